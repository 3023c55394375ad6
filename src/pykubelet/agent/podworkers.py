"""Pod workers: one asyncio task per pod, serial per pod, parallel across pods (upstream pod_workers.go).

Modelled on kopf's ``reactor/queueing.py``: each pod uid has its own pending slot and at most one
worker task that drains it, so work for one pod is strictly serial while different pods progress
concurrently. Updates arriving while a sync runs are *coalesced* (latest wins): the worker picks up
only the newest one when the current sync returns. Like upstream's ``podWorkerLoop`` goroutine, which
sleeps on its channel, the worker exists only while there is work: ``update_pod`` starts it when none
runs, and it ends when its slot is empty. An idle pod thus keeps no task, coroutine, event or future
(~3 kB each, 0.33 MB of the agent's heap with 110 pods), only its resync timer.

Lifecycle follows upstream's podSyncStatus state machine:

    syncing ──(pod terminal / deleted / killed)──▶ terminating ──▶ terminated ──▶ (forgotten)

- ``sync_pod`` runs while the pod should be running; returning ``terminal=True`` (all containers
  finished per restartPolicy) moves the pod to terminating at once;
- a ``kill`` update or a pod with ``deletionTimestamp`` moves it to terminating with a grace period
  (upstream ``calculateEffectiveGracePeriod``: ``deletionGracePeriodSeconds`` — the API server's word —
  or a kill override, else ``spec.terminationGracePeriodSeconds``; it may only shrink and is at least
  1 s, so ``--grace-period=0 --force`` still sends SIGTERM first);
- like upstream's ``cancelFn``, a sync in flight is cancelled when the pod becomes terminating (e.g.
  deleted during a long image pull) or when a running termination's grace period is shortened (a
  graceful delete followed by ``--grace-period=0 --force``); the worker then runs the kill at once
  with the new grace period;
- ``sync_terminating_pod`` stops containers; ``sync_terminated_pod`` cleans up; after that the worker
  ends and further updates for that uid are ignored (a pod never restarts with the same uid) until
  housekeeping calls ``forget`` once the pod left the config.
Errors are logged and the pod is retried with a capped back-off; ``requeue_after`` lets a sync ask to
be run again later (e.g. when a CrashLoopBackOff delay expires).

Periodic resync: like upstream's ``completeWork``, which re-enqueues each pod after a successful sync
at ``wait.Jitter(resyncInterval, workerResyncIntervalJitterFactor=0.5)`` (a delay drawn uniformly from
``[resync, 1.5 * resync)``), each worker schedules its own next sync ``resync_interval`` after its last
one (an earlier ``requeue_after`` wins). Pods started together therefore drift apart within one sync
period instead of all resyncing in one burst (1,000 pods at once starved the PLEG relist), and an
idle pod costs one timer between syncs. Without ``resync_interval`` no periodic sync is scheduled.
With ``resync_tick`` (the kubelet gives the PLEG's relist period) a resync's due time is rounded up
to a multiple of it on the loop clock, as upstream's work queue is drained by the sync loop's 1 s
``syncTicker``: due resyncs then run in the relist's own loop wake-up (``common.ticks``) instead of
one timer wake-up each (~1.3 a second with 100 pods).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from pykubelet.agent import metrics
from pykubelet.agent.container.grace import effective_grace
from pykubelet.agent.types import Pod
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.ticks import tick_at_or_after

log = logging.getLogger(__name__)

_T = TypeVar("_T")

RESYNC_JITTER_FACTOR = 0.5  # upstream workerResyncIntervalJitterFactor


def jitter(duration: float, factor: float, rand: Callable[[], float] = random.random) -> float:
    """Upstream ``wait.Jitter``: ``duration`` plus up to ``factor * duration``."""
    return duration + rand() * factor * duration if factor > 0 else duration

class SyncPodType(enum.StrEnum):
    """Why a pod is synced (upstream ``kubetypes.SyncPodType``)."""

    CREATE = "create"  # first seen
    UPDATE = "update"  # the source changed it
    SYNC = "sync"  # periodic resync, a PLEG event, a probe change, a requeue
    KILL = "kill"  # stop it (removed from the source, force-deleted, refused)


class PodWorkerState(enum.StrEnum):
    """Upstream ``PodWorkerState``: a pod only moves forward through these."""

    SYNCING = "syncing"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


@dataclass
class UpdatePodOptions:
    update_type: SyncPodType
    pod: Pod
    mirror_pod: Pod | None = None
    kill_grace: int | None = None


@dataclass
class SyncPodResult:
    terminal: bool = False
    requeue_after: float | None = None


class PodSyncer(Protocol):
    """What a pod worker runs (upstream ``podSyncer``): one method per ``PodWorkerState``."""

    async def sync_pod(self, update_type: SyncPodType, pod: Pod, mirror_pod: Pod | None) -> SyncPodResult: ...

    async def sync_terminating_pod(self, pod: Pod, grace: int | None) -> None: ...

    async def sync_terminated_pod(self, pod: Pod) -> None: ...


@dataclass(slots=True)
class PodSyncStatus:
    uid: str
    pod: Pod
    mirror_pod: Pod | None = None
    pending: UpdatePodOptions | None = None
    task: asyncio.Task[None] | None = None  # the worker, while there is work (None when idle)
    first_seen: float = field(default_factory=time.monotonic)
    terminating_at: float | None = None
    terminated_at: float | None = None
    finished: bool = False
    grace: int | None = None
    last_sync: float = 0.0
    errors: int = 0
    syncing: bool = False
    timer: asyncio.TimerHandle | None = None
    # a sync or termination is running in ``task`` and may be cancelled (upstream's cancelFn)
    cancellable: bool = False
    cancel_asked: bool = False  # ``update_pod`` cancelled ``task`` for that sync (not yet delivered)

    @property
    def state(self) -> PodWorkerState:
        if self.finished or self.terminated_at is not None:
            return PodWorkerState.TERMINATED
        if self.terminating_at is not None:
            return PodWorkerState.TERMINATING
        return PodWorkerState.SYNCING


class PodWorkers:
    def __init__(self, syncer: PodSyncer, *, max_retry_delay: float = 10.0,
                 resync_interval: float | Callable[[], float] | None = None,
                 rand: Callable[[], float] = random.random, resync_tick: float = 0.0) -> None:
        self.syncer = syncer
        self.max_retry_delay = max_retry_delay
        self.resync_interval = resync_interval  # upstream syncFrequency; None: no periodic resync
        self.resync_tick = resync_tick  # resyncs start on multiples of it (0: at their own time)
        self._rand = rand
        self._pods: dict[str, PodSyncStatus] = {}
        self._finished: set[str] = set()  # terminated (finished) and not yet forgotten
        self._closed = False
        self.on_terminating: Callable[[str], None] | None = None  # a pod's termination began

    # -- queries ---------------------------------------------------------------------------
    def known_uids(self) -> list[str]:
        return list(self._pods)

    def get(self, uid: str) -> PodSyncStatus | None:
        return self._pods.get(uid)

    def is_terminated(self, uid: str) -> bool:
        st = self._pods.get(uid)
        return st is not None and st.finished

    def finished_uids(self) -> frozenset[str]:
        """The terminated pods not yet forgotten (few: housekeeping forgets them within a pass)."""
        return frozenset(self._finished)

    def is_terminating(self, uid: str) -> bool:
        """Terminating or terminated (asked for every admitted pod on each admission: kept cheap)."""
        st = self._pods.get(uid)
        return st is not None and (st.terminating_at is not None or st.terminated_at is not None or st.finished)

    # -- updates ---------------------------------------------------------------------------
    def update_pod(self, opts: UpdatePodOptions) -> None:
        if self._closed:
            return
        uid = (opts.pod.get("metadata") or {}).get("uid", "")
        if not uid:
            log.warning("ignoring pod update without uid")
            return
        st = self._pods.get(uid)
        if st is None:
            st = PodSyncStatus(uid=uid, pod=opts.pod)
            self._pods[uid] = st
        if st.finished:
            return  # terminated pods never come back under the same uid
        st.pod = opts.pod
        if opts.mirror_pod is not None:
            st.mirror_pod = opts.mirror_pod
        deleting = bool((opts.pod.get("metadata") or {}).get("deletionTimestamp"))
        cancel = False
        if opts.update_type == SyncPodType.KILL or deleting:
            grace = effective_grace(st.grace, opts.pod, opts.kill_grace)
            if st.terminated_at is None:
                # becoming terminating cancels a sync in flight; a shorter grace period restarts
                # the termination in flight (not once it is done: the containers are stopped)
                cancel = st.terminating_at is None or (st.grace is not None and grace < st.grace)
            st.grace = grace
            if st.terminating_at is None:
                st.terminating_at = time.monotonic()
                self._terminating(uid)
        if st.pending is None or opts.update_type != SyncPodType.SYNC:
            st.pending = opts
        # (never from the worker's own task: its sync sees the termination when it returns)
        if (cancel and st.cancellable and not st.cancel_asked and st.task is not None and not st.task.done()
                and st.task is not asyncio.current_task()):
            log.info("pod %s: cancelling the sync in flight (terminating, grace %ss)", uid, st.grace)
            st.cancel_asked = True
            st.task.cancel()
        if st.task is None or st.task.done():
            st.task = asyncio.get_running_loop().create_task(self._worker(st), name=f"pod-worker-{uid}")

    def _terminating(self, uid: str) -> None:
        """Tell ``on_terminating`` (the kubelet's node usage) the pod stopped counting as active; a
        pending resync of the running pod is dropped (the termination runs at once)."""
        st = self._pods.get(uid)
        if st is not None and st.timer is not None:
            st.timer.cancel()
            st.timer = None
        if self.on_terminating is not None:
            self.on_terminating(uid)

    def _requeue(self, uid: str) -> None:
        st = self._pods.get(uid)
        if st is None or st.finished:
            return
        st.timer = None
        self.update_pod(UpdatePodOptions(SyncPodType.SYNC, st.pod))

    def _schedule(self, st: PodSyncStatus, delay: float) -> None:
        if st.timer is not None:
            st.timer.cancel()
        st.timer = asyncio.get_running_loop().call_later(delay, self._requeue, st.uid)

    def next_resync_delay(self) -> float | None:
        """A fresh jittered resync delay (upstream ``wait.Jitter(resyncInterval, 0.5)``)."""
        r = self.resync_interval
        if r is None:
            return None
        return jitter(float(r() if callable(r) else r), RESYNC_JITTER_FACTOR, self._rand)

    def _schedule_next(self, st: PodSyncStatus, requeue_after: float | None) -> None:
        """After a successful sync: the earlier of the sync's own requeue and the pod's next resync."""
        resync = self.next_resync_delay()
        if resync is not None and (requeue_after is None or resync <= requeue_after):
            if st.timer is not None:
                st.timer.cancel()
            loop = asyncio.get_running_loop()
            st.timer = loop.call_at(tick_at_or_after(loop.time() + resync, self.resync_tick), self._requeue, st.uid)
        elif requeue_after is not None:
            self._schedule(st, requeue_after)

    def forget(self, uid: str) -> None:
        st = self._pods.pop(uid, None)
        self._finished.discard(uid)
        if st is not None:
            if st.timer is not None:
                st.timer.cancel()
            if st.task is not None and not st.task.done() and st.finished:
                st.task.cancel()

    async def stop(self) -> None:
        """Stop all workers (never touches containers)."""
        self._closed = True
        for st in self._pods.values():
            if st.timer is not None:
                st.timer.cancel()
        await cancel_and_wait(*(st.task for st in self._pods.values()))

    # -- the worker ------------------------------------------------------------------------
    async def _worker(self, st: PodSyncStatus) -> None:
        """Drain the pod's slot, then end: the next ``update_pod`` starts a new worker."""
        try:
            while not st.finished and (opts := st.pending) is not None:
                st.pending = None
                state = st.state
                st.syncing = True
                t0 = time.monotonic()
                try:
                    if state is PodWorkerState.SYNCING:
                        result = await self._run_cancellable(
                            st, self.syncer.sync_pod(opts.update_type, st.pod, st.mirror_pod))
                        if result is None:  # cancelled: the pod became terminating meanwhile
                            self._kick(st)
                            continue
                        metrics.POD_WORKER_DURATION.labels(opts.update_type.value).observe(time.monotonic() - t0)
                        if result.terminal and st.terminating_at is None:
                            st.terminating_at = time.monotonic()
                            self._terminating(st.uid)
                            self._kick(st)
                        else:
                            self._schedule_next(st, result.requeue_after)
                    elif state is PodWorkerState.TERMINATING:
                        done = await self._run_cancellable(st, self._terminate(st))
                        if done is None:  # cancelled: run again with the shortened grace period
                            self._kick(st)
                            continue
                        st.terminated_at = time.monotonic()
                        self._kick(st)
                    else:
                        await self.syncer.sync_terminated_pod(st.pod)
                        st.finished = True
                        if self._pods.get(st.uid) is st:
                            self._finished.add(st.uid)
                    st.errors = 0
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    st.errors += 1
                    delay = min(self.max_retry_delay, 0.5 * (2 ** min(st.errors, 6)))
                    log.warning("pod %s: %s failed (retry in %.1fs): %s", st.uid, state, delay, e, exc_info=True)
                    self._schedule(st, delay)
                finally:
                    st.syncing = False
                    st.last_sync = time.time()
        finally:
            if st.task is asyncio.current_task():
                st.task = None  # an idle pod keeps no task

    async def _terminate(self, st: PodSyncStatus) -> bool:
        await self.syncer.sync_terminating_pod(st.pod, st.grace)
        return True

    async def _run_cancellable(self, st: PodSyncStatus, coro: Coroutine[object, object, _T]) -> _T | None:
        """Run one sync in the worker's own task so that ``update_pod`` can cancel it (``st.task``,
        marked by ``cancel_asked``); None when it was cancelled that way. A cancellation of the
        worker itself (``stop``) propagates, also when both came. No task of its own per sync: a
        task costs 6-15 µs of CPU here, and a 1,000-pod start runs 1,000 syncs, an idle node one
        per pod per resync period."""
        st.cancellable = True
        try:
            result = await coro
        except asyncio.CancelledError:
            if not self._take_cancel(st):
                raise
            return None
        finally:
            st.cancellable = False
        self._take_cancel(st)  # asked for, but the sync ended before it could be delivered
        return result

    @staticmethod
    def _take_cancel(st: PodSyncStatus) -> bool:
        """Withdraw ``update_pod``'s cancellation of the worker's task, if it asked for one: True when
        that leaves no other cancellation pending (so the worker goes on)."""
        if not st.cancel_asked:
            return False
        st.cancel_asked = False
        task = asyncio.current_task()
        return task is not None and task.uncancel() == 0

    def _kick(self, st: PodSyncStatus) -> None:
        if st.pending is None:
            st.pending = UpdatePodOptions(SyncPodType.SYNC, st.pod)  # the running worker takes it
