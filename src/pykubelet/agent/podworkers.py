"""Pod workers: one asyncio task per pod, serial per pod, parallel across pods (upstream pod_workers.go).

Modelled on kopf's ``reactor/queueing.py``: each pod uid has its own pending slot and wake-up event
and a single worker task that drains it, so work for one pod is strictly serial while different pods
progress concurrently. Updates arriving while a sync runs are *coalesced* (latest wins): the worker
picks up only the newest one when the current sync returns.

Lifecycle follows upstream's podSyncStatus state machine:

    syncing ──(pod terminal / deleted / killed)──▶ terminating ──▶ terminated ──▶ (forgotten)

- ``sync_pod`` runs while the pod should be running; returning ``terminal=True`` (all containers
  finished per restartPolicy) moves the pod to terminating at once;
- a ``kill`` update or a pod with ``deletionTimestamp`` moves it to terminating with a grace period
  (``deletionGracePeriodSeconds`` or ``spec.terminationGracePeriodSeconds``; it may only shrink);
- ``sync_terminating_pod`` stops containers; ``sync_terminated_pod`` cleans up; after that the worker
  ends and further updates for that uid are ignored (a pod never restarts with the same uid) until
  housekeeping calls ``forget`` once the pod left the config.
Errors are logged and the pod is retried with a capped back-off; ``requeue_after`` lets a sync ask to
be run again later (e.g. when a CrashLoopBackOff delay expires).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykubelet.agent import metrics

log = logging.getLogger(__name__)

Pod = dict[str, Any]

SYNC_CREATE = "create"
SYNC_UPDATE = "update"
SYNC_SYNC = "sync"
SYNC_KILL = "kill"


@dataclass
class UpdatePodOptions:
    update_type: str
    pod: Pod
    mirror_pod: Pod | None = None
    kill_grace: int | None = None


@dataclass
class SyncPodResult:
    terminal: bool = False
    requeue_after: float | None = None


class PodSyncer(Protocol):
    async def sync_pod(self, update_type: str, pod: Pod, mirror_pod: Pod | None) -> SyncPodResult: ...

    async def sync_terminating_pod(self, pod: Pod, grace: int | None) -> None: ...

    async def sync_terminated_pod(self, pod: Pod) -> None: ...


def pod_grace(pod: Pod) -> int:
    md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if md.get("deletionGracePeriodSeconds") is not None:
        return int(md["deletionGracePeriodSeconds"])
    g = spec.get("terminationGracePeriodSeconds")
    return 30 if g is None else int(g)


@dataclass
class PodSyncStatus:
    uid: str
    pod: Pod
    mirror_pod: Pod | None = None
    pending: UpdatePodOptions | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    first_seen: float = field(default_factory=time.monotonic)
    terminating_at: float | None = None
    terminated_at: float | None = None
    finished: bool = False
    grace: int | None = None
    last_sync: float = 0.0
    errors: int = 0
    syncing: bool = False
    timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> str:
        if self.finished or self.terminated_at is not None:
            return "terminated"
        if self.terminating_at is not None:
            return "terminating"
        return "syncing"


class PodWorkers:
    def __init__(self, syncer: PodSyncer, *, max_retry_delay: float = 10.0) -> None:
        self.syncer = syncer
        self.max_retry_delay = max_retry_delay
        self._pods: dict[str, PodSyncStatus] = {}
        self._closed = False

    # -- queries ---------------------------------------------------------------------------
    def known_uids(self) -> list[str]:
        return list(self._pods)

    def get(self, uid: str) -> PodSyncStatus | None:
        return self._pods.get(uid)

    def is_terminated(self, uid: str) -> bool:
        st = self._pods.get(uid)
        return st is not None and st.finished

    def is_terminating(self, uid: str) -> bool:
        st = self._pods.get(uid)
        return st is not None and st.state != "syncing"

    def could_have_running_containers(self, uid: str) -> bool:
        st = self._pods.get(uid)
        return st is not None and not st.finished

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
        if opts.update_type == SYNC_KILL or deleting:
            grace = opts.kill_grace if opts.kill_grace is not None else pod_grace(opts.pod)
            st.grace = grace if st.grace is None else min(st.grace, grace)
            if st.terminating_at is None:
                st.terminating_at = time.monotonic()
        if st.pending is None or opts.update_type != SYNC_SYNC:
            st.pending = opts
        st.wake.set()
        if st.task is None or st.task.done():
            st.task = asyncio.get_running_loop().create_task(self._worker(st), name=f"pod-worker-{uid}")

    def _requeue(self, uid: str) -> None:
        st = self._pods.get(uid)
        if st is None or st.finished:
            return
        st.timer = None
        self.update_pod(UpdatePodOptions(SYNC_SYNC, st.pod))

    def _schedule(self, st: PodSyncStatus, delay: float) -> None:
        if st.timer is not None:
            st.timer.cancel()
        st.timer = asyncio.get_running_loop().call_later(delay, self._requeue, st.uid)

    def forget(self, uid: str) -> None:
        st = self._pods.pop(uid, None)
        if st is not None:
            if st.timer is not None:
                st.timer.cancel()
            if st.task is not None and not st.task.done() and st.finished:
                st.task.cancel()

    async def stop(self) -> None:
        """Stop all workers (never touches containers)."""
        self._closed = True
        tasks = []
        for st in self._pods.values():
            if st.timer is not None:
                st.timer.cancel()
            if st.task is not None and not st.task.done():
                st.task.cancel()
                tasks.append(st.task)
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    # -- the worker ------------------------------------------------------------------------
    async def _worker(self, st: PodSyncStatus) -> None:
        while not st.finished:
            await st.wake.wait()
            st.wake.clear()
            opts = st.pending
            st.pending = None
            if opts is None:
                continue
            state = st.state
            st.syncing = True
            t0 = time.monotonic()
            try:
                if state == "syncing":
                    result = await self.syncer.sync_pod(opts.update_type, st.pod, st.mirror_pod)
                    metrics.POD_WORKER_DURATION.labels(opts.update_type).observe(time.monotonic() - t0)
                    if result.terminal and st.terminating_at is None:
                        st.terminating_at = time.monotonic()
                        self._kick(st)
                    elif result.requeue_after is not None:
                        self._schedule(st, result.requeue_after)
                elif state == "terminating":
                    await self.syncer.sync_terminating_pod(st.pod, st.grace)
                    st.terminated_at = time.monotonic()
                    self._kick(st)
                else:
                    await self.syncer.sync_terminated_pod(st.pod)
                    st.finished = True
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

    def _kick(self, st: PodSyncStatus) -> None:
        if st.pending is None:
            st.pending = UpdatePodOptions(SYNC_SYNC, st.pod)
        st.wake.set()
