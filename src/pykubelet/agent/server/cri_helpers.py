"""Finding a pod's containers in the runtime, the way upstream's kubelet server does.

The HTTP API never trusts in-memory state for container ids: like ``kuberuntime`` it lists CRI
containers filtered by the labels the agent put on them (``io.kubernetes.pod.namespace``,
``io.kubernetes.pod.name``, ``io.kubernetes.container.name``) and orders instances by the
``io.kubernetes.container.restartCount`` annotation (creation time breaks ties). The newest instance
serves logs/exec/attach; ``previous=true`` logs use the newest *exited* instance older than it.
For logs, the pod's status names the instance first when it can (upstream
``validateContainerLogStatus``): ``previous`` is ``lastState.terminated``, so during CrashLoopBackOff
it is the instance that just crashed, not the one before it; a container that is waiting to restart
shows the logs of its last terminated instance.

The CRI client is used duck-typed (``list_containers(filter)``, ``container_status(id)``) so both the
real ``pykubelet.cri.CRIClient`` and test doubles work; responses may be the CRI response message or an
already-unwrapped list/status.
"""

from __future__ import annotations

from pykubelet.agent.interfaces import RuntimeService
from pykubelet.agent.types import JSONObj
from pykubelet.common import labels as names
from pykubelet.cri import CRIError, pb


class NotFound(Exception):
    pass


def restart_count(c: pb.Container) -> int:
    try:
        return int(c.annotations.get(names.CONTAINER_RESTART_COUNT_ANNOTATION, "0"))
    except ValueError:
        return 0


def _order_key(c: pb.Container) -> tuple[int, int]:
    return restart_count(c), c.created_at


async def pod_containers(runtime: RuntimeService, namespace: str, pod: str, container: str,
                         uid: str | None = None) -> list[pb.Container]:
    """Instances of one container of a pod, newest first."""
    selector = {names.POD_NAMESPACE_LABEL: namespace, names.POD_NAME_LABEL: pod,
                names.CONTAINER_NAME_LABEL: container}
    if uid:
        selector[names.POD_UID_LABEL] = uid
    items = await runtime.list_containers(pb.ContainerFilter(label_selector=selector))
    # a runtime that ignores the selector must not hand us other pods' containers
    mine = [c for c in items if all(c.labels.get(k) == v for k, v in selector.items())]
    return sorted(mine, key=_order_key, reverse=True)


async def container_status(runtime: RuntimeService, container_id: str) -> pb.ContainerStatus:
    return (await runtime.container_status(container_id)).status


async def is_running(runtime: RuntimeService, container_id: str) -> bool:
    try:
        st = await container_status(runtime, container_id)
    except CRIError:
        return False
    return st.state == pb.CONTAINER_RUNNING


def _status_of(pod_status: JSONObj, container: str) -> JSONObj | None:
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in pod_status.get(key) or []:
            if isinstance(cs, dict) and cs.get("name") == container:
                return cs
    return None


def logs_container_id(pod_status: JSONObj, container: str, previous: bool) -> str | None:
    """The runtime id of the instance whose logs upstream serves, from the pod status (None: unknown)."""
    cs = _status_of(pod_status, container)
    if cs is None:
        return None
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    if previous:
        cid = last.get("containerID")
    elif "running" in state:
        cid = cs.get("containerID")
    elif "terminated" in state:
        cid = (state.get("terminated") or {}).get("containerID") or last.get("containerID")
    else:
        cid = last.get("containerID")
    return str(cid).split("://", 1)[-1] if cid else None


async def pick_container(runtime: RuntimeService, namespace: str, pod: str, container: str, *,
                         uid: str | None = None, previous: bool = False,
                         status_id: str | None = None) -> pb.Container:
    """The instance to serve; ``status_id`` (from :func:`logs_container_id`) wins when it exists."""
    items = await pod_containers(runtime, namespace, pod, container, uid)
    if status_id:
        for c in items:
            if c.id == status_id:
                return c
    if not items:
        raise NotFound(f'container "{container}" in pod "{pod}" is waiting to start: ContainerCreating'
                       if not previous else
                       f'previous terminated container "{container}" in pod "{pod}" not found')
    if not previous:
        return items[0]
    for c in items[1:]:
        if c.state != pb.CONTAINER_RUNNING:
            return c
    raise NotFound(f'previous terminated container "{container}" in pod "{pod}" not found')


async def running_container(runtime: RuntimeService, namespace: str, pod: str, container: str,
                            uid: str | None = None) -> pb.Container:
    items = await pod_containers(runtime, namespace, pod, container, uid)
    for c in items:
        if c.state == pb.CONTAINER_RUNNING:
            return c
    raise NotFound(f'container "{container}" in pod "{pod}" is not running')
