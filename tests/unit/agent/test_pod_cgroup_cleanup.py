"""Pod cgroups on a fake cgroup v1 tree: what is created, and that nothing is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubelet.agent.cm.podcgroups import QOS_RESYNC_PERIOD, PodCgroupManager
from pykubelet.agent.interfaces import HousekeepingContext
from tests.builders import container, pod


def _tree(tmp_path: Path) -> Path:
    for h in ("cpu", "memory", "pids", "systemd", "unified"):
        (tmp_path / h).mkdir()
    return tmp_path


async def test_deleted_pod_leaves_no_cgroup_in_any_hierarchy(tmp_path: Path) -> None:
    mount = _tree(tmp_path)
    m = PodCgroupManager("/pk", mount=str(mount))
    await m.ensure(pod(uid="u1"))
    rel = m.pod_cgroup(pod(uid="u1")).strip("/")
    assert (mount / "memory" / rel).is_dir()
    # the runtime (runc) creates the same path in the named and unified hierarchies too
    for h in ("systemd", "unified"):
        (mount / h / rel / "container1").mkdir(parents=True)
    assert await m.list_pod_uids() == {"u1"}
    await m.destroy("u1")
    assert await m.list_pod_uids() == set()
    assert not any((mount / h / rel).exists() for h in ("cpu", "memory", "pids", "systemd", "unified"))


async def test_debris_only_in_the_systemd_hierarchy_is_found(tmp_path: Path) -> None:
    mount = _tree(tmp_path)
    m = PodCgroupManager("/pk", mount=str(mount))
    (mount / "systemd" / "pk/kubepods/besteffort/podgone").mkdir(parents=True)
    assert await m.list_pod_uids() == {"gone"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _ctx(*known: str) -> HousekeepingContext:
    return HousekeepingContext(desired=frozenset(known), known=frozenset(known))


async def test_a_pod_that_leaves_the_node_has_its_cgroup_removed_by_the_next_pass(tmp_path: Path) -> None:
    mount = _tree(tmp_path)
    m = PodCgroupManager("/pk", mount=str(mount), clock=Clock())
    step = m.cleanup_step(lambda: [])
    for uid in ("u1", "u2"):
        await m.ensure(pod(uid=uid))
    await step(_ctx("u1", "u2"))
    assert await m.list_pod_uids() == {"u1", "u2"}
    await step(_ctx("u1"))  # u2 left the node's known pods
    assert await m.list_pod_uids() == {"u1"}


async def test_debris_made_outside_the_agent_is_removed_within_the_resync_period(tmp_path: Path) -> None:
    mount = _tree(tmp_path)
    clock = Clock()
    m = PodCgroupManager("/pk", mount=str(mount), clock=clock)
    step = m.cleanup_step(lambda: [])
    await m.ensure(pod(uid="u1"))
    await step(_ctx("u1"))
    (mount / "memory" / "pk/kubepods/besteffort/podstray").mkdir(parents=True)
    clock.now += QOS_RESYNC_PERIOD
    await step(_ctx("u1"))
    assert await m.list_pod_uids() == {"u1"}


async def test_qos_tiers_follow_a_new_pod_at_the_next_pass_and_are_restored_within_the_resync_period(
        tmp_path: Path) -> None:
    mount = _tree(tmp_path)
    clock = Clock()
    m = PodCgroupManager("/pk", mount=str(mount), clock=clock)
    shares = mount / "cpu" / "pk/kubepods/burstable/cpu.shares"
    pods = [pod(uid="b1", containers=[container("c", requests={"cpu": "1"})])]
    step = m.cleanup_step(lambda: pods)
    await step(_ctx("b1"))
    assert shares.read_text() == "1024"
    pods.append(pod(uid="b2", containers=[container("c", requests={"cpu": "500m"})]))
    await step(_ctx("b1", "b2"))
    assert shares.read_text() == "1536"
    shares.write_text("2")  # changed behind the agent's back: the minute's update writes it again
    clock.now += QOS_RESYNC_PERIOD
    await step(_ctx("b1", "b2"))
    assert shares.read_text() == "1536"


async def test_an_orphan_cgroup_that_cannot_be_removed_is_tried_again_with_a_back_off_and_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    mount = _tree(tmp_path)
    clock = Clock()
    m = PodCgroupManager("/pk", mount=str(mount), clock=clock)
    (mount / "memory" / "pk/kubepods/besteffort/podbusy").mkdir(parents=True)
    tries: list[float] = []

    def busy(uid: str) -> bool:  # EBUSY: something outside the agent still runs in it
        tries.append(clock.now)
        return False

    monkeypatch.setattr(m, "_destroy_sync", busy)
    start = clock.now
    for _ in range(40):  # 40 housekeeping passes, 2 s apart
        await m.cleanup(_ctx())
        clock.now += 2.0
    assert [t - start for t in tries] == [0.0, 2.0, 6.0, 14.0, 30.0, 62.0]  # waits 2, 4, 8, 16, 32 s
    warnings = [r for r in caplog.records if "cannot remove the cgroups of pod busy" in r.getMessage()]
    assert len(warnings) == 1
