"""Pod cgroups (upstream pkg/kubelet/cm pod containers) on a fake cgroup v1 tree: the parent follows
the QoS class, requests and limits become cpu.shares, CFS quota and memory limits, and destroy removes
the pod's cgroup."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.cm.podcgroups import PodCgroupManager
from tests.builders import container, pod


async def test_pod_cgroups_on_fake_cgroupfs(tmp_path: Path) -> None:
    for ctrl in ("cpu", "memory", "pids", "cpuset"):
        (tmp_path / ctrl).mkdir()
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0")
    cm = PodCgroupManager("", mount=str(tmp_path))
    assert cm.enabled
    c = container("a", "i", resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "64Mi"}})
    p = pod("web", containers=[c], uid="uid-1")
    assert cm.cgroup_parent(p) == "/pykubelet/kubepods/burstable/poduid-1"
    await cm.ensure(p)
    base = tmp_path / "memory" / "pykubelet/kubepods/burstable/poduid-1"
    assert base.is_dir()
    assert (base / "memory.limit_in_bytes").read_text() == str(64 * 1024**2)
    assert (tmp_path / "cpu/pykubelet/kubepods/burstable/poduid-1/cpu.shares").read_text() == "512"
    assert (tmp_path / "cpu/pykubelet/kubepods/burstable/poduid-1/cpu.cfs_quota_us").read_text() == "100000"
    assert (tmp_path / "cpuset/pykubelet/kubepods/burstable/poduid-1/cpuset.cpus").read_text() == "0-1"
    assert await cm.list_pod_uids() == {"uid-1"}
    await cm.destroy("uid-1")
    assert not base.exists() and await cm.list_pod_uids() == set()
    res = {"cpu": "1", "memory": "1Gi"}
    g = container("g", "i", resources={"limits": res, "requests": res})
    guaranteed = pod("web", containers=[g], uid="uid-1")
    assert PodCgroupManager("/custom", mount=str(tmp_path)).cgroup_parent(guaranteed) == "/custom/kubepods/poduid-1"
    assert PodCgroupManager("", mount=str(tmp_path / "nope")).cgroup_parent(p) == ""
