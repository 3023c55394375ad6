"""The node status reports the eviction manager's conditions (transition period included), not its
own comparison of the signals with evictionHard."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pykubelet.agent.config import AgentOptions, KubeletConfiguration, load_options
from pykubelet.agent.nodestatus import MachineInfo, NodeStatusManager, StatusInputs, build_status
from pykubelet.agent.nodestatus.machine import HostPaths

GI = 1024**3


def inputs(decided: dict[str, bool] | None, memory_available: int) -> StatusInputs:
    return StatusInputs(
        machine=MachineInfo(num_cores=2, cpu_millis=2000, memory_bytes=4 * GI, operating_system="linux"),
        node_ip="198.18.0.2", hostname="n1", ephemeral_storage_bytes=100 * GI,
        runtime_conditions={"RuntimeReady": (True, "", ""), "NetworkReady": (True, "", "")},
        runtime_error=None, runtime_version="containerd://1.7",
        pressure_signals={"memory.available": memory_available}, pressure_capacity={"memory.available": 4 * GI},
        decided_pressure=decided,
    )


def memory_pressure(decided: dict[str, bool] | None, memory_available: int) -> str:
    status, _ = build_status(AgentOptions(config=KubeletConfiguration(), node_name="n1"),
                             inputs(decided, memory_available), [], 100.0)
    return next(c["status"] for c in status["conditions"] if c["type"] == "MemoryPressure")


def test_the_eviction_managers_conditions_win_over_the_raw_signal() -> None:
    # memory recovered, but the transition period has not passed: still MemoryPressure
    assert memory_pressure({"MemoryPressure": True, "DiskPressure": False, "PIDPressure": False}, 2 * GI) == "True"
    assert memory_pressure({"MemoryPressure": False, "DiskPressure": False, "PIDPressure": False}, 1024) == "False"


def test_before_the_first_eviction_pass_the_hard_thresholds_decide() -> None:
    assert memory_pressure(None, 1024) == "True"
    assert memory_pressure(None, 2 * GI) == "False"


class FakeRuntime:
    async def status(self) -> SimpleNamespace:
        conds = [SimpleNamespace(type=t, status=True, reason="", message="") for t in ("RuntimeReady", "NetworkReady")]
        return SimpleNamespace(status=SimpleNamespace(conditions=conds))

    async def version(self) -> SimpleNamespace:
        return SimpleNamespace(runtime_name="containerd", runtime_version="1.7")

    async def list_images(self) -> list[SimpleNamespace]:
        return []


class Engine:
    def __init__(self, decided: dict[str, bool] | None) -> None:
        self.decided = decided

    def pleg_healthy(self) -> bool:
        return True

    def sync_loop_healthy(self) -> bool:
        return True

    def pressure_conditions(self) -> dict[str, bool] | None:
        return self.decided


def host(tmp_path: Path) -> HostPaths:
    proc = tmp_path / "proc"
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: {4 * GI // 1024} kB\nMemAvailable: 1 kB\n")
    for name in ("pid_max", "threads-max"):
        (proc / "sys/kernel" / name).write_text("4096\n")
    return HostPaths(proc=proc, sys=tmp_path / "sys", etc=tmp_path / "etc", cgroup_root=tmp_path / "cgroup")


async def test_a_status_update_reads_the_signals_only_while_the_eviction_manager_has_no_decision(
        tmp_path: Path) -> None:
    engine = Engine(None)
    mgr = NodeStatusManager(options=load_options(["--node-ip", "198.18.0.2", "--root-dir", str(tmp_path)]),
                            api=None, runtime=FakeRuntime(), kubelet=engine,  # type: ignore[arg-type]
                            host_paths=host(tmp_path))
    before = await mgr.collect()
    assert before.decided_pressure is None and "memory.available" in before.pressure_signals
    engine.decided = {"MemoryPressure": True, "DiskPressure": False, "PIDPressure": False}
    after = await mgr.collect()
    assert after.decided_pressure == engine.decided and after.pressure_signals == {}
