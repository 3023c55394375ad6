"""Ephemeral containers (``kubectl debug``): what differs from a regular container, pure.

Upstream (``kuberuntime_container.go`` / ``computePodActions``): ephemeral containers are added to a
running pod through the ``ephemeralcontainers`` subresource, started once after the app containers
and never restarted; with ``targetContainerName`` the container joins the PID namespace of that
(running) container (CRI ``NamespaceMode.TARGET`` + ``target_id``), which is what lets
``kubectl debug --target=main`` see and signal the target's processes.  Their statuses are reported
in ``status.ephemeralContainerStatuses`` (never ready).
"""

from __future__ import annotations

from pykubelet.agent.container import runtime as t
from pykubelet.cri import pb


def share_target_pid(config: pb.ContainerConfig, target: str, status: t.RuntimePodStatus) -> None:
    """Put the container in the PID namespace of the running container ``target`` (if running)."""
    cs = status.find_container(target)
    if cs is None or cs.state != t.ContainerState.RUNNING:
        return  # upstream starts it anyway, in its own namespace
    ns = config.linux.security_context.namespace_options
    ns.pid = pb.TARGET
    ns.target_id = cs.id
