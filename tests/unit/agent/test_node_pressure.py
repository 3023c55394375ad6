"""Node pressure conditions from eviction signals: the pure decision, the host reader, composition."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.nodestatus import setters
from pykubelet.agent.nodestatus.machine import HostPaths, MachineInfo
from pykubelet.agent.nodestatus.manager import StatusInputs, build_status
from pykubelet.agent.nodestatus.pressure import (
    pressure_conditions,
    read_signals,
    threshold_value,
    working_set_bytes,
)

GI = 1 << 30
MI = 1 << 20
DEFAULTS = KubeletConfiguration().eviction_hard
MEM, DISK, PID = setters.MEMORY_PRESSURE, setters.DISK_PRESSURE, setters.PID_PRESSURE

CAP = {
    "memory.available": 4 * GI,
    "nodefs.available": 100 * GI,
    "nodefs.inodesFree": 1_000_000,
    "imagefs.available": 100 * GI,
    "imagefs.inodesFree": 1_000_000,
    "pid.available": 32768,
}
HEALTHY = {
    "memory.available": 2 * GI,
    "nodefs.available": 50 * GI,
    "nodefs.inodesFree": 500_000,
    "imagefs.available": 50 * GI,
    "imagefs.inodesFree": 500_000,
    "pid.available": 30000,
}


def test_threshold_values() -> None:
    assert threshold_value("100Mi", None) == 100 * MI
    assert threshold_value("10%", 200) == 20
    assert threshold_value("10%", None) is None
    assert threshold_value("10%", 0) is None
    assert threshold_value("bogus", 10) is None


def test_no_pressure_when_healthy() -> None:
    assert pressure_conditions(HEALTHY, DEFAULTS, CAP) == {MEM: False, DISK: False, PID: False}
    assert pressure_conditions({}, DEFAULTS, {}) == {MEM: False, DISK: False, PID: False}


def test_memory_quantity_threshold() -> None:
    assert pressure_conditions({**HEALTHY, "memory.available": 99 * MI}, DEFAULTS, CAP)[MEM]
    assert not pressure_conditions({**HEALTHY, "memory.available": 100 * MI}, DEFAULTS, CAP)[MEM]  # strict <


def test_memory_percentage_threshold() -> None:
    th = {"memory.available": "25%"}
    assert pressure_conditions({"memory.available": GI - 1}, th, CAP)[MEM]
    assert not pressure_conditions({"memory.available": GI}, th, CAP)[MEM]


def test_each_disk_signal_crosses() -> None:
    for signal, value in (
        ("nodefs.available", 9 * GI),  # < 10%
        ("nodefs.inodesFree", 49_999),  # < 5%
        ("imagefs.available", 14 * GI),  # < 15%
        ("imagefs.inodesFree", 49_999),  # < 5%
    ):
        got = pressure_conditions({**HEALTHY, signal: value}, DEFAULTS, CAP)
        assert got == {MEM: False, DISK: True, PID: False}, signal
    assert not pressure_conditions({**HEALTHY, "nodefs.available": 11 * GI}, DEFAULTS, CAP)[DISK]
    assert pressure_conditions({"nodefs.available": GI}, {"nodefs.available": "2Gi"}, {})[DISK]


def test_pid_only_when_configured() -> None:
    low = {**HEALTHY, "pid.available": 10}
    assert not pressure_conditions(low, DEFAULTS, CAP)[PID]
    assert pressure_conditions(low, {"pid.available": "100"}, CAP) == {MEM: False, DISK: False, PID: True}
    assert pressure_conditions(low, {"pid.available": "10%"}, CAP)[PID]
    assert not pressure_conditions(HEALTHY, {"pid.available": "10%"}, CAP)[PID]


def test_unknown_capacity_never_pressure() -> None:
    assert not pressure_conditions({"nodefs.available": 0}, {"nodefs.available": "10%"}, {})[DISK]


def test_working_set_cgroup_v1_and_meminfo(tmp_path: Path) -> None:
    paths = HostPaths(proc=tmp_path / "proc", sys=tmp_path / "sys", etc=tmp_path / "etc",
                      cgroup_root=tmp_path / "cg")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:  1000 kB\nMemFree: 1 kB\nMemAvailable:  400 kB\n")
    assert working_set_bytes(paths) == 600 * 1024
    mem = tmp_path / "cg" / "memory"
    mem.mkdir(parents=True)
    (mem / "memory.usage_in_bytes").write_text("5000\n")
    (mem / "memory.stat").write_text("cache 10\ntotal_inactive_file 1200\ninactive_file 7\n")
    assert working_set_bytes(paths) == 3800


def test_read_signals_on_this_machine(tmp_path: Path) -> None:
    signals, cap = read_signals(64 * GI, tmp_path)
    for name in ("memory.available", "nodefs.available", "imagefs.available", "pid.available"):
        assert signals[name] > 0, name
        assert cap[name] >= signals[name], name
    if "nodefs.inodesFree" in signals:
        assert 0 < signals["nodefs.inodesFree"] <= cap["nodefs.inodesFree"]


def _inputs(signals: dict[str, int]) -> StatusInputs:
    return StatusInputs(
        machine=MachineInfo(num_cores=2, cpu_millis=2000, memory_bytes=4 * GI, operating_system="linux"),
        node_ip="198.18.0.2", hostname="n1", ephemeral_storage_bytes=100 * GI,
        runtime_conditions={"RuntimeReady": (True, "", ""), "NetworkReady": (True, "", "")},
        runtime_error=None, runtime_version="containerd://1.6.20",
        pressure_signals=signals, pressure_capacity=CAP,
    )


def test_build_status_reports_pressure_and_transitions() -> None:
    options = AgentOptions(config=KubeletConfiguration(), node_name="n1")
    status, _ = build_status(options, _inputs(HEALTHY), [], 100.0)
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds[MEM]["status"] == "False" and conds[MEM]["reason"] == "KubeletHasSufficientMemory"

    low = {**HEALTHY, "memory.available": 50 * MI}
    status2, changed = build_status(options, _inputs(low), status["conditions"], 200.0)
    conds2 = {c["type"]: c for c in status2["conditions"]}
    assert conds2[MEM]["status"] == "True"
    assert conds2[MEM]["reason"] == "KubeletHasInsufficientMemory"
    assert conds2[MEM]["message"] == "kubelet has insufficient memory available"
    assert conds2[MEM]["lastTransitionTime"] != conds[MEM]["lastTransitionTime"]
    assert conds2[DISK]["lastTransitionTime"] == conds[DISK]["lastTransitionTime"]
    assert [c["type"] for c in changed] == [MEM]
    assert setters.condition_event(changed[0]) == (
        "NodeHasInsufficientMemory", "Node {node} status is now: NodeHasInsufficientMemory")
