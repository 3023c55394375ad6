"""Which pod to evict, and what to tell its owner: pure functions (upstream
``pkg/kubelet/eviction/helpers.go`` rank functions and messages).

Design: pods are API JSON, usage is a ``PodUsage`` per pod uid (built from the stats summary by
``usage_from_summary``); nothing here reads a file or calls the runtime.

Upstream behaviour followed:
- memory (``rankMemoryPressure``): pods whose working set exceeds their memory request first, then
  lower ``spec.priority`` first, then the largest usage above request first; a pod with no stats
  goes first (upstream: "prioritize evicting the pod for which no stats were found");
- disk (``rankDiskPressureFunc``): the same with ephemeral-storage (container rootfs + logs + local
  volumes) or inodes and the ephemeral-storage request;
- pids (``rankPIDPressure``): lower priority first, then more processes;
- critical pods (static, mirror, or priority >= 2000000000 — system-cluster-critical and
  system-node-critical) are never evicted (``evictPod`` refuses them);
- messages: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.
  Container x was using 300Mi, request is 0, has larger consumption of memory. " and, for local
  storage limits, "Usage of EmptyDir volume "v" exceeds the limit "1Mi". ", "Pod ephemeral local
  storage usage exceeds the total limit of containers 2Mi. ", "Container c exceeded its local
  ephemeral storage limit "1Mi". " (the ``*MessageFmt`` constants).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pykubelet.common import podutil
from pykubelet.common.quantity import QuantityError, format_quantity, parse_quantity

from .thresholds import Observation, Signal, Threshold, format_amount

Pod = dict[str, Any]

REASON = "Evicted"
CRITICAL_PRIORITY = 2000000000
NODE_LOW_FMT = "The node was low on resource: {}. "
THRESHOLD_MET_FMT = "Threshold quantity: {}, available: {}. "
CONTAINER_FMT = "Container {} was using {}, request is {}, has larger consumption of {}. "
CONTAINER_EPHEMERAL_FMT = 'Container {} exceeded its local ephemeral storage limit "{}". '
POD_EPHEMERAL_FMT = "Pod ephemeral local storage usage exceeds the total limit of containers {}. "
EMPTYDIR_FMT = 'Usage of EmptyDir volume "{}" exceeds the limit "{}". '
NODE_CONDITION_FMT = "The node had condition: {}. "


@dataclass(frozen=True)
class ContainerUsage:
    memory: int | None = None  # working set bytes
    rootfs: int = 0
    logs: int = 0
    inodes: int = 0


@dataclass(frozen=True)
class PodUsage:
    memory: int | None = None  # pod working set bytes
    containers: Mapping[str, ContainerUsage] = field(default_factory=dict)
    volumes: Mapping[str, int] = field(default_factory=dict)  # local volume name -> used bytes
    volume_inodes: Mapping[str, int] = field(default_factory=dict)
    processes: int | None = None

    def ephemeral_storage(self, pod: Pod) -> int:
        """Container rootfs + logs + the pod's local (non-memory emptyDir) volumes."""
        local = local_volume_names(pod)
        return (sum(c.rootfs + c.logs for c in self.containers.values())
                + sum(v for n, v in self.volumes.items() if n in local))

    def inodes(self, pod: Pod) -> int:
        local = local_volume_names(pod)
        return sum(c.inodes for c in self.containers.values()) + sum(
            v for n, v in self.volume_inodes.items() if n in local)


def _int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def usage_from_summary(summary: Mapping[str, Any]) -> dict[str, PodUsage]:
    """uid → usage from a ``/stats/summary`` document (``stats.v1alpha1`` field names)."""
    out: dict[str, PodUsage] = {}
    for p in summary.get("pods") or []:
        uid = str((p.get("podRef") or {}).get("uid") or "")
        if not uid:
            continue
        containers = {}
        for c in p.get("containers") or []:
            mem = (c.get("memory") or {}).get("workingSetBytes")
            containers[str(c.get("name", ""))] = ContainerUsage(
                memory=None if mem is None else _int(mem),
                rootfs=_int((c.get("rootfs") or {}).get("usedBytes")),
                logs=_int((c.get("logs") or {}).get("usedBytes")),
                inodes=_int((c.get("rootfs") or {}).get("inodesUsed")),
            )
        pmem = (p.get("memory") or {}).get("workingSetBytes")
        if pmem is None and containers and all(c.memory is not None for c in containers.values()):
            pmem = sum(c.memory or 0 for c in containers.values())
        vols = {str(v.get("name", "")): _int(v.get("usedBytes")) for v in p.get("volume") or []}
        vinodes = {str(v.get("name", "")): _int(v.get("inodesUsed")) for v in p.get("volume") or []}
        procs = (p.get("process_stats") or {}).get("process_count")
        out[uid] = PodUsage(None if pmem is None else _int(pmem), containers, vols, vinodes,
                            None if procs is None else _int(procs))
    return out


# --------------------------------------------------------------------------- pod facts


def priority(pod: Pod) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return p if isinstance(p, int) else 0


def is_critical(pod: Pod) -> bool:
    """Upstream ``IsCriticalPod``: static, mirror, or a priority at least system-cluster-critical."""
    return podutil.is_static_pod(pod) or podutil.is_mirror_pod(pod) or priority(pod) >= CRITICAL_PRIORITY


def local_volume_names(pod: Pod) -> set[str]:
    """Volumes whose data lives on the node's filesystem (emptyDir not backed by memory)."""
    out = set()
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(v, dict):
            continue
        ed = v.get("emptyDir")
        if isinstance(ed, dict) and ed.get("medium") != "Memory":
            out.add(str(v.get("name", "")))
    return out


def _request(pod: Pod, resource: str) -> Decimal:
    return podutil.pod_requests(pod).get(resource, Decimal(0))


def _qty(raw: Any) -> Decimal | None:
    try:
        return parse_quantity(raw).value
    except (QuantityError, ValueError, TypeError):
        return None


# --------------------------------------------------------------------------- ranking


def _usage_for(signal: Signal, pod: Pod, u: PodUsage | None) -> int | None:
    if u is None:
        return None
    if signal in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE):
        return u.memory
    if signal in (Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_INODES_FREE, Signal.CONTAINERFS_INODES_FREE):
        return u.inodes(pod)
    if signal in (Signal.IMAGEFS_AVAILABLE, Signal.CONTAINERFS_AVAILABLE):
        return sum(c.rootfs for c in u.containers.values())
    if signal is Signal.PID_AVAILABLE:
        return u.processes
    return u.ephemeral_storage(pod)


def _request_for(signal: Signal, pod: Pod) -> Decimal:
    if signal in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE):
        return _request(pod, "memory")
    if signal in (Signal.NODEFS_AVAILABLE, Signal.IMAGEFS_AVAILABLE, Signal.CONTAINERFS_AVAILABLE):
        return _request(pod, "ephemeral-storage")
    return Decimal(0)


def rank(signal: Signal, pods: list[Pod], usage: Mapping[str, PodUsage]) -> list[Pod]:
    """Pods in eviction order for a threshold of ``signal`` (first = evict first)."""
    def uid(p: Pod) -> str:
        return str((p.get("metadata") or {}).get("uid", ""))

    if signal is Signal.PID_AVAILABLE:
        def pid_key(p: Pod) -> tuple[int, int]:
            return (priority(p), -(_usage_for(signal, p, usage.get(uid(p))) or 0))
        return sorted(pods, key=pid_key)

    def key(p: Pod) -> tuple[int, int, int, Decimal]:
        used = _usage_for(signal, p, usage.get(uid(p)))
        if used is None:
            return (0, 0, 0, Decimal(0))  # no stats: first
        req = _request_for(signal, p)
        exceeds = Decimal(used) > req
        return (1, 0 if exceeds else 1, priority(p), -(Decimal(used) - req))
    return sorted(pods, key=key)


# --------------------------------------------------------------------------- messages


def eviction_message(signal: Signal, resource: str, pod: Pod, u: PodUsage | None,
                     threshold: Threshold, observation: Observation | None) -> str:
    """Upstream ``evictionMessage`` (with the threshold-met part)."""
    msg = NODE_LOW_FMT.format(resource)
    if observation is not None:
        msg += THRESHOLD_MET_FMT.format(threshold.describe(observation.capacity),
                                        format_amount(signal, observation.available))
    if u is None or resource not in ("memory", "ephemeral-storage"):
        return msg
    for c in (pod.get("spec") or {}).get("containers") or []:
        name = str(c.get("name", ""))
        cu = u.containers.get(name)
        if cu is None:
            continue
        used = cu.memory if resource == "memory" else cu.rootfs + cu.logs
        if used is None:
            continue
        req = podutil.container_requests(c).get(resource, Decimal(0))
        if Decimal(used) > req:
            msg += CONTAINER_FMT.format(name, format_quantity(used, "BinarySI"),
                                        format_quantity(req, "BinarySI") if req else "0", resource)
    return msg


def admission_message(conditions: list[str]) -> str:
    return NODE_CONDITION_FMT.format("[" + ", ".join(conditions) + "]")


# --------------------------------------------------------------------------- local storage limits


def local_storage_violation(pod: Pod, u: PodUsage | None) -> str | None:
    """The message of the first local-storage limit the pod is over (upstream ``localStorageEviction``:
    emptyDir sizeLimit, then the pod's total limit, then a container's limit), or None."""
    if u is None:
        return None
    spec = pod.get("spec") or {}
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict) or not isinstance(v.get("emptyDir"), dict):
            continue
        raw = v["emptyDir"].get("sizeLimit")
        limit = _qty(raw) if raw is not None else None
        name = str(v.get("name", ""))
        if limit is not None and limit > 0 and name in u.volumes and Decimal(u.volumes[name]) > limit:
            return EMPTYDIR_FMT.format(name, raw)
    containers = spec.get("containers") or []
    limits = [podutil.container_limits(c).get("ephemeral-storage") for c in containers]
    if containers and all(lim is not None for lim in limits):
        total = sum((lim for lim in limits if lim is not None), Decimal(0))
        if total > 0 and Decimal(u.ephemeral_storage(pod)) > total:
            return POD_EPHEMERAL_FMT.format(format_quantity(total, "BinarySI"))
    for c in containers:
        lim = podutil.container_limits(c).get("ephemeral-storage")
        cu = u.containers.get(str(c.get("name", "")))
        if lim is not None and cu is not None and Decimal(cu.rootfs + cu.logs) > lim:
            raw = ((c.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
            return CONTAINER_EPHEMERAL_FMT.format(c.get("name", ""), raw)
    return None


RankFunc = Callable[[Signal, list[Pod], Mapping[str, PodUsage]], list[Pod]]
