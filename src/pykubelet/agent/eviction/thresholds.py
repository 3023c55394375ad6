"""Eviction thresholds and the node conditions they drive: pure functions (upstream
``pkg/kubelet/eviction/helpers.go``).

Design: the manager observes, for every signal, the amount *available* and the signal's capacity
(an ``Observation``); everything that decides — which thresholds are met, whether a soft threshold's
grace period has elapsed, which node conditions to report once ``evictionPressureTransitionPeriod``
is applied, how much must be reclaimed — is a function of those observations, the configured
thresholds and the time, so unit tests need no clock, cgroup or runtime.

Upstream behaviour followed:
- a threshold is a quantity (``100Mi``) or a percentage of the signal's capacity (``10%``); it is
  *met* when available < threshold (``thresholdsMet``); with ``enforce_min_reclaim`` (a threshold met
  in the previous pass stays met until ``evictionMinimumReclaim`` more is available) it is met when
  available < threshold + minimum reclaim;
- ``evictionHard`` thresholds act at once; ``evictionSoft`` ones only once they have been met
  continuously for their ``evictionSoftGracePeriod`` (``thresholdsMetGracePeriod``); a soft
  threshold without a grace period is a configuration error (upstream validation);
- memory signals map to MemoryPressure, filesystem signals to DiskPressure, ``pid.available`` to
  PIDPressure; a condition stays reported until no threshold of it has been met for
  ``evictionPressureTransitionPeriod`` (``nodeConditionsObservedSince``), so the node does not
  oscillate;
- the order in which thresholds are acted on: memory first, then the rest (``byEvictionPriority``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from pykubelet.common.durations import parse_duration
from pykubelet.common.quantity import QuantityError, format_quantity, parse_quantity


class Signal(enum.StrEnum):
    MEMORY_AVAILABLE = "memory.available"
    ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
    NODEFS_AVAILABLE = "nodefs.available"
    NODEFS_INODES_FREE = "nodefs.inodesFree"
    IMAGEFS_AVAILABLE = "imagefs.available"
    IMAGEFS_INODES_FREE = "imagefs.inodesFree"
    CONTAINERFS_AVAILABLE = "containerfs.available"
    CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
    PID_AVAILABLE = "pid.available"


MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
CONDITIONS = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)

SIGNAL_CONDITION: dict[Signal, str] = {
    Signal.MEMORY_AVAILABLE: MEMORY_PRESSURE,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: MEMORY_PRESSURE,
    Signal.NODEFS_AVAILABLE: DISK_PRESSURE,
    Signal.NODEFS_INODES_FREE: DISK_PRESSURE,
    Signal.IMAGEFS_AVAILABLE: DISK_PRESSURE,
    Signal.IMAGEFS_INODES_FREE: DISK_PRESSURE,
    Signal.CONTAINERFS_AVAILABLE: DISK_PRESSURE,
    Signal.CONTAINERFS_INODES_FREE: DISK_PRESSURE,
    Signal.PID_AVAILABLE: PID_PRESSURE,
}

# the resource a signal is short of (upstream signalToResource), as named in eviction messages
SIGNAL_RESOURCE: dict[Signal, str] = {
    Signal.MEMORY_AVAILABLE: "memory",
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: "memory",
    Signal.NODEFS_AVAILABLE: "ephemeral-storage",
    Signal.NODEFS_INODES_FREE: "inodes",
    Signal.IMAGEFS_AVAILABLE: "ephemeral-storage",
    Signal.IMAGEFS_INODES_FREE: "inodes",
    Signal.CONTAINERFS_AVAILABLE: "ephemeral-storage",
    Signal.CONTAINERFS_INODES_FREE: "inodes",
    Signal.PID_AVAILABLE: "pids",
}

MEMORY_SIGNALS = frozenset({Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE})


class ThresholdError(ValueError):
    """An eviction setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class Threshold:
    """One configured threshold: a quantity, or a percentage of capacity (upstream ThresholdValue)."""

    signal: Signal
    quantity: Decimal | None = None
    percentage: Decimal | None = None  # 0..1
    grace_period: float = 0.0  # 0: hard
    min_reclaim_quantity: Decimal | None = None
    min_reclaim_percentage: Decimal | None = None
    raw: str = field(default="", compare=False)

    @property
    def hard(self) -> bool:
        return self.grace_period == 0

    def value(self, capacity: int | None) -> Decimal | None:
        """The threshold in the signal's unit; None for a percentage of an unknown capacity."""
        if self.quantity is not None:
            return self.quantity
        if self.percentage is None or not capacity or capacity <= 0:
            return None
        return Decimal(capacity) * self.percentage

    def min_reclaim(self, capacity: int | None) -> Decimal:
        if self.min_reclaim_quantity is not None:
            return self.min_reclaim_quantity
        if self.min_reclaim_percentage is not None and capacity:
            return Decimal(capacity) * self.min_reclaim_percentage
        return Decimal(0)

    def describe(self, capacity: int | None) -> str:
        """The threshold as eviction messages show it ("100Mi"; a percentage as the computed amount)."""
        if self.quantity is not None:
            return self.raw or format_quantity(self.quantity, _fmt(self.signal))
        v = self.value(capacity)
        return format_quantity(int(v), _fmt(self.signal)) if v is not None else "unknown"


@dataclass(frozen=True)
class Observation:
    available: int
    capacity: int | None = None


def _fmt(signal: Signal) -> str:
    return "DecimalSI" if signal in (Signal.PID_AVAILABLE, Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_INODES_FREE,
                                     Signal.CONTAINERFS_INODES_FREE) else "BinarySI"


def format_amount(signal: Signal, amount: int | Decimal) -> str:
    return format_quantity(int(amount), _fmt(signal))


def _parse_value(setting: str, signal: str, raw: str) -> tuple[Decimal | None, Decimal | None]:
    t = str(raw).strip()
    try:
        if t.endswith("%"):
            pct = Decimal(t[:-1])
            if not 0 <= pct <= 100:
                raise ThresholdError(f"{setting}[{signal}]: percentage must be between 0% and 100%, got {raw!r}")
            return None, pct / 100
        q = parse_quantity(t).value
    except (QuantityError, ArithmeticError, ValueError) as e:
        if isinstance(e, ThresholdError):
            raise
        raise ThresholdError(f"{setting}[{signal}]: invalid quantity {raw!r}") from None
    if q < 0:
        raise ThresholdError(f"{setting}[{signal}]: must not be negative, got {raw!r}")
    return q, None


def _signal(setting: str, name: str) -> Signal:
    try:
        return Signal(name)
    except ValueError:
        raise ThresholdError(f"{setting}: unsupported eviction signal {name!r}") from None


def parse_thresholds(
    hard: Mapping[str, str],
    soft: Mapping[str, str] | None = None,
    soft_grace: Mapping[str, str] | None = None,
    min_reclaim: Mapping[str, str] | None = None,
) -> list[Threshold]:
    """Upstream ``ParseThresholdConfig``: evictionHard + evictionSoft (+ grace periods, min reclaim).

    A zero threshold ("0", "0%") disables that signal, as upstream drops it.
    """
    soft = soft or {}
    soft_grace = soft_grace or {}
    min_reclaim = min_reclaim or {}
    reclaim: dict[Signal, tuple[Decimal | None, Decimal | None]] = {}
    for name, raw in min_reclaim.items():
        reclaim[_signal("evictionMinimumReclaim", name)] = _parse_value("evictionMinimumReclaim", name, raw)
    for name in soft_grace:
        _signal("evictionSoftGracePeriod", name)
        if name not in soft:
            raise ThresholdError(f"evictionSoftGracePeriod[{name}]: no evictionSoft threshold for this signal")
    out: list[Threshold] = []
    for setting, values in (("evictionHard", hard), ("evictionSoft", soft)):
        for name, raw in values.items():
            sig = _signal(setting, name)
            q, pct = _parse_value(setting, name, raw)
            if (q is not None and q == 0) or (pct is not None and pct == 0):
                continue
            grace = 0.0
            if setting == "evictionSoft":
                if name not in soft_grace:
                    raise ThresholdError(f"evictionSoft[{name}]: requires evictionSoftGracePeriod[{name}]")
                try:
                    grace = parse_duration(str(soft_grace[name]))
                except ValueError:
                    raise ThresholdError(
                        f"evictionSoftGracePeriod[{name}]: invalid duration {soft_grace[name]!r}") from None
                if grace <= 0:
                    raise ThresholdError(f"evictionSoftGracePeriod[{name}]: must be positive, got {soft_grace[name]!r}")
            rq, rp = reclaim.get(sig, (None, None))
            out.append(Threshold(sig, q, pct, grace, rq, rp, raw=str(raw).strip()))
    return out


def thresholds_met(
    thresholds: Iterable[Threshold], observations: Mapping[Signal, Observation], *, enforce_min_reclaim: bool
) -> list[Threshold]:
    """Thresholds whose signal is observed below them (plus minimum reclaim when enforced)."""
    met: list[Threshold] = []
    for t in thresholds:
        obs = observations.get(t.signal)
        if obs is None:
            continue
        limit = t.value(obs.capacity)
        if limit is None:
            continue
        if enforce_min_reclaim:
            limit += t.min_reclaim(obs.capacity)
        if Decimal(obs.available) < limit:
            met.append(t)
    return met


def merge(*groups: Iterable[Threshold]) -> list[Threshold]:
    out: list[Threshold] = []
    for g in groups:
        for t in g:
            if t not in out:
                out.append(t)
    return out


def update_first_observed(
    met: Iterable[Threshold], previous: Mapping[Threshold, float], now: float
) -> dict[Threshold, float]:
    """Upstream ``thresholdsFirstObservedAt``: keep the first time of thresholds still met."""
    return {t: previous.get(t, now) for t in met}


def thresholds_met_grace_period(first_observed: Mapping[Threshold, float], now: float) -> list[Threshold]:
    """Met thresholds whose grace period has elapsed (hard ones at once)."""
    return [t for t, since in first_observed.items() if now - since >= t.grace_period]


def node_conditions(met: Iterable[Threshold]) -> set[str]:
    return {SIGNAL_CONDITION[t.signal] for t in met}


def update_conditions_last_observed(
    conditions: Iterable[str], previous: Mapping[str, float], now: float
) -> dict[str, float]:
    out = dict(previous)
    for c in conditions:
        out[c] = now
    return out


def conditions_observed_since(last_observed: Mapping[str, float], period: float, now: float) -> set[str]:
    """Upstream ``nodeConditionsObservedSince``: conditions seen within the transition period."""
    return {c for c, at in last_observed.items() if now - at < period}


def by_eviction_priority(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """Memory thresholds first (upstream ``byEvictionPriority``), then the others in order."""
    ts = list(thresholds)
    return [t for t in ts if t.signal in MEMORY_SIGNALS] + [t for t in ts if t.signal not in MEMORY_SIGNALS]
