"""Generic pod lifecycle event generator and the pod status cache (upstream pleg/generic.go, container/cache.go).

containerd 1.6 does not implement GetContainerEvents, so like upstream's GenericPLEG the agent
relists: every ``relist_period`` (1 s) it lists sandboxes and containers, diffs each pod's
{id → state} map against the previous relist, fetches the full status of pods that changed, stores
it in the ``PodStatusCache`` and calls ``on_event(uid, events)`` so the pod's worker wakes up.

``PodStatusCache`` implements upstream's "newer than" semantics: every entry carries the time the
runtime was *queried* (taken before the query), the cache has a global timestamp moved forward after
each complete relist, and ``get_newer_than(uid, t)`` waits until either the entry or the global
timestamp is newer than ``t`` — so a worker never decides on a view older than its own last sync.
``healthy()`` is False when the last relist is older than 3 minutes (upstream relistThreshold).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pykubelet.agent import metrics
from pykubelet.agent.container.runtime import RuntimePodStatus
from pykubelet.common.aio import cancel_and_wait

log = logging.getLogger(__name__)

RELIST_THRESHOLD = 180.0


class PodStatusCache:
    def __init__(self) -> None:
        self._entries: dict[str, RuntimePodStatus] = {}
        self._global = 0.0
        self._cond = asyncio.Condition()

    def get(self, uid: str) -> RuntimePodStatus:
        st = self._entries.get(uid)
        return st if st is not None else RuntimePodStatus(uid=uid, timestamp=self._global)

    def has(self, uid: str) -> bool:
        return uid in self._entries

    def uids(self) -> list[str]:
        return list(self._entries)

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    def set(self, uid: str, status: RuntimePodStatus) -> None:
        old = self._entries.get(uid)
        if old is not None and old.timestamp > status.timestamp:
            return  # never replace a newer view with an older one
        self._entries[uid] = status
        self._wake()

    def delete(self, uid: str) -> None:
        self._entries.pop(uid, None)

    def update_time(self, ts: float) -> None:
        self._global = max(self._global, ts)
        self._wake()

    def _wake(self) -> None:
        try:
            asyncio.get_running_loop().create_task(self._notify())
        except RuntimeError:
            pass

    def newer_than(self, uid: str, ts: float) -> bool:
        st = self._entries.get(uid)
        return (st is not None and st.timestamp > ts) or self._global > ts

    async def get_newer_than(self, uid: str, ts: float) -> RuntimePodStatus:
        async with self._cond:
            await self._cond.wait_for(lambda: self.newer_than(uid, ts))
        return self.get(uid)


class GenericPLEG:
    def __init__(
        self,
        manager: Any,
        cache: PodStatusCache,
        on_event: Callable[[str, list[str]], None],
        *,
        relist_period: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.manager = manager
        self.cache = cache
        self.on_event = on_event
        self.relist_period = relist_period
        self.clock = clock
        self._old: dict[str, dict[str, str]] = {}
        self._last_relist = 0.0
        self._last_relist_mono: float | None = None
        self._task: asyncio.Task[None] | None = None
        self.relist_count = 0

    def healthy(self) -> bool:
        if self._last_relist_mono is None:
            return True  # not started yet: upstream reports healthy until the first relist
        return time.monotonic() - self._last_relist_mono < RELIST_THRESHOLD

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="pleg")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.relist()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("PLEG relist failed: %s", e)
            await asyncio.sleep(self.relist_period)

    async def relist(self) -> None:
        ts = self.clock()
        t0 = time.monotonic()
        if self._last_relist_mono is not None:
            metrics.PLEG_RELIST_INTERVAL.observe(t0 - self._last_relist_mono)
        listing = await self.manager.list_runtime()
        current = listing.pods
        changed: dict[str, list[str]] = {}
        for uid in set(current) | set(self._old):
            old, new = self._old.get(uid, {}), current.get(uid, {})
            if old == new and self.cache.has(uid):
                continue
            events = []
            for cid in set(old) | set(new):
                o, n = old.get(cid), new.get(cid)
                if o != n:
                    events.append(_event_name(o, n))
            changed[uid] = events or ["Resync"]
        for uid, events in changed.items():
            if uid in current:
                try:
                    status = await self.manager.get_pod_status(uid)
                except Exception as e:
                    log.warning("PLEG: status of pod %s: %s", uid, e)
                    current[uid] = {}  # retry at the next relist
                    continue
            else:
                status = RuntimePodStatus(uid=uid, timestamp=ts)
            self.cache.set(uid, status)
            if uid not in current:
                self.cache.delete(uid)
            try:
                self.on_event(uid, events)
            except Exception as e:
                log.warning("PLEG event handler: %s", e)
        self._old = current
        self._last_relist = ts
        self._last_relist_mono = time.monotonic()
        self.relist_count += 1
        self.cache.update_time(ts)
        metrics.PLEG_RELIST_DURATION.observe(time.monotonic() - t0)
        running_pods = sum(1 for sb in listing.sandboxes if sb.state == 0)
        metrics.RUNNING_PODS.set(running_pods)
        counts: dict[str, int] = {}
        for c in listing.containers:
            counts[_CONTAINER_STATE.get(c.state, "unknown")] = counts.get(_CONTAINER_STATE.get(c.state, "unknown"), 0) + 1
        for state in _CONTAINER_STATE.values():
            metrics.RUNNING_CONTAINERS.labels(state).set(counts.get(state, 0))


_CONTAINER_STATE = {0: "created", 1: "running", 2: "exited", 3: "unknown"}


def _event_name(old: str | None, new: str | None) -> str:
    if new is None:
        return "ContainerRemoved"
    if new == "container:1":
        return "ContainerStarted"
    if new == "container:2":
        return "ContainerDied"
    if new.startswith("sandbox:"):
        return "SandboxChanged"
    return "ContainerChanged"
