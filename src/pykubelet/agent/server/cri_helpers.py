"""Finding a pod's containers in the runtime, the way upstream's kubelet server does.

The HTTP API never trusts in-memory state for container ids: like ``kuberuntime`` it lists CRI
containers filtered by the labels the agent put on them (``io.kubernetes.pod.namespace``,
``io.kubernetes.pod.name``, ``io.kubernetes.container.name``) and orders instances by the
``io.kubernetes.container.restartCount`` annotation (creation time breaks ties). The newest instance
serves logs/exec/attach; ``previous=true`` logs use the newest *exited* instance older than it.

The CRI client is used duck-typed (``list_containers(filter)``, ``container_status(id)``) so both the
real ``pykubelet.cri.CRIClient`` and test doubles work; responses may be the CRI response message or an
already-unwrapped list/status.
"""

from __future__ import annotations

from typing import Any

from cri_api.v1 import api_pb2 as pb

LABEL_NS = "io.kubernetes.pod.namespace"
LABEL_POD = "io.kubernetes.pod.name"
LABEL_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER = "io.kubernetes.container.name"
ANN_RESTART = "io.kubernetes.container.restartCount"


class NotFound(Exception):
    pass


def restart_count(c: Any) -> int:
    try:
        return int(dict(c.annotations).get(ANN_RESTART, "0"))
    except (TypeError, ValueError):
        return 0


def _order_key(c: Any) -> tuple[int, int]:
    return restart_count(c), int(getattr(c, "created_at", 0) or 0)


async def list_containers(runtime: Any, labels: dict[str, str]) -> list[Any]:
    flt = pb.ContainerFilter(label_selector=labels)
    resp = await runtime.list_containers(flt)
    items = getattr(resp, "containers", resp)
    out = [c for c in (items or []) if all(dict(c.labels).get(k) == v for k, v in labels.items())]
    return out


async def pod_containers(runtime: Any, namespace: str, pod: str, container: str,
                         uid: str | None = None) -> list[Any]:
    """Instances of one container of a pod, newest first."""
    labels = {LABEL_NS: namespace, LABEL_POD: pod, LABEL_CONTAINER: container}
    if uid:
        labels[LABEL_UID] = uid
    items = await list_containers(runtime, labels)
    return sorted(items, key=_order_key, reverse=True)


async def container_status(runtime: Any, container_id: str) -> Any:
    resp = await runtime.container_status(container_id)
    return getattr(resp, "status", resp)


async def is_running(runtime: Any, container_id: str) -> bool:
    try:
        st = await container_status(runtime, container_id)
    except Exception:
        return False
    return int(getattr(st, "state", pb.CONTAINER_EXITED)) == pb.CONTAINER_RUNNING


async def pick_container(runtime: Any, namespace: str, pod: str, container: str, *,
                         uid: str | None = None, previous: bool = False) -> Any:
    items = await pod_containers(runtime, namespace, pod, container, uid)
    if not items:
        raise NotFound(f'container "{container}" in pod "{pod}" is waiting to start: ContainerCreating'
                       if not previous else
                       f'previous terminated container "{container}" in pod "{pod}" not found')
    if not previous:
        return items[0]
    for c in items[1:]:
        if int(getattr(c, "state", 0)) != pb.CONTAINER_RUNNING:
            return c
    raise NotFound(f'previous terminated container "{container}" in pod "{pod}" not found')


async def running_container(runtime: Any, namespace: str, pod: str, container: str,
                            uid: str | None = None) -> Any:
    items = await pod_containers(runtime, namespace, pod, container, uid)
    for c in items:
        if int(getattr(c, "state", 0)) == pb.CONTAINER_RUNNING:
            return c
    raise NotFound(f'container "{container}" in pod "{pod}" is not running')
