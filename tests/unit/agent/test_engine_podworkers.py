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


def pod(uid: str, gen: int = 0, **md: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "d", "generation": gen, **md},
            "spec": {"terminationGracePeriodSeconds": 30}}


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


async def until(pred: Any) -> None:
    async with asyncio.timeout(5):
        while not pred():  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(0.005)


async def test_serial_per_pod_parallel_across_pods_and_coalescing() -> None:
    s = Syncer()
    w = PodWorkers(s)
    s.gate.clear()
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod("a", 0)))
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod("b", 0)))
    await until(lambda: s.total_active == 2)
    for gen in range(1, 6):
        w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, pod("a", gen)))
    s.gate.set()
    await until(lambda: ("sync", "a", 5) in s.calls)
    await until(lambda: all(not w.get(u).syncing for u in "ab"))  # type: ignore[union-attr]
    a_calls = [g for kind, u, g in s.calls if u == "a"]
    assert a_calls == [0, 5]  # intermediate updates coalesced, latest wins
    assert s.max_active == {"a": 1, "b": 1}
    assert s.max_total == 2
    await w.stop()


async def test_terminal_pod_goes_through_terminating_and_terminated() -> None:
    s = Syncer()
    s.terminal.add("a")
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod("a")))
    await asyncio.wait_for(s.done.wait(), 5)
    assert [k for k, _u, _g in s.calls] == ["sync", "terminating", "terminated"]
    assert w.is_terminated("a")
    w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, pod("a", 1)))  # ignored after termination
    await asyncio.sleep(0.05)
    assert len(s.calls) == 3
    w.forget("a")
    assert w.get("a") is None
    await w.stop()


async def test_deletion_uses_pod_grace_and_only_shrinks() -> None:
    s = Syncer()
    w = PodWorkers(s)
    s.gate.clear()
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod("a")))
    await until(lambda: s.total_active == 1)
    w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, pod("a", 1, deletionTimestamp="t", deletionGracePeriodSeconds=20)))
    w.update_pod(UpdatePodOptions(SyncPodType.KILL, pod("a", 2), kill_grace=40))
    assert w.is_terminating("a")
    s.gate.set()
    await asyncio.wait_for(s.done.wait(), 5)
    assert s.graces == [20]
    kinds = [k for k, _u, _g in s.calls]
    assert kinds == ["sync", "terminating", "terminated"]
    await w.stop()


async def test_failed_sync_is_retried() -> None:
    s = Syncer()
    s.fail_once.add("a")
    w = PodWorkers(s, max_retry_delay=0.05)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod("a")))
    await until(lambda: len(s.calls) >= 2)
    await w.stop()


async def test_requeue_after() -> None:
    class Requeue(Syncer):
        async def sync_pod(self, update_type: str, pod: dict[str, Any], mirror_pod: Any) -> SyncPodResult:
            await super().sync_pod(update_type, pod, mirror_pod)
            return SyncPodResult(requeue_after=0.01)

    s = Requeue()
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod("a")))
    await until(lambda: len(s.calls) >= 3)
    await w.stop()
