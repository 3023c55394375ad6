"""Probe results and the pure per-worker state machine (upstream prober/results and worker.go).

Upstream keeps three result caches (liveness, readiness, startup) keyed by *container id*, and each
probe worker turns raw probe outcomes into a cached result with hysteresis: the cached value only
changes after ``successThreshold`` consecutive successes or ``failureThreshold`` consecutive
failures. Probe *errors* (the probe could not be run: unknown named port, CRI failure...) are thrown
away and leave the state untouched, exactly like upstream's ``doProbe`` returning early.

After a liveness or startup probe has tipped to FAILURE the worker is put "on hold": the result stays
FAILURE (so the kubelet kills the container) and no further probes run until the container id
changes, which resets the state to the probe type's initial value (liveness SUCCESS, readiness
FAILURE, startup UNKNOWN). This module does no I/O so it can be tested exhaustively.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Result(enum.Enum):
    """A cached probe result (upstream results.Result)."""

    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


class ProbeType(enum.Enum):
    """Which probe; the value is upstream's ``probeType.String()`` used in events and metrics."""

    LIVENESS = "Liveness"
    READINESS = "Readiness"
    STARTUP = "Startup"

    # members are singletons: hashed by identity, in C (Enum's own __hash__ is a Python call, and
    # the prober hashes a ProbeType a few times per probe: result tables, worker keys)
    __hash__ = object.__hash__

    @property
    def spec_field(self) -> str:
        return {"Liveness": "livenessProbe", "Readiness": "readinessProbe", "Startup": "startupProbe"}[self.value]

    @property
    def initial(self) -> Result:
        """Result a fresh container starts with (upstream newWorker initialValue)."""
        if self is ProbeType.LIVENESS:
            return Result.SUCCESS
        if self is ProbeType.READINESS:
            return Result.FAILURE
        return Result.UNKNOWN


class Outcome(enum.Enum):
    """A single probe run's outcome (upstream pkg/probe Result). WARNING counts as success."""

    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"


@dataclass
class ProbeState:
    """Hysteresis for one (container id, probe type); ``observe`` returns the new cached result."""

    probe_type: ProbeType
    success_threshold: int = 1
    failure_threshold: int = 3
    result: Result = Result.UNKNOWN
    last: Result | None = None
    run: int = 0
    on_hold: bool = False
    container_id: str = ""

    def __post_init__(self) -> None:
        self.result = self.probe_type.initial
        self.success_threshold = max(1, self.success_threshold)
        self.failure_threshold = max(1, self.failure_threshold)

    def reset(self, container_id: str) -> None:
        """A new container (restart): back to the initial value, hold released."""
        self.container_id = container_id
        self.result = self.probe_type.initial
        self.last = None
        self.run = 0
        self.on_hold = False

    def observe(self, outcome: Result) -> Result:
        """Feed one probe outcome (SUCCESS/FAILURE; UNKNOWN = probe error, ignored)."""
        if self.on_hold or outcome is Result.UNKNOWN:
            return self.result
        if outcome is self.last:
            self.run += 1
        else:
            self.last = outcome
            self.run = 1
        if outcome is Result.FAILURE and self.run < self.failure_threshold:
            return self.result
        if outcome is Result.SUCCESS and self.run < self.success_threshold:
            return self.result
        self.result = outcome
        if outcome is Result.FAILURE and self.probe_type in (ProbeType.LIVENESS, ProbeType.STARTUP):
            # the kubelet will restart the container; stop probing until it has a new id
            self.on_hold = True
            self.run = 0
        return self.result
