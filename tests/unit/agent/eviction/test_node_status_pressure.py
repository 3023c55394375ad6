"""The node status reports the eviction manager's conditions (transition period included), not its
own comparison of the signals with evictionHard."""

from __future__ import annotations

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.nodestatus import MachineInfo, StatusInputs, build_status

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
