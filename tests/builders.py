"""Builders for the objects tests need: API objects (containers, pods, nodes) and the agent's runtime view.

Each builder returns the smallest valid object with fixed, readable defaults (pod "p" in namespace
"default" with uid "uid-p" and one busybox container "c"; node "n1", Ready). A test passes the
fields its assertions depend on, so the data that matters is visible in the test itself; anything
else is an ordinary keyword (``pod(hostNetwork=True)`` puts ``hostNetwork`` in the spec).

Runtime-view builders (``running``, ``exited``, ``runtime_status``) produce what the agent's runtime
manager reports for a pod (``pykubelet.agent.container.runtime``), hashed like the spec they are
given, so ``compute_pod_actions`` sees an unchanged container unless the test changes the spec.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from typing import Any

from pykubelet.agent.container.runtime import (
    ContainerRuntimeStatus,
    ContainerState,
    RuntimePodStatus,
    SandboxRuntimeStatus,
    hash_container,
)

JSON = dict[str, Any]

# The runtime view's clock: containers were created 100 s before NOW unless a test says otherwise.
NOW = 1_000_000.0
POD_IP = "198.18.0.2"

# ---------------------------------------------------------------------------------- API objects


def container(name: str = "c", image: str = "busybox", *, requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None, **fields: Any) -> JSON:
    """A container spec; ``requests``/``limits`` fill ``resources``; ``fields`` are further container
    fields (command, ports, restartPolicy...)."""
    c: JSON = {"name": name, "image": image, **fields}
    if requests is not None or limits is not None:
        c["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return c


def _containers(items: Sequence[JSON | str]) -> list[JSON]:
    return [container(c) if isinstance(c, str) else c for c in items]


def pod(
    name: str = "p",
    *,
    containers: Sequence[JSON | str] = ("c",),
    init_containers: Sequence[JSON | str] = (),
    namespace: str = "default",
    uid: str | None = None,
    node_name: str | None = None,
    restart_policy: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    metadata: JSON | None = None,
    status: JSON | None = None,
    **spec: Any,
) -> JSON:
    """A Pod. Containers may be given by name (busybox). ``uid`` defaults to ``uid-<name>``; pass
    ``uid=""`` for a manifest without one. ``metadata`` adds metadata fields (creationTimestamp,
    deletionTimestamp, resourceVersion...); ``spec`` adds spec fields. No status unless given."""
    meta: JSON = {"name": name, "namespace": namespace}
    if uid != "":
        meta["uid"] = uid or f"uid-{name}"
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    meta.update(metadata or {})
    s: JSON = {"containers": _containers(containers)}
    if init_containers:
        s["initContainers"] = _containers(init_containers)
    if restart_policy is not None:
        s["restartPolicy"] = restart_policy
    if node_name is not None:
        s["nodeName"] = node_name
    s.update(spec)
    p: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": s}
    if status is not None:
        p["status"] = status
    return copy.deepcopy(p)  # nothing shared with the arguments or with other pods


def fresh_uid() -> str:
    """A new random uid, for pods on a real runtime that outlives one test (containerd in e2e)."""
    return str(uuid.uuid4())


def pod_path(p: JSON) -> str:
    """The pod's API path: /api/v1/namespaces/<ns>/pods/<name>."""
    md = p["metadata"]
    return f"/api/v1/namespaces/{md.get('namespace', 'default')}/pods/{md['name']}"


def node(
    name: str = "n1",
    *,
    ready: str | None = "True",
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    conditions: Sequence[JSON] = (),
    addresses: Sequence[JSON] | None = None,
    node_info: dict[str, str] | None = None,
    metadata: JSON | None = None,
    **spec: Any,
) -> JSON:
    """A Node. ``ready`` is the Ready condition's status (None: no Ready condition, as before the
    kubelet first reports); ``conditions`` come first. Labels default to the hostname label the
    kubelet sets; addresses to 127.0.0.1 and the hostname. ``spec`` adds spec fields
    (unschedulable, taints, podCIDR...)."""
    conds = list(conditions)
    if ready is not None:
        conds.append({"type": "Ready", "status": ready})
    status: JSON = {
        "conditions": conds,
        "addresses": list(addresses) if addresses is not None else [
            {"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
    }
    if allocatable is not None:
        status["allocatable"] = allocatable
    if capacity is not None:
        status["capacity"] = capacity
    if node_info is not None:
        status["nodeInfo"] = node_info
    meta: JSON = {"name": name, "labels": {"kubernetes.io/hostname": name} if labels is None else labels}
    meta.update(metadata or {})
    return copy.deepcopy({"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status})


# --------------------------------------------------------------------- the agent's runtime view


def sandbox(sid: str = "sb1", *, ready: bool = True, attempt: int = 0, ips: Sequence[str] = (POD_IP,),
            host_network: bool = False) -> SandboxRuntimeStatus:
    """A pod sandbox as the runtime reports it (ready, with the pod IP, unless told otherwise)."""
    return SandboxRuntimeStatus(id=sid, ready=ready, attempt=attempt, ips=list(ips), host_network=host_network)


def container_status(spec: JSON | str, state: str, *, exit_code: int = 0, restarts: int = 0, cid: str | None = None,
                     created_at: float | None = None, **fields: Any) -> ContainerRuntimeStatus:
    """A container of the runtime view for ``spec`` (or a busybox container of that name).

    The id is ``id-<name>`` (``id-<name>-<restarts>`` for a restart); created ``NOW - 100 + restarts``,
    started then, and (exited) finished a second later; image ``sha256:abc`` on containerd."""
    spec = container(spec) if isinstance(spec, str) else spec
    name = spec["name"]
    created = NOW - 100 + restarts if created_at is None else created_at
    values: JSON = {
        "id": cid or (f"id-{name}-{restarts}" if restarts else f"id-{name}"),
        "name": name,
        "state": ContainerState(state),
        "exit_code": exit_code,
        "restart_count": restarts,
        "created_at": created,
        "started_at": created if state in ("running", "exited") else 0.0,
        "finished_at": created + 1 if state == "exited" else 0.0,
        "hash": hash_container(spec),
        "image_ref": "sha256:abc",
        "runtime_type": "containerd",
    }
    values.update(fields)
    return ContainerRuntimeStatus(**values)


def running(spec: JSON | str, **kw: Any) -> ContainerRuntimeStatus:
    """A running container (see ``container_status``)."""
    return container_status(spec, "running", **kw)


def exited(spec: JSON | str, code: int, **kw: Any) -> ContainerRuntimeStatus:
    """An exited container with exit code ``code`` (see ``container_status``)."""
    return container_status(spec, "exited", exit_code=code, **kw)


def runtime_status(*containers: ContainerRuntimeStatus, sandboxes: Sequence[SandboxRuntimeStatus] | None = None,
                   uid: str = "uid-p") -> RuntimePodStatus:
    """The runtime view of one pod: one ready sandbox (unless given) and these containers, sorted."""
    st = RuntimePodStatus(uid=uid, sandboxes=[sandbox()] if sandboxes is None else list(sandboxes),
                          containers=list(containers))
    st.sort()
    return st
