"""The eviction manager: node self-protection under resource pressure (upstream
``pkg/kubelet/eviction/eviction_manager.go``).

Every ``monitoring_period`` (upstream ``evictionMonitoringPeriod``, 10 s) — and at once when a cgroup
v1 memory threshold notification fires (``kernelMemcgNotification``, see ``memcg``) — one
``synchronize`` pass:

1. observe the signals (node memory / filesystems / pids from the injected reader, pod usage from
   the stats summary; ``allocatableMemory.available`` = allocatable memory - the pods' working sets);
2. decide with the pure functions of ``thresholds``: thresholds met (kept met until
   ``evictionMinimumReclaim`` more is available), soft thresholds only after their grace period,
   node conditions with ``evictionPressureTransitionPeriod`` applied — those are what the node
   status reports (``pressure_conditions``) and what pod admission checks (``admit``);
3. local ephemeral storage first: a pod over an emptyDir ``sizeLimit``, its containers' total or a
   container's ``ephemeral-storage`` limit is evicted at once (every such pod in the pass);
4. otherwise, for the first met threshold (memory first): reclaim node-level resources through the
   ``NodeResourceReclaimer``s (image and container GC; nothing for memory) and stop if the signal is
   no longer met; else rank the pods (``ranking.rank``) and evict the first one that may be evicted
   (critical pods never are) — one pod per pass, as upstream, so the next pass sees its effect.

An eviction is the ``PodEvictor``'s job (the kubelet): phase ``Failed``, reason ``Evicted``, the
message, the containers killed with grace 0 for a hard threshold or ``evictionMaxPodGracePeriod``
for a soft one; the manager records the ``Evicted`` event. All I/O is in ``observe``/``evict``;
``synchronize`` may be driven by a test with a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pykubelet.agent.config import ConfigError, KubeletConfiguration
from pykubelet.agent.interfaces import (
    EventRecorder,
    NodeResourceReclaimer,
    PodAdmitAttributes,
    PodAdmitResult,
)
from pykubelet.common import podutil
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.ticks import tick_at_or_after
from pykubelet.common.tolerations import tolerations_tolerate_taint

from . import ranking
from . import thresholds as th
from .memcg import MemcgThresholdNotifier
from .ranking import PodUsage
from .thresholds import Observation, Signal, Threshold

log = logging.getLogger(__name__)


def has_local_storage_limit(pod: Pod) -> bool:
    """Whether the pod has an emptyDir sizeLimit or an ephemeral-storage limit to police."""
    spec = pod.get("spec") or {}
    if any(isinstance(v, dict) and isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("sizeLimit")
           for v in spec.get("volumes") or []):
        return True
    return any("ephemeral-storage" in ((c.get("resources") or {}).get("limits") or {})
               for c in spec.get("containers") or [] if isinstance(c, dict))

Pod = dict[str, Any]
SignalReader = Callable[[], tuple[dict[str, int], dict[str, int]]]
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"


class SummaryProvider(Protocol):
    """The stats summary (``/stats/summary``) the manager reads pod usage from."""

    async def summary(self, *, keep_ids: bool = False) -> dict[str, Any]: ...


class PodEvictor(Protocol):
    """Makes a pod Failed/Evicted with ``message`` and kills its containers with ``grace`` seconds."""

    async def evict_pod(self, pod: Pod, message: str, grace: int) -> bool: ...


@dataclass
class EvictionConfig:
    thresholds: list[Threshold]
    pressure_transition_period: float = 300.0
    max_pod_grace_period: int = 0
    monitoring_period: float = 10.0
    local_storage_isolation: bool = True
    memcg_notification: bool = False  # kernelMemcgNotification
    memcg_dir: Path | None = None  # the v1 root memory cgroup notifications are armed on


def eviction_grace(threshold: Threshold, pod: Pod, max_pod_grace_period: int) -> int:
    """Hard: 0 (killed at once); soft: evictionMaxPodGracePeriod, or the pod's own grace when shorter."""
    if threshold.hard:
        return 0
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return min(max_pod_grace_period, own) if isinstance(own, int) and own >= 0 else max_pod_grace_period


def eviction_config(cfg: KubeletConfiguration, monitoring_period: float = 10.0,
                    memcg_dir: Path | None = None) -> EvictionConfig:
    """The eviction settings of a KubeletConfiguration; a ``ConfigError`` naming a bad setting."""
    try:
        thresholds = th.parse_thresholds(cfg.eviction_hard, cfg.eviction_soft, cfg.eviction_soft_grace_period,
                                         cfg.eviction_minimum_reclaim)
    except th.ThresholdError as e:
        raise ConfigError(str(e)) from None
    return EvictionConfig(thresholds, pressure_transition_period=cfg.eviction_pressure_transition_period,
                          max_pod_grace_period=cfg.eviction_max_pod_grace_period,
                          monitoring_period=monitoring_period,
                          local_storage_isolation=cfg.local_storage_capacity_isolation,
                          memcg_notification=cfg.kernel_memcg_notification, memcg_dir=memcg_dir)


@dataclass(frozen=True)
class EvictionResult:
    """What one pass did (for tests, benchmarks and logs)."""

    evicted: tuple[str, ...] = ()
    reclaimed: bool = False
    threshold: Threshold | None = None


class EvictionManager:
    def __init__(
        self,
        config: EvictionConfig,
        *,
        read_signals: SignalReader,
        summary: SummaryProvider | None,
        active_pods: Callable[[], list[Pod]],
        evictor: PodEvictor,
        recorder: EventRecorder,
        reclaimers: Sequence[NodeResourceReclaimer] = (),
        allocatable_memory: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.read_signals = read_signals
        self.summary = summary
        self.active_pods = active_pods
        self.evictor = evictor
        self.recorder = recorder
        self.reclaimers = list(reclaimers)
        self.allocatable_memory = allocatable_memory
        self.clock = clock
        self.observations: dict[Signal, Observation] = {}
        self.thresholds_met: list[Threshold] = []
        self.first_observed: dict[Threshold, float] = {}
        self.conditions_last_observed: dict[str, float] = {}
        self.node_conditions: set[str] = set()
        self.observed_once = False
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self.notifier: MemcgThresholdNotifier | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._task is not None:
            return
        cfg = self.config
        if cfg.memcg_notification and cfg.memcg_dir is not None and self._memory_threshold() is not None:
            self.notifier = MemcgThresholdNotifier.create(cfg.memcg_dir, asyncio.get_running_loop(), self._wake.set)
            if self.notifier is None:
                log.info("kernelMemcgNotification: no cgroup v1 memory threshold events here; polling every %.0fs",
                         cfg.monitoring_period)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="eviction-manager")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self.notifier is not None:
            self.notifier.close()
            self.notifier = None

    async def _run(self) -> None:
        """A pass every monitoring period, or at once when a memory threshold notification fires.
        The periodic passes start on multiples of the period on the loop clock (``common.ticks``),
        sharing the loop wake-up of the agent's other periodic work."""
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            try:
                await self.synchronize()
                await self._arm_notifier()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("eviction manager pass failed")
            period = self.config.monitoring_period
            now = loop.time()
            due = tick_at_or_after(now, period)
            if due <= now:
                due += period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), due - now)

    def _memory_threshold(self) -> Threshold | None:
        mem = [t for t in self.config.thresholds if t.signal is Signal.MEMORY_AVAILABLE]
        return mem[0] if mem else None

    async def _arm_notifier(self) -> None:
        """Re-arm on the memory.available threshold crossed first (the largest value)."""
        obs = self.observations.get(Signal.MEMORY_AVAILABLE)
        if self.notifier is None or obs is None or not obs.capacity:
            return
        values = [v for t in self.config.thresholds if t.signal is Signal.MEMORY_AVAILABLE
                  and (v := t.value(obs.capacity)) is not None]
        if values:
            await asyncio.to_thread(self.notifier.arm, obs.capacity, int(max(values)))

    # ------------------------------------------------------------------ what others read
    def pressure_conditions(self) -> dict[str, bool] | None:
        """NodePressureProvider: None until the first pass observed something."""
        if not self.observed_once:
            return None
        return {c: c in self.node_conditions for c in th.CONDITIONS}

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        """Upstream eviction ``Admit``: under MemoryPressure only BestEffort pods (not tolerating the
        memory-pressure taint) are refused; under any other pressure every pod but critical ones."""
        conds = sorted(self.node_conditions)
        if not conds:
            return PodAdmitResult(True)
        pod = attrs.pod
        if ranking.is_critical(pod):
            return PodAdmitResult(True)
        if conds == [th.MEMORY_PRESSURE]:
            if podutil.qos_class(pod) != "BestEffort":
                return PodAdmitResult(True)
            tols = (pod.get("spec") or {}).get("tolerations") or []
            if tolerations_tolerate_taint(tols, {"key": MEMORY_PRESSURE_TAINT, "effect": "NoSchedule"}):
                return PodAdmitResult(True)
        return PodAdmitResult(False, ranking.REASON, ranking.admission_message(conds))

    # ------------------------------------------------------------------ observe
    async def observe_signals(self) -> dict[Signal, Observation]:
        signals, capacity = await asyncio.to_thread(self.read_signals)
        obs: dict[Signal, Observation] = {}
        for name, available in signals.items():
            try:
                obs[Signal(name)] = Observation(int(available), capacity.get(name))
            except ValueError:
                continue
        return obs

    async def observe_usage(self) -> dict[str, PodUsage]:
        """Pod usage from the stats summary (CRI stats + volume usage): only read when needed, as it
        walks every pod's volumes."""
        if self.summary is None:
            return {}
        try:
            return ranking.usage_from_summary(await self.summary.summary())
        except Exception as e:  # stats are best effort: pods without stats rank first
            log.debug("eviction: stats summary unavailable: %s", e)
            return {}

    def _needs_usage_every_pass(self, pods: list[Pod]) -> bool:
        if any(t.signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE for t in self.config.thresholds):
            return True
        return self.config.local_storage_isolation and any(has_local_storage_limit(p) for p in pods)

    # ------------------------------------------------------------------ one pass
    async def synchronize(self) -> EvictionResult:
        async with self._lock:
            observations = await self.observe_signals()
            pods = [p for p in self.active_pods() if not podutil.is_terminal(p)]
            usage = await self.observe_usage() if self._needs_usage_every_pass(pods) else None
            return await self.decide_and_act(observations, pods, usage)

    async def decide_and_act(self, observations: Mapping[Signal, Observation], pods: list[Pod],
                             usage: Mapping[str, PodUsage] | None) -> EvictionResult:
        """One pass on given observations; ``usage`` None means "read it only if a pod must go"."""
        now = self.clock()
        cfg = self.config
        obs = dict(observations)
        alloc = self.allocatable_memory()
        if usage is not None and alloc is not None and alloc > 0:
            used = sum(u.memory or 0 for u in usage.values())
            obs[Signal.ALLOCATABLE_MEMORY_AVAILABLE] = Observation(max(0, alloc - used), alloc)
        self.observations = obs
        met = th.thresholds_met(cfg.thresholds, obs, enforce_min_reclaim=False)
        if self.thresholds_met:
            still = th.thresholds_met(self.thresholds_met, obs, enforce_min_reclaim=True)
            met = th.merge(met, still)
        self.first_observed = th.update_first_observed(met, self.first_observed, now)
        self.conditions_last_observed = th.update_conditions_last_observed(
            th.node_conditions(met), self.conditions_last_observed, now)
        conditions = th.conditions_observed_since(self.conditions_last_observed, cfg.pressure_transition_period, now)
        if conditions != self.node_conditions:
            log.info("eviction manager: node conditions now %s", sorted(conditions) or "none")
        self.node_conditions = conditions
        self.observed_once = True
        self.thresholds_met = met
        acting = th.thresholds_met_grace_period(self.first_observed, now)

        if cfg.local_storage_isolation and usage is not None:
            evicted = await self._local_storage_eviction(pods, usage)
            if evicted:
                return EvictionResult(tuple(evicted))
        if not acting:
            return EvictionResult()
        threshold = th.by_eviction_priority(acting)[0]
        resource = th.SIGNAL_RESOURCE[threshold.signal]
        seen = obs.get(threshold.signal)
        log.warning("eviction manager: attempting to reclaim %s (%s below %s)", resource, threshold.signal.value,
                    threshold.describe(seen.capacity if seen else None))
        if await self._reclaim_node_level(threshold):
            return EvictionResult(reclaimed=True, threshold=threshold)
        if usage is None:
            usage = await self.observe_usage()
        for pod in ranking.rank(threshold.signal, pods, usage):
            if ranking.is_critical(pod):
                continue
            uid = str((pod.get("metadata") or {}).get("uid", ""))
            msg = ranking.eviction_message(threshold.signal, resource, pod, usage.get(uid), threshold, seen)
            if await self._evict(pod, msg, eviction_grace(threshold, pod, cfg.max_pod_grace_period)):
                return EvictionResult((uid,), threshold=threshold)
        log.error("eviction manager: unable to evict any pod from the node")
        return EvictionResult(threshold=threshold)

    async def _local_storage_eviction(self, pods: list[Pod], usage: Mapping[str, PodUsage]) -> list[str]:
        evicted = []
        for pod in pods:
            uid = str((pod.get("metadata") or {}).get("uid", ""))
            msg = ranking.local_storage_violation(pod, usage.get(uid))
            if msg is not None and not ranking.is_critical(pod) and await self._evict(pod, msg, 0):
                evicted.append(uid)
        return evicted

    async def _reclaim_node_level(self, threshold: Threshold) -> bool:
        """Upstream ``reclaimNodeLevelResources``: True when the signal is no longer met afterwards."""
        if threshold.signal in th.MEMORY_SIGNALS or not self.reclaimers:
            return False
        freed = 0
        for r in self.reclaimers:
            try:
                freed += await r.reclaim(threshold.signal.value)
            except Exception as e:
                log.warning("eviction manager: node-level reclaim for %s failed: %s", threshold.signal.value, e)
        if freed <= 0:
            return False
        observations = await self.observe_signals()
        if th.thresholds_met([threshold], observations, enforce_min_reclaim=True):
            return False
        log.info("eviction manager: node-level reclaim freed %d bytes; %s is fine again", freed,
                 threshold.signal.value)
        return True

    async def _evict(self, pod: Pod, message: str, grace: int) -> bool:
        md = pod.get("metadata") or {}
        log.warning("eviction manager: evicting pod %s/%s: %s", md.get("namespace"), md.get("name"), message)
        self.recorder.event(pod, "Warning", ranking.REASON, message)
        try:
            return await self.evictor.evict_pod(pod, message, grace)
        except Exception as e:
            log.error("eviction manager: evicting pod %s failed: %s", md.get("name"), e)
            return False
