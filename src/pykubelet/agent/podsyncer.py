"""What a pod worker does for one pod (upstream ``Kubelet.SyncPod``, ``SyncTerminatingPod``,
``SyncTerminatedPod``).

The pod workers (``podworkers.PodWorkers``) decide *when* a pod is synced and in which state; this
module decides *what* a sync does, as upstream's three methods:

- ``sync_pod`` (the pod should run): generate the API status from the runtime view and hand it to
  the status manager (skipped when nothing it is made from changed since a generation that changed
  nothing: a periodic resync of an idle pod costs no generation and no comparison); stop if the pod
  is terminal or its ``activeDeadlineSeconds`` passed (``DeadlineExceeded``); register its probes;
  make sure its mirror pod exists (static pods); run the ``PodLifecycleHook``s that must succeed
  before containers start (pod directories, the pod cgroup; volumes plug in here); then
  ``RuntimeManager.sync_pod``. When that started containers the runtime is re-read at once (the
  PLEG's targeted ``update_pod``: cache and events, so the next relist has nothing left to fetch)
  and the new status handed over, so ``Running`` reaches the API without waiting for the next
  relist. A crash-loop back-off or a deadline asks the worker to come back (``requeue_after``),
  since nothing else would wake it in time.
- ``sync_terminating_pod``: stop every container with the grace period, report the final status.
- ``sync_terminated_pod``: remove the probes, release the hooks (cgroup), let the status manager
  confirm the deletion to the API.

The runtime view comes from the PLEG's cache when it is newer than this pod's last sync, else from a
fresh runtime query (upstream ``podCache.GetNewerThan``). A pod this process never began to sync, of
which a complete relist saw nothing (``runtime_has_nothing_of``), starts from an empty view without
asking (upstream's cache answers a new pod the same way); a pod whose containers outlived an agent
restart is listed by that relist, so it is adopted. While such a pod's first sync runs the relist
leaves it to the sync (``is_making``), and when that sync made all of the pod's objects the re-read
after starting asks for just those by id (``RuntimeManager.status_of_made``): a new pod costs no
List call of its own. The ContainerStarted events of that re-read after a clean start wake no second
sync (``reported_by_its_sync``): the status was generated from that very view. Probe results enter the status through the
prober: each status generation first feeds it the runtime view (container id, running, started).
"""

from __future__ import annotations

import calendar
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from pykubelet.agent import metrics
from pykubelet.agent.container import filework
from pykubelet.agent.container.runtime import ContainerState, RuntimePodStatus
from pykubelet.agent.interfaces import EventRecorder, MirrorClient, PodLifecycleHook, PodNotReadyError
from pykubelet.agent.kuberuntime.actions import ProbeKill, ProbeKillFunc, backoff_key
from pykubelet.agent.kuberuntime.manager import MadeObjects, RuntimeManager, make_dir
from pykubelet.agent.pleg import PodLifecycleEvent, PodLifecycleEventType, PodStatusCache, StatusReader
from pykubelet.agent.podmanager import PodManager, pod_uid
from pykubelet.agent.podworkers import SyncPodResult, SyncPodType
from pykubelet.agent.prober.manager import ProbeManager, probe_containers
from pykubelet.agent.prober.results import Result
from pykubelet.agent.status.generate import generate_api_status
from pykubelet.agent.status.manager import StatusManager
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.common import podutil

log = logging.getLogger(__name__)

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
ERROR_RETRY = 5.0


def active_deadline_left(pod: Pod, status: JSONObj, now: float) -> float | None:
    """Seconds until spec.activeDeadlineSeconds passes (counted from status.startTime), or None."""
    ads = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    start = status.get("startTime")
    if ads is None or not start:
        return None
    try:
        t0 = calendar.timegm(time.strptime(str(start), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None
    return t0 + float(ads) - now


class PodDirectories:
    """``<root-dir>/pods/<uid>/{volumes,plugins,containers}``, as upstream's ``makePodDataDirs``."""

    def __init__(self, root_dir: Path) -> None:
        self.base = root_dir / "pods"
        self._base = str(self.base)
        self._made: set[str] = set()

    def _make(self, uid: str) -> None:
        # ``Path.mkdir(parents=True, exist_ok=True)`` of each, on str paths (pathlib's joins cost
        # ~45-75 µs of Python per pod, this ~12-14 µs; the same mkdir calls)
        pod_dir = os.path.join(self._base, uid)
        make_dir(pod_dir)
        for sub in ("volumes", "plugins", "containers"):
            make_dir(os.path.join(pod_dir, sub))

    async def prepare_pod(self, pod: Pod) -> None:
        uid = pod_uid(pod)
        if uid in self._made:  # once per pod, not on every sync
            return
        try:
            await filework.run(self._make, uid)  # three mkdirs: the file worker, not a to_thread hop
            self._made.add(uid)
        except OSError as e:
            log.warning("pod dirs for %s: %s", uid, e)

    async def release_pod(self, uid: str) -> None:
        """Kept until housekeeping removes them: the termination-message files live there."""
        self._made.discard(uid)


def runtime_has_nothing_of(*, synced_here: bool, listed_without_at: float | None, last_forget: float) -> bool:
    """Whether a pod's runtime view can be taken as empty without asking the runtime: this process
    never began a sync of the pod (so it made nothing for it), and a complete relist that began
    after the last time a pod was forgotten here listed nothing of it (``listed_without_at``: when
    that relist began, None if it saw the pod or none finished yet). A pod whose containers outlived
    an agent restart was listed by that first relist, so it is adopted, never started again."""
    return not synced_here and listed_without_at is not None and listed_without_at > last_forget


def reported_by_its_sync(event_type: PodLifecycleEventType, *, clean_start_report: bool) -> bool:
    """Whether a PLEG event needs no new sync of its pod because the pod's own sync reported it:
    the re-read after a start that went through without error or back-off (``clean_start_report``)
    emits ContainerStarted for what that sync just started, and the status was generated from that
    very view; a sync woken by it would find nothing to do. Any other event (a container already
    dead, one created but not started) still wakes the pod, as does a start that failed (retried at
    once, as after upstream's next relist) and one that started an init container (the pod's next
    step: a started sidecar lets the app containers start)."""
    return clean_start_report and event_type is PodLifecycleEventType.CONTAINER_STARTED


@dataclass(frozen=True)
class _StatusInputs:
    """What one status generation was made from (besides the clock, which only stamps changes)."""

    rt: RuntimePodStatus
    pod: Pod
    version: int  # the status manager's version of the cached (previous) status
    reasons: dict[str, tuple[str, str]]
    probes: dict[str, tuple[bool, bool]]
    host_ips: tuple[str, ...]

    def same_as(self, other: _StatusInputs | None) -> bool:
        return (other is not None and self.rt is other.rt and self.pod is other.pod
                and self.version == other.version and self.reasons == other.reasons
                and self.probes == other.probes and self.host_ips == other.host_ips)


# a status of just that phase, one shared dict per phase (read only, like every pod object here)
_PHASE_ONLY: dict[str, JSONObj] = {p: {"phase": p} for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown")}


def _phase_only(phase: object) -> JSONObj:
    """A status holding ``phase`` alone (none when it is None)."""
    if isinstance(phase, str):
        return _PHASE_ONLY.get(phase) or {"phase": phase}
    return {} if phase is None else {"phase": phase}


class PodSyncer:
    """Implements ``podworkers.PodSyncer`` for the kubelet."""

    def __init__(
        self,
        *,
        pods: PodManager,
        runtime: RuntimeManager,
        cache: PodStatusCache,
        statuses: StatusManager,
        probes: ProbeManager,
        recorder: EventRecorder,
        mirror: MirrorClient | None,
        host_ips: list[str],
        hooks: list[PodLifecycleHook],
        clock: Callable[[], float] = time.time,
        refresh: Callable[[str, StatusReader | None], Awaitable[RuntimePodStatus]] | None = None,
        listed_without: Callable[[str], float | None] | None = None,
    ) -> None:
        self.pods = pods
        self.runtime = runtime
        self.cache = cache
        self.statuses = statuses
        self.probes = probes
        self.recorder = recorder
        self.mirror = mirror
        self.host_ips = host_ips
        self.hooks = hooks
        self.clock = clock
        # the PLEG's targeted update (cache + events at once); a bare runtime query without a PLEG
        self.refresh = refresh
        # the PLEG's word that its last relist saw nothing of a pod (``GenericPLEG.listed_without``)
        self.listed_without = listed_without
        self._last_sync: dict[str, float] = {}
        self._began: set[str] = set()  # pods whose sync (of any kind) began in this process
        self._making: set[str] = set()  # pods whose in-flight sync began with nothing in the runtime
        self._reporting: set[str] = set()  # pods whose clean start is being re-read and reported
        self._last_forget = 0.0  # wall clock of the last ``forget``
        # uid → what the last status generation that changed nothing was made from (``_update_status``)
        self._unchanged: dict[str, _StatusInputs] = {}

    def forget(self, uid: str) -> None:
        self._last_sync.pop(uid, None)
        self._unchanged.pop(uid, None)
        self._began.discard(uid)
        # a relist that began before now may have missed what the pod's syncs made: until one that
        # began later finished, no pod is taken as absent from the runtime on a relist's word
        self._last_forget = self.clock()

    # ------------------------------------------------------------------ the runtime view
    async def _runtime_status(self, uid: str) -> RuntimePodStatus:
        last = self._last_sync.get(uid, 0.0)
        if self.cache.newer_than(uid, last) and self.cache.has(uid):
            return self.cache.get(uid)
        listed_without_at = self.listed_without(uid) if self.listed_without is not None else None
        if runtime_has_nothing_of(synced_here=uid in self._began, listed_without_at=listed_without_at,
                                  last_forget=self._last_forget):
            # a pod new to this process that the runtime has nothing of: no ListPodSandbox and
            # ListContainers for it (the cache's empty view, as upstream's GetNewerThan answers)
            return RuntimePodStatus(uid=uid, timestamp=listed_without_at or 0.0)
        st = await self.runtime.get_pod_status(uid)
        self.cache.set(uid, st)  # ignored if the PLEG stored a newer view meanwhile
        return self.cache.get(uid)

    def generate(self, pod: Pod, status: RuntimePodStatus, *, terminal: bool = False) -> JSONObj:
        uid = pod_uid(pod)
        p = pod
        cached = self.statuses.peek_pod_status(uid)  # read only: generate_api_status copies what it keeps
        if cached is not None:
            p = {**pod, "status": cached}
        return generate_api_status(
            p, status, reasons=self.runtime.reasons_for(uid), host_ips=self.host_ips,
            qos_class=podutil.qos_class(pod), pod_is_terminal=terminal, probes=self._feed_probes(pod, cached, status),
        )

    def _update_status(self, pod: Pod, rt: RuntimePodStatus) -> JSONObj:
        """Generate the pod's API status and hand it to the status manager; return it.

        A periodic resync of an idle pod finds the same runtime view (the cache's very object), the
        same pod object, the same cached status version, reason cache and probe results as its last
        generation that changed nothing: the generation would change nothing again, so it is skipped
        and the cached status (read only) is the answer. The prober is fed the runtime view either way.
        """
        uid = pod_uid(pod)
        cached = self.statuses.peek_pod_status(uid)
        inputs = _StatusInputs(rt, pod, self.statuses.version(uid), self.runtime.reasons_for(uid),
                               self._feed_probes(pod, cached, rt), tuple(self.host_ips))
        if cached is not None and inputs.same_as(self._unchanged.get(uid)):
            return cached
        status = generate_api_status(
            pod if cached is None else {**pod, "status": cached}, rt, reasons=inputs.reasons,
            host_ips=self.host_ips, qos_class=podutil.qos_class(pod), probes=inputs.probes,
        )
        if self.statuses.set_pod_status(pod, status, handed_over=True):  # only read from here on
            self._unchanged.pop(uid, None)
        else:
            self._unchanged[uid] = inputs
        return status

    def _feed_probes(self, pod: Pod, cached: JSONObj | None,
                     status: RuntimePodStatus) -> dict[str, tuple[bool, bool]]:
        """Give the prober the runtime view, return name → (started, ready) for probed containers.

        The prober keeps the pod it is given until the next sync and reads of its status only the
        phase (a terminal pod's probes stop), which is the cached status's (upstream's workers ask the
        status manager). It gets the pod with that phase alone: with the whole cached status it
        kept the previous generated status (~2.3 kB) alive next to the status manager's new one
        until the pod's next sync (a minute for an idle pod)."""
        uid = pod_uid(pod)
        views: dict[str, tuple[str, bool, float | None]] = {}
        for c in probe_containers(pod):
            cs = status.find_container(c.get("name", ""))
            if cs is not None:
                views[cs.name] = (cs.id, cs.state is ContainerState.RUNNING, cs.started_at or None)
        seen = pod if cached is None else {**pod, "status": _phase_only(cached.get("phase"))}
        self.probes.update_pod_status(seen, views, (status.ips or [""])[0])
        return {n: (self.probes.is_started(uid, n), self.probes.is_ready(uid, n)) for n in views}

    def _probe_kill(self, pod: Pod) -> ProbeKillFunc:
        def decide(name: str, container_id: str) -> ProbeKill | None:
            d = self.probes.kill_decision(pod, name)
            # only act on a result about this very container (never on a stale id's)
            if d is None or self.probes.result_for(d.probe_type, container_id) is not Result.FAILURE:
                return None
            return ProbeKill(d.reason, d.message, d.grace_period)
        return decide

    def _observe_start(self, uid: str, status: JSONObj) -> None:
        if status.get("phase") == "Running":
            first_seen = self.pods.take_first_seen(uid)
            if first_seen is not None:
                metrics.POD_START_DURATION.observe(time.monotonic() - first_seen)

    # ------------------------------------------------------------------ PodSyncer
    def reported_by_its_sync(self, event: PodLifecycleEvent) -> bool:
        """``reported_by_its_sync`` for an event of the PLEG (the kubelet wakes no sync for it)."""
        return reported_by_its_sync(event.type, clean_start_report=event.pod_uid in self._reporting)

    def is_making(self, uid: str) -> bool:
        """A sync of this pod is in flight that began with nothing of it in the runtime (so whatever
        a relist finds of the pod, that sync made it and reports it itself: ``GenericPLEG.making``)."""
        return uid in self._making

    async def sync_pod(self, update_type: SyncPodType, pod: Pod, mirror_pod: Pod | None) -> SyncPodResult:
        uid = pod_uid(pod)
        rt = await self._runtime_status(uid)
        self._began.add(uid)  # before anything of the pod can be made
        making = not rt.sandboxes and not rt.containers
        if making:
            self._making.add(uid)
        try:
            return await self._sync_pod(pod, uid, rt)
        finally:
            if making:
                self._making.discard(uid)

    async def _sync_pod(self, pod: Pod, uid: str, rt: RuntimePodStatus) -> SyncPodResult:
        status = self._update_status(pod, rt)
        if status.get("phase") in ("Succeeded", "Failed"):
            return SyncPodResult(terminal=True)
        deadline_left = active_deadline_left(pod, status, self.clock())
        if deadline_left is not None and deadline_left <= 0:
            self.recorder.event(pod, "Normal", "DeadlineExceeded", DEADLINE_MESSAGE)
            self.statuses.set_pod_status(
                pod, {**status, "phase": "Failed", "reason": "DeadlineExceeded", "message": DEADLINE_MESSAGE})
            return SyncPodResult(terminal=True)
        self.probes.add_pod(pod)
        self._observe_start(uid, status)
        mirror_missing = False
        if podutil.is_static_pod(pod) and self.mirror is not None:
            try:
                mirror_missing = await self.mirror.ensure_mirror(pod) is None
            except Exception as e:
                mirror_missing = True
                log.warning("mirror pod for %s: %s", (pod.get("metadata") or {}).get("name"), e)
        try:
            for hook in self.hooks:
                await hook.prepare_pod(pod)
        except PodNotReadyError as e:
            self.recorder.event(pod, "Warning", e.reason, e.message)
            return SyncPodResult(terminal=False, requeue_after=e.retry_after)
        result = await self.runtime.sync_pod(pod, rt, probe_kill=self._probe_kill(pod),
                                             started=lambda n: self.probes.is_started(uid, n))
        self._last_sync[uid] = self.clock()
        if result.started:
            # report what we just started at once instead of after the next PLEG relist (up to 1 s)
            # "clean": this sync's own re-read reports everything its start changed, so the
            # ContainerStarted events of that re-read wake no second sync. Not when it started an init
            # container: the pod's next step waits on that container's events (a sidecar's
            # ContainerStarted lets the app containers start; nothing else would wake the pod).
            actions = result.actions
            clean = not result.error and not (actions is not None and (actions.backoff or actions.init_containers_to_start))
            rt = await self._refresh_after_start(pod, rt, result.made, clean=clean)
        elif result.actions is not None and not result.actions.kill_pod:
            # nothing changed in the runtime: refresh waiting reasons (CrashLoopBackOff, ...) now
            # (skipped when neither they nor anything else the status is made from changed)
            self._update_status(pod, rt)
        with contextlib.suppress(Exception):
            await self.runtime.gc_pod(rt)
        requeue: float | None = None
        if result.actions is not None and result.actions.backoff:
            # wake up when the first crash-loop back-off expires (nothing else would)
            remaining = [
                self.runtime.backoff.remaining(backoff_key(pod, c), cs.finished_at)
                for name in result.actions.backoff
                if (c := podutil.find_container(pod, name)) is not None
                and (cs := rt.find_container(name)) is not None
            ]
            requeue = max(0.5, min(remaining, default=1.0) + 0.2)
        elif result.error:
            requeue = ERROR_RETRY
        if mirror_missing:
            # e.g. a static pod synced before the node was registered: the API refuses a mirror
            # without the Node's owner reference, so try again soon instead of at the next resync
            requeue = min(requeue if requeue is not None else ERROR_RETRY, ERROR_RETRY)
        if deadline_left is not None:
            requeue = min(requeue if requeue is not None else deadline_left + 0.2, deadline_left + 0.2)
        return SyncPodResult(terminal=False, requeue_after=requeue)

    async def _refresh_after_start(self, pod: Pod, rt: RuntimePodStatus, made: MadeObjects | None, *,
                                   clean: bool = False) -> RuntimePodStatus:
        """Re-read the runtime after starting containers and hand the new status over at once.

        The status manager writes it immediately (no batching), so the first ``Running`` reaches the
        API a few milliseconds after StartContainer returned; the PLEG's next relist then finds the
        cache already up to date for this pod. When this sync made all of the pod's objects, those
        are read by id (``RuntimeManager.status_of_made``) instead of listing the runtime for the pod.
        """
        uid = pod_uid(pod)
        read: StatusReader | None = None
        if made is not None:
            def read() -> Awaitable[RuntimePodStatus]:
                return self.runtime.status_of_made(uid, made)
        if clean:
            self._reporting.add(uid)  # its ContainerStarted events need no second sync
        try:
            if self.refresh is not None:
                fresh = await self.refresh(uid, read)
            else:
                fresh = await (read() if read is not None else self.runtime.get_pod_status(uid))
                self.cache.set(uid, fresh)
        except Exception as e:
            log.debug("runtime status of pod %s after start: %s", uid, e)
            return rt
        finally:
            self._reporting.discard(uid)
        status = self.generate(pod, fresh)
        self.statuses.set_pod_status(pod, status, handed_over=True)  # only read from here on
        self._observe_start(uid, status)
        return fresh

    async def sync_terminating_pod(self, pod: Pod, grace: int | None) -> None:
        uid = pod_uid(pod)
        self._began.add(uid)
        rt = await self.runtime.get_pod_status(uid)
        self.cache.set(uid, rt)
        await self.runtime.kill_pod(pod, rt, grace)
        rt = await self.runtime.get_pod_status(uid)
        self.cache.set(uid, rt)
        self._last_sync[uid] = self.clock()
        if not self.pods.is_rejected(uid):
            self.statuses.set_pod_status(pod, self.generate(pod, rt, terminal=True), handed_over=True)

    async def sync_terminated_pod(self, pod: Pod) -> None:
        uid = pod_uid(pod)
        self.probes.remove_pod(uid)
        for hook in reversed(self.hooks):
            await hook.release_pod(uid)
        self.statuses.terminated(uid)
