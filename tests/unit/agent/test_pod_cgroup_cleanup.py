"""Pod cgroups on a fake cgroup v1 tree: what is created, and that nothing is left behind."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.cm.podcgroups import PodCgroupManager
from tests.builders import pod


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
