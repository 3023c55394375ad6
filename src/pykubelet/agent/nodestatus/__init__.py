"""The node side of the agent: registration, NodeStatus, the heartbeat Lease, machine capacity.

Split like upstream: ``machine`` reads the host (cAdvisor's role), ``setters`` are the pure
``nodestatus/setters.go`` equivalents, ``lease`` is ``pkg/kubelet/nodelease``, and ``manager`` is
``kubelet_node_status.go`` (register, then periodically compute and patch status).
"""

from .lease import LeaseController, build_lease
from .machine import HostPaths, MachineInfo, read_machine_info
from .manager import NodeStatusManager, StatusInputs, build_status

__all__ = [
    "HostPaths",
    "LeaseController",
    "MachineInfo",
    "NodeStatusManager",
    "StatusInputs",
    "build_lease",
    "build_status",
    "read_machine_info",
]
