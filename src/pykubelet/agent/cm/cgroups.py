"""cgroup values and names: pure functions of a pod spec and the configuration (upstream
``pkg/kubelet/cm/helpers_linux.go``, ``cgroup_manager_linux.go``, ``qos_container_manager_linux.go``).

Design: every number the container manager writes is computed here from the pod spec / the set of
pods, and turned into the files of one cgroup version by ``files_for``; the writers
(``podcgroups``) only mkdir and write. So cgroup v1 vs v2 (unified) and the cgroupfs vs systemd
drivers are unit-testable on a fake tree.

Upstream behaviour followed:
- ``MilliCPUToShares`` (min 2, max 262144), ``MilliCPUToQuota`` (min 1000 µs, period from
  ``cpuCFSQuotaPeriod``), ``CPUSharesToCPUWeight`` = 1 + ((shares - 2) * 9999) / 262142 for v2;
- ``ResourceConfigForPod``: cpu shares from requests (BestEffort: 2), a CFS quota only when every
  container has a cpu limit (and ``cpuCFSQuota`` is true), a memory limit only when every container
  has one, hugepage limits from hugepage limits, ``podPidsLimit`` (-1: unlimited);
- QoS tiers: Burstable's cpu shares = the sum of Burstable pods' cpu requests, BestEffort's = 2; with
  ``qosReserved memory: N%`` Burstable's memory limit = allocatable - N% of Guaranteed requests and
  BestEffort's = that - N% of Burstable requests (``setMemoryReserve``);
- cgroup names: ``kubepods/burstable/pod<uid>`` for cgroupfs; for systemd each component becomes a
  nested slice, ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice``, with
  "-" in a component escaped to "_" (``ToSystemd`` / ``escapeSystemdCgroupName``);
- v2 files: ``cpu.weight``, ``cpu.max`` ("quota period" or "max period"), ``memory.max``,
  ``pids.max``, ``hugetlb.<size>.max``, ``memory.swap.max`` (``memorySwap.swapBehavior``: NoSwap or
  unset → 0, LimitedSwap → the pod's share of swap proportional to its memory request).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from pykubelet.common import podutil

MIN_SHARES = 2
MAX_SHARES = 262144
MIN_QUOTA_PERIOD = 1000
DEFAULT_PERIOD_US = 100000


class CgroupVersion(enum.Enum):
    V1 = "v1"
    V2 = "v2"


class CgroupDriver(enum.StrEnum):
    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


def detect_version(mount: Path) -> CgroupVersion | None:
    """v2 when the mount is the unified hierarchy, v1 when controllers are separate dirs, else None."""
    if (mount / "cgroup.controllers").is_file():
        return CgroupVersion.V2
    if (mount / "memory").is_dir() and (mount / "cpu").is_dir():
        return CgroupVersion.V1
    return None


# --------------------------------------------------------------------------- conversions


def milli_cpu_to_shares(millis: int) -> int:
    if millis == 0:
        return MIN_SHARES
    return min(MAX_SHARES, max(MIN_SHARES, (millis * 1024) // 1000))


def milli_cpu_to_quota(millis: int, period_us: int = DEFAULT_PERIOD_US) -> int:
    if millis == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, (millis * period_us) // 1000)


def cpu_shares_to_weight(shares: int) -> int:
    """Upstream ``CPUSharesToCPUWeight`` (runc's conversion): 2 → 1, 1024 → 39, 262144 → 10000."""
    if shares == 0:
        return 0
    return 1 + ((shares - 2) * 9999) // 262142


# --------------------------------------------------------------------------- names


def cgroupfs_path(root: str, parts: Iterable[str]) -> str:
    return "/" + "/".join(p.strip("/") for p in [root, *parts] if p.strip("/"))


def _escape(part: str) -> str:
    return part.replace("-", "_")


def systemd_path(parts: Iterable[str]) -> str:
    """``["kubepods", "burstable", "pod1"]`` → ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice``."""
    out: list[str] = []
    prefix = ""
    for p in parts:
        name = _escape(p)
        prefix = f"{prefix}-{name}" if prefix else name
        out.append(prefix + ".slice")
    return "/" + "/".join(out)


def cgroup_path(driver: CgroupDriver, root: str, parts: Iterable[str]) -> str:
    """The path below the cgroup mount; the systemd driver puts the slices below ``root``'s slice
    path unchanged (a root like ``/`` or ``/system.slice``)."""
    if driver is CgroupDriver.SYSTEMD:
        base = "/" + root.strip("/") if root.strip("/") else ""
        return base + systemd_path(parts)
    return cgroupfs_path(root, parts)


def qos_parts(qos: str) -> list[str]:
    return ["kubepods"] if qos == podutil.QOS_GUARANTEED else ["kubepods", qos.lower()]


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ResourceConfig:
    """Upstream ``ResourceConfig``: None leaves a setting alone."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # µs; -1: unlimited
    cpu_period: int | None = None
    memory: int | None = None  # bytes
    pids_limit: int | None = None  # -1: unlimited
    hugepages: Mapping[str, int] = field(default_factory=dict)  # "2Mi" -> bytes
    swap: int | None = None  # v2 memory.swap.max bytes


def _millis(v: Decimal | None) -> int:
    return podutil.to_millis(v) if v is not None else 0


def resource_config_for_pod(
    pod: dict[str, Any], *, cfs_quota: bool = True, period_us: int = DEFAULT_PERIOD_US, pids_limit: int = -1,
) -> ResourceConfig:
    """Upstream ``ResourceConfigForPod``."""
    containers = (pod.get("spec") or {}).get("containers") or []
    req = podutil.pod_requests(pod)
    lim = podutil.pod_limits(pod)
    qos = podutil.qos_class(pod)
    all_cpu = bool(containers) and all(podutil.container_limits(c).get("cpu") for c in containers)
    all_mem = bool(containers) and all(podutil.container_limits(c).get("memory") for c in containers)
    shares = milli_cpu_to_shares(_millis(req.get("cpu")))
    quota: int | None = None  # no cpu limit on every container: the pod level is left unlimited
    if all_cpu and lim.get("cpu"):
        quota = milli_cpu_to_quota(_millis(lim["cpu"]), period_us) if cfs_quota else -1
    hugepages = {k[len("hugepages-"):]: int(v) for k, v in lim.items() if k.startswith("hugepages-")}
    if qos == podutil.QOS_BEST_EFFORT:
        shares = MIN_SHARES
    return ResourceConfig(
        cpu_shares=shares, cpu_quota=quota, cpu_period=period_us,
        memory=int(lim["memory"]) if all_mem and lim.get("memory") else None,
        pids_limit=pids_limit if pids_limit > 0 else -1, hugepages=hugepages,
    )


def qos_configs(
    pods: Iterable[dict[str, Any]], *, allocatable_memory: int | None, qos_reserved: Mapping[str, str],
) -> dict[str, ResourceConfig]:
    """Burstable / BestEffort tier values from the active pods (upstream ``UpdateCgroups``)."""
    burstable_millis = 0
    mem_req = {podutil.QOS_GUARANTEED: Decimal(0), podutil.QOS_BURSTABLE: Decimal(0)}
    for p in pods:
        qos = podutil.qos_class(p)
        req = podutil.pod_requests(p)
        if qos == podutil.QOS_BURSTABLE:
            burstable_millis += _millis(req.get("cpu"))
        if qos in mem_req:
            mem_req[qos] += req.get("memory", Decimal(0))
    burstable = ResourceConfig(cpu_shares=milli_cpu_to_shares(burstable_millis))
    best_effort = ResourceConfig(cpu_shares=MIN_SHARES)
    pct_raw = str(qos_reserved.get("memory", "")).strip().rstrip("%")
    if pct_raw and allocatable_memory:
        pct = Decimal(pct_raw)
        b_limit = max(0, int(allocatable_memory - mem_req[podutil.QOS_GUARANTEED] * pct / 100))
        be_limit = max(0, int(b_limit - mem_req[podutil.QOS_BURSTABLE] * pct / 100))
        burstable = ResourceConfig(cpu_shares=burstable.cpu_shares, memory=b_limit)
        best_effort = ResourceConfig(cpu_shares=MIN_SHARES, memory=be_limit)
    return {podutil.QOS_BURSTABLE: burstable, podutil.QOS_BEST_EFFORT: best_effort}


def swap_limit(pod: dict[str, Any], behavior: str, *, node_memory: int, node_swap: int) -> int | None:
    """memory.swap.max for a pod on v2: NoSwap (and unset) → 0; LimitedSwap → Burstable pods get
    request / node memory * node swap, other QoS classes 0 (upstream ``calcSwapForBurstablePods``)."""
    if behavior in ("", "NoSwap"):
        return 0
    if behavior != "LimitedSwap":
        return None
    if podutil.qos_class(pod) != podutil.QOS_BURSTABLE or node_memory <= 0:
        return 0
    req = podutil.pod_requests(pod).get("memory", Decimal(0))
    return int(req * node_swap / node_memory)


def files_for(config: ResourceConfig, version: CgroupVersion) -> dict[str, str]:
    """File (relative to the cgroup dir; v1 prefixed by its controller) → value to write."""
    out: dict[str, str] = {}
    if version is CgroupVersion.V1:
        if config.cpu_shares is not None:
            out["cpu/cpu.shares"] = str(config.cpu_shares)
        if config.cpu_period is not None and config.cpu_quota is not None:
            out["cpu/cpu.cfs_period_us"] = str(config.cpu_period)
        if config.cpu_quota is not None:
            out["cpu/cpu.cfs_quota_us"] = str(config.cpu_quota)
        if config.memory is not None:
            out["memory/memory.limit_in_bytes"] = str(config.memory)
        if config.pids_limit is not None:
            out["pids/pids.max"] = "max" if config.pids_limit < 0 else str(config.pids_limit)
        for size, v in config.hugepages.items():
            out[f"hugetlb/hugetlb.{size.replace('i', '')}B.limit_in_bytes"] = str(v)
        return out
    if config.cpu_shares is not None:
        out["cpu.weight"] = str(cpu_shares_to_weight(config.cpu_shares))
    if config.cpu_quota is not None:
        period = config.cpu_period or DEFAULT_PERIOD_US
        out["cpu.max"] = f"{'max' if config.cpu_quota < 0 else config.cpu_quota} {period}"
    if config.memory is not None:
        out["memory.max"] = str(config.memory)
    if config.swap is not None:
        out["memory.swap.max"] = str(config.swap)
    if config.pids_limit is not None:
        out["pids.max"] = "max" if config.pids_limit < 0 else str(config.pids_limit)
    for size, v in config.hugepages.items():
        out[f"hugetlb.{size.replace('i', '')}B.max"] = str(v)
    return out
