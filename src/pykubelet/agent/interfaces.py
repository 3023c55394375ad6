"""The seams of the agent: every Protocol one subsystem needs from another, in one place.

Upstream's kubelet is held together by small Go interfaces (``kubecontainer.Runtime``,
``record.EventRecorder``, ``lifecycle.PodAdmitHandler``, ``status.PodStatusProvider``, the pod
manager's getters); virtual-kubelet's six-method ``PodLifecycleHandler`` shows how little a seam
needs. This module is the pykubelet equivalent: a subsystem depends on these Protocols, never on
another subsystem's class, so each can be tested with a small fake and replaced on its own.

Where a new subsystem plugs in (``agent/main.py`` and ``Kubelet.__init__`` do the wiring):

- **admission** — a ``PodAdmitHandler`` appended to ``Kubelet.admission``: called for every new pod
  before it gets a worker; a refusal makes the pod ``Failed`` with the handler's reason (upstream
  ``canAdmitPod``). Max pods is the first handler; resources, eviction and security checks follow.
- **before containers start** — a ``PodLifecycleHook``: ``prepare_pod`` runs in every sync of a
  pod that should run, before any container is created (upstream's ``WaitForAttachAndMount`` spot;
  the volume manager goes here); raising ``PodNotReadyError`` keeps the pod waiting with an event and
  a retry. ``release_pod`` runs once the pod's containers are all stopped.
- **housekeeping** — a ``HousekeepingStep`` added to ``Kubelet.housekeeping``: runs every
  housekeeping period once all pod sources are ready, with the sets of pods the node knows.
- **periodic task** — ``pykubelet.common.ticks.run_on_ticks(fn, period, name=...)`` in the
  subsystem's own ``start()`` (runs start on multiples of the period on the loop clock, so an idle
  node's loops share one wake-up a second); its ``stop()`` cancels the task.

Pods are JSON objects (``Pod``) as the API serves them: typed accessors live in
``pykubelet.common.podutil``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from pykubelet.agent.types import JSONObj, Pod
from pykubelet.cri import pb


class RuntimeService(Protocol):
    """The CRI ``RuntimeService`` calls the agent makes (``pykubelet.cri.CRIClient`` implements it)."""

    endpoint: str

    async def version(self) -> pb.VersionResponse: ...
    async def status(self, verbose: bool = False) -> pb.StatusResponse: ...
    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, runtime_handler: str = "") -> str: ...
    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None: ...
    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None: ...
    async def pod_sandbox_status(self, pod_sandbox_id: str, verbose: bool = False) -> pb.PodSandboxStatusResponse: ...
    async def list_pod_sandbox(self, filter: pb.PodSandboxFilter | None = None) -> list[pb.PodSandbox]: ...
    async def create_container(
        self, pod_sandbox_id: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig
    ) -> str: ...
    async def start_container(self, container_id: str) -> None: ...
    async def stop_container(self, container_id: str, timeout: int = 0) -> None: ...  # noqa: ASYNC109
    async def remove_container(self, container_id: str) -> None: ...
    async def list_containers(self, filter: pb.ContainerFilter | None = None) -> list[pb.Container]: ...
    async def container_status(self, container_id: str, verbose: bool = False) -> pb.ContainerStatusResponse: ...
    async def reopen_container_log(self, container_id: str) -> None: ...
    async def exec_sync(self, container_id: str, cmd: Iterable[str], timeout: int = 0) -> pb.ExecSyncResponse: ...  # noqa: ASYNC109
    async def exec(self, request: pb.ExecRequest) -> pb.ExecResponse: ...
    async def attach(self, request: pb.AttachRequest) -> pb.AttachResponse: ...
    async def port_forward(self, request: pb.PortForwardRequest) -> pb.PortForwardResponse: ...
    async def list_container_stats(self, filter: pb.ContainerStatsFilter | None = None) -> list[pb.ContainerStats]: ...
    async def list_pod_sandbox_stats(
        self, filter: pb.PodSandboxStatsFilter | None = None
    ) -> list[pb.PodSandboxStats]: ...


class ImageService(Protocol):
    """The CRI ``ImageService`` calls the agent makes."""

    async def pull_image(
        self,
        image: pb.ImageSpec | str,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str: ...
    async def image_status(self, image: pb.ImageSpec | str, verbose: bool = False) -> pb.ImageStatusResponse: ...
    async def list_images(self, filter: pb.ImageFilter | None = None) -> list[pb.Image]: ...
    async def remove_image(self, image: pb.ImageSpec | str) -> None: ...
    async def image_fs_info(self) -> pb.ImageFsInfoResponse: ...


class ContainerRuntime(RuntimeService, ImageService, Protocol):
    """Both CRI services, as one endpoint serves them (containerd, CRI-O, the fake runtime)."""


class EventRecorder(Protocol):
    """Upstream ``record.EventRecorder``: non-blocking, the write happens in the background."""

    def event(self, obj: Pod, type_: str, reason: str, message: str) -> None: ...


class LifecycleHookRunner(Protocol):
    """Runs a container's postStart and preStop handlers (upstream ``lifecycle.HandlerRunner``)."""

    async def run_post_start(self, pod: Pod, container: JSONObj, container_id: str, *, pod_ip: str) -> str | None:
        """A message means the hook failed: the container is killed (FailedPostStartHook)."""
        ...

    async def run_pre_stop(self, pod: Pod, container: JSONObj, container_id: str, *,
                           pod_ip: str, grace_seconds: float) -> float:
        """Returns the grace period left for StopContainer."""
        ...

    async def close(self) -> None: ...


class PodStatusProvider(Protocol):
    """The newest API status the agent computed for a pod (upstream ``status.PodStatusProvider``)."""

    def get_pod_status(self, uid: str) -> Pod | None: ...


class PodProvider(Protocol):
    """What the kubelet HTTP API and the node status read about the pods of this node."""

    def pods(self) -> list[Pod]: ...
    def get_pod_by_name(self, namespace: str, name: str) -> Pod | None: ...
    def running_pod_count(self) -> int: ...
    def sync_loop_healthy(self) -> bool: ...
    def pleg_healthy(self) -> bool: ...


class MirrorClient(Protocol):
    """Creates and deletes the API's mirror pods of static pods (upstream ``pod.MirrorClient``)."""

    async def ensure_mirror(self, static_pod: Pod) -> Pod | None: ...
    async def delete_mirror(self, namespace: str, name: str, uid: str | None = None) -> bool: ...


@dataclass(frozen=True)
class PodAdmitAttributes:
    """Upstream ``lifecycle.PodAdmitAttributes``: the new pod and the pods already admitted."""

    pod: Pod
    other_pods: list[Pod]


@dataclass(frozen=True)
class PodAdmitResult:
    """``admit`` False refuses the pod: it becomes ``Failed`` with ``reason`` and ``message``."""

    admit: bool
    reason: str = ""
    message: str = ""


class PodAdmitHandler(Protocol):
    """One node-side admission check (upstream ``lifecycle.PodAdmitHandler``)."""

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult: ...


class PodNotReadyError(Exception):
    """Raised by ``PodLifecycleHook.prepare_pod``: the pod must wait (e.g. a volume is not mounted).

    The sync records a Warning event with ``reason`` and retries later; containers are not started.
    """

    def __init__(self, reason: str, message: str, *, retry_after: float = 5.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class PodLifecycleHook(Protocol):
    """Work around a pod's containers: before any is created, and after all have stopped."""

    async def prepare_pod(self, pod: Pod) -> None: ...
    async def release_pod(self, uid: str) -> None: ...


@dataclass(frozen=True)
class HousekeepingContext:
    """What one housekeeping pass knows, computed once for all steps.

    ``desired``: uids the pod sources want; ``known``: those plus the uids that still have a pod worker
    or runtime objects — anything outside ``known`` is debris a step may remove.
    """

    desired: frozenset[str]
    known: frozenset[str]
    runtime_container_ids: frozenset[str] = field(default_factory=frozenset)
    listed_at: float = 0.0


HousekeepingStep = Callable[[HousekeepingContext], Awaitable[None]]


class NodeResourceReclaimer(Protocol):
    """Frees node-level resources before the eviction manager evicts pods (upstream
    ``nodeReclaimFunc``: image GC and dead-container GC).

    ``resource`` is the eviction signal under pressure (``nodefs.available``, ``imagefs.inodesFree``,
    ...); a reclaimer that cannot help with it returns 0. Returns the bytes freed.
    """

    async def reclaim(self, resource: str) -> int: ...


class NodePressureProvider(Protocol):
    """The node conditions the eviction manager decided (MemoryPressure, DiskPressure, PIDPressure →
    under pressure), the transition period applied; the node status reports them as they are."""

    def pressure_conditions(self) -> dict[str, bool] | None: ...
