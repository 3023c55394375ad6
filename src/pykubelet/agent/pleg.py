"""Generic pod lifecycle event generator and the pod status cache (upstream pleg/generic.go, container/cache.go).

containerd 1.6 does not implement GetContainerEvents, so like upstream's GenericPLEG the agent
relists: every ``relist_period`` (1 s) it lists sandboxes and containers, diffs each pod's
{id → state} map against the previous relist (``list_runtime`` hands back the previous listing's map
object for a pod whose objects kept their ids and states, so on an idle node the diff is an identity
check per pod and the metrics are counted once per change), fetches the full status of pods that changed
(concurrently, up to ``MAX_CONCURRENT_STATUS``; upstream's Go loop goes one by one, which in Python
made the last of 1,000 starting pods wait seconds for its event), stores it in the ``PodStatusCache``
and hands one typed ``PodLifecycleEvent`` per change to ``on_event``.

Events follow upstream's ``generateEvents``: a sandbox or container that is now running gives
``ContainerStarted``, one that exited ``ContainerDied``, one that disappeared ``ContainerRemoved``
(after ``ContainerDied`` if it was running), any other change ``ContainerChanged``; a pod whose cache
entry had to be refreshed without any per-container change gives ``PodSync``. The sync loop drops the
events that need no sync (``is_sync_pod_worthy``: ``ContainerRemoved``), as upstream does.

``PodStatusCache`` keeps upstream's "newer than" bookkeeping: every entry carries the time the runtime
was *queried* (taken before the query) and the cache has a global timestamp moved forward after each
complete relist, so a worker can tell whether the cache already holds a view newer than its own last
sync (``newer_than``) or must query the runtime itself.
``healthy()`` is False when the last relist is older than 3 minutes (upstream relistThreshold).

An idle node's relist is cheap in Python too: when the listing handed back every pod's previous map
(and no targeted update, deferral or cache removal happened since), there is nothing to diff and no
status to fetch; the running pods/containers gauges are set only when the counts are a new object
(``list_runtime`` recounts them only on a change). Relists start on whole multiples of the period on
the loop clock (``common.ticks``), so the other periodic work of the agent (housekeeping, due pod
resyncs, the runtime check) runs in the same loop wake-up instead of one of its own.

``update_pod(uid)`` is the targeted update a pod worker asks for right after its sync started
containers (what upstream's Evented PLEG and ``GenericPLEG.UpdateCache`` give): one pod's status is
read, stored in the cache, diffed against the states the PLEG last reported for that pod, and the
events emitted at once, so the started containers reach the status manager without waiting up to a
relist period (and a relist at 1,000 pods does not re-fetch 1,000 statuses it already has). The
relist stays the safety net and emits no event twice: a targeted update records the states it
reported (the relist's own "old" view) and the query time; a relist that listed before that time
leaves the pod to the targeted view, and a targeted answer older than a finished relist is dropped.
A pod new to the PLEG whose first sync is in flight (``making``) is left to that sync's targeted
update: no status fetch, no event sent twice; the next relist finds it if the sync reported nothing.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import operator
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from pykubelet.agent import metrics
from pykubelet.agent.container.runtime import ContainerState, RuntimePodStatus
from pykubelet.agent.kuberuntime.manager import RuntimeListing
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.ticks import run_on_ticks

log = logging.getLogger(__name__)

RELIST_THRESHOLD = 180.0
MAX_CONCURRENT_STATUS = 32


class PodLifecycleEventType(enum.StrEnum):
    """Upstream ``PodLifeCycleEventType``."""

    CONTAINER_STARTED = "ContainerStarted"
    CONTAINER_DIED = "ContainerDied"
    CONTAINER_REMOVED = "ContainerRemoved"
    CONTAINER_CHANGED = "ContainerChanged"
    POD_SYNC = "PodSync"


@dataclass(frozen=True)
class PodLifecycleEvent:
    """One change the PLEG saw in the runtime (upstream ``PodLifecycleEvent``)."""

    pod_uid: str
    type: PodLifecycleEventType
    container_id: str = ""  # the sandbox or container id; empty for PodSync


def is_sync_pod_worthy(event: PodLifecycleEvent) -> bool:
    """Upstream ``isSyncPodWorthy``: a removed container changes nothing the pod worker acts on."""
    return event.type is not PodLifecycleEventType.CONTAINER_REMOVED


StatusReader = Callable[[], Awaitable[RuntimePodStatus]]
"""One pod's runtime status, read the way its caller knows best (``GenericPLEG.update_pod``)."""


class RuntimeLister(Protocol):
    """What the PLEG needs from the runtime manager."""

    async def list_runtime(self) -> RuntimeListing: ...

    async def get_pod_status(self, uid: str) -> RuntimePodStatus: ...


class PodStatusCache:
    def __init__(self) -> None:
        self._entries: dict[str, RuntimePodStatus] = {}
        self._global = 0.0
        self.deletions = 0  # entries removed so far (a relist re-fetches a listed pod without one)

    def get(self, uid: str) -> RuntimePodStatus:
        st = self._entries.get(uid)
        return st if st is not None else RuntimePodStatus(uid=uid, timestamp=self._global)

    def has(self, uid: str) -> bool:
        return uid in self._entries

    def uids(self) -> list[str]:
        return list(self._entries)

    def set(self, uid: str, status: RuntimePodStatus) -> None:
        old = self._entries.get(uid)
        if old is not None and old.timestamp > status.timestamp:
            return  # never replace a newer view with an older one
        self._entries[uid] = status

    def delete(self, uid: str) -> None:
        if self._entries.pop(uid, None) is not None:
            self.deletions += 1

    def update_time(self, ts: float) -> None:
        self._global = max(self._global, ts)

    def newer_than(self, uid: str, ts: float) -> bool:
        st = self._entries.get(uid)
        return (st is not None and st.timestamp > ts) or self._global > ts


class GenericPLEG:
    def __init__(
        self,
        manager: RuntimeLister,
        cache: PodStatusCache,
        on_event: Callable[[PodLifecycleEvent], None],
        *,
        relist_period: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.manager = manager
        self.cache = cache
        self.on_event = on_event
        self.relist_period = relist_period
        self.clock = clock
        self._old: dict[str, dict[str, ContainerState]] = {}
        self._last_relist = 0.0
        self._last_relist_mono: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._targeted: dict[str, float] = {}  # uid → query time of its last targeted update
        # pods the agent is making right now (a first sync in flight; None: none is left alone). A
        # relist leaves a pod new to it to that sync's own targeted update instead of fetching its
        # status (4 CRI calls) and sending events that sync reports anyway; if the sync ends without
        # one, the next relist finds the pod as it would have.
        self.making: Callable[[str], bool] | None = None
        self._deferred: set[str] = set()  # the pods the last relist left to their sync
        self.relist_count = 0
        self._deletions_seen = -1  # the cache's deletions when the last relist ended (-1: none yet)
        self._settled = False  # the last relist left every listed pod cached as listed (no error, no deferral)
        self._container_gauges = [(state, metrics.RUNNING_CONTAINERS.labels(state.value)) for state in ContainerState]
        self._counted: object = None  # the listing's counts last set on the gauges

    def healthy(self) -> bool:
        if self._last_relist_mono is None:
            return True  # not started yet: upstream reports healthy until the first relist
        return time.monotonic() - self._last_relist_mono < RELIST_THRESHOLD

    def start(self) -> None:
        if self._task is None:
            self._task = run_on_ticks(self.relist, self.relist_period, name="pleg", log=log, first_delay=0)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _statuses(self, uids: list[str]) -> dict[str, RuntimePodStatus | Exception]:
        """The changed pods' statuses, fetched concurrently (up to ``MAX_CONCURRENT_STATUS``): one
        after another, a relist that follows 1,000 starting pods took many seconds, and the last
        pod's event waited for all the others' round trips."""
        limit = asyncio.Semaphore(MAX_CONCURRENT_STATUS)

        async def one(uid: str) -> RuntimePodStatus | Exception:
            async with limit:
                try:
                    return await self.manager.get_pod_status(uid)
                except Exception as e:
                    return e

        results = await asyncio.gather(*(one(uid) for uid in uids))
        return dict(zip(uids, results, strict=True))

    async def update_pod(self, uid: str, read: StatusReader | None = None) -> RuntimePodStatus:
        """Targeted update of one pod (see the module docstring): its fresh status is cached and the
        changes since the states last reported for it are emitted now. Raises what the runtime raised.
        ``read``: how the caller reads this pod's status when it knows more than a relist would (a
        pod worker that just made all of the pod's objects reads just those); its answer must carry
        the time its query began, as ``get_pod_status``'s does."""
        ts = self.clock()
        status = await (read() if read is not None else self.manager.get_pod_status(uid))
        if self._last_relist > ts and uid not in self._deferred:
            return self.cache.get(uid)  # a relist that listed after this query already reported it
        new = pod_states(status)
        old = self._old.get(uid, {})
        self.cache.set(uid, status)
        self._targeted[uid] = ts
        self._old[uid] = new
        for cid in set(old) | set(new):
            for event in _events(uid, cid, old.get(cid), new.get(cid)):
                self._emit(event)
        return self.cache.get(uid)

    def listed_without(self, uid: str) -> float | None:
        """When the last complete relist began listing, if neither it nor a targeted update since
        saw any sandbox or container of ``uid``; None if one did, or before the first relist. The
        agent (the only maker of pod sandboxes on its node) uses it to start a pod it never synced
        without asking the runtime about it again (upstream reads a new pod's status from this
        cache too: ``podCache.GetNewerThan``)."""
        if self._last_relist_mono is None or uid in self._old or uid in self._deferred:
            return None
        return self._last_relist

    def _emit(self, event: PodLifecycleEvent) -> None:
        try:
            self.on_event(event)
        except Exception:
            log.exception("PLEG event handler failed on %s", event)

    async def relist(self) -> None:
        ts = self.clock()
        t0 = time.monotonic()
        if self._last_relist_mono is not None:
            metrics.PLEG_RELIST_INTERVAL.observe(t0 - self._last_relist_mono)
        listing = await self.manager.list_runtime()
        current = listing.pods
        before = dict(self._targeted)
        old_pods, has = self._old, self.cache.has
        changed: list[str]
        if (self._settled and not before and self.cache.deletions == self._deletions_seen
                and len(current) == len(old_pods)
                and all(map(operator.is_, current.values(), old_pods.values())) and current.keys() == old_pods.keys()):
            changed = []  # every pod's map is the previous listing's own object: nothing changed
        else:
            # an unchanged pod's map is the very object of the previous listing (list_runtime reuses it)
            changed = [uid for uid in current.keys() | old_pods.keys()
                       if ((new := current.get(uid)) is not (old := old_pods.get(uid)) and (new or {}) != (old or {}))
                       or not has(uid)]
        deferred: set[str] = set()
        if self.making is not None and changed:
            deferred = {uid for uid in changed if uid not in old_pods and uid in current and self.making(uid)}
            changed = [uid for uid in changed if uid not in deferred]
        to_fetch = [uid for uid in changed if uid in current]
        fetched = await self._statuses(to_fetch) if to_fetch else {}
        # pods a targeted update queried after this listing began: their view and events stand
        newer = {uid for uid, at in self._targeted.items() if at >= ts}
        settled = not newer and not deferred
        for uid in changed:
            if uid in newer:
                continue
            if uid in current:
                got = fetched[uid]
                if isinstance(got, Exception):
                    log.warning("PLEG: status of pod %s: %s", uid, got)
                    current[uid] = {}  # retry at the next relist
                    settled = False
                    continue
                status = got
            else:
                status = RuntimePodStatus(uid=uid, timestamp=ts)
            self.cache.set(uid, status)
            if uid not in current:
                self.cache.delete(uid)
            # diffed now, not before the awaits: a targeted update may have reported part of it
            old, new = self._old.get(uid, {}), current.get(uid, {})
            events = [e for cid in set(old) | set(new) for e in _events(uid, cid, old.get(cid), new.get(cid))]
            if not events and self._targeted.get(uid) == before.get(uid):
                events = [PodLifecycleEvent(uid, PodLifecycleEventType.POD_SYNC)]
            for event in events:
                self._emit(event)
        for uid in newer | deferred:
            if uid in self._old:
                current[uid] = self._old[uid]  # what a targeted update reported stands
            elif uid in deferred:
                del current[uid]  # not reported yet: the next relist sees it as new
        self._deferred = deferred
        self._targeted = {uid: self._targeted[uid] for uid in newer}
        self._old = current
        self._last_relist = ts
        self._last_relist_mono = time.monotonic()
        self.relist_count += 1
        self.cache.update_time(ts)
        self._deletions_seen = self.cache.deletions
        self._settled = settled
        metrics.PLEG_RELIST_DURATION.observe(time.monotonic() - t0)
        if listing.container_counts is not self._counted:  # counted by list_runtime, once per change
            self._counted = listing.container_counts
            metrics.RUNNING_PODS.set(listing.ready_sandboxes)
            for state, gauge in self._container_gauges:
                gauge.set(listing.container_counts.get(state, 0))


def pod_states(status: RuntimePodStatus) -> dict[str, ContainerState]:
    """One pod's sandbox and container id → state, as a relist lists them (a sandbox is running
    when ready, exited when not)."""
    states = {sb.id: ContainerState.RUNNING if sb.ready else ContainerState.EXITED for sb in status.sandboxes}
    states.update((c.id, c.state) for c in status.containers)
    return states


def _events(uid: str, cid: str, old: ContainerState | None, new: ContainerState | None) -> list[PodLifecycleEvent]:
    """Upstream ``generateEvents`` for one sandbox or container whose state changed."""
    if old == new:
        return []
    t = PodLifecycleEventType
    if new is None:
        if old is ContainerState.RUNNING:
            return [PodLifecycleEvent(uid, t.CONTAINER_DIED, cid), PodLifecycleEvent(uid, t.CONTAINER_REMOVED, cid)]
        return [PodLifecycleEvent(uid, t.CONTAINER_REMOVED, cid)]
    if new is ContainerState.RUNNING:
        return [PodLifecycleEvent(uid, t.CONTAINER_STARTED, cid)]
    if new is ContainerState.EXITED:
        return [PodLifecycleEvent(uid, t.CONTAINER_DIED, cid)]
    return [PodLifecycleEvent(uid, t.CONTAINER_CHANGED, cid)]
