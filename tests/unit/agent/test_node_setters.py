"""Pure node-status logic: capacity capping, allocatable math, conditions, images, registration."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.nodestatus import setters
from pykubelet.agent.nodestatus.lease import build_lease
from pykubelet.agent.nodestatus.machine import (
    HostPaths,
    MachineInfo,
    cap_cpu_millis,
    cap_memory,
    cgroup_limits,
    go_arch,
    parse_os_release,
    pick_node_ip,
    read_machine_info,
)
from pykubelet.agent.nodestatus.manager import StatusInputs, build_status

GI = 1 << 30
MI = 1 << 20


def test_cpu_capped_by_quota() -> None:
    assert cap_cpu_millis(4, None, None) == 4000
    assert cap_cpu_millis(4, 150000, 100000) == 1500
    assert cap_cpu_millis(2, 800000, 100000) == 2000  # quota above the machine: machine wins
    assert cap_cpu_millis(2, -1, 100000) == 2000


def test_memory_capped_by_limit() -> None:
    assert cap_memory(8 * GI, None) == 8 * GI
    assert cap_memory(8 * GI, 2 * GI) == 2 * GI
    assert cap_memory(8 * GI, 9223372036854771712) == 8 * GI  # v1 "unlimited"


def _write(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_cgroup_v1_limits_tightest_ancestor(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _write(proc / "self" / "cgroup", "4:memory:/outer/inner\n3:cpu,cpuacct:/outer/inner\n0::/\n")
    _write(cg / "cpu,cpuacct" / "outer" / "cpu.cfs_quota_us", "50000\n")
    _write(cg / "cpu,cpuacct" / "outer" / "cpu.cfs_period_us", "100000\n")
    _write(cg / "cpu,cpuacct" / "outer" / "inner" / "cpu.cfs_quota_us", "-1\n")
    _write(cg / "cpu,cpuacct" / "outer" / "inner" / "cpu.cfs_period_us", "100000\n")
    _write(cg / "memory" / "outer" / "memory.limit_in_bytes", str(3 * GI))
    _write(cg / "memory" / "outer" / "inner" / "memory.limit_in_bytes", str(1 * GI))
    _write(cg / "memory" / "memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_limits(HostPaths(proc=proc, cgroup_root=cg)) == (50000, 100000, 1 * GI)


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _write(proc / "self" / "cgroup", "0::/agent\n")
    _write(cg / "cgroup.controllers", "cpu memory\n")
    _write(cg / "agent" / "cpu.max", "150000 100000\n")
    _write(cg / "agent" / "memory.max", "max\n")
    _write(cg / "memory.max", str(512 * MI))
    assert cgroup_limits(HostPaths(proc=proc, cgroup_root=cg)) == (150000, 100000, 512 * MI)


def test_read_machine_info_from_fake_tree(tmp_path: Path) -> None:
    proc, sysd, etc, cg = tmp_path / "proc", tmp_path / "sys", tmp_path / "etc", tmp_path / "cg"
    _write(proc / "meminfo", "MemTotal:       8000000 kB\nMemFree: 1 kB\n")
    _write(proc / "self" / "cgroup", "0::/\n")
    _write(proc / "sys" / "kernel" / "random" / "boot_id", "boot-123\n")
    _write(etc / "machine-id", "abc\n")
    _write(etc / "os-release", 'NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    _write(sysd / "class" / "dmi" / "id" / "product_uuid", "UUID-1\n")
    _write(sysd / "kernel" / "mm" / "hugepages" / "hugepages-2048kB" / "nr_hugepages", "4\n")
    _write(sysd / "kernel" / "mm" / "hugepages" / "hugepages-1048576kB" / "nr_hugepages", "0\n")
    cg.mkdir()
    info = read_machine_info(HostPaths(proc=proc, sys=sysd, etc=etc, cgroup_root=cg))
    assert info.memory_bytes == 8000000 * 1024
    assert info.machine_id == "abc" and info.boot_id == "boot-123" and info.system_uuid == "UUID-1"
    assert info.os_image == "Debian GNU/Linux 12 (bookworm)"
    assert info.hugepages == {"hugepages-2Mi": 8 * MI, "hugepages-1Gi": 0}
    assert info.cpu_millis == info.num_cores * 1000


def test_small_helpers() -> None:
    assert go_arch("x86_64") == "amd64" and go_arch("aarch64") == "arm64"
    assert parse_os_release('NAME="X"\n') == "X"
    assert pick_node_ip(["127.0.0.1", "fe80::1", "198.18.0.7", "10.0.0.1"]) == "198.18.0.7"
    assert pick_node_ip(["::1", "2001:db8::1", "198.18.0.9"]) == "198.18.0.9"
    assert pick_node_ip(["127.0.0.1"]) is None


def test_capacity_lists_hugepages() -> None:
    cap = setters.capacity(
        cpu_millis=1500, memory_bytes=4 * GI, max_pods=110, ephemeral_storage_bytes=100 * GI, hugepages={}
    )
    assert cap == {
        "cpu": "1500m",
        "memory": "4Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }


def test_allocatable_math() -> None:
    cap = {"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "100Gi",
           "hugepages-2Mi": "256Mi", "hugepages-1Gi": "0"}
    alloc = setters.allocatable(
        cap,
        system_reserved={"cpu": "100m", "memory": "256Mi"},
        kube_reserved={"cpu": "200m", "memory": "256Mi", "ephemeral-storage": "1Gi"},
        eviction_hard={"memory.available": "100Mi", "nodefs.available": "10%"},
    )
    assert alloc["cpu"] == "1700m"
    # 4Gi - 256Mi - 256Mi - 100Mi - 256Mi hugepages
    assert alloc["memory"] == f"{(4096 - 256 - 256 - 100 - 256)}Mi"
    # 100Gi - 1Gi - 10% of 100Gi
    assert alloc["ephemeral-storage"] == "89Gi"
    assert alloc["pods"] == "110"
    assert alloc["hugepages-2Mi"] == "256Mi"


def test_allocatable_never_negative() -> None:
    alloc = setters.allocatable({"cpu": "1", "memory": "100Mi"}, system_reserved={"cpu": "2", "memory": "1Gi"})
    assert alloc == {"cpu": "0", "memory": "0"}


def test_ready_condition_messages() -> None:
    ok = setters.runtime_errors(
        runtime_conditions={"RuntimeReady": (True, "", ""), "NetworkReady": (True, "", "")},
        runtime_error=None, pleg_healthy=True, sync_loop_healthy=True,
    )
    cap = {"cpu": "1", "memory": "1Gi", "pods": "10"}
    ready = setters.ready_condition(ok, cap)
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady"
    assert ready["message"] == "kubelet is posting ready status"

    errs = setters.runtime_errors(
        runtime_conditions={
            "RuntimeReady": (True, "", ""),
            "NetworkReady": (False, "NetworkPluginNotReady", "cni plugin not initialized"),
        },
        runtime_error=None, pleg_healthy=False, sync_loop_healthy=True,
    )
    nr = setters.ready_condition(errs, cap)
    assert nr["status"] == "False" and nr["reason"] == "KubeletNotReady"
    assert "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady" in nr["message"]
    assert "PLEG is not healthy" in nr["message"]

    down = setters.runtime_errors(runtime_conditions=None, runtime_error="connection refused",
                                  pleg_healthy=True, sync_loop_healthy=True)
    assert setters.ready_condition(down, cap)["message"].startswith("container runtime is down")
    assert "missing node capacity" in setters.ready_condition([], {"cpu": "1"})["message"]


def test_condition_times() -> None:
    first, changed = setters.merge_conditions([], [setters.pressure_condition("MemoryPressure", False)], 1000.0)
    assert first[0]["lastTransitionTime"] == first[0]["lastHeartbeatTime"] == "1970-01-01T00:16:40Z"
    assert len(changed) == 1
    same, changed = setters.merge_conditions(first, [setters.pressure_condition("MemoryPressure", False)], 2000.0)
    assert same[0]["lastTransitionTime"] == "1970-01-01T00:16:40Z"
    assert same[0]["lastHeartbeatTime"] == "1970-01-01T00:33:20Z"
    assert changed == []
    flipped, changed = setters.merge_conditions(same, [setters.pressure_condition("MemoryPressure", True)], 3000.0)
    assert flipped[0]["lastTransitionTime"] == "1970-01-01T00:50:00Z" and len(changed) == 1
    assert flipped[0]["reason"] == "KubeletHasInsufficientMemory"
    # conditions owned by others survive
    kept, _ = setters.merge_conditions([{"type": "NetworkUnavailable", "status": "False"}], [], 1.0)
    assert kept == [{"type": "NetworkUnavailable", "status": "False"}]


def test_condition_events() -> None:
    assert setters.condition_event({"type": "Ready", "status": "True"})[0] == "NodeReady"
    assert setters.condition_event({"type": "Ready", "status": "False"})[0] == "NodeNotReady"
    assert setters.condition_event({"type": "MemoryPressure", "status": "False"})[0] == "NodeHasSufficientMemory"
    assert setters.condition_event({"type": "DiskPressure", "status": "False"})[0] == "NodeHasNoDiskPressure"
    assert setters.condition_event({"type": "PIDPressure", "status": "False"})[0] == "NodeHasSufficientPID"


def test_images_sorted_and_capped() -> None:
    entries = [([f"img{i}:v1"], [f"img{i}@sha256:{i}"], i * 100) for i in range(60)]
    entries.append(([], [], 10**9))  # no names: skipped
    out = setters.images(entries, 50)
    assert len(out) <= 50
    assert out[0] == {"names": ["img59:v1", "img59@sha256:59"], "sizeBytes": 5900}
    many = setters.images([([f"t{i}" for i in range(8)], [], 1)], 50)
    assert len(many[0]["names"]) == setters.MAX_NAMES_PER_IMAGE
    assert len(setters.images(entries, -1)) == 60


def test_initial_node_and_reconcile() -> None:
    node = setters.initial_node(
        "n1", os_name="linux", arch="amd64", node_labels={"role": "edge"},
        taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}],
    )
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "n1"
    assert labels["kubernetes.io/os"] == labels["beta.kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] == labels["beta.kubernetes.io/arch"] == "amd64"
    assert labels["role"] == "edge"
    assert node["spec"]["taints"] == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert node["metadata"]["annotations"][setters.CMAD_ANNOTATION] == "true"

    existing = {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "kubernetes.io/os": "windows",
                                               "role": "admin-changed"},
                     "annotations": {setters.CMAD_ANNOTATION: "true"}},
        "spec": {"taints": [{"key": "other", "effect": "NoExecute"}]},
    }
    patch = setters.reconcile_existing_node(node, existing)
    assert patch is not None
    assert patch["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert "role" not in patch["metadata"]["labels"]  # admin edits win
    assert patch["spec"]["taints"] == [{"key": "other", "effect": "NoExecute"},
                                       {"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert setters.reconcile_existing_node(node, node) is None


def test_status_changed_ignores_heartbeats() -> None:
    a = {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}], "capacity": {"cpu": "1"}}
    b = {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}], "capacity": {"cpu": "1"}}
    assert not setters.status_changed(a, b)
    assert setters.status_changed(a, {**b, "capacity": {"cpu": "2"}})
    assert setters.status_changed(None, b)


def test_build_status_composes() -> None:
    options = AgentOptions(config=KubeletConfiguration(max_pods=30, port=10250), node_name="n1")
    inputs = StatusInputs(
        machine=MachineInfo(num_cores=2, cpu_millis=2000, memory_bytes=4 * GI, machine_id="m", boot_id="b",
                            kernel_version="6.1", os_image="Debian", operating_system="linux",
                            architecture="amd64"),
        node_ip="198.18.0.2", hostname="n1", ephemeral_storage_bytes=10 * GI,
        runtime_conditions={"RuntimeReady": (True, "", ""), "NetworkReady": (True, "", "")},
        runtime_error=None, runtime_version="containerd://1.6.20",
        images=[(["busybox:latest"], [], 1000)],
    )
    status, changed = build_status(options, inputs, [], 100.0)
    assert status["capacity"]["pods"] == "30"
    assert status["allocatable"]["memory"] == f"{4096 - 100}Mi"
    assert status["nodeInfo"]["containerRuntimeVersion"] == "containerd://1.6.20"
    assert status["nodeInfo"]["kubeletVersion"].startswith("v1.")
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["addresses"] == [{"type": "InternalIP", "address": "198.18.0.2"},
                                   {"type": "Hostname", "address": "n1"}]
    types = {c["type"]: c for c in status["conditions"]}
    assert types["Ready"]["status"] == "True"
    assert {c["type"] for c in changed} == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
    assert status["images"] == [{"names": ["busybox:latest"], "sizeBytes": 1000}]


def test_lease_body() -> None:
    lease = build_lease("n1", 40, 0.5, "uid-1")
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["spec"]["holderIdentity"] == "n1"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["spec"]["renewTime"] == "1970-01-01T00:00:00.500000Z"
    assert lease["metadata"]["ownerReferences"][0] == {"apiVersion": "v1", "kind": "Node", "name": "n1",
                                                       "uid": "uid-1"}
    renewed = build_lease("n1", 40, 10.0, "uid-1", lease)
    assert renewed["spec"]["renewTime"] == "1970-01-01T00:00:10.000000Z"
    assert build_lease("n1", 40, 0, None)["metadata"].get("ownerReferences") is None
