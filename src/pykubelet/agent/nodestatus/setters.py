"""Pure functions that build each part of the Node object, like upstream ``nodestatus/setters.go``.

Design: every setter takes plain values (machine info, runtime answers, the previous status, "now")
and returns dicts; no I/O, no clocks.  ``NodeStatusManager`` gathers the inputs and composes them.
That keeps the subtle rules testable on their own:

- allocatable = capacity - systemReserved - kubeReserved - hard eviction threshold, per resource;
  memory also loses the hugepage reservations; percentages in evictionHard are of capacity; never
  below zero (upstream ``GetNodeAllocatableReservation`` + the MachineInfo setter);
- conditions keep ``lastTransitionTime`` while their status is unchanged and take ``now`` when it
  flips; ``lastHeartbeatTime`` is ``now`` on every computation (upstream ReadyCondition and
  MemoryPressure/DiskPressure/PIDPressure setters);
- Ready is False with reason KubeletNotReady and the joined error messages when the runtime or its
  network is not ready, the PLEG or sync loop is unhealthy, or capacity is missing;
- images: sorted by size, largest first, capped at nodeStatusMaxImages (-1 = all), at most 5 names
  each (upstream ``maxNamesPerImageInNodeStatus``);
- "has the status changed?" ignores heartbeat times (upstream ``nodeStatusHasChanged``), so the
  manager only PATCHes on real change or when the report period elapses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from pykubelet.common.quantity import (
    QuantityError,
    format_cpu_millicores,
    format_memory_bytes,
    parse_quantity,
)

MAX_NAMES_PER_IMAGE = 5
CMAD_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"

READY = "Ready"
MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"

_PRESSURE = {
    MEMORY_PRESSURE: (
        ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
        ("NodeHasSufficientMemory", "NodeHasInsufficientMemory"),
    ),
    DISK_PRESSURE: (
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("KubeletHasDiskPressure", "kubelet has disk pressure"),
        ("NodeHasNoDiskPressure", "NodeHasDiskPressure"),
    ),
    PID_PRESSURE: (
        ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
        ("NodeHasSufficientPID", "NodeHasInsufficientPID"),
    ),
}

Obj = dict[str, Any]


def format_time(ts: float) -> str:
    """RFC 3339 seconds, UTC (metav1.Time)."""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(int(ts), _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(ts: float) -> str:
    """RFC 3339 with microseconds, UTC (metav1.MicroTime, used by Lease.renewTime)."""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- labels / taints / object


def default_labels(node_name: str, os_name: str, arch: str) -> dict[str, str]:
    """Labels the kubelet owns and reconciles (upstream ``updateDefaultLabels``)."""
    return {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": os_name,
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": os_name,
        "beta.kubernetes.io/arch": arch,
    }


def initial_node(
    node_name: str,
    *,
    os_name: str,
    arch: str,
    node_labels: Mapping[str, str],
    taints: Iterable[Mapping[str, Any]],
    pod_cidr: str = "",
    provider_id: str = "",
) -> Obj:
    """The Node object POSTed at registration (upstream ``initialNode``)."""
    labels = {**node_labels, **default_labels(node_name, os_name, arch)}
    spec: Obj = {}
    tl = [dict(t) for t in taints]
    if tl:
        spec["taints"] = tl
    if pod_cidr:
        spec["podCIDR"] = pod_cidr
        spec["podCIDRs"] = [pod_cidr]
    if provider_id:
        spec["providerID"] = provider_id
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": labels,
            "annotations": {CMAD_ANNOTATION: "true"},
        },
        "spec": spec,
    }


def reconcile_existing_node(desired: Obj, existing: Obj) -> Obj | None:
    """Merge patch bringing an already-registered node in line, or None when nothing to do.

    Mirrors upstream ``tryRegisterWithAPIServer`` on AlreadyExists: the default labels
    (hostname/os/arch) are rewritten, the controller-managed-attach-detach annotation is ensured.
    Labels from --node-labels and taints from --register-with-taints are only *added* when missing
    (never removed or overwritten): an administrator's edits on the live node win, as upstream's
    "registration only" semantics intend, but a node re-created by the same kubelet gets them.
    """
    meta = existing.get("metadata") or {}
    have_labels = meta.get("labels") or {}
    have_ann = meta.get("annotations") or {}
    want_labels = (desired.get("metadata") or {}).get("labels") or {}
    os_name = want_labels.get("kubernetes.io/os", "")
    arch = want_labels.get("kubernetes.io/arch", "")
    defaults = default_labels(want_labels.get("kubernetes.io/hostname", meta.get("name", "")), os_name, arch)
    label_patch: dict[str, str] = {}
    for k, v in want_labels.items():
        if k in defaults:
            if have_labels.get(k) != v:
                label_patch[k] = v
        elif k not in have_labels:
            label_patch[k] = v
    patch: Obj = {}
    meta_patch: Obj = {}
    if label_patch:
        meta_patch["labels"] = label_patch
    if have_ann.get(CMAD_ANNOTATION) != "true":
        meta_patch["annotations"] = {CMAD_ANNOTATION: "true"}
    if meta_patch:
        patch["metadata"] = meta_patch
    have_taints = (existing.get("spec") or {}).get("taints") or []
    want_taints = (desired.get("spec") or {}).get("taints") or []
    have_keys = {(t.get("key"), t.get("effect")) for t in have_taints}
    missing = [t for t in want_taints if (t.get("key"), t.get("effect")) not in have_keys]
    if missing:
        patch["spec"] = {"taints": [*have_taints, *missing]}
    return patch or None


# --------------------------------------------------------------------------- capacity


def capacity(
    *,
    cpu_millis: int,
    memory_bytes: int,
    max_pods: int,
    ephemeral_storage_bytes: int,
    hugepages: Mapping[str, int],
) -> dict[str, str]:
    """Node capacity; hugepages-2Mi and hugepages-1Gi are always listed (0 when none reserved)."""
    cap = {
        "cpu": format_cpu_millicores(cpu_millis),
        "memory": format_memory_bytes(memory_bytes),
        "pods": str(max_pods),
    }
    if ephemeral_storage_bytes > 0:
        cap["ephemeral-storage"] = format_memory_bytes(ephemeral_storage_bytes)
    hp = {"hugepages-2Mi": 0, "hugepages-1Gi": 0, **dict(hugepages)}
    for name, value in sorted(hp.items()):
        cap[name] = format_memory_bytes(value) if value else "0"
    return cap


def _threshold_bytes(threshold: str, capacity_value: Decimal) -> Decimal:
    t = threshold.strip()
    if t.endswith("%"):
        return capacity_value * Decimal(t[:-1]) / Decimal(100)
    return parse_quantity(t).value


def reservation(
    capacity_map: Mapping[str, str],
    system_reserved: Mapping[str, str],
    kube_reserved: Mapping[str, str],
    eviction_hard: Mapping[str, str],
) -> dict[str, Decimal]:
    """What is held back from pods per resource (upstream GetNodeAllocatableReservation)."""
    out: dict[str, Decimal] = {}
    for reserved in (system_reserved, kube_reserved):
        for name, q in reserved.items():
            try:
                out[name] = out.get(name, Decimal(0)) + parse_quantity(q).value
            except QuantityError:
                continue
    for signal, resource in (("memory.available", "memory"), ("nodefs.available", "ephemeral-storage")):
        if signal in eviction_hard and resource in capacity_map:
            try:
                cap = parse_quantity(capacity_map[resource]).value
                out[resource] = out.get(resource, Decimal(0)) + _threshold_bytes(eviction_hard[signal], cap)
            except (QuantityError, ArithmeticError, ValueError):
                continue
    return out


def allocatable(
    capacity_map: Mapping[str, str],
    *,
    system_reserved: Mapping[str, str] | None = None,
    kube_reserved: Mapping[str, str] | None = None,
    eviction_hard: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """capacity - reservations (- hugepages for memory), floored at zero, canonical strings."""
    res = reservation(capacity_map, system_reserved or {}, kube_reserved or {}, eviction_hard or {})
    hugepage_total = Decimal(0)
    for name, q in capacity_map.items():
        if name.startswith("hugepages-"):
            try:
                hugepage_total += parse_quantity(q).value
            except QuantityError:
                pass
    out: dict[str, str] = {}
    for name, q in capacity_map.items():
        try:
            value = parse_quantity(q).value
        except QuantityError:
            out[name] = q
            continue
        value -= res.get(name, Decimal(0))
        if name == "memory":
            value -= hugepage_total
        if value < 0:
            value = Decimal(0)
        if name == "cpu":
            out[name] = format_cpu_millicores(int(value * 1000))
        elif name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
            out[name] = format_memory_bytes(int(value))
        else:
            out[name] = str(int(value))
    return out


# --------------------------------------------------------------------------- conditions


def runtime_errors(
    *,
    runtime_conditions: Mapping[str, tuple[bool, str, str]] | None,
    runtime_error: str | None,
    pleg_healthy: bool,
    sync_loop_healthy: bool,
) -> list[str]:
    """Messages that make the node NotReady (upstream runtimeState errors).

    ``runtime_conditions`` maps CRI condition type → (status, reason, message); None means the CRI
    Status call failed (``runtime_error`` says why).
    """
    errs: list[str] = []
    if runtime_conditions is None:
        errs.append(f"container runtime is down: {runtime_error or 'no status'}")
    else:
        rt = runtime_conditions.get("RuntimeReady")
        if rt is None or not rt[0]:
            reason, msg = (rt[1], rt[2]) if rt else ("", "missing RuntimeReady condition")
            errs.append(f"container runtime not ready: RuntimeReady=false reason:{reason} message:{msg}")
        net = runtime_conditions.get("NetworkReady")
        if net is None or not net[0]:
            reason, msg = (net[1], net[2]) if net else ("", "missing NetworkReady condition")
            errs.append(f"container runtime network not ready: NetworkReady=false reason:{reason} message:{msg}")
    if not pleg_healthy:
        errs.append("PLEG is not healthy: pleg has yet to be successful")
    if not sync_loop_healthy:
        errs.append("Kubelet sync loop is not healthy")
    return errs


def ready_condition(errors: list[str], capacity_map: Mapping[str, str]) -> Obj:
    """The Ready condition without timestamps (``merge_conditions`` adds them)."""
    missing = [r for r in ("cpu", "memory", "pods") if r not in capacity_map]
    errs = list(errors)
    if missing:
        errs.append(f"missing node capacity for resources: {', '.join(missing)}")
    if errs:
        return {"type": READY, "status": "False", "reason": "KubeletNotReady", "message": ", ".join(errs)}
    return {"type": READY, "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}


def pressure_condition(kind: str, under_pressure: bool) -> Obj:
    ok, bad, _ = _PRESSURE[kind]
    reason, message = bad if under_pressure else ok
    return {"type": kind, "status": "True" if under_pressure else "False", "reason": reason, "message": message}


def condition_event(cond: Obj) -> tuple[str, str] | None:
    """(event reason, message) the kubelet records when this condition takes its status."""
    kind = cond.get("type", "")
    if kind == READY:
        return ("NodeReady", "Node {node} status is now: NodeReady") if cond.get("status") == "True" else (
            "NodeNotReady",
            "Node {node} status is now: NodeNotReady",
        )
    if kind in _PRESSURE:
        good, bad = _PRESSURE[kind][2]
        reason = bad if cond.get("status") == "True" else good
        return reason, "Node {node} status is now: " + reason
    return None


def merge_conditions(previous: Iterable[Mapping[str, Any]], current: Iterable[Obj], now: float) -> tuple[list[Obj], list[Obj]]:
    """Stamp heartbeat/transition times; return (conditions, those whose status changed or are new)."""
    prev = {c.get("type"): c for c in previous}
    ts = format_time(now)
    out: list[Obj] = []
    changed: list[Obj] = []
    for cond in current:
        c = dict(cond)
        old = prev.get(c["type"])
        c["lastHeartbeatTime"] = ts
        if old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime"):
            c["lastTransitionTime"] = old["lastTransitionTime"]
        else:
            c["lastTransitionTime"] = ts
            changed.append(c)
        out.append(c)
    # Conditions set by others (e.g. NetworkUnavailable by a CNI daemon) are kept as they are.
    types = {c["type"] for c in out}
    for t, kept in prev.items():
        if t not in types and t is not None:
            out.append(dict(kept))
    return out, changed


# --------------------------------------------------------------------------- images / addresses / info


def images(entries: Iterable[tuple[list[str], list[str], int]], max_images: int) -> list[Obj]:
    """(repo_tags, repo_digests, size) → node.status.images, largest first, capped."""
    items = sorted(entries, key=lambda e: e[2], reverse=True)
    if max_images >= 0:
        items = items[:max_images]
    out: list[Obj] = []
    for tags, digests, size in items:
        names = [*tags, *digests]
        if not names:
            continue
        out.append({"names": names[:MAX_NAMES_PER_IMAGE], "sizeBytes": int(size)})
    return out


def addresses(node_ip: str, hostname: str) -> list[Obj]:
    return [{"type": "InternalIP", "address": node_ip}, {"type": "Hostname", "address": hostname}]


def node_info(
    *,
    machine_id: str,
    system_uuid: str,
    boot_id: str,
    kernel_version: str,
    os_image: str,
    container_runtime_version: str,
    kubelet_version: str,
    operating_system: str,
    architecture: str,
) -> Obj:
    return {
        "machineID": machine_id,
        "systemUUID": system_uuid,
        "bootID": boot_id,
        "kernelVersion": kernel_version,
        "osImage": os_image,
        "containerRuntimeVersion": container_runtime_version,
        "kubeletVersion": kubelet_version,
        "kubeProxyVersion": "",
        "operatingSystem": operating_system,
        "architecture": architecture,
    }


def _strip_heartbeats(status: Mapping[str, Any]) -> Obj:
    s = dict(status)
    s["conditions"] = sorted(
        ({k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in status.get("conditions") or []),
        key=lambda c: str(c.get("type")),
    )
    return s


def status_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when anything but heartbeat times differs (upstream nodeStatusHasChanged)."""
    if old is None:
        return True
    return _strip_heartbeats(old) != _strip_heartbeats(new)
