"""Pod and QoS cgroups on fake cgroup v2 trees (cgroupfs and systemd drivers with a fake D-Bus), and
the container manager's startup checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pykubelet.agent.cm import checks
from pykubelet.agent.cm.podcgroups import PodCgroupManager
from pykubelet.agent.config import ConfigError, KubeletConfiguration
from tests.builders import container, pod


class FakeSystemd:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped: list[str] = []

    def ensure_slice(self, name: str) -> None:
        if name not in self.started:
            self.started.append(name)

    def remove_slice(self, name: str) -> None:
        self.stopped.append(name)


def v2_tree(tmp_path: Path) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    return tmp_path


async def test_v2_cgroupfs_pod_cgroup_has_weight_and_limits(tmp_path: Path) -> None:
    mount = v2_tree(tmp_path)
    cm = PodCgroupManager("/pk", mount=str(mount))
    p = pod("web", uid="u1", containers=[container("c", requests={"cpu": "500m"},
                                                   limits={"cpu": "1", "memory": "64Mi"})])
    await cm.ensure(p)
    d = mount / "pk/kubepods/burstable/podu1"
    assert (d / "cpu.weight").read_text() == "20"
    assert (d / "cpu.max").read_text() == "100000 100000"
    assert (d / "memory.max").read_text() == str(64 * 1024**2)
    assert "+memory" in (mount / "cgroup.subtree_control").read_text() or \
        (mount / "cgroup.subtree_control").read_text().startswith("+")
    assert await cm.list_pod_uids() == {"u1"}
    await cm.destroy("u1")
    assert not d.exists()


async def test_v2_systemd_driver_creates_slices_through_dbus_and_removes_them(tmp_path: Path) -> None:
    mount = v2_tree(tmp_path)
    fake = FakeSystemd()
    cm = PodCgroupManager("", mount=str(mount), driver="systemd", systemd=fake)
    p = pod("web", uid="ab-12", containers=[container("c", requests={"cpu": "100m"})])
    assert cm.cgroup_parent(p) == "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab_12.slice"
    await cm.ensure(p)
    assert fake.started == ["kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-podab_12.slice"]
    assert (mount / cm.cgroup_parent(p).strip("/") / "cpu.weight").read_text() == "4"
    assert await cm.list_pod_uids() == {"ab-12"}
    await cm.destroy("ab-12")
    assert "kubepods-burstable-podab_12.slice" in fake.stopped


async def test_qos_tiers_follow_node_allocatable_and_pods(tmp_path: Path) -> None:
    mount = v2_tree(tmp_path)
    cm = PodCgroupManager("/pk", mount=str(mount))
    cm.node_allocatable = {"cpu": 2000, "memory": 1024**3}
    b = pod("b", containers=[container("c", requests={"cpu": "1"})])
    await cm.update_qos([b])
    assert (mount / "pk/kubepods/memory.max").read_text() == str(1024**3)
    assert (mount / "pk/kubepods/cpu.weight").read_text() == "79"
    assert (mount / "pk/kubepods/burstable/cpu.weight").read_text() == "39"
    assert (mount / "pk/kubepods/besteffort/cpu.weight").read_text() == "1"


async def test_reserved_cgroup_must_exist_when_enforced(tmp_path: Path) -> None:
    mount = v2_tree(tmp_path)
    cm = PodCgroupManager("/pk", mount=str(mount))
    cfg = KubeletConfiguration.from_dict({"enforceNodeAllocatable": ["pods", "system-reserved"],
                                               "systemReserved": {"memory": "100Mi"},
                                               "systemReservedCgroup": "/system.slice"})
    with pytest.raises(ConfigError, match="systemReservedCgroup"):
        await checks.enforce_node_allocatable(cm, cfg, cpu_millis=2000, memory_bytes=1024**3)
    (mount / "system.slice").mkdir()
    await checks.enforce_node_allocatable(cm, cfg, cpu_millis=2000, memory_bytes=1024**3)
    assert (mount / "system.slice/memory.max").read_text() == str(100 * 1024**2)
    assert cm.node_allocatable == {"cpu": 2000, "memory": 1024**3 - 100 * 1024**2}


def test_swap_on_with_fail_swap_on_is_a_startup_error_naming_the_setting() -> None:
    swaps = "Filename Type Size Used Priority\n/dev/sda2 partition 100 0 -2\n"
    err = checks.swap_error(True, swaps)
    assert err is not None and err.startswith("failSwapOn: running with swap on is not supported")
    assert checks.swap_error(False, swaps) is None
    assert checks.swap_error(True, "Filename Type Size Used Priority\n") is None


def test_systemd_driver_without_systemd_as_pid_1_is_a_startup_error() -> None:
    err = checks.systemd_error("systemd", "bash\n")
    assert err is not None and "cgroupDriver" in err
    assert checks.systemd_error("systemd", "systemd\n") is None
    assert checks.systemd_error("cgroupfs", "bash") is None


def test_driver_mismatch_with_containerd_is_a_startup_error() -> None:
    cfg = {"containerd": {"defaultRuntimeName": "runc", "runtimes": {"runc": {"options": {"SystemdCgroup": True}}}}}
    driver = checks.runtime_cgroup_driver({"config": json.dumps(cfg)})
    assert driver == "systemd"
    err = checks.driver_mismatch_error("cgroupfs", driver)
    assert err is not None and err.startswith("cgroupDriver:")
    assert checks.runtime_cgroup_driver({}) is None
    assert checks.driver_mismatch_error("cgroupfs", None) is None


async def test_limited_swap_gives_a_burstable_pod_its_share_of_swap_on_v2(tmp_path: Path) -> None:
    mount = v2_tree(tmp_path)
    cm = PodCgroupManager("/pk", mount=str(mount), swap_behavior="LimitedSwap")
    cm.node_memory, cm.node_swap = 4 * 1024**3, 1024**3
    p = pod("b", uid="u2", containers=[container("c", requests={"memory": "1Gi"})])
    await cm.ensure(p)
    assert (mount / "pk/kubepods/burstable/podu2/memory.swap.max").read_text() == str(256 * 1024**2)
