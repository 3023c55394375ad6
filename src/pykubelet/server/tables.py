"""Server-side Table rendering (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``).

Design: kubectl has no built-in columns for core types; it prints whatever ``Table`` the server
returns (see docs in /work/shared/notes/kubectl-wire.md).  ``to_table`` is a pure function from
a resource name and objects to the Table dict; one printer per resource returns the column
definitions and a row builder.  Like the upstream API server, rows are always built in "wide"
form (priority-1 columns included) and kubectl hides priority-1 columns unless ``-o wide``.
Each row carries a PartialObjectMetadata with the full metadata so that ``-A`` (NAMESPACE) and
``--show-labels`` work.  A printer that trips over one stored object (a shape it does not expect)
costs only that row its cells, which print ``<unknown>`` (NAME and AGE still shown), never the
Table: kubectl would otherwise fall back to bare names for the whole namespace.

Upstream behaviour followed (pkg/printers/internalversion/printers.go and
k8s.io/apimachinery/pkg/util/duration): column names/types/priorities, the pod STATUS algorithm
(status.reason, SchedulingGated, Init:N/M, Init:<reason>, Init:ExitCode/Signal, sidecars,
container waiting/terminated reasons, Completed->Running/NotReady when a container still runs,
Terminating, Unknown for NodeLost pods being deleted), RESTARTS "N (age ago)", node STATUS
(Ready/NotReady/Unknown + SchedulingDisabled) and ROLES, event OBJECT "kind/name" and SOURCE, the
CSR CONDITION column, PV/PVC columns (access modes as RWO,ROX,RWX,RWOP, the beta class annotation
before storageClassName, Terminating while deleting, a claim's capacity only once bound) and the
StorageClass ``(default)`` suffix, and ``HumanDuration`` for ages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pykubelet.common.timestamps import parse_time
from pykubelet.server import rbac

Obj = dict[str, Any]
RowFn = Callable[[Obj, datetime], tuple[list[Any], list[dict[str, Any]] | None]]

_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. "
    "It is not guaranteed to be set in happens-before order across separate operations. Clients "
    "may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the "
    "system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def col(name: str, typ: str = "string", *, priority: int = 0, desc: str = "", fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


NAME_COL = col("Name", fmt="name", desc=_NAME_DESC)
AGE_COL = col("Age", desc=_AGE_DESC)


# --- time helpers ---------------------------------------------------------------------------


def human_duration(seconds_f: float) -> str:
    """Upstream duration.HumanDuration."""
    seconds = int(seconds_f)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60 * 2:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def since(value: Any, now: datetime) -> str:
    """Upstream translateTimestampSince: "<unknown>" for a missing timestamp."""
    t = parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration((now - t).total_seconds())


def _meta(o: Obj) -> Obj:
    m = o.get("metadata") or {}
    return m if isinstance(m, dict) else {}


def _name(o: Obj) -> str:
    return str(_meta(o).get("name", ""))


def _age(o: Obj, now: datetime) -> str:
    return since(_meta(o).get("creationTimestamp"), now)


# --- pods -----------------------------------------------------------------------------------

POD_COLUMNS = [
    NAME_COL,
    col("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
    col("Status", desc="The aggregate status of the containers in this pod."),
    col(
        "Restarts",
        desc="The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE_COL,
    col("IP", priority=1, desc="podIP is an IP address allocated to the pod. Routable at least within the cluster."),
    col("Node", priority=1, desc="NodeName indicates in which node this pod is scheduled."),
    col("Nominated Node", priority=1, desc="nominatedNodeName is set when this pod preempts other pods on the node."),
    col("Readiness Gates", priority=1, desc="If specified, all readiness gates will be evaluated for pod readiness."),
]

_POD_SUCCESS = [{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]
_POD_FAILED = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]


def _later(a: datetime | None, b: Any) -> datetime | None:
    t = parse_time(b)
    if t is None:
        return a
    return t if a is None or t > a else a


def pod_status_text(pod: Obj) -> tuple[int, int, str, int, datetime | None]:
    """(ready, total, STATUS, restarts, last restart time) exactly like upstream printPod."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    meta = _meta(pod)
    restarts = 0
    sidecar_restarts = 0
    total = len(spec.get("containers") or [])
    ready = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    conditions = status.get("conditions") or []
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    n_init = len(init_specs)
    for c in init_specs.values():
        if c.get("restartPolicy") == "Always":
            total += 1

    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(cs.get("restartCount") or 0)
        last_term = (cs.get("lastState") or {}).get("terminated")
        if last_term:
            last_restart = _later(last_restart, last_term.get("finishedAt"))
        is_sidecar = (init_specs.get(cs.get("name")) or {}).get("restartPolicy") == "Always"
        if is_sidecar:
            sidecar_restarts += int(cs.get("restartCount") or 0)
            if last_term:
                last_sidecar_restart = _later(last_sidecar_restart, last_term.get("finishedAt"))
        state = cs.get("state") or {}
        term = state.get("terminated")
        waiting = state.get("waiting")
        if term and int(term.get("exitCode") or 0) == 0:
            continue
        if is_sidecar and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if term:
            if not term.get("reason"):
                if term.get("signal"):
                    reason = f"Init:Signal:{term['signal']}"
                else:
                    reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
            else:
                reason = "Init:" + term["reason"]
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{n_init}"
        initializing = True
        break

    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions)
    if not initializing or initialized:
        restarts = sidecar_restarts
        last_restart = last_sidecar_restart
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            last_term = (cs.get("lastState") or {}).get("terminated")
            if last_term:
                last_restart = _later(last_restart, last_term.get("finishedAt"))
            state = cs.get("state") or {}
            waiting = state.get("waiting")
            term = state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif term and term.get("reason"):
                reason = term["reason"]
            elif term:
                if term.get("signal"):
                    reason = f"Signal:{term['signal']}"
                else:
                    reason = f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            has_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            reason = "Running" if has_ready else "NotReady"

    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return ready, total, reason, restarts, last_restart


def _pod_parts(pod: Obj) -> tuple[list[Any], int, datetime | None, list[dict[str, Any]] | None]:
    """A pod's row without the two cells that depend on the time of the request (RESTARTS when a
    container has restarted, AGE: ``None`` here), the restart count and time, and the conditions."""
    ready, total, reason, restarts, last_restart = pod_status_text(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ips = status.get("podIPs") or []
    ip = (ips[0] or {}).get("ip") if ips else ""
    gates = spec.get("readinessGates") or []
    gates_s = "<none>"
    if gates:
        true_n = 0
        for g in gates:
            for c in status.get("conditions") or []:
                if c.get("type") == g.get("conditionType"):
                    if c.get("status") == "True":
                        true_n += 1
                    break
        gates_s = f"{true_n}/{len(gates)}"
    cells = [
        _name(pod),
        f"{ready}/{total}",
        reason,
        None,
        None,
        ip or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_s,
    ]
    phase = status.get("phase")
    conds = _POD_SUCCESS if phase == "Succeeded" else _POD_FAILED if phase == "Failed" else None
    return cells, restarts, last_restart, conds


def _restarts_text(restarts: int, last_restart: datetime | None, now: datetime) -> str:
    if restarts and last_restart is not None:
        return f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    return str(restarts)


def _pod_row(pod: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    cells, restarts, last_restart, conds = _pod_parts(pod)
    cells[3] = _restarts_text(restarts, last_restart, now)
    cells[4] = _age(pod, now)
    return cells, conds


# --- nodes ----------------------------------------------------------------------------------

NODE_COLUMNS = [
    NAME_COL,
    col("Status", desc="The status of the node"),
    col("Roles", desc="The roles of the node"),
    AGE_COL,
    col("Version", desc="Kubelet Version reported by the node."),
    col("Internal-IP", priority=1, desc="List of addresses reachable to the node. Queried from cloud provider, if available."),
    col("External-IP", priority=1, desc="List of addresses reachable to the node. Queried from cloud provider, if available."),
    col("OS-Image", priority=1, desc="OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    col("Kernel-Version", priority=1, desc="Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    col("Container-Runtime", priority=1, desc="Container runtime version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
]


def node_status_text(node: Obj) -> str:
    parts: list[str] = []
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            parts.append("Ready" if c.get("status") == "True" else "NotReady")
            break
    if not parts:
        parts.append("Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def node_roles(node: Obj) -> list[str]:
    roles: set[str] = set()
    for k, v in (_meta(node).get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            role = k[len("node-role.kubernetes.io/"):]
            if role:
                roles.add(role)
        elif k == "kubernetes.io/role" and v:
            roles.add(str(v))
    return sorted(roles)


def _node_address(node: Obj, typ: str) -> str:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == typ:
            return str(a.get("address", ""))
    return "<none>"


def _node_row(node: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [
        _name(node),
        node_status_text(node),
        ",".join(node_roles(node)) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        _node_address(node, "InternalIP"),
        _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ], None


# --- events ---------------------------------------------------------------------------------

EVENT_COLUMNS = [
    col("Last Seen", desc="The last time this event was observed"),
    col("Type", desc="Type of this event (Normal, Warning), new types could be added in the future"),
    col("Reason", desc="This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
    col("Object", desc="The object that this event is about."),
    col("Subobject", priority=1, desc="The field path of the object this event is about (e.g. spec.containers{name})."),
    col("Source", priority=1, desc="The component reporting this event. Should be a short machine understandable string."),
    col("Message", desc="A human-readable description of the status of this operation."),
    col("First Seen", priority=1, desc="The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
    col("Count", "integer", priority=1, desc="The number of times this event has occurred."),
    col("Name", priority=1, fmt="name", desc=_NAME_DESC),
]


def _event_row(ev: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    first = since(ev.get("firstTimestamp"), now)
    if not ev.get("firstTimestamp"):
        first = since(ev.get("eventTime"), now)
    last = since(ev.get("lastTimestamp"), now) if ev.get("lastTimestamp") else first
    count = int(ev.get("count") or 0)
    series = ev.get("series")
    if series:
        last = since(series.get("lastObservedTime"), now)
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    io = ev.get("involvedObject") or {}
    kind = str(io.get("kind", "")).lower()
    target = f"{kind}/{io['name']}" if io.get("name") else kind
    src = ev.get("source") or {}
    component = src.get("component") or ev.get("reportingComponent") or ev.get("reportingController") or ""
    host = src.get("host") or ev.get("reportingInstance") or ""
    source = f"{component}, {host}" if host else component
    return [
        last,
        ev.get("type", ""),
        ev.get("reason", ""),
        target,
        io.get("fieldPath", ""),
        source,
        str(ev.get("message", "")).strip(),
        first,
        count,
        _name(ev),
    ], None


# --- simple kinds ---------------------------------------------------------------------------


def _more(items: list[str], shown: int = 3) -> str:
    """Upstream printers' "a,b,c + N more..." (``<none>`` when empty)."""
    if not items:
        return "<none>"
    out = ",".join(items[:shown])
    return out + (f" + {len(items) - shown} more..." if len(items) > shown else "")


def _endpoints_cell(ep: Obj) -> str:
    """formatEndpoints: ready ``ip:port`` pairs of all subsets."""
    pairs = [f"{a.get('ip')}:{p.get('port')}" if p else str(a.get("ip"))
             for s in ep.get("subsets") or [] for p in (s.get("ports") or [None]) for a in s.get("addresses") or []]
    return _more(pairs)


def _simple(cols: list[dict[str, Any]], fn: Callable[[Obj], list[Any]]) -> tuple[list[dict[str, Any]], RowFn]:
    """Columns NAME, <cols>, AGE, built from ``fn`` returning the middle cells."""
    def row(o: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
        return [_name(o), *fn(o), _age(o, now)], None

    return [NAME_COL, *cols, AGE_COL], row


def _lease_cells(o: Obj) -> list[Any]:
    return [(o.get("spec") or {}).get("holderIdentity") or ""]


def _service_row(svc: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    spec = svc.get("spec") or {}
    typ = spec.get("type") or "ClusterIP"
    cluster_ip = spec.get("clusterIP") or "<none>"
    ext = spec.get("externalIPs") or []
    if typ in ("ClusterIP", "NodePort"):
        external = ",".join(ext) if ext else "<none>"
    elif typ == "LoadBalancer":
        ing = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        ips = [i.get("ip") or i.get("hostname") for i in ing if i.get("ip") or i.get("hostname")] + list(ext)
        external = ",".join(ips) if ips else "<pending>"
    elif typ == "ExternalName":
        external = spec.get("externalName") or "<none>"
    else:
        external = "<unknown>"
    ports = []
    for p in spec.get("ports") or []:
        proto = p.get("protocol") or "TCP"
        if p.get("nodePort"):
            ports.append(f"{p.get('port')}:{p['nodePort']}/{proto}")
        else:
            ports.append(f"{p.get('port')}/{proto}")
    sel = spec.get("selector") or {}
    sel_s = ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"
    return [_name(svc), typ, cluster_ip, external, ",".join(ports) or "<none>", _age(svc, now), sel_s], None


SERVICE_COLUMNS = [
    NAME_COL,
    col("Type", desc="type determines how the Service is exposed."),
    col("Cluster-IP", desc="clusterIP is the IP address of the service."),
    col("External-IP", desc="externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
    col("Port(s)", desc="The list of ports that are exposed by this service."),
    AGE_COL,
    col("Selector", priority=1, desc="Route service traffic to pods with label keys and values matching this selector."),
]


def csr_condition(csr: Obj) -> str:
    types = {c.get("type") for c in (csr.get("status") or {}).get("conditions") or []}
    if "Denied" in types:
        s = "Denied"
    elif "Approved" in types:
        s = "Approved"
    else:
        s = "Pending"
    if "Failed" in types:
        s += ",Failed"
    if (csr.get("status") or {}).get("certificate"):
        s += ",Issued"
    return s


CSR_COLUMNS = [
    NAME_COL,
    AGE_COL,
    col("SignerName", desc="Name of the signer the request is addressed to."),
    col("Requestor", desc="Name of the user which submitted the request."),
    col("RequestedDuration", desc="Requested duration of issued certificate."),
    col("Condition", desc="Conditions applied to the request, such as approval or denial."),
]


def _csr_row(csr: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    spec = csr.get("spec") or {}
    exp = spec.get("expirationSeconds")
    dur = human_duration(float(exp)) if exp is not None else "<none>"
    return [
        _name(csr),
        _age(csr, now),
        spec.get("signerName") or "<none>",
        spec.get("username", ""),
        dur,
        csr_condition(csr),
    ], None


# --- storage ---------------------------------------------------------------------------------

_BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
_DEFAULT_CLASS = ("storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class")


def access_modes_text(modes: Any) -> str:
    """helper.GetAccessModesAsString: RWO, ROX, RWX, RWOP in that order, each once."""
    have = set(modes or [])
    short = (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"),
             ("ReadWriteOncePod", "RWOP"))
    return ",".join(s for m, s in short if m in have)


def _volume_class(o: Obj) -> str:
    """GetPersistentVolume(Claim)Class: the beta annotation first, then spec.storageClassName."""
    ann = _meta(o).get("annotations") or {}
    if _BETA_CLASS in ann:
        return str(ann[_BETA_CLASS])
    return str((o.get("spec") or {}).get("storageClassName") or "")


def _phase(o: Obj) -> str:
    if _meta(o).get("deletionTimestamp"):
        return "Terminating"
    return str((o.get("status") or {}).get("phase") or "")


PV_COLUMNS = [
    NAME_COL,
    col("Capacity", desc="capacity is the description of the persistent volume's resources and capacity."),
    col("Access Modes", desc="accessModes contains all ways the volume can be mounted."),
    col("Reclaim Policy", desc="persistentVolumeReclaimPolicy defines what happens to a persistent volume when "
        "released from its claim."),
    col("Status", desc="phase indicates if a volume is available, bound to a claim, or released by a claim."),
    col("Claim", desc="claimRef is part of a bi-directional binding between PersistentVolume and "
        "PersistentVolumeClaim."),
    col("StorageClass", desc="StorageClass of the pv"),
    col("VolumeAttributesClass", desc="VolumeAttributesClass of the pv"),
    col("Reason", desc="reason is a brief CamelCase string that describes any failure and is meant for machine "
        "parsing and tidy display in the CLI."),
    AGE_COL,
    col("VolumeMode", priority=1, desc="volumeMode defines if a volume is intended to be used with a formatted "
        "filesystem or to remain in raw block state."),
]


def _pv_row(pv: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    spec = pv.get("spec") or {}
    ref = spec.get("claimRef")
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else ""
    return [_name(pv), str((spec.get("capacity") or {}).get("storage") or "0"),
            access_modes_text(spec.get("accessModes")), spec.get("persistentVolumeReclaimPolicy") or "",
            _phase(pv), claim, _volume_class(pv), spec.get("volumeAttributesClassName") or "<unset>",
            (pv.get("status") or {}).get("reason") or "", _age(pv, now), spec.get("volumeMode") or "<unset>"], None


PVC_COLUMNS = [
    NAME_COL,
    col("Status", desc="phase represents the current phase of PersistentVolumeClaim."),
    col("Volume", desc="volumeName is the binding reference to the PersistentVolume backing this claim."),
    col("Capacity", desc="capacity represents the actual resources of the underlying volume."),
    col("Access Modes", desc="accessModes contains the actual access modes the volume backing the PVC has."),
    col("StorageClass", desc="StorageClass of the pvc"),
    col("VolumeAttributesClass", desc="VolumeAttributesClass of the pvc"),
    AGE_COL,
    col("VolumeMode", priority=1, desc="volumeMode defines what type of volume is required by the claim."),
]


def _pvc_row(pvc: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    spec = pvc.get("spec") or {}
    status = pvc.get("status") or {}
    capacity = modes = ""
    if spec.get("volumeName"):
        modes = access_modes_text(status.get("accessModes"))
        capacity = str((status.get("capacity") or {}).get("storage") or "0")
    return [_name(pvc), _phase(pvc), spec.get("volumeName") or "", capacity, modes, _volume_class(pvc),
            spec.get("volumeAttributesClassName") or "<unset>", _age(pvc, now),
            spec.get("volumeMode") or "<unset>"], None


SC_COLUMNS = [
    NAME_COL,
    col("Provisioner", desc="provisioner indicates the type of the provisioner."),
    col("ReclaimPolicy", desc="reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
        "PersistentVolumes of this storage class. Defaults to Delete."),
    col("VolumeBindingMode", desc="volumeBindingMode indicates how PersistentVolumeClaims should be provisioned "
        "and bound.  When unset, VolumeBindingImmediate is used."),
    col("AllowVolumeExpansion", desc="allowVolumeExpansion shows whether the storage class allow volume expand."),
    AGE_COL,
]


def _sc_row(sc: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    ann = _meta(sc).get("annotations") or {}
    name = _name(sc) + (" (default)" if any(ann.get(a) == "true" for a in _DEFAULT_CLASS) else "")
    return [name, sc.get("provisioner", ""), sc.get("reclaimPolicy") or "Delete",
            sc.get("volumeBindingMode") or "Immediate", bool(sc.get("allowVolumeExpansion")), _age(sc, now)], None


# --- apps/v1 (upstream printers.go: printDeployment, printReplicaSet, printDaemonSet, ...) ---------


def label_selector_text(sel: Any) -> str:
    """metav1.FormatLabelSelector: ``<none>`` for an empty selector."""
    from pykubelet.server.apps import selector_string
    return selector_string(sel) or "<none>"


def _template_cells(o: Obj) -> list[Any]:
    cs = (((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return [",".join(str(c.get("name", "")) for c in cs), ",".join(str(c.get("image", "")) for c in cs)]


_CONTAINERS_COL = col("Containers", priority=1, desc="Names of each container in the template.")
_IMAGES_COL = col("Images", priority=1, desc="Images referenced by each container in the template.")
_SELECTOR_COL = col("Selector", priority=1, desc="Label selector for pods. Existing ReplicaSets whose pods are "
                    "selected by this will be the ones affected by this deployment.")


def _with_wide(cols: list[dict[str, Any]], fn: Callable[[Obj], list[Any]]) -> tuple[list[dict[str, Any]], RowFn]:
    """NAME, the priority-0 columns, AGE, then the priority-1 (wide) ones, as upstream orders them."""
    n = len([c for c in cols if not c["priority"]])

    def row(o: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
        cells = fn(o)
        return [_name(o), *cells[:n], _age(o, now), *cells[n:]], None

    return [NAME_COL, *cols[:n], AGE_COL, *cols[n:]], row


def _apps_printers() -> dict[str, tuple[list[dict[str, Any]], RowFn]]:
    def st(o: Obj, k: str) -> int:
        return int((o.get("status") or {}).get(k) or 0)

    def sp(o: Obj, k: str) -> int:
        return int((o.get("spec") or {}).get(k) or 0)

    def sel(o: Obj) -> str:
        return label_selector_text((o.get("spec") or {}).get("selector"))

    def node_sel(o: Obj) -> str:
        ns = (((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        return ",".join(f"{k}={v}" for k, v in sorted(ns.items())) or "<none>"

    def controller(o: Obj) -> str:
        for ref in (o.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("controller"):
                group = str(ref.get("apiVersion", "")).rpartition("/")[0]
                kind = str(ref.get("kind", "")).lower()
                return f"{kind}.{group}/{ref.get('name', '')}" if group else f"{kind}/{ref.get('name', '')}"
        return "<none>"

    return {
        "deployments": _with_wide(
            [col("Ready", desc="Number of the pod with ready state"),
             col("Up-to-date", "integer", desc="Total number of non-terminated pods targeted by this deployment "
                 "that have the desired template spec."),
             col("Available", "integer", desc="Total number of available pods (ready for at least minReadySeconds) "
                 "targeted by this deployment."),
             _CONTAINERS_COL, _IMAGES_COL, _SELECTOR_COL],
            lambda o: [f"{st(o, 'readyReplicas')}/{sp(o, 'replicas')}", st(o, "updatedReplicas"),
                       st(o, "availableReplicas"), *_template_cells(o), sel(o)]),
        "replicasets": _with_wide(
            [col("Desired", "integer", desc="Replicas is the number of desired replicas."),
             col("Current", "integer", desc="Replicas is the most recently observed number of replicas."),
             col("Ready", "integer", desc="The number of ready replicas for this replica set."),
             _CONTAINERS_COL, _IMAGES_COL, _SELECTOR_COL],
            lambda o: [sp(o, "replicas"), st(o, "replicas"), st(o, "readyReplicas"), *_template_cells(o), sel(o)]),
        "daemonsets": _with_wide(
            [col("Desired", "integer", desc="The total number of nodes that should be running the daemon pod."),
             col("Current", "integer", desc="The number of nodes that are running at least 1 daemon pod and are "
                 "supposed to run the daemon pod."),
             col("Ready", "integer", desc="The number of nodes that should be running the daemon pod and have one "
                 "or more of the daemon pod running and ready."),
             col("Up-to-date", "integer", desc="The total number of nodes that are running updated daemon pod"),
             col("Available", "integer", desc="The number of nodes that should be running the daemon pod and have "
                 "one or more of the daemon pod running and available."),
             col("Node Selector", desc="NodeSelector is a selector which must be true for the pod to fit on a node."),
             _CONTAINERS_COL, _IMAGES_COL, _SELECTOR_COL],
            lambda o: [st(o, "desiredNumberScheduled"), st(o, "currentNumberScheduled"), st(o, "numberReady"),
                       st(o, "updatedNumberScheduled"), st(o, "numberAvailable"), node_sel(o), *_template_cells(o),
                       sel(o)]),
        "statefulsets": _with_wide(
            [col("Ready", desc="Number of the pod with ready state"), _CONTAINERS_COL, _IMAGES_COL],
            lambda o: [f"{st(o, 'readyReplicas')}/{sp(o, 'replicas')}", *_template_cells(o)]),
        "controllerrevisions": _simple(
            [col("Controller", desc="Controller of the object"),
             col("Revision", "integer", desc="Revision indicates the revision of the state represented by Data.")],
            lambda o: [controller(o), int(o.get("revision") or 0)]),
    }


# --- batch/v1 (pkg/printers/internalversion printJob / printCronJob) ----------------------------
def _has_condition(o: Obj, typ: str) -> bool:
    return any(c.get("type") == typ and c.get("status") == "True" for c in (o.get("status") or {}).get("conditions") or [])


def _selector_text(sel: Any) -> str:
    if not sel:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op, vals = e.get("operator"), ",".join(e.get("values") or [])
        parts.append({"In": f"{e.get('key')} in ({vals})", "NotIn": f"{e.get('key')} notin ({vals})",
                      "Exists": str(e.get("key")), "DoesNotExist": f"!{e.get('key')}"}.get(op, str(e.get("key"))))
    return ",".join(parts) or "<none>"


def _batch_template_cells(pod_spec: Any) -> list[str]:
    cs = (pod_spec or {}).get("containers") or []
    return [",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)]


def job_status_text(job: Obj) -> str:
    if _has_condition(job, "Complete"):
        return "Complete"
    if _has_condition(job, "Failed"):
        return "Failed"
    if _meta(job).get("deletionTimestamp"):
        return "Terminating"
    for typ in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if _has_condition(job, typ):
            return typ
    return "Running"


def _job_row(job: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    spec, st = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(st.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(st.get("startTime")), parse_time(st.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration(((end or now) - start).total_seconds())
    tspec = (spec.get("template") or {}).get("spec")
    return [_name(job), job_status_text(job), completions, duration, _age(job, now), *_batch_template_cells(tspec),
            _selector_text(spec.get("selector"))], None


JOB_COLUMNS = [
    NAME_COL,
    col("Status", desc="Status of the job."),
    col("Completions", desc="The desired number of successfully finished pods the job should be run with."),
    col("Duration", desc="Time required to complete the job."),
    AGE_COL,
    col("Containers", priority=1, desc="Names of each container in the template."),
    col("Images", priority=1, desc="Images referenced by each container in the template."),
    col("Selector", priority=1, desc="A label query over pods that should match the pod count."),
]


def _cronjob_row(cj: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
    spec, st = cj.get("spec") or {}, cj.get("status") or {}
    last = since(st["lastScheduleTime"], now) if st.get("lastScheduleTime") else "<none>"
    jspec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return [_name(cj), spec.get("schedule", ""), spec.get("timeZone") or "<none>",
            "True" if spec.get("suspend") else "False", len(st.get("active") or []), last, _age(cj, now),
            *_batch_template_cells((jspec.get("template") or {}).get("spec")), _selector_text(jspec.get("selector"))], None


CRONJOB_COLUMNS = [
    NAME_COL,
    col("Schedule", desc="The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    col("Timezone", desc="The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
    col("Suspend", "boolean", desc="This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false."),
    col("Active", "integer", desc="A list of pointers to currently running jobs."),
    col("Last Schedule", desc="Information when was the last time the job was successfully scheduled."),
    AGE_COL,
    col("Containers", priority=1, desc="Names of each container in the template."),
    col("Images", priority=1, desc="Images referenced by each container in the template."),
    col("Selector", priority=1, desc="A label query over pods that should match the pod count."),
]


def _printers() -> dict[str, tuple[list[dict[str, Any]], RowFn]]:
    p: dict[str, tuple[list[dict[str, Any]], RowFn]] = {
        "pods": (POD_COLUMNS, _pod_row),
        "nodes": (NODE_COLUMNS, _node_row),
        "events": (EVENT_COLUMNS, _event_row),
        "services": (SERVICE_COLUMNS, _service_row),
        "certificatesigningrequests": (CSR_COLUMNS, _csr_row),
        "persistentvolumes": (PV_COLUMNS, _pv_row),
        "persistentvolumeclaims": (PVC_COLUMNS, _pvc_row),
        "storageclasses": (SC_COLUMNS, _sc_row),
        "jobs": (JOB_COLUMNS, _job_row),
        "cronjobs": (CRONJOB_COLUMNS, _cronjob_row),
    }
    p["namespaces"] = _simple(
        [col("Status", desc="The status of the namespace")],
        lambda o: [(o.get("status") or {}).get("phase") or "Active"],
    )
    p["endpoints"] = _simple([col("Endpoints", desc="Endpoints is the list of endpoints in the object.")],
                             lambda o: [_endpoints_cell(o)])
    p["endpointslices"] = _simple(
        [col("AddressType", desc="addressType specifies the type of address carried by this EndpointSlice."),
         col("Ports", desc="ports specifies the list of network ports exposed by each endpoint in this slice."),
         col("Endpoints", desc="endpoints is a list of unique endpoints in this slice.")],
        lambda o: [o.get("addressType", ""),
                   ",".join(str(x.get("port")) for x in o.get("ports") or [] if x.get("port")) or "<unset>",
                   _more([a for e in o.get("endpoints") or [] for a in e.get("addresses") or []])])
    p["leases"] = _simple([col("Holder", desc="holderIdentity contains the identity of the holder of a current lease.")], _lease_cells)
    p["configmaps"] = _simple(
        [col("Data", "integer", desc="Number of data in the configmap")],
        lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {})],
    )
    p["secrets"] = _simple(
        [col("Type", desc="The type of the secret"), col("Data", "integer", desc="Number of data in the secret")],
        lambda o: [o.get("type") or "Opaque", len(o.get("data") or {}) + len(o.get("stringData") or {})],
    )
    p["serviceaccounts"] = _simple(
        [col("Secrets", "integer", desc="Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.")],
        lambda o: [len(o.get("secrets") or [])],
    )
    p["runtimeclasses"] = _simple(
        [col("Handler", desc="handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.")],
        lambda o: [o.get("handler", "")],
    )
    p.update(_apps_printers())
    p["generic"] = _simple([], lambda o: [])
    role_cols = [NAME_COL, col("Created At", "date", desc="CreationTimestamp of the object")]
    p["roles"] = p["clusterroles"] = (role_cols, lambda o, now: (rbac.role_cells(o), None))

    def _binding_row(o: Obj, now: datetime) -> tuple[list[Any], list[dict[str, Any]] | None]:
        role, users, groups, sas = rbac.binding_cells(o)
        return [_name(o), role, _age(o, now), ", ".join(users), ", ".join(groups), ", ".join(sas)], None
    binding_cols = [NAME_COL, col("Role", desc="Role of the binding"), AGE_COL,
                    col("Users", priority=1, desc="Users in the binding"),
                    col("Groups", priority=1, desc="Groups in the binding"),
                    col("ServiceAccounts", priority=1, desc="ServiceAccounts in the binding")]
    p["rolebindings"] = p["clusterrolebindings"] = (binding_cols, _binding_row)
    return p


PRINTERS = _printers()


# What a printer raises on a stored object of an unexpected shape (e.g. written before the server
# decoded bodies against their types): such a row still prints, with ``<unknown>`` cells, instead
# of the whole Table failing and kubectl losing every column.
_BAD_DATA = (AttributeError, TypeError, ValueError, KeyError, IndexError, OverflowError)


def _fallback_cells(cols: list[dict[str, Any]], o: Obj, now: datetime) -> list[Any]:
    out: list[Any] = []
    for c in cols:
        try:
            if c is NAME_COL:
                out.append(_name(o))
            elif c is AGE_COL:
                out.append(_age(o, now))
            else:
                out.append("<unknown>")
        except _BAD_DATA:
            out.append("<unknown>")
    return out


def partial_object_metadata(obj: Obj) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _meta(obj)}


def to_table(
    resource: str,
    objs: list[Obj],
    *,
    now: datetime | None = None,
    resource_version: str | None = None,
    include_columns: bool = True,
) -> dict[str, Any]:
    """Render ``objs`` of ``resource`` (plural, e.g. "pods") as a meta.k8s.io/v1 Table.

    ``include_columns=False`` gives ``columnDefinitions: null`` as used for watch events after
    the first one.
    """
    now = now or datetime.now(UTC)
    cols, row_fn = PRINTERS.get(resource, PRINTERS["generic"])
    rows = []
    for o in objs:
        try:
            cells, conds = row_fn(o, now)
        except _BAD_DATA:
            cells, conds = _fallback_cells(cols, o, now), None
        row: dict[str, Any] = {"cells": cells, "object": partial_object_metadata(o)}
        if conds:
            row["conditions"] = conds
        rows.append(row)
    meta: dict[str, Any] = {}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": cols if include_columns else None,
        "rows": rows,
    }


# --- pod rows kept per revision --------------------------------------------------------------

_J = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True)
class _PodRow:
    """One pod's Table row as JSON, made once per resourceVersion: everything but RESTARTS and AGE,
    which depend on the time of the request and are filled in then (RESTARTS only when the pod has
    restarted: "0" is part of ``prefix``)."""

    key: tuple[str, str]  # (namespace, name)
    head: bytes  # '{"cells":[NAME,READY,STATUS,'
    prefix: bytes | None  # head + RESTARTS + ',' when RESTARTS does not depend on the time
    tail: bytes  # ',IP,NODE,...],"object":{...}[,"conditions":[...]]},'  (with the separator)
    restarts: int
    last_restart: datetime | None
    created: float | None  # creationTimestamp as a POSIX time


class PodRowCache:
    """Encoded pod rows by resourceVersion (one global counter, so it names one revision of one pod).

    Listing 10,000 pods as a Table (``kubectl get pods -A``) otherwise recomputes every pod's STATUS
    and re-encodes its metadata on every request; upstream's printers are Go and cheap, ours are not.
    A request then only looks each row up, fills in AGE (and RESTARTS of pods that restarted) and
    joins all rows' bytes once.  Objects whose row cannot be computed (a shape the printer does not
    expect) are not cached: they take :func:`to_table`'s fallback row on every request.
    """

    def __init__(self) -> None:
        self._rows: dict[str, _PodRow] = {}

    def _row(self, pod: Obj) -> _PodRow | None:
        meta = _meta(pod)
        rv = meta.get("resourceVersion")
        row = self._rows.get(rv) if isinstance(rv, str) else None
        if row is not None and row.key[1] == meta.get("name"):
            return row
        try:
            cells, restarts, last_restart, conds = _pod_parts(pod)
        except _BAD_DATA:
            return None
        head = ('{"cells":' + _J(cells[:3])[:-1] + ",").encode()
        tail = "," + _J(cells[5:])[1:] + ',"object":' + _J(partial_object_metadata(pod))
        if conds:
            tail += ',"conditions":' + _J(conds)
        fixed = not (restarts and last_restart is not None)  # else "N (5m ago)"
        created = parse_time(meta.get("creationTimestamp"))
        row = _PodRow((str(meta.get("namespace", "")), str(meta.get("name", ""))), head,
                      head + (_J(str(restarts)) + ",").encode() if fixed else None, (tail + "},").encode(),
                      restarts, last_restart, None if created is None else created.timestamp())
        if rv and isinstance(rv, str):
            self._rows[rv] = row
        return row

    def table(self, pods: list[Obj], meta: dict[str, Any], *, now: datetime | None = None,
              keep: Callable[[tuple[str, str], str], bool] | None = None, live: int | None = None) -> bytes:
        """The same Table as ``to_table("pods", pods)`` with ``metadata`` ``meta``, as JSON bytes.
        ``keep(key, rv)``: whether (namespace, name) is still at resourceVersion ``rv``, asked when
        the cache has grown a quarter past the listed pods or ``live`` (how many pods exist: a page
        lists fewer); rows of changed and deleted pods are dropped then."""
        now = now or datetime.now(UTC)
        now_ts = now.timestamp()
        ages: dict[int, bytes] = {}
        unknown = b'"<unknown>"'
        head = _J({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                   "columnDefinitions": POD_COLUMNS})
        parts: list[bytes] = [head[:-1].encode(), b',"rows":[']
        add = parts.append
        row_of = self._row
        for pod in pods:
            row = row_of(pod)
            if row is None:
                add(_J(to_table("pods", [pod], now=now)["rows"][0]).encode() + b",")
                continue
            if row.prefix is not None:
                add(row.prefix)
            else:
                add(row.head)
                add((_J(_restarts_text(row.restarts, row.last_restart, now)) + ",").encode())
            if row.created is None:
                add(unknown)
            else:
                secs = int(now_ts - row.created)
                age = ages.get(secs)
                if age is None:
                    age = ages[secs] = _J(human_duration(secs)).encode()
                add(age)
            add(row.tail)
        if pods:
            parts[-1] = parts[-1][:-1]  # no separator after the last row
        parts.append(b"]}")
        if keep is not None and len(self._rows) > max(len(pods), live or 0) * 5 // 4 + 1000:
            self._rows = {rv: r for rv, r in self._rows.items() if keep(r.key, rv)}
        return b"".join(parts)
