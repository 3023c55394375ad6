"""Status manager: writes the kubelet's view of pod status to the API (upstream status/status_manager.go).

- ``set_pod_status(pod, status)`` caches the generated status; the version counter of the pod goes
  up only when the status actually changed, so identical statuses cause no API traffic.
- a background loop syncs pods whose cached version is newer than the last written one (woken at
  once; only the pods queued by a change, no pass over every pod). What the API holds is known
  from the agent's own pod watch — ``reconcile(pod)`` (RECONCILE updates: only the API status
  changed, e.g. the node-lifecycle controller marked the pod not ready) and the answer to each
  PATCH —, so a pod is rewritten when the watch shows a status that differs
  from ours (upstream's ``needsReconcile``), never after a periodic GET of every pod; every
  ``reconcile_period`` the loop only retries the writes that failed (e.g. while the API was down).
  That retry runs on a fixed ticker, as upstream's ``syncTicker`` (a wake-up for a write does not move
  it), whose ticks are multiples of the period on the loop clock (``common.ticks``): an idle agent
  wakes for it in the same loop iteration as its other 1 s / 10 s loops.
- writing: merge in conditions owned by others, never move a terminal phase back, then PATCH
  ``pods/<name>/status`` (merge patch carrying ``metadata.uid`` as precondition: a 409 means the pod
  was recreated under the same name, a 404 that it is gone; either way our entry is dropped). The
  API's current status comes from the pod the agent already holds (its watch) and from each PATCH
  answer, so a write costs one request, not upstream's GET + PATCH; only a static pod's mirror pod
  (a different object, addressed by name, which must carry our config hash) is read first.
  Writes of different pods run concurrently (up to ``MAX_CONCURRENT_WRITES``; upstream writes one
  at a time, which made 1,000 pods wait on 1,000 round trips); one pod is written by at most one
  task, and only its newest version (versions monotonic per pod), so an older view can never
  overwrite a newer one.
- which pod is written next: a change is queued (its pod once, in the order of its first change) and
  the writers take the queue as it grows, so a pod that changes while others are being written
  waits for no batch to end. A write that changes what controllers act on (the phase, or whether
  the pod is Ready) goes before the others (upstream's syncBatch takes the pods in map order, no
  order at all). In a burst of pod starts this writes the Running+Ready status of the pods that
  got there first, and a pod whose first status (Pending, ContainerCreating) was still queued
  when it became Running is written once, with its newest status, as upstream's status manager
  writes only its latest status of a pod; when the writers keep up, every status is written as
  soon as it changes, as before. Measured in 1,000-pod starts (``bench_scale_pods.py``): 1.06-1.35
  status writes per pod instead of 2 when the writers were behind, 2 when they kept up.
- a new API pod's first status waits ``first_write_delay`` (the agent: ``NEW_POD_STATUS_DELAY``,
  1 s) unless it changes the phase or readiness the watch showed: the first sync hands over Pending
  (ContainerCreating) just before it makes the pod's sandbox and containers, and when they start
  within that second the pod is written once, Running, instead of twice. Upstream writes the first
  status at once; its writes then go through the client's kubeAPIQPS limit (50 a second), which
  coalesces them the same way in a burst. A pod that takes longer (an image pull, a missing
  ConfigMap) shows ContainerCreating at most that second later; a static pod (its mirror's status
  is read first) is not held. Hollow nodes (in-process fake runtime) made 2.0 status PATCHes a pod.
- ``terminated(uid)``: once the pod finished terminating, a pod with a deletionTimestamp is deleted
  for good: DELETE with gracePeriodSeconds=0 and a uid precondition (upstream canBeDeleted).
Works with ``api=None`` (statuses only cached).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import marshal
import time
from dataclasses import dataclass

from pykubelet.agent.status.generate import KUBELET_CONDITIONS
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.common import labels, podutil
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.common.ticks import tick_at_or_after

log = logging.getLogger(__name__)


def _copy(status: JSONObj) -> JSONObj:
    """A deep copy of a status (decoded JSON): ``marshal`` out and in, in C, 4-5x cheaper than
    ``copy.deepcopy`` (10 vs 49 µs for a one-container pod's status; two per started pod). The copy
    is the same as deepcopy's (exact types, key order, an object met twice stays one object);
    anything marshal does not take (subclasses, other objects) is left to ``copy.deepcopy``."""
    try:
        out: JSONObj = marshal.loads(marshal.dumps(status))
    except ValueError:
        return copy.deepcopy(status)
    return out


MAX_CONCURRENT_WRITES = 32
NEW_POD_STATUS_DELAY = 1.0  # seconds a new pod's first status waits unless it changes the phase or readiness


_CONDITION_TIMES = ("lastProbeTime", "lastTransitionTime")


def _conditions_key(conditions: object) -> object:
    """Conditions without their timestamps, in type order (stable), for comparison only."""
    if not isinstance(conditions, list):
        return conditions
    stripped = [{k: v for k, v in c.items() if k not in _CONDITION_TIMES} if isinstance(c, dict) else c
                for c in conditions]
    return sorted(stripped, key=lambda c: c.get("type", "") if isinstance(c, dict) else "")


def _ready(status: JSONObj) -> bool:
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def _changes_what_controllers_see(ours: JSONObj, api_status: JSONObj | None) -> bool:
    """Whether writing ``ours`` changes the pod's phase or readiness in the API (what endpoints,
    ReplicaSets and Jobs act on): such a write goes first (see the module docstring)."""
    if api_status is None:
        return False
    return ours.get("phase") != api_status.get("phase") or _ready(ours) != _ready(api_status)


def status_equal(a: JSONObj, b: JSONObj) -> bool:
    """Equality ignoring condition timestamps and ordering (upstream isPodStatusByKubeletEqual).

    Compared in place, field by field: only the conditions are rebuilt (without their timestamps);
    nothing is deep-copied (each pod's sync compares its status, 1,000 pods made the copies show)."""
    if a is b:
        return True
    if a.keys() != b.keys():
        return False
    for k, va in a.items():
        vb = b[k]
        if k == "conditions" and va and vb:
            if _conditions_key(va) != _conditions_key(vb):
                return False
        elif va != vb:
            return False
    return True


def merge_status(ours: JSONObj, api_status: JSONObj) -> JSONObj:
    """What the agent writes (upstream mergePodStatus): its own view, plus the conditions others own
    (DisruptionTarget, readiness gates, ...), never a terminal phase moved back, and the fields the
    kubelet does not set kept as the API has them."""
    merged = dict(ours)  # shallow: the result is compared and sent, never changed in place
    mine = {c.get("type") for c in merged.get("conditions") or []}
    others = [c for c in api_status.get("conditions") or []
              if c.get("type") not in mine and c.get("type") not in KUBELET_CONDITIONS]
    if others:
        merged["conditions"] = [*(merged.get("conditions") or []), *others]
    if api_status.get("phase") in ("Succeeded", "Failed") and merged.get("phase") != api_status.get("phase"):
        merged["phase"] = api_status["phase"]
    for k in ("nominatedNodeName", "resize", "reason", "message"):
        if k in api_status and k not in merged:
            merged[k] = api_status[k]
    return merged


@dataclass
class _Entry:
    namespace: str
    name: str
    uid: str
    static: bool
    config_hash: str
    status: JSONObj
    version: int = 1
    synced: int = 0
    terminated: bool = False
    deleted: bool = False
    deletion_requested: bool = False
    api_status: JSONObj | None = None  # the status the API holds, as last seen (watch or PATCH answer)
    api_deleting: bool = False  # the API pod has a deletionTimestamp (as last seen)
    hold_until: float = 0.0  # time.monotonic() before which a first, non-urgent write waits

    def observe(self, pod: Pod, *, answer: bool = False) -> None:
        """Remember what the API holds for this pod (a watch event, or with ``answer`` a PATCH
        answer): the pod's own status object, not a copy. Nothing changes a pod once received (the
        API source's store shares it with the engine, see ``sources/podconfig.py``), nor this status
        (it is only compared and merged into new dicts); a copy was one more status per pod (~2 kB).
        An answer equal to what the watch already showed keeps the watch's object, which the
        source's store holds anyway (the watch event often arrives before the answer)."""
        status = pod.get("status") or {}
        if not (answer and status == self.api_status):
            self.api_status = status
        self.api_deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))


class StatusManager:
    def __init__(self, api: ApiClient | None, *, reconcile_period: float = 10.0,
                 first_write_delay: float = 0.0) -> None:
        self.api = api
        self.reconcile_period = reconcile_period
        self.first_write_delay = first_write_delay
        self._entries: dict[str, _Entry] = {}
        self._wake = asyncio.Event()
        # pods whose status may need a write (an ordered set: first change first); the urgent ones
        # (their write changes the phase or readiness) are written before the others
        self._queued: dict[str, None] = {}
        self._urgent: dict[str, None] = {}
        self._writing: set[str] = set()  # pods a writer is writing now
        self._held: dict[str, float] = {}  # new pods' first writes waiting: uid -> when they may go
        self._held_timer: asyncio.TimerHandle | None = None
        self._writers: set[asyncio.Task[None]] | None = None  # while draining: the running writers
        self._task: asyncio.Task[None] | None = None
        self.patches = 0  # number of PATCH calls made (observability / tests)

    # -- cache -----------------------------------------------------------------------------
    def get_pod_status(self, uid: str) -> JSONObj | None:
        e = self._entries.get(uid)
        return _copy(e.status) if e else None

    def peek_pod_status(self, uid: str) -> JSONObj | None:
        """The cached status itself, not a copy: for readers that never change it (the status
        generator reads the previous status on every sync of every pod)."""
        e = self._entries.get(uid)
        return e.status if e else None

    def version(self, uid: str) -> int:
        e = self._entries.get(uid)
        return e.version if e else 0

    def set_pod_status(self, pod: Pod, status: JSONObj, *, handed_over: bool = False) -> bool:
        """Cache ``status``; return True when it changed. The manager keeps its own copy, unless the
        caller hands the status over (``handed_over``: a status generated for this call that nobody
        changes afterwards, as the pod syncer's; saves a copy, ~11 µs, two per started pod)."""
        md = pod.get("metadata") or {}
        uid = md.get("uid", "")
        ann = md.get("annotations") or {}
        e = self._entries.get(uid)
        if e is not None and md.get("deletionTimestamp"):
            e.api_deleting = True
        if e is not None:
            old_phase = e.status.get("phase")
            if old_phase in ("Succeeded", "Failed") and status.get("phase") != old_phase:
                log.warning("refusing phase transition %s -> %s for pod %s", old_phase, status.get("phase"), uid)
                status = {**status, "phase": old_phase}
            if status_equal(e.status, status):
                return False
            e.status = status if handed_over else _copy(status)
            e.version += 1
        else:
            e = self._entries[uid] = _Entry(
                namespace=md.get("namespace", "default"), name=md.get("name", ""), uid=uid,
                static=podutil.is_static_pod(pod), config_hash=ann.get(labels.CONFIG_HASH_ANNOTATION, ""),
                status=status if handed_over else _copy(status),
            )
            if self.first_write_delay > 0:
                e.hold_until = time.monotonic() + self.first_write_delay
            if not e.static and md.get("resourceVersion"):  # an API pod: its status as the watch saw it
                e.observe(pod)
        self._queue(e)
        return True

    def reconcile(self, pod: Pod) -> None:
        """RECONCILE: the API status changed; rewrite ours if it differs.

        A status equal to the one already known (the watch's echo of the agent's own write whose
        PATCH answer came first: 93 % of the 2 echoes per started pod in a 1,000-pod start) tells
        nothing new: it is only remembered (the store's object instead of the answer's), without
        the merge and the condition-by-condition comparison (~20 µs). Were ours to have changed
        since, its write is already pending (``set_pod_status``); a status someone else changed
        differs from the known one and is compared as before (upstream ``needsReconcile``)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        e = self._entries.get(uid)
        if e is None:
            return
        known = e.api_status
        e.observe(pod)
        if known is not None and e.api_status == known:
            return
        if self._needs_reconcile(e):
            e.synced = 0
            self._queue(e)

    @staticmethod
    def _needs_reconcile(e: _Entry) -> bool:
        return e.api_status is not None and not status_equal(e.api_status, merge_status(e.status, e.api_status))

    def terminated(self, uid: str) -> None:
        e = self._entries.get(uid)
        if e is not None:
            e.terminated = True
            e.synced = 0
            self._queue(e)

    def forget(self, uid: str) -> None:
        self._entries.pop(uid, None)

    # -- background sync -------------------------------------------------------------------
    def _queue(self, e: _Entry) -> None:
        """Queue the pod's write (see the module docstring for the order) and wake the writers."""
        uid = e.uid
        if uid not in self._urgent:
            if _changes_what_controllers_see(e.status, e.api_status):
                self._urgent[uid] = None
                self._queued.pop(uid, None)
            elif uid not in self._queued:
                self._queued[uid] = None
        self._wake.set()
        if self._writers is not None:
            self._start_writer()

    def _next(self) -> _Entry | None:
        """The next pod to write: the first urgent one, else the first queued; pods gone, written
        meanwhile, or being written now are skipped (a write that ends behind queues its pod again),
        and a new pod's first write is held until its ``hold_until`` (then queued again)."""
        now = 0.0
        for queue in (self._urgent, self._queued):
            while queue:
                uid = next(iter(queue))
                del queue[uid]
                e = self._entries.get(uid)
                if e is not None and e.synced < e.version and uid not in self._writing:
                    # held: only while what the API holds is known (urgency is judged against it),
                    # never a terminated pod's last write (its deletion follows it)
                    if (queue is self._queued and e.synced == 0 and e.hold_until and not e.terminated
                            and e.api_status is not None):
                        now = now or time.monotonic()
                        if e.hold_until > now:
                            self._hold(e, now)
                            continue
                    return e
        return None

    def _hold(self, e: _Entry, now: float) -> None:
        """Queue ``e`` again at its ``hold_until``. One timer serves every held pod: they are held
        nearly in the order they were created, each for the same delay, so the timer is armed for
        the first one due and each release re-arms it for the next (no pass over all held pods);
        a pod held out of that order goes with the one before it, at most the delay late."""
        self._held[e.uid] = e.hold_until
        if self._held_timer is None:
            self._arm(e.hold_until, now)

    def _arm(self, due: float, now: float) -> None:
        self._held_timer = asyncio.get_running_loop().call_later(max(0.0, due - now), self._release_held)

    def _release_held(self) -> None:
        self._held_timer = None
        now = time.monotonic()
        while self._held:
            uid, due = next(iter(self._held.items()))
            if due > now:
                self._arm(due, now)
                break
            del self._held[uid]
            e = self._entries.get(uid)
            if e is not None and e.synced < e.version:
                self._queue(e)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="status-manager")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.reconcile_period
        tick = tick_at_or_after(loop.time() + period, period)
        while True:
            retry = False
            try:
                async with asyncio.timeout_at(tick):
                    await self._wake.wait()
            except TimeoutError:
                # retry what failed to write (what the API holds is compared in reconcile()); the
                # next tick is the next multiple of the period (a missed one is not made up)
                now = loop.time()
                tick = tick_at_or_after(now, period)
                if tick <= now:
                    tick += period
                retry = True
            self._wake.clear()
            await (self.sync_all() if retry else self._drain())

    async def sync_all(self) -> None:
        """Write every pod whose status is newer than what was written (failed writes included:
        the periodic retry), then whatever changes meanwhile."""
        for e in self._entries.values():
            if e.synced < e.version:
                self._queue(e)
        await self._drain()

    async def _drain(self) -> None:
        """Writers (at most ``MAX_CONCURRENT_WRITES``) taking queued pods until the queue is empty.
        A pod queued meanwhile starts one more writer while there are fewer than that: a drain
        that began with a pod or two queued (a burst's first statuses, or a new pod's first status
        released after its delay) grows with the pods queued behind it. It kept its first writers
        before, and they wrote a 1,000-pod burst's statuses a round trip at a time."""
        n = min(MAX_CONCURRENT_WRITES, len(self._urgent) + len(self._queued))
        if not n:
            return
        owner = self._writers is None  # else a drain is running (``sync_all`` called meanwhile): join it
        writers: set[asyncio.Task[None]] = set() if self._writers is None else self._writers
        self._writers = writers
        try:
            for _ in range(n):
                self._start_writer()
            while writers:
                await asyncio.wait(list(writers))
        finally:
            if owner:
                self._writers = None
                for t in writers:
                    t.cancel()
                if writers:
                    await asyncio.gather(*writers, return_exceptions=True)

    def _start_writer(self) -> None:
        """One more writer for the running drain, unless it has ``MAX_CONCURRENT_WRITES`` or as
        many as there are pods being written and queued."""
        writers = self._writers
        if (writers is not None and len(writers) < MAX_CONCURRENT_WRITES
                and len(writers) < len(self._writing) + len(self._urgent) + len(self._queued)):
            t = asyncio.get_running_loop().create_task(self._writer(), name="status-writer")
            writers.add(t)
            t.add_done_callback(writers.discard)

    async def _writer(self) -> None:
        while (e := self._next()) is not None:
            uid, version = e.uid, e.version
            self._writing.add(uid)
            try:
                await self._sync(e)
            except asyncio.CancelledError:
                raise
            except Exception as ex:  # left behind: retried by the next sync_all (the periodic retry)
                log.warning("status update for pod %s/%s failed: %s", e.namespace, e.name, ex)
                continue
            finally:
                self._writing.discard(uid)
            if e.version != version and e.synced < e.version and self._entries.get(uid) is e:
                self._queue(e)  # changed while it was written (one left behind otherwise waits for the retry)

    def _drop(self, e: _Entry, why: str) -> None:
        log.info("pod %s/%s %s; dropping its status", e.namespace, e.name, why)
        self._entries.pop(e.uid, None)

    async def _sync(self, e: _Entry) -> None:
        version = e.version
        if self.api is None:
            e.synced = version
            return
        path = f"/api/v1/namespaces/{e.namespace}/pods/{e.name}"
        target_uid = e.uid
        if e.static or e.api_status is None:
            try:
                pod = await self.api.get(path)
            except ApiError as ex:
                if ex.status == 404:
                    if not e.static:
                        self._drop(e, "is gone from the API")
                    return
                raise
            md = pod.get("metadata") or {}
            if e.static:
                if (md.get("annotations") or {}).get(labels.CONFIG_MIRROR_ANNOTATION) != e.config_hash:
                    return  # not (yet) our mirror pod
                target_uid = md.get("uid", "")
            elif md.get("uid") != e.uid:
                self._drop(e, f"was recreated (uid {md.get('uid')} != {e.uid})")
                return
            e.observe(pod)
        api_status = e.api_status or {}
        merged = merge_status(e.status, api_status)
        if not status_equal(api_status, merged):
            try:
                patched = await self.api.patch(f"{path}/status", {"metadata": {"uid": target_uid}, "status": merged},
                                               patch_type="merge")
            except ApiError as ex:
                if ex.status == 404 and not e.static:
                    self._drop(e, "is gone from the API")
                    return
                if ex.status == 409 and not e.static:
                    self._drop(e, "was recreated")
                    return
                raise
            self.patches += 1
            if e.static:
                e.api_status = patched.get("status") or merged
            else:
                e.observe(patched, answer=True)
        e.synced = max(e.synced, version)
        if e.terminated and e.api_deleting and not e.static and not e.deletion_requested:
            try:
                await self.api.delete(path, body={"apiVersion": "v1", "kind": "DeleteOptions",
                                                  "gracePeriodSeconds": 0,
                                                  "preconditions": {"uid": e.uid}})
            except ApiError as ex:
                if ex.status not in (404, 409):
                    raise
            e.deletion_requested = True
            log.info("pod %s/%s deleted from the API after termination", e.namespace, e.name)
