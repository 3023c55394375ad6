"""CPU manager static policy: exclusive CPUs for integer-CPU Guaranteed containers, the shared pool
for the rest, reserved CPUs, and a state file that survives restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pykubelet.agent.cm.cpumanager import CPUInfo, CPUManager, format_cpuset, parse_cpuset, take_by_topology
from pykubelet.agent.config import ConfigError, KubeletConfiguration
from pykubelet.agent.interfaces import PodAdmitAttributes
from pykubelet.cri import pb
from tests.builders import container, pod

# 2 sockets x 2 cores x 2 threads: cpu n and n+4 are siblings
TOPOLOGY = [CPUInfo(c, core=c % 4, socket=(c % 4) // 2) for c in range(8)]


def static(tmp_path: Path, **cfg: object) -> CPUManager:
    conf = KubeletConfiguration.from_dict({"cpuManagerPolicy": "static", **cfg})
    return CPUManager(conf, tmp_path, topology=TOPOLOGY)


def guaranteed(name: str, cpu: str) -> dict[str, object]:
    res = {"cpu": cpu, "memory": "64Mi"}
    return pod(name, containers=[container("c", requests=res, limits=res)])


def test_cpusets_parse_and_format_like_the_kernel() -> None:
    assert parse_cpuset("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert format_cpuset({8, 0, 1, 2, 5, 7}) == "0-2,5,7-8"


def test_whole_cores_are_taken_before_single_threads() -> None:
    assert take_by_topology(TOPOLOGY, frozenset({1, 2, 3, 5, 6, 7}), 2) == {1, 5}
    assert take_by_topology(TOPOLOGY, frozenset({1, 2}), 3) is None


def test_static_policy_needs_reserved_cpus(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"systemreserved\.cpu"):
        static(tmp_path)


def test_guaranteed_integer_cpu_container_gets_exclusive_cpus_and_others_the_shared_pool(tmp_path: Path) -> None:
    m = static(tmp_path, reservedSystemCPUs="0")
    g = guaranteed("g", "2")
    assert m.admit(PodAdmitAttributes(g, [])).admit
    excl = m.cpuset_for(g, g["spec"]["containers"][0])  # type: ignore[index]
    assert excl is not None and len(excl) == 2 and 0 not in excl
    shared = pod("b", containers=[container("c", requests={"cpu": "500m"})])
    r = pb.LinuxContainerResources()
    m.apply(shared, shared["spec"]["containers"][0], r)
    assert parse_cpuset(r.cpuset_cpus) == frozenset(range(8)) - excl
    fractional = guaranteed("f", "1500m")
    assert m.admit(PodAdmitAttributes(fractional, [])).admit
    assert m.cpuset_for(fractional, fractional["spec"]["containers"][0]) == m.default_set()  # type: ignore[index]


def test_not_enough_cpus_is_an_unexpected_admission_error(tmp_path: Path) -> None:
    m = static(tmp_path, reservedSystemCPUs="0-3")
    r = m.admit(PodAdmitAttributes(guaranteed("big", "5"), []))
    assert (r.admit, r.reason) == (False, "UnexpectedAdmissionError")
    assert r.message == ("Allocate failed due to not enough cpus available to satisfy request: requested=5, "
                         "available=4, which is unexpected")


def test_state_file_keeps_assignments_across_restarts_and_refuses_another_policy(tmp_path: Path) -> None:
    m = static(tmp_path, reservedSystemCPUs="0")
    g = guaranteed("g", "1")
    m.admit(PodAdmitAttributes(g, []))
    state = json.loads((tmp_path / "cpu_manager_state").read_text())
    assert state["policyName"] == "static" and set(state) == {"policyName", "defaultCpuSet", "entries", "checksum"}
    again = static(tmp_path, reservedSystemCPUs="0")
    assert again.assignments == m.assignments
    (tmp_path / "cpu_manager_state").write_text(json.dumps({**state, "policyName": "none"}))
    with pytest.raises(ConfigError, match="differs from state checkpoint"):
        static(tmp_path, reservedSystemCPUs="0")


async def test_reconcile_updates_running_shared_containers_when_the_pool_shrinks(tmp_path: Path) -> None:
    m = static(tmp_path, reservedSystemCPUs="0")
    shared = pod("b", uid="ub", containers=[container("c", requests={"cpu": "100m"})])

    class Runtime:
        def __init__(self) -> None:
            self.updates: list[tuple[str, str]] = []

        async def list_containers(self) -> list[pb.Container]:
            return [pb.Container(id="c1", state=pb.CONTAINER_RUNNING, metadata=pb.ContainerMetadata(name="c"),
                                 labels={"io.kubernetes.pod.uid": "ub"})]

        async def update_container_resources(self, cid: str, linux: pb.LinuxContainerResources) -> None:
            self.updates.append((cid, linux.cpuset_cpus))

    rt = Runtime()
    assert await m.reconcile(rt, {"ub": shared}) == 1
    assert await m.reconcile(rt, {"ub": shared}) == 0
    g = guaranteed("g", "2")
    m.admit(PodAdmitAttributes(g, []))
    await m.reconcile(rt, {"ub": shared, g["metadata"]["uid"]: g})  # type: ignore[index]
    assert len(parse_cpuset(rt.updates[-1][1])) == 6
