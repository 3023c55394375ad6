"""PodWorkers: serial per pod, parallel across pods, coalescing, lifecycle (upstream pod_workers.go)."""

from __future__ import annotations

import asyncio
from typing import Any

from pykubelet.agent.podworkers import (
    PodWorkers,
    SyncPodResult,
    SyncPodType,
    UpdatePodOptions,
)
from tests.builders import pod


def update(update_type: SyncPodType, name: str, generation: int = 0, *, kill_grace: int | None = None,
           **metadata: Any) -> UpdatePodOptions:
    """An update of pod ``name`` (uid ``uid-<name>``) at ``generation``, which the syncer records."""
    return UpdatePodOptions(update_type, pod(name, metadata={"generation": generation, **metadata}),
                            kill_grace=kill_grace)


class Syncer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.active: dict[str, int] = {}
        self.max_active: dict[str, int] = {}
        self.total_active = 0
        self.max_total = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.terminal: set[str] = set()
        self.fail_once: set[str] = set()
        self.graces: list[int | None] = []
        self.done = asyncio.Event()

    async def _enter(self, uid: str) -> None:
        self.active[uid] = self.active.get(uid, 0) + 1
        self.max_active[uid] = max(self.max_active.get(uid, 0), self.active[uid])
        self.total_active += 1
        self.max_total = max(self.max_total, self.total_active)
        await self.gate.wait()
        self.active[uid] -= 1
        self.total_active -= 1

    async def sync_pod(self, update_type: str, pod: dict[str, Any], mirror_pod: Any) -> SyncPodResult:
        uid = pod["metadata"]["uid"]
        self.calls.append(("sync", uid, pod["metadata"]["generation"]))
        await self._enter(uid)
        if uid in self.fail_once:
            self.fail_once.discard(uid)
            raise RuntimeError("boom")
        return SyncPodResult(terminal=uid in self.terminal)

    async def sync_terminating_pod(self, pod: dict[str, Any], grace: int | None) -> None:
        self.calls.append(("terminating", pod["metadata"]["uid"], pod["metadata"]["generation"]))
        self.graces.append(grace)

    async def sync_terminated_pod(self, pod: dict[str, Any]) -> None:
        self.calls.append(("terminated", pod["metadata"]["uid"], pod["metadata"]["generation"]))
        self.done.set()

    def syncs_of(self, uid: str) -> list[int]:
        """The generations ``sync_pod`` saw for this pod, in order."""
        return [g for kind, u, g in self.calls if kind == "sync" and u == uid]


async def until(pred: Any) -> None:
    async with asyncio.timeout(5):
        while not pred():  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(0.005)


def idle(w: PodWorkers, *uids: str) -> bool:
    """No sync of these pods is running."""
    return all((st := w.get(u)) is not None and not st.syncing for u in uids)


async def test_serial_per_pod_parallel_across_pods_and_coalescing() -> None:
    s = Syncer()
    w = PodWorkers(s)
    s.gate.clear()
    w.update_pod(update(SyncPodType.CREATE, "a", 0))
    w.update_pod(update(SyncPodType.CREATE, "b", 0))
    await until(lambda: s.total_active == 2)
    for gen in range(1, 6):
        w.update_pod(update(SyncPodType.UPDATE, "a", gen))
    s.gate.set()
    await until(lambda: ("sync", "uid-a", 5) in s.calls)
    await until(lambda: idle(w, "uid-a", "uid-b"))
    a_calls = [g for kind, u, g in s.calls if u == "uid-a"]
    assert a_calls == [0, 5]  # intermediate updates coalesced, latest wins
    assert s.max_active == {"uid-a": 1, "uid-b": 1}
    assert s.max_total == 2
    await w.stop()


async def test_terminal_pod_goes_through_terminating_and_terminated() -> None:
    s = Syncer()
    s.terminal.add("uid-a")
    w = PodWorkers(s)
    w.update_pod(update(SyncPodType.CREATE, "a"))
    await asyncio.wait_for(s.done.wait(), 5)
    assert [k for k, _u, _g in s.calls] == ["sync", "terminating", "terminated"]
    assert w.is_terminated("uid-a")
    w.update_pod(update(SyncPodType.UPDATE, "a", 1))  # ignored after termination
    await asyncio.sleep(0.05)
    assert len(s.calls) == 3
    w.forget("uid-a")
    assert w.get("uid-a") is None
    await w.stop()


async def test_deletion_uses_pod_grace_and_only_shrinks() -> None:
    s = Syncer()
    w = PodWorkers(s)
    s.gate.clear()
    w.update_pod(update(SyncPodType.CREATE, "a"))
    await until(lambda: s.total_active == 1)
    w.update_pod(update(SyncPodType.UPDATE, "a", 1, deletionTimestamp="t", deletionGracePeriodSeconds=20))
    w.update_pod(update(SyncPodType.KILL, "a", 2, kill_grace=40))
    assert w.is_terminating("uid-a")
    s.gate.set()
    await asyncio.wait_for(s.done.wait(), 5)
    assert s.graces == [20]
    kinds = [k for k, _u, _g in s.calls]
    assert kinds == ["sync", "terminating", "terminated"]
    await w.stop()


async def test_failed_sync_is_retried() -> None:
    s = Syncer()
    s.fail_once.add("uid-a")
    w = PodWorkers(s, max_retry_delay=0.05)
    w.update_pod(update(SyncPodType.CREATE, "a", 3))
    await until(lambda: len(s.syncs_of("uid-a")) >= 2 and idle(w, "uid-a"))
    # the failed sync was retried on its own, with the same pod, and the retry succeeded: the pod
    # is still an ordinary running pod (a failure does not terminate it) and nothing else ran
    assert s.syncs_of("uid-a") == [3, 3]
    assert s.calls == [("sync", "uid-a", 3), ("sync", "uid-a", 3)]
    assert not w.is_terminating("uid-a")
    await w.stop()


async def test_requeue_after_syncs_that_pod_again() -> None:
    class Requeue(Syncer):
        """Asks for a resync of pod a only (like a pod waiting out a back-off)."""

        def __init__(self) -> None:
            super().__init__()
            self.update_types: dict[str, list[SyncPodType]] = {}

        async def sync_pod(self, update_type: str, pod: dict[str, Any], mirror_pod: Any) -> SyncPodResult:
            await super().sync_pod(update_type, pod, mirror_pod)
            uid = pod["metadata"]["uid"]
            self.update_types.setdefault(uid, []).append(SyncPodType(update_type))
            return SyncPodResult(requeue_after=0.01 if uid == "uid-a" else None)

    s = Requeue()
    w = PodWorkers(s)
    w.update_pod(update(SyncPodType.CREATE, "a", 1))
    w.update_pod(update(SyncPodType.CREATE, "b", 1))
    await until(lambda: len(s.syncs_of("uid-a")) >= 3 and idle(w, "uid-b"))
    # pod a was synced again and again, as periodic resyncs of the pod it had, with no new update
    assert set(s.syncs_of("uid-a")) == {1}
    types = s.update_types["uid-a"]
    assert types[0] is SyncPodType.CREATE and set(types[1:]) == {SyncPodType.SYNC}
    # pod b did not ask for it and was synced once
    assert s.syncs_of("uid-b") == [1]
    assert s.update_types["uid-b"] == [SyncPodType.CREATE]
    await w.stop()


async def test_an_idle_pod_is_synced_again_every_resync_interval() -> None:
    s = Syncer()
    w = PodWorkers(s, resync_interval=0.02)
    w.update_pod(update(SyncPodType.CREATE, "a"))
    await until(lambda: len(s.syncs_of("uid-a")) >= 3)
    await w.stop()
    # nothing changed: the same pod synced again and again by its own timer, never two syncs at once
    assert len({c for c in s.calls if c[1] == "uid-a"}) == 1
    assert s.max_active["uid-a"] == 1


async def test_resyncs_of_1000_pods_started_together_are_spread_over_the_sync_period() -> None:
    s = Syncer()
    w = PodWorkers(s, resync_interval=100.0)
    uids = [f"uid-p{i}" for i in range(1000)]
    for i in range(1000):
        w.update_pod(update(SyncPodType.CREATE, f"p{i}"))
    await until(lambda: len(s.calls) == 1000 and idle(w, *uids))
    now = asyncio.get_running_loop().time()
    delays = []
    for u in uids:
        st = w.get(u)
        assert st is not None and st.timer is not None
        delays.append(st.timer.when() - now)
    # upstream wait.Jitter(syncFrequency, 0.5): each pod between 1x and 1.5x the period after its sync
    assert all(99.0 <= d <= 150.0 for d in delays)
    per_tenth = [sum(1 for d in delays if 100 + 5 * k <= d < 105 + 5 * k) for k in range(10)]
    assert max(per_tenth) < 200, per_tenth  # ~100 per tenth of the window, never one burst
    await w.stop()


async def test_a_terminating_pod_gets_no_periodic_resync() -> None:
    s = Syncer()
    w = PodWorkers(s, resync_interval=100.0)
    w.update_pod(update(SyncPodType.CREATE, "a"))
    await until(lambda: idle(w, "uid-a") and bool(s.syncs_of("uid-a")))
    w.update_pod(update(SyncPodType.KILL, "a"))
    await until(lambda: s.done.is_set())
    st = w.get("uid-a")
    assert st is not None and st.timer is None
    await w.stop()


async def test_resyncs_due_on_the_relist_tick_start_on_whole_ticks() -> None:
    s = Syncer()
    w = PodWorkers(s, resync_interval=100.0, resync_tick=1.0)
    uids = [f"uid-p{i}" for i in range(50)]
    for i in range(50):
        w.update_pod(update(SyncPodType.CREATE, f"p{i}"))
    await until(lambda: len(s.calls) == 50 and idle(w, *uids))
    now = asyncio.get_running_loop().time()
    whens = [st.timer.when() for u in uids if (st := w.get(u)) is not None and st.timer is not None]
    assert len(whens) == 50
    # still upstream's jittered 1-1.5x the period (rounded up by less than a tick), but each on a whole
    # tick of the loop clock, where the relist wakes the loop anyway
    assert all(100.0 <= when - now <= 151.0 for when in whens)
    assert all(abs(when - round(when)) < 1e-6 for when in whens)
    assert len(set(round(when) for when in whens)) > 10  # still spread over the window
    await w.stop()


async def test_an_idle_pod_keeps_no_worker_task_and_its_next_update_still_syncs_it_alone() -> None:
    s = Syncer()
    w = PodWorkers(s, resync_interval=100.0)
    w.update_pod(update(SyncPodType.CREATE, "a"))
    await until(lambda: idle(w, "uid-a") and bool(s.syncs_of("uid-a")))
    await asyncio.sleep(0)  # the worker ends once its slot is empty
    st = w.get("uid-a")
    assert st is not None and st.task is None and st.timer is not None  # only the resync timer is left
    s.gate.clear()
    for gen in (1, 2, 3):  # the first starts a worker; the others wait for it and are coalesced
        w.update_pod(update(SyncPodType.UPDATE, "a", gen))
    await until(lambda: s.total_active == 1)
    w.update_pod(update(SyncPodType.UPDATE, "a", 4))
    s.gate.set()
    await until(lambda: ("sync", "uid-a", 4) in s.calls and idle(w, "uid-a"))
    assert s.syncs_of("uid-a") == [0, 3, 4] and s.max_active["uid-a"] == 1
    await w.stop()
