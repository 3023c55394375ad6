"""Runtime-side view of a pod, rebuilt from CRI objects.

Upstream ``kubecontainer.PodStatus`` is what the kubelet knows about a pod *from the runtime*: its
sandboxes and containers (running and dead), keyed by the labels the kubelet put on them at creation.
Every decision (``compute_pod_actions``) and the API status (``status.generate_api_status``) is a pure
function of this value plus the desired pod spec, so restarting the agent loses nothing: the same
value is rebuilt from CRI labels/annotations (see architecture.md) by ``RuntimeManager.get_pod_status``.

These are plain dataclasses (no protobufs) so the decision logic and its tests need no runtime.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field

from pykubelet.agent.types import JSONObj

CONTAINER_TYPE_LABEL = "io.kubernetes.container.type"  # informational; not required by the contract


class ContainerState(enum.StrEnum):
    """Upstream ``kubecontainer.State``: what the runtime says of one container."""

    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass
class ContainerRuntimeStatus:
    """One runtime container (upstream kubecontainer.Status). Times are wall-clock seconds."""

    id: str
    name: str
    state: ContainerState = ContainerState.UNKNOWN
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    image: str = ""
    image_ref: str = ""
    image_id: str = ""
    hash: str = ""
    restart_count: int = 0
    reason: str = ""
    message: str = ""
    sandbox_id: str = ""
    log_path: str = ""
    runtime_type: str = ""  # the runtime's own name from CRI Version (containerd, cri-o, ...)

    @property
    def container_id(self) -> str:
        """``<runtime>://<id>`` as the API shows it (upstream ``ContainerID.String()``): the scheme is
        the name the runtime gives itself, so a CRI-O node shows ``cri-o://``, not ``containerd://``."""
        return f"{self.runtime_type}://{self.id}" if self.id else ""


@dataclass
class SandboxRuntimeStatus:
    id: str
    ready: bool = False
    attempt: int = 0
    created_at: float = 0.0
    ips: list[str] = field(default_factory=list)
    host_network: bool = False


@dataclass
class RuntimePodStatus:
    """All the runtime knows about one pod (upstream kubecontainer.PodStatus).

    ``sandboxes`` and ``containers`` are sorted newest first, like upstream.
    """

    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: list[SandboxRuntimeStatus] = field(default_factory=list)
    containers: list[ContainerRuntimeStatus] = field(default_factory=list)
    timestamp: float = 0.0

    @property
    def ips(self) -> list[str]:
        for sb in self.sandboxes:
            if sb.ready and sb.ips:
                return list(sb.ips)
        return []

    def find_container(self, name: str) -> ContainerRuntimeStatus | None:
        """Latest status of the container called ``name`` (FindContainerStatusByName)."""
        for c in self.containers:
            if c.name == name:
                return c
        return None

    def all_of(self, name: str) -> list[ContainerRuntimeStatus]:
        return [c for c in self.containers if c.name == name]

    def running(self) -> list[ContainerRuntimeStatus]:
        return [c for c in self.containers if c.state == ContainerState.RUNNING]

    def sort(self) -> None:
        self.sandboxes.sort(key=lambda s: (s.created_at, s.attempt), reverse=True)
        self.containers.sort(key=lambda c: (c.created_at, c.restart_count), reverse=True)


# what ``json.dumps(spec, sort_keys=True, separators=(",", ":"))`` builds on every call, made once
_HASH_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def hash_container(container: JSONObj) -> str:
    """Stable hash of a container spec (upstream HashContainer); resources excluded like upstream's
    in-place-resize aware hash, so a resize does not restart the container."""
    spec = {k: v for k, v in container.items() if k != "resources"} if "resources" in container else container
    raw = _HASH_ENCODER.encode(spec).encode()
    return hashlib.sha256(raw).hexdigest()[:8]
