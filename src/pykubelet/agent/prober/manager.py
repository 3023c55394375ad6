"""Probe manager and per-probe workers (upstream pkg/kubelet/prober/{prober_manager,worker}.go).

Design: one lightweight asyncio task per (pod uid, container name, probe type) that has a probe spec,
all on the agent's single event loop. A worker sleeps on a future that a loop timer resolves
when the next run is due (one timer for all the workers due in the same wake slot, below), so the
manager can wake it early (new container id) and cancel it instantly; every probe is bounded by
``timeoutSeconds``, so probes of many pods never block each other or the sync loop.

Scheduling is start-to-start like upstream's ``time.Ticker``: the next run is due one period after
the previous run *started* (a slow probe does not push every later run back). Wake-ups are rounded
to a ``WAKE_GRID`` (100 ms) of the loop clock, so workers whose due times fall in the same slot are
woken by the same loop iteration and issue their ExecSync calls together, which the CRI transport
writes in one ``send`` and whose answers it reads with the next slot's wake-up (an exec probe's
connection reads on the same grid: ``CRIClient.exec_sync(read_grid=...)``). What an exec
probe costs the agent is mostly those wake-ups and socket writes, not Python: with 200 probes/s
spread over a second, a 100 ms grid costs ~30 % less CPU per probe than 25 ms (10 writes and timer
wake-ups a second instead of up to 40; docs/benchmarks-scale.md, "Probes: fewer wake-ups"). A
worker runs at most half a slot (50 ms) early or late because of it, a twentieth of the shortest
period (1 s), so no probe is late by a period; the interval between two runs stays the period.
Upstream spreads workers by a random first delay only after a kubelet restart, and so does this
(``first_delay``); the grid only gathers workers whose phases fall within 100 ms of each other.
Decisions live in pure code: ``ProbeState`` (hysteresis, results.py) and ``first_delay`` here.

The engine feeds the manager what upstream's worker reads from the status manager:
``update_pod_status(pod, {name: (container_id, running, started_at_wall_seconds)}, pod_ip)``.
Upstream behaviour followed by ``Worker.step`` (doProbe):

* pods in phase Succeeded/Failed stop their workers; a container without status is waited for;
* a new container id (restart) resets the worker to the probe type's initial result
  (liveness SUCCESS, readiness FAILURE, startup UNKNOWN), releases the on-hold state and drops the
  old id's result; results are stored per container id;
* a non-running container gets FAILURE; the worker stops if it terminated and restartPolicy=Never;
* while the pod is being deleted, liveness/startup report SUCCESS and stop probing;
* nothing runs before ``initialDelaySeconds`` since the container started (whole seconds, like
  upstream's int32 truncation); liveness/readiness wait until startup succeeded; the startup probe
  stops once it did;
* the first run is delayed by a random fraction of the period only if the manager is younger than
  one period (upstream: avoids a probe storm after a kubelet restart);
* probe errors (unknown port, CRI error after 3 tries) are discarded, with a Warning event;
* a liveness/startup FAILURE puts the worker on hold until the container is replaced.

Results changes invoke ``on_change(uid)`` so the kubelet re-syncs that pod (liveness/startup
failure -> kill with ``kill_decision``; readiness -> status update). Events: Warning ``Unhealthy``
"<Type> probe failed: <output>", Warning ``ProbeWarning`` "<Type> probe warning: <output>".
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pykubelet.agent.interfaces import EventRecorder
from pykubelet.agent.prober import metrics
from pykubelet.agent.prober.probes import WAKE_GRID, ExecRuntime, ProbeError, Prober
from pykubelet.agent.prober.results import Outcome, ProbeState, ProbeType, Result
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.podutil import is_restartable_init_container

log = logging.getLogger(__name__)

ContainerStatuses = dict[str, tuple[str, bool, float | None]]
DEFAULT_POD_GRACE = 30


def first_delay(period: float, manager_age: float, rnd: float) -> float:
    """Jitter before a worker's first probe: only right after (re)start, like upstream."""
    return rnd * period if period > manager_age else 0.0


def probe_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers upstream probes: regular ones and restartable (sidecar) init containers."""
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if is_restartable_init_container(c)]
    return [*sidecars, *(spec.get("containers") or [])]


def pod_uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


@dataclass(frozen=True)
class KillDecision:
    """Why a container must be killed because of a probe (for the engine's killContainer)."""

    probe_type: ProbeType
    reason: str  # upstream kill reason: "LivenessProbe" / "StartupProbe"
    message: str  # "Container X failed liveness probe" (engine appends ", will be restarted")
    grace_period: int | None  # probe-level terminationGracePeriodSeconds, if set


@dataclass
class _PodInfo:
    pod: dict[str, Any]
    statuses: ContainerStatuses
    pod_ip: str


class Worker:
    """Periodically probes one container with one probe spec."""

    def __init__(self, manager: ProbeManager, uid: str, container: dict[str, Any], probe_type: ProbeType,
                 spec: dict[str, Any]) -> None:
        self.manager = manager
        self.uid = uid
        self.container = container
        self.name = str(container.get("name", ""))
        self.probe_type = probe_type
        self.key: tuple[str, str, ProbeType] = (uid, self.name, probe_type)
        self.spec = spec
        self.period = float(spec.get("periodSeconds") or 10)
        self.initial_delay = int(spec.get("initialDelaySeconds") or 0)
        self.state = ProbeState(probe_type, int(spec.get("successThreshold") or 1),
                                int(spec.get("failureThreshold") or 3))
        self._woken = False  # wake() came while not waiting: the next wait returns at once
        self._sleeper: asyncio.Future[None] | None = None  # the future the worker waits on
        self.task: asyncio.Task[None] | None = None
        self.probes_run = 0
        self.last_run: float | None = None  # clock() when the last probe started (lateness metric)
        # whether liveness/readiness must wait for a startup probe (the container's spec cannot
        # change, and without a startupProbe there is no startup worker and no startup result)
        self._gated = probe_type is not ProbeType.STARTUP and bool(container.get(ProbeType.STARTUP.spec_field))
        # labelled metric children, resolved once: labels() costs a lock and a dict lookup per call
        self._metrics: dict[str, Any] = {}

    def wake(self) -> None:
        """Probe now (a new container id): ends the current wait, or the next one at once."""
        if self._sleeper is not None and not self._sleeper.done():
            self._sleeper.set_result(None)
        else:
            self._woken = True

    async def run(self) -> None:
        m = self.manager
        try:
            delay = first_delay(self.period, m.clock() - m.started, m.rand())
            if delay > 0:
                await m._wait(self, delay)
            while True:
                ran = self.probes_run
                try:
                    keep = await self.step()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("probe worker %s/%s %s crashed in one run", self.uid, self.name,
                                  self.probe_type.value)
                    keep = True
                if not keep:
                    break
                delay = self.period
                if self.probes_run != ran and self.last_run is not None:
                    # start-to-start, like upstream's ticker: the probe's own duration is not added
                    delay = max(0.0, self.period - (m.clock() - self.last_run))
                await m._wait(self, delay)
        finally:
            m._worker_done(self)

    async def step(self) -> bool:
        """One doProbe; returns False when the worker should stop."""
        m = self.manager
        info = m._pods.get(self.uid)
        if info is None:
            return True
        pod = info.pod
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            return False
        st = info.statuses.get(self.name)
        if st is None:
            return True
        cid, running, started_at = st
        if cid and cid != self.state.container_id:
            if self.state.container_id:
                m._remove_result(self.probe_type, self.state.container_id)
            self.state.reset(cid)
            m._set_result(self.probe_type, cid, self.state.result, self.uid)
        if self.state.on_hold:
            return True
        if not running:
            if self.state.container_id:
                m._set_result(self.probe_type, self.state.container_id, Result.FAILURE, self.uid)
            restart = str((pod.get("spec") or {}).get("restartPolicy") or "Always")
            return not (cid and restart == "Never")
        if (pod.get("metadata") or {}).get("deletionTimestamp") and self.probe_type in (
            ProbeType.LIVENESS, ProbeType.STARTUP
        ):
            m._set_result(self.probe_type, cid, Result.SUCCESS, self.uid)
            return True
        if self.initial_delay and started_at is not None and int(m.wall_clock() - started_at) < self.initial_delay:
            return True
        if self.probe_type is ProbeType.STARTUP:
            if m.startup(self.uid, self.name) is Result.SUCCESS:
                return True
        elif self._gated and m.startup(self.uid, self.name) is not Result.SUCCESS:
            return True

        self.probes_run += 1
        now = m.clock()
        if self.last_run is not None:
            self._metric("lateness", pod).observe(max(0.0, now - self.last_run - self.period))
        self.last_run = now
        t0 = now
        try:
            outcome, output = await m.prober.run(self.spec, self.container, cid, info.pod_ip)
        except ProbeError as e:
            m._event(pod, "Warning", "Unhealthy",
                     f"{self.probe_type.value} probe errored and resulted in unknown state: {e}")
            self._metric("unknown", pod).inc()
            self._metric("duration", pod).observe(max(0.0, m.clock() - t0))
            return True
        if self.state.container_id != cid or self.key not in m._workers:
            return True  # container replaced or worker removed while probing: result is stale
        result = Result.SUCCESS
        if outcome is Outcome.WARNING:
            m._event(pod, "Warning", "ProbeWarning", f"{self.probe_type.value} probe warning: {output}")
        elif outcome in (Outcome.FAILURE, Outcome.UNKNOWN):
            result = Result.FAILURE
            m._event(pod, "Warning", "Unhealthy", f"{self.probe_type.value} probe failed: {output}")
        if result is Result.SUCCESS:
            self._metric("successful", pod).inc()
            self._metric("duration", pod).observe(max(0.0, m.clock() - t0))
        else:
            self._metric("failed", pod).inc()
        m._set_result(self.probe_type, cid, self.state.observe(result), self.uid)
        return True

    def _metric(self, which: str, pod: dict[str, Any]) -> Any:
        """The worker's labelled child of a prober metric (its labels never change: pod name,
        namespace and container name are immutable for a pod uid), looked up once and kept."""
        child = self._metrics.get(which)
        if child is None:
            pm = metrics.PROBE_METRICS
            if which == "lateness":
                child = pm.lateness(self.probe_type.value)
            else:
                md = pod.get("metadata") or {}
                pod_name, ns = str(md.get("name", "")), str(md.get("namespace", ""))
                if which == "duration":
                    child = pm.duration(self.probe_type.value, self.name, pod_name, ns)
                else:
                    child = pm.total(self.probe_type.value, which, self.name, pod_name, ns, self.uid)
            self._metrics[which] = child
        return child


class ProbeManager:
    """Creates probe workers for pods and serves their cached results (upstream prober.Manager)."""

    def __init__(
        self,
        runtime: ExecRuntime,
        recorder: EventRecorder | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_change: Callable[[str], None] | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.clock = clock
        self.wall_clock = wall_clock
        self.on_change = on_change
        self.rand = rand
        self.started = clock()
        self.prober = Prober(runtime)
        self._pods: dict[str, _PodInfo] = {}
        self._workers: dict[tuple[str, str, ProbeType], Worker] = {}
        self._pod_workers: dict[str, set[tuple[str, str, ProbeType]]] = {}  # uid → its worker keys
        self._results: dict[ProbeType, dict[str, Result]] = {t: {} for t in ProbeType}
        # wake-grid slot → its loop timer and the futures of the workers sleeping until it
        self._slots: dict[int, tuple[asyncio.TimerHandle, list[asyncio.Future[None]]]] = {}

    # -- pod lifecycle -----------------------------------------------------------------------
    def add_pod(self, pod: dict[str, Any]) -> None:
        """Start workers for every probe of the pod (idempotent; probe specs are immutable)."""
        uid = pod_uid(pod)
        info = self._pods.get(uid)
        if info is None:
            self._pods[uid] = _PodInfo(pod, {}, "")
        else:
            info.pod = pod
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        for c in probe_containers(pod):
            for t in ProbeType:
                spec = c.get(t.spec_field)
                if not spec or (uid, c.get("name", ""), t) in self._workers:
                    continue
                w = Worker(self, uid, c, t, spec)
                self._workers[w.key] = w
                self._pod_workers.setdefault(uid, set()).add(w.key)
                self._start(w)

    def update_pod_status(self, pod: dict[str, Any], container_statuses: ContainerStatuses, pod_ip: str) -> None:
        """Latest runtime view; a changed container id wakes that container's workers at once."""
        uid = pod_uid(pod)
        info = self._pods.get(uid)
        old: ContainerStatuses = info.statuses if info else {}
        self._pods[uid] = _PodInfo(pod, dict(container_statuses), pod_ip or "")
        for name, st in container_statuses.items():
            prev = old.get(name)
            if prev is None or prev[0] != st[0] or prev[1] != st[1]:
                for t in ProbeType:
                    w = self._workers.get((uid, name, t))
                    if w is not None:
                        w.wake()

    def remove_pod(self, uid: str) -> None:
        for key in list(self._pod_workers.get(uid, ())):
            w = self._workers.get(key)
            if w is not None:
                self._stop_worker(w)
        self._pod_workers.pop(uid, None)
        self._pods.pop(uid, None)

    def cleanup_pods(self, desired_uids: Iterable[str]) -> None:
        """Remove the workers and state of every pod not in ``desired_uids`` (upstream ``CleanupPods``,
        run by each housekeeping pass). Every pod with a worker has an entry in ``_pods``, so the pods
        to remove are one set difference: no Python work per pod that stays."""
        desired = desired_uids if isinstance(desired_uids, (set, frozenset)) else set(desired_uids)
        for uid in self._pods.keys() - desired:
            self.remove_pod(uid)

    async def stop(self) -> None:
        """Cancel every worker and close the HTTP session (agent shutdown)."""
        tasks = [w.task for w in self._workers.values() if w.task is not None]
        for w in list(self._workers.values()):
            self._stop_worker(w)
        await cancel_and_wait(*tasks)
        await self.prober.close()

    # -- results -----------------------------------------------------------------------------
    def _cid(self, uid: str, name: str) -> str:
        info = self._pods.get(uid)
        st = info.statuses.get(name) if info else None
        return st[0] if st else ""

    def _lookup(self, t: ProbeType, uid: str, name: str, default_with_probe: Result) -> Result:
        cid = self._cid(uid, name)
        if cid and cid in self._results[t]:
            return self._results[t][cid]
        return default_with_probe if (uid, name, t) in self._workers else Result.SUCCESS

    def liveness(self, uid: str, container_name: str) -> Result:
        return self._lookup(ProbeType.LIVENESS, uid, container_name, Result.SUCCESS)

    def readiness(self, uid: str, container_name: str) -> Result:
        return self._lookup(ProbeType.READINESS, uid, container_name, Result.FAILURE)

    def startup(self, uid: str, container_name: str) -> Result:
        return self._lookup(ProbeType.STARTUP, uid, container_name, Result.UNKNOWN)

    def result_for(self, probe_type: ProbeType, container_id: str) -> Result | None:
        """Raw cached result by container id (upstream results.Manager.Get)."""
        return self._results[probe_type].get(container_id)

    def is_started(self, uid: str, container_name: str) -> bool:
        """ContainerStatus.started: running and (no startup probe or it succeeded)."""
        info = self._pods.get(uid)
        st = info.statuses.get(container_name) if info else None
        return bool(st and st[1]) and self.startup(uid, container_name) is Result.SUCCESS

    def is_ready(self, uid: str, container_name: str) -> bool:
        """ContainerStatus.ready: started and (no readiness probe or it succeeded)."""
        return self.is_started(uid, container_name) and self.readiness(uid, container_name) is Result.SUCCESS

    def kill_decision(self, pod: dict[str, Any], container_name: str) -> KillDecision | None:
        """Whether a liveness/startup failure requires killing the container (computePodActions)."""
        uid = pod_uid(pod)
        info = self._pods.get(uid)
        st = info.statuses.get(container_name) if info else None
        if st is not None and not st[1]:
            return None  # upstream only kills *running* unhealthy containers; dead ones just restart
        container = next((c for c in probe_containers(pod) if c.get("name") == container_name), {})
        for t, reason in ((ProbeType.LIVENESS, "LivenessProbe"), (ProbeType.STARTUP, "StartupProbe")):
            if self._lookup(t, uid, container_name, Result.SUCCESS) is Result.FAILURE:
                grace = (container.get(t.spec_field) or {}).get("terminationGracePeriodSeconds")
                return KillDecision(t, reason, f"Container {container_name} failed {t.value.lower()} probe",
                                    int(grace) if grace is not None else None)
        return None

    @staticmethod
    def kill_grace_period(pod: dict[str, Any], decision: KillDecision | None) -> int:
        """Grace period for a probe-caused kill: probe-level override, else the pod's."""
        if decision is not None and decision.grace_period is not None:
            return decision.grace_period
        g = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return int(g) if g is not None else DEFAULT_POD_GRACE

    def workers(self) -> list[Worker]:
        return list(self._workers.values())

    # -- internals ---------------------------------------------------------------------------
    def _start(self, w: Worker) -> None:
        """Spawn the worker's task (tests override this to drive ``Worker.step`` by hand)."""
        w.task = asyncio.get_running_loop().create_task(
            w.run(), name=f"probe-{w.probe_type.value.lower()}-{w.uid}-{w.name}")

    def _set_result(self, t: ProbeType, cid: str, result: Result, uid: str) -> None:
        store = self._results[t]
        if store.get(cid) is result:
            return
        store[cid] = result
        if self.on_change is not None:
            try:
                self.on_change(uid)
            except Exception:
                log.exception("probe on_change callback failed for pod %s", uid)

    def _remove_result(self, t: ProbeType, cid: str) -> None:
        self._results[t].pop(cid, None)

    def _forget_worker(self, w: Worker) -> None:
        self._workers.pop(w.key, None)
        keys = self._pod_workers.get(w.uid)
        if keys is not None:
            keys.discard(w.key)
            if not keys:
                del self._pod_workers[w.uid]

    def _stop_worker(self, w: Worker) -> None:
        self._forget_worker(w)
        if w.state.container_id:
            self._remove_result(w.probe_type, w.state.container_id)
        if w.task is not None and not w.task.done():
            w.task.cancel()

    def _worker_done(self, w: Worker) -> None:
        if self._workers.get(w.key) is w:
            self._forget_worker(w)
            if w.state.container_id:
                self._remove_result(w.probe_type, w.state.container_id)

    def _event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if self.recorder is None:
            return
        try:
            self.recorder.event(pod, type_, reason, message)
        except Exception:
            log.exception("failed to record probe event")

    async def _wait(self, worker: Worker, seconds: float) -> None:
        """Sleep ``seconds`` (rounded to the wake grid) or until ``worker.wake()`` (tests override
        this).

        One future per sleep, resolved by the loop timer of its grid slot or by ``wake()``: no
        timeout context whose expiry cancels the task and unwinds a CancelledError every period, no
        ``asyncio.Event`` with its waiter list. The workers due in the same slot share one timer
        (armed by the first of them, it resolves every future still pending): with 200 probes a
        second that is ~10 timers a second instead of 200 armed and cancelled, about 5 µs less per
        probe run on the 2-core VM (docs/benchmarks-scale.md, "A slower VM"). A worker woken or
        cancelled before its slot leaves it (the timer is cancelled with its last sleeper), so a
        long period's slot holds nothing for a pod that is gone.
        """
        if worker._woken:
            worker._woken = False
            return
        loop = asyncio.get_running_loop()
        slot = round((loop.time() + seconds) / WAKE_GRID)
        fut: asyncio.Future[None] = loop.create_future()
        entry = self._slots.get(slot)
        if entry is None:
            entry = self._slots[slot] = (loop.call_at(slot * WAKE_GRID, self._wake_slot, slot), [])
        entry[1].append(fut)
        worker._sleeper = fut
        try:
            await fut
        finally:
            worker._sleeper = None
            if self._slots.get(slot) is entry:  # ended before its slot: woken or cancelled
                entry[1].remove(fut)
                if not entry[1]:
                    entry[0].cancel()
                    del self._slots[slot]
        worker._woken = False

    def _wake_slot(self, slot: int) -> None:
        entry = self._slots.pop(slot, None)
        for fut in entry[1] if entry is not None else ():
            if not fut.done():
                fut.set_result(None)
