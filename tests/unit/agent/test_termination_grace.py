"""Termination grace periods in the pod workers (upstream calculateEffectiveGracePeriod + cancelFn)."""

from __future__ import annotations

import asyncio
from typing import Any

from pykubelet.agent.container.grace import effective_grace
from pykubelet.agent.podworkers import (
    PodWorkers,
    SyncPodResult,
    SyncPodType,
    UpdatePodOptions,
)
from tests.builders import pod


def graced(spec_grace: int | None = 30, **metadata: Any) -> dict[str, Any]:
    """Pod "p" whose spec asks for ``spec_grace`` seconds (None: the field unset), with these metadata fields
    (deletionTimestamp, deletionGracePeriodSeconds: what the API server sets on a deleted pod)."""
    spec = {} if spec_grace is None else {"terminationGracePeriodSeconds": spec_grace}
    return pod(metadata=metadata, **spec)


def test_effective_grace_follows_upstream() -> None:
    assert effective_grace(None, graced()) == 30
    assert effective_grace(None, graced(None)) == 30
    assert effective_grace(None, graced(5)) == 5
    # the API server's deletionGracePeriodSeconds wins, even 0 (then the 1 s floor applies)
    assert effective_grace(None, graced(deletionGracePeriodSeconds=3)) == 3
    assert effective_grace(None, graced(deletionGracePeriodSeconds=0)) == 1
    # a kubelet override applies when shorter; the grace period never grows back
    assert effective_grace(None, graced(), 0) == 1
    assert effective_grace(None, graced(), 40) == 40
    assert effective_grace(10, graced(deletionGracePeriodSeconds=20)) == 10
    assert effective_grace(10, graced(), 40) == 10
    assert effective_grace(10, graced(deletionGracePeriodSeconds=2)) == 2
    assert effective_grace(None, graced(0)) == 1


class SlowSyncer:
    """sync_terminating_pod sleeps for the grace period it gets (like StopContainer would)."""

    def __init__(self) -> None:
        self.graces: list[int | None] = []
        self.started = asyncio.Event()
        self.terminated = asyncio.Event()
        self.pull = asyncio.Event()  # sync_pod blocks on it, like a long image pull
        self.syncs_finished = 0

    async def sync_pod(self, update_type: str, p: dict[str, Any], mirror: Any) -> SyncPodResult:
        self.started.set()
        await self.pull.wait()
        self.syncs_finished += 1
        return SyncPodResult()

    async def sync_terminating_pod(self, p: dict[str, Any], grace: int | None) -> None:
        self.graces.append(grace)
        await asyncio.sleep(grace or 0)

    async def sync_terminated_pod(self, p: dict[str, Any]) -> None:
        self.terminated.set()


async def test_shorter_grace_cancels_the_termination_in_flight() -> None:
    s = SlowSyncer()
    s.pull.set()
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, graced()))
    await asyncio.wait_for(s.started.wait(), 5)
    w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, graced(deletionTimestamp="t", deletionGracePeriodSeconds=30)))
    await asyncio.sleep(0.1)
    assert s.graces == [30]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    # force delete: the pod disappears from the API, the kubelet kills with the shortest grace
    w.update_pod(UpdatePodOptions(SyncPodType.KILL, graced(deletionTimestamp="t", deletionGracePeriodSeconds=30),
                                  kill_grace=0))
    await asyncio.wait_for(s.terminated.wait(), 5)
    assert s.graces == [30, 1]
    assert loop.time() - t0 < 3
    await w.stop()


async def test_deletion_cancels_a_sync_in_flight() -> None:
    s = SlowSyncer()  # the pull never finishes
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, graced()))
    await asyncio.wait_for(s.started.wait(), 5)
    w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, graced(deletionTimestamp="t", deletionGracePeriodSeconds=0)))
    await asyncio.wait_for(s.terminated.wait(), 5)
    assert s.graces == [1] and s.syncs_finished == 0
    await w.stop()


async def test_same_grace_does_not_restart_the_termination() -> None:
    s = SlowSyncer()
    s.pull.set()
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, graced(1)))
    await asyncio.wait_for(s.started.wait(), 5)
    w.update_pod(UpdatePodOptions(SyncPodType.KILL, graced(1)))
    await asyncio.sleep(0.2)
    w.update_pod(UpdatePodOptions(SyncPodType.KILL, graced(1)))
    await asyncio.wait_for(s.terminated.wait(), 5)
    assert s.graces == [1]
    await w.stop()


async def test_stopping_the_workers_while_a_deletion_cancels_a_sync_ends_the_worker() -> None:
    s = SlowSyncer()  # the pull never finishes
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, graced()))
    await asyncio.wait_for(s.started.wait(), 5)
    st = w.get("uid-p")
    assert st is not None and st.task is not None
    task = st.task
    # the deletion's cancellation and the agent's shutdown reach the worker together
    w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, graced(deletionTimestamp="t", deletionGracePeriodSeconds=0)))
    task.cancel()  # what ``stop`` does to each worker, before the worker ran again
    await asyncio.wait([task], timeout=5)
    assert task.cancelled() and s.graces == [] and s.syncs_finished == 0
    await w.stop()


async def test_a_deleted_pods_sync_cancellation_leaves_the_worker_running_its_next_syncs() -> None:
    s = SlowSyncer()
    w = PodWorkers(s)
    w.update_pod(UpdatePodOptions(SyncPodType.CREATE, graced()))
    await asyncio.wait_for(s.started.wait(), 5)
    st = w.get("uid-p")
    assert st is not None and st.task is not None
    task = st.task  # the worker that runs the termination too
    w.update_pod(UpdatePodOptions(SyncPodType.UPDATE, graced(deletionTimestamp="t", deletionGracePeriodSeconds=0)))
    await asyncio.wait_for(s.terminated.wait(), 5)
    await asyncio.wait_for(task, 5)  # it ends normally once the pod is terminated
    assert not task.cancelled() and not task.cancelling()  # the withdrawn cancellation left nothing behind
    await w.stop()
