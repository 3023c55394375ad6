"""Node/pod/container resource statistics: ``/stats/summary``, ``/metrics/resource``, ``/metrics/cadvisor``.

Upstream builds these from cAdvisor plus the CRI stats provider. We use the CRI alone (as upstream's
``PodAndContainerStatsFromCRI`` mode does): ``ListPodSandboxStats`` (falling back to
``ListContainerStats`` grouped by pod labels), ``ImageFsInfo`` for ``runtime.imageFs``, and read node
figures from the root cgroup / procfs:

* node CPU: cgroup v1 ``cpuacct.usage`` of the root, cgroup v2 ``cpu.stat`` ``usage_usec``, or
  ``/proc/stat`` jiffies; ``usageNanoCores`` is the rate between two samples (kept per provider, as
  upstream's CRI provider caches the previous sample);
* node memory: working set = usage - inactive file (cgroup root), else MemTotal - MemAvailable;
* fs: statvfs of the kubelet root dir (nodefs); rlimit from ``pid_max`` and the process count;
* pod ``volume``: every volume materialized under ``<root-dir>/pods/<uid>/volumes`` (du for used
  bytes and inodes, statfs for capacity), as upstream's volume stats (``volumemanager.stats``).

JSON field names and nesting follow k8s.io/kubelet/pkg/apis/stats/v1alpha1 (``podRef``,
``usageCoreNanoSeconds``, ``workingSetBytes``, ``ephemeral-storage`` …); metric names/labels follow
upstream's resource metrics collector and cAdvisor's Prometheus exporter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from pykubelet.agent.server.logs import format_rfc3339_nano
from pykubelet.agent.volumemanager.stats import pod_volume_stats
from pykubelet.common.labels import CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from pykubelet.common.procfs import read_meminfo


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def node_cpu_usage_ns() -> int:
    v = _read("/sys/fs/cgroup/cpuacct/cpuacct.usage") or _read("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage")
    if v and v.strip().isdigit():
        return int(v.strip())
    st = _read("/sys/fs/cgroup/cpu.stat")
    if st:
        for line in st.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) * 1000
    ps = _read("/proc/stat") or ""
    for line in ps.splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]]
            busy = sum(f) - f[3] - (f[4] if len(f) > 4 else 0)
            hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            return busy * 1_000_000_000 // hz
    return 0


def node_memory() -> dict[str, int]:
    mi = read_meminfo()
    total = mi.get("MemTotal", 0)
    usage = total - mi.get("MemFree", 0)
    working = total - mi.get("MemAvailable", mi.get("MemFree", 0))
    rss = mi.get("AnonPages", 0)
    return {"availableBytes": max(total - working, 0), "usageBytes": usage, "workingSetBytes": working,
            "rssBytes": rss, "pageFaults": 0, "majorPageFaults": 0, "capacity": total}


def fs_stats(path: str) -> dict[str, int]:
    try:
        s = os.statvfs(path)
    except OSError:
        return {}
    cap = s.f_blocks * s.f_frsize
    avail = s.f_bavail * s.f_frsize
    return {"availableBytes": avail, "capacityBytes": cap, "usedBytes": cap - s.f_bfree * s.f_frsize,
            "inodesFree": s.f_favail, "inodes": s.f_files, "inodesUsed": s.f_files - s.f_ffree}


def rlimit() -> dict[str, int]:
    pid_max = _read("/proc/sys/kernel/pid_max")
    try:
        cur = sum(1 for n in os.listdir("/proc") if n.isdigit())
    except OSError:
        cur = 0
    return {"maxpid": int(pid_max.strip()) if pid_max and pid_max.strip().isdigit() else 0, "curproc": cur}


def _val(msg: Any, field: str) -> int | None:
    """Value of an optional UInt64Value field, None when unset."""
    if msg is None:
        return None
    with contextlib.suppress(ValueError, AttributeError):
        if msg.HasField(field):
            return int(getattr(msg, field).value)
    return None


def _cpu(cpu: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if cpu is None:
        return out
    if getattr(cpu, "timestamp", 0):
        out["time"] = format_rfc3339_nano(int(cpu.timestamp))
    for src, dst in (("usage_nano_cores", "usageNanoCores"), ("usage_core_nano_seconds", "usageCoreNanoSeconds")):
        v = _val(cpu, src)
        if v is not None:
            out[dst] = v
    return out


def _mem(mem: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mem is None:
        return out
    if getattr(mem, "timestamp", 0):
        out["time"] = format_rfc3339_nano(int(mem.timestamp))
    for src, dst in (("available_bytes", "availableBytes"), ("usage_bytes", "usageBytes"),
                     ("working_set_bytes", "workingSetBytes"), ("rss_bytes", "rssBytes"),
                     ("page_faults", "pageFaults"), ("major_page_faults", "majorPageFaults")):
        v = _val(mem, src)
        if v is not None:
            out[dst] = v
    return out


def _fs_usage(fs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if fs is None:
        return out
    if getattr(fs, "timestamp", 0):
        out["time"] = format_rfc3339_nano(int(fs.timestamp))
    v = _val(fs, "used_bytes")
    if v is not None:
        out["usedBytes"] = v
    v = _val(fs, "inodes_used")
    if v is not None:
        out["inodesUsed"] = v
    return out


class StatsProvider:
    """Collects a stats snapshot from the CRI runtime and the host."""

    def __init__(self, *, runtime: Any, node_name: str, root_dir: str) -> None:
        self.runtime = runtime
        self.node_name = node_name
        self.root_dir = root_dir
        self._prev_cpu: tuple[float, int] | None = None
        self._boot = time.time() - _uptime()

    def _node_cpu(self) -> dict[str, Any]:
        now = time.time()
        usage = node_cpu_usage_ns()
        out: dict[str, Any] = {"time": format_rfc3339_nano(int(now * 1e9)), "usageCoreNanoSeconds": usage}
        if self._prev_cpu is not None and now > self._prev_cpu[0]:
            out["usageNanoCores"] = max(int((usage - self._prev_cpu[1]) / (now - self._prev_cpu[0])), 0)
        else:
            out["usageNanoCores"] = 0
        self._prev_cpu = (now, usage)
        return out

    async def _pod_stats(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = []
        sandbox_stats = None
        with contextlib.suppress(Exception):
            resp = await self.runtime.list_pod_sandbox_stats()
            sandbox_stats = list(getattr(resp, "stats", resp) or [])
        if sandbox_stats:
            for ps in sandbox_stats:
                md = ps.attributes.metadata
                linux = ps.linux if ps.HasField("linux") else None
                containers = []
                for cs in (linux.containers if linux is not None else []):
                    containers.append(self._container(cs))
                pod: dict[str, Any] = {
                    "podRef": {"name": md.name, "namespace": md.namespace, "uid": md.uid},
                    "startTime": containers[0].get("startTime") if containers else None,
                    "containers": containers,
                    "cpu": _cpu(linux.cpu if linux is not None and linux.HasField("cpu") else None),
                    "memory": _mem(linux.memory if linux is not None and linux.HasField("memory") else None),
                }
                if linux is not None and linux.HasField("network"):
                    pod["network"] = self._network(linux.network)
                pods.append(self._finish_pod(pod))
            return pods
        resp = None
        with contextlib.suppress(Exception):
            resp = await self.runtime.list_container_stats()
        grouped: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
        for cs in getattr(resp, "stats", resp) or []:
            labels = dict(cs.attributes.labels)
            key = (labels.get(POD_NAMESPACE_LABEL, ""), labels.get(POD_NAME_LABEL, ""), labels.get(POD_UID_LABEL, ""))
            grouped[key].append(cs)
        for (ns, name, uid), items in grouped.items():
            containers = [self._container(cs) for cs in items]
            cpu_total = sum(c.get("cpu", {}).get("usageCoreNanoSeconds", 0) for c in containers)
            nano = sum(c.get("cpu", {}).get("usageNanoCores", 0) for c in containers)
            ws = sum(c.get("memory", {}).get("workingSetBytes", 0) for c in containers)
            usage = sum(c.get("memory", {}).get("usageBytes", 0) for c in containers)
            now = format_rfc3339_nano(time.time_ns())
            pods.append(self._finish_pod({
                "podRef": {"name": name, "namespace": ns, "uid": uid},
                "containers": containers,
                "cpu": {"time": now, "usageCoreNanoSeconds": cpu_total, "usageNanoCores": nano},
                "memory": {"time": now, "workingSetBytes": ws, "usageBytes": usage},
            }))
        return pods

    def _add_volume_stats(self, pods: list[dict[str, Any]]) -> None:
        """Each pod's ``volume`` list: usage of its volumes under ``<root-dir>/pods/<uid>/volumes``."""
        pods_dir = Path(self.root_dir) / "pods"
        for p in pods:
            uid = (p.get("podRef") or {}).get("uid")
            if uid:
                p["volume"] = pod_volume_stats(pods_dir, str(uid))

    @staticmethod
    def _finish_pod(pod: dict[str, Any]) -> dict[str, Any]:
        used = sum(c.get("rootfs", {}).get("usedBytes", 0) + c.get("logs", {}).get("usedBytes", 0)
                   for c in pod["containers"])
        pod["volume"] = []
        pod["ephemeral-storage"] = {"time": format_rfc3339_nano(time.time_ns()), "usedBytes": used}
        if pod.get("startTime") is None:
            pod.pop("startTime", None)
        return pod

    @staticmethod
    def _network(net: Any) -> dict[str, Any]:
        ifaces = []
        for i in net.interfaces:
            ifaces.append({"name": i.name, "rxBytes": _val(i, "rx_bytes") or 0, "rxErrors": _val(i, "rx_errors") or 0,
                           "txBytes": _val(i, "tx_bytes") or 0, "txErrors": _val(i, "tx_errors") or 0})
        out: dict[str, Any] = {"time": format_rfc3339_nano(int(net.timestamp) or time.time_ns()), "interfaces": ifaces}
        if net.HasField("default_interface"):
            d = net.default_interface
            out.update({"name": d.name, "rxBytes": _val(d, "rx_bytes") or 0, "rxErrors": _val(d, "rx_errors") or 0,
                        "txBytes": _val(d, "tx_bytes") or 0, "txErrors": _val(d, "tx_errors") or 0})
        return out

    @staticmethod
    def _container(cs: Any) -> dict[str, Any]:
        attrs = cs.attributes
        name = attrs.metadata.name or dict(attrs.labels).get(CONTAINER_NAME_LABEL, "")
        c: dict[str, Any] = {
            "name": name,
            "cpu": _cpu(cs.cpu if cs.HasField("cpu") else None),
            "memory": _mem(cs.memory if cs.HasField("memory") else None),
            "rootfs": _fs_usage(cs.writable_layer if cs.HasField("writable_layer") else None),
            "logs": {},
            "_id": attrs.id,
        }
        return c

    async def summary(self, *, keep_ids: bool = False) -> dict[str, Any]:
        now = format_rfc3339_nano(time.time_ns())
        mem: dict[str, Any] = dict(await asyncio.to_thread(node_memory))
        mem.pop("capacity", None)
        mem["time"] = now
        fs_path = self.root_dir if await asyncio.to_thread(os.path.exists, self.root_dir) else "/"
        fs = await asyncio.to_thread(fs_stats, fs_path)
        node: dict[str, Any] = {
            "nodeName": self.node_name,
            "startTime": format_rfc3339_nano(int(self._boot * 1e9)),
            "cpu": self._node_cpu(),
            "memory": mem,
            "network": {"time": now, "interfaces": []},
            "fs": {"time": now, **fs},
            "runtime": {"imageFs": {"time": now, **await self._image_fs()}},
            "rlimit": {"time": now, **await asyncio.to_thread(rlimit)},
            "systemContainers": [],
        }
        pods = await self._pod_stats()
        await asyncio.to_thread(self._add_volume_stats, pods)
        if not keep_ids:
            for p in pods:
                for c in p["containers"]:
                    c.pop("_id", None)
        return {"node": node, "pods": pods}

    async def _image_fs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            resp = await self.runtime.image_fs_info()
            fss = list(getattr(resp, "image_filesystems", []) or [])
            if fss:
                fu = fss[0]
                mount = fu.fs_id.mountpoint if fu.HasField("fs_id") else ""
                if mount:
                    st = await asyncio.to_thread(fs_stats, mount)
                    out.update({k: v for k, v in st.items() if k != "usedBytes"})
                used = _val(fu, "used_bytes")
                if used is not None:
                    out["usedBytes"] = used
                inodes_used = _val(fu, "inodes_used")
                if inodes_used is not None:
                    out["inodesUsed"] = inodes_used
        return out


def _uptime() -> float:
    v = _read("/proc/uptime")
    try:
        return float(v.split()[0]) if v else 0.0
    except (ValueError, IndexError):
        return 0.0


# ------------------------------------------------------------------------ Prometheus text exposition


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, type_: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {type_}")

    def sample(self, name: str, labels: dict[str, str], value: float, ts_ms: int | None = None) -> None:
        lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        s = f"{name}{{{lab}}} {value:.9g}" if lab else f"{name} {value:.9g}"
        if ts_ms is not None:
            s += f" {ts_ms}"
        self.lines.append(s)

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


def _ts_ms(obj: dict[str, Any]) -> int | None:
    t = obj.get("time")
    if not t:
        return None
    from pykubelet.agent.server.logs import parse_rfc3339_nano

    try:
        return parse_rfc3339_nano(t) // 1_000_000
    except ValueError:
        return None


def resource_metrics(summary: dict[str, Any] | None) -> str:
    """``/metrics/resource`` from a summary (upstream resource_metrics.go names and labels)."""
    t = _Text()
    node = (summary or {}).get("node", {})
    pods = (summary or {}).get("pods", [])
    t.family("node_cpu_usage_seconds_total", "counter", "[STABLE] Cumulative cpu time consumed by the node in core-seconds")
    if "usageCoreNanoSeconds" in node.get("cpu", {}):
        t.sample("node_cpu_usage_seconds_total", {}, node["cpu"]["usageCoreNanoSeconds"] / 1e9, _ts_ms(node["cpu"]))
    t.family("node_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the node in bytes")
    if "workingSetBytes" in node.get("memory", {}):
        t.sample("node_memory_working_set_bytes", {}, node["memory"]["workingSetBytes"], _ts_ms(node["memory"]))
    t.family("pod_cpu_usage_seconds_total", "counter", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds")
    for p in pods:
        ref = p["podRef"]
        if "usageCoreNanoSeconds" in p.get("cpu", {}):
            t.sample("pod_cpu_usage_seconds_total", {"namespace": ref["namespace"], "pod": ref["name"]},
                     p["cpu"]["usageCoreNanoSeconds"] / 1e9, _ts_ms(p["cpu"]))
    t.family("pod_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the pod in bytes")
    for p in pods:
        ref = p["podRef"]
        if "workingSetBytes" in p.get("memory", {}):
            t.sample("pod_memory_working_set_bytes", {"namespace": ref["namespace"], "pod": ref["name"]},
                     p["memory"]["workingSetBytes"], _ts_ms(p["memory"]))
    t.family("container_cpu_usage_seconds_total", "counter",
             "[STABLE] Cumulative cpu time consumed by the container in core-seconds")
    for p in pods:
        ref = p["podRef"]
        for c in p["containers"]:
            if "usageCoreNanoSeconds" in c.get("cpu", {}):
                t.sample("container_cpu_usage_seconds_total",
                         {"container": c["name"], "namespace": ref["namespace"], "pod": ref["name"]},
                         c["cpu"]["usageCoreNanoSeconds"] / 1e9, _ts_ms(c["cpu"]))
    t.family("container_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the container in bytes")
    for p in pods:
        ref = p["podRef"]
        for c in p["containers"]:
            if "workingSetBytes" in c.get("memory", {}):
                t.sample("container_memory_working_set_bytes",
                         {"container": c["name"], "namespace": ref["namespace"], "pod": ref["name"]},
                         c["memory"]["workingSetBytes"], _ts_ms(c["memory"]))
    t.family("scrape_error", "gauge", "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise")
    t.sample("scrape_error", {}, 0 if summary is not None else 1)
    return t.render()


def cadvisor_metrics(summary: dict[str, Any], *, machine_cores: int, machine_memory: int) -> str:
    """``/metrics/cadvisor``: cAdvisor exporter names with its container/id/image/name/namespace/pod labels."""
    t = _Text()
    node = summary.get("node", {})
    rows: list[tuple[dict[str, str], dict[str, Any]]] = [
        ({"container": "", "id": "/", "image": "", "name": "", "namespace": "", "pod": ""}, node)]
    for p in summary.get("pods", []):
        ref = p["podRef"]
        base = {"image": "", "name": "", "namespace": ref["namespace"], "pod": ref["name"]}
        rows.append(({"container": "", "id": f"/kubepods/pod{ref['uid']}", **base}, p))
        for c in p["containers"]:
            rows.append(({"container": c["name"], "id": f"/kubepods/pod{ref['uid']}/{c.get('_id', '')}", **base}, c))

    def emit(metric: str, type_: str, help_: str, section: str, field: str, scale: float = 1.0,
             extra: dict[str, str] | None = None) -> None:
        t.family(metric, type_, help_)
        for labels, obj in rows:
            v = obj.get(section, {}).get(field)
            if v is not None:
                lab = dict(labels)
                if extra:
                    lab.update(extra)
                t.sample(metric, lab, v / scale, _ts_ms(obj.get(section, {})))

    emit("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds.",
         "cpu", "usageCoreNanoSeconds", 1e9, {"cpu": "total"})
    emit("container_memory_working_set_bytes", "gauge", "Current working set in bytes.", "memory", "workingSetBytes")
    emit("container_memory_usage_bytes", "gauge", "Current memory usage in bytes, including all memory regardless of when it was accessed",
         "memory", "usageBytes")
    emit("container_memory_rss", "gauge", "Size of RSS in bytes.", "memory", "rssBytes")
    t.family("container_network_receive_bytes_total", "counter", "Cumulative count of bytes received")
    t.family("container_network_transmit_bytes_total", "counter", "Cumulative count of bytes transmitted")
    for labels, obj in rows:
        for iface in obj.get("network", {}).get("interfaces", []) if "podRef" in obj else []:
            lab = {**labels, "interface": iface["name"]}
            t.sample("container_network_receive_bytes_total", lab, iface.get("rxBytes", 0))
            t.sample("container_network_transmit_bytes_total", lab, iface.get("txBytes", 0))
    t.family("machine_cpu_cores", "gauge", "Number of logical CPU cores.")
    t.sample("machine_cpu_cores", {}, machine_cores)
    t.family("machine_memory_bytes", "gauge", "Amount of memory installed on the machine.")
    t.sample("machine_memory_bytes", {}, machine_memory)
    return t.render()
