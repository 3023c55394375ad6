"""What the machine offers: CPUs, memory, hugepages, disk, identity, addresses.

Design: upstream gets these from cAdvisor (``MachineInfo``) and the host's identity files; we read
the same sources directly.  All file reads go through a ``HostPaths`` value (default: the real
``/proc``, ``/sys``, ``/etc``) so tests can point the readers at a fake tree, and the decisions
(capping by cgroup limits) are small pure functions.  Nothing here raises on odd machines: a value
that cannot be read is left empty and logged, so node status is still posted.

Deliberate difference from upstream: the reported CPU and memory capacity are capped by the cgroup
limits the agent itself runs under (cgroup v1 cpu.cfs_quota_us/cfs_period_us and
memory.limit_in_bytes, cgroup v2 cpu.max and memory.max, the tightest along the ancestry).  When the
agent runs inside a container (the dev ``pykubelet up`` setup, CI) the machine totals would
over-promise what pods can actually get.  On macOS (development only) CPU and memory come from
``sysctl hw.ncpu`` / ``hw.memsize``.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import math
import os
import platform
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pykubelet.common.procfs import read_meminfo

log = logging.getLogger(__name__)

# cgroup v1 reports "no limit" as a huge page-aligned number.
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class HostPaths:
    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    etc: Path = Path("/etc")
    cgroup_root: Path = Path("/sys/fs/cgroup")


@dataclass
class MachineInfo:
    num_cores: int = 0
    cpu_millis: int = 0  # capacity after cgroup capping
    memory_bytes: int = 0  # capacity after cgroup capping
    hugepages: dict[str, int] = field(default_factory=dict)  # "hugepages-2Mi" -> bytes
    machine_id: str = ""
    system_uuid: str = ""
    boot_id: str = ""
    kernel_version: str = ""
    os_image: str = ""
    operating_system: str = ""
    architecture: str = ""


# --------------------------------------------------------------------------- pure decisions


def cap_cpu_millis(num_cores: int, quota_us: int | None, period_us: int | None) -> int:
    """CPU capacity in millicores: the machine's cores, lowered to a CFS quota if one applies."""
    machine = num_cores * 1000
    if quota_us is None or period_us is None or quota_us <= 0 or period_us <= 0:
        return machine
    limited = math.ceil(quota_us * 1000 / period_us)
    return max(1, min(machine, limited))


def cap_memory(machine_bytes: int, limit_bytes: int | None) -> int:
    if limit_bytes is None or limit_bytes <= 0 or limit_bytes >= _V1_UNLIMITED:
        return machine_bytes
    return min(machine_bytes, limit_bytes) if machine_bytes > 0 else limit_bytes


def go_arch(machine: str) -> str:
    """Map ``uname -m`` to GOARCH as upstream reports it (runtime.GOARCH)."""
    m = machine.lower()
    return {
        "x86_64": "amd64",
        "amd64": "amd64",
        "aarch64": "arm64",
        "arm64": "arm64",
        "armv7l": "arm",
        "armv6l": "arm",
        "i386": "386",
        "i686": "386",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
        "riscv64": "riscv64",
    }.get(m, m)


def go_os(sys_platform: str = sys.platform) -> str:
    if sys_platform.startswith("linux"):
        return "linux"
    if sys_platform == "darwin":
        return "darwin"
    if sys_platform.startswith("win"):
        return "windows"
    return sys_platform


def parse_os_release(text: str) -> str:
    """PRETTY_NAME from /etc/os-release (upstream osImage), falling back to NAME."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep:
            values[k] = v.strip().strip('"').strip("'")
    return values.get("PRETTY_NAME") or values.get("NAME") or ""


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup → controller → path; the v2 unified entry has key ""."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out[""] = path
        for c in controllers.split(","):
            if c:
                out[c] = path
    return out


# --------------------------------------------------------------------------- readers


def _read(p: Path) -> str | None:
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(p: Path) -> int | None:
    s = _read(p)
    if s is None:
        return None
    try:
        return int(s.strip())
    except ValueError:
        return None


def _ancestry(base: Path, rel: str) -> list[Path]:
    """``base/rel`` and each parent up to ``base`` (the tightest limit may sit on an ancestor)."""
    rel = rel.strip("/")
    out = []
    parts = rel.split("/") if rel else []
    for i in range(len(parts), -1, -1):
        p = base.joinpath(*parts[:i]) if i else base
        out.append(p)
    return out


def cgroup_limits(paths: HostPaths) -> tuple[int | None, int | None, int | None]:
    """(cpu quota µs, cpu period µs, memory limit bytes) of the agent's own cgroup, tightest wins."""
    mapping = parse_proc_cgroup(_read(paths.proc / "self" / "cgroup") or "")
    root = paths.cgroup_root
    quota: int | None = None
    period: int | None = None
    mem: int | None = None
    best_cpu = math.inf

    if (root / "cgroup.controllers").exists():  # pure v2
        rel = mapping.get("", "/")
        for d in _ancestry(root, rel):
            cpu_max = _read(d / "cpu.max")
            if cpu_max:
                q, _, per = cpu_max.strip().partition(" ")
                if q != "max" and per:
                    with contextlib.suppress(ValueError):
                        qi, pi = int(q), int(per)
                        if pi > 0 and qi / pi < best_cpu:
                            best_cpu, quota, period = qi / pi, qi, pi
            mem_max = _read(d / "memory.max")
            if mem_max and mem_max.strip() != "max":
                with contextlib.suppress(ValueError):
                    m = int(mem_max.strip())
                    mem = m if mem is None else min(mem, m)
        return quota, period, mem

    # v1 (or hybrid: v1 controllers, v2 only for process tracking)
    cpu_rel = mapping.get("cpu", mapping.get("cpuacct", "/"))
    for base in (root / "cpu,cpuacct", root / "cpu"):
        if base.exists():
            for d in _ancestry(base, cpu_rel):
                q1 = _read_int(d / "cpu.cfs_quota_us")
                p1 = _read_int(d / "cpu.cfs_period_us")
                if q1 is not None and p1 and q1 > 0 and q1 / p1 < best_cpu:
                    best_cpu, quota, period = q1 / p1, q1, p1
            break
    mem_base = root / "memory"
    if mem_base.exists():
        for d in _ancestry(mem_base, mapping.get("memory", "/")):
            m1 = _read_int(d / "memory.limit_in_bytes")
            if m1 is not None and m1 < _V1_UNLIMITED:
                mem = m1 if mem is None else min(mem, m1)
    return quota, period, mem


def _sysctl(name: str) -> int:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=True)
        return int(out.stdout.strip())
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        log.warning("cannot read sysctl %s: %s", name, e)
        return 0


def _hugepages(paths: HostPaths) -> dict[str, int]:
    """hugepages-<size> → bytes reserved, for every page size the kernel supports (0 if none)."""
    out: dict[str, int] = {}
    base = paths.sys / "kernel" / "mm" / "hugepages"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for name in entries:
        if not name.startswith("hugepages-") or not name.endswith("kB"):
            continue
        try:
            kb = int(name[len("hugepages-"):-2])
        except ValueError:
            continue
        count = _read_int(base / name / "nr_hugepages") or 0
        out[f"hugepages-{_page_size_name(kb * 1024)}"] = count * kb * 1024
    return out


def _page_size_name(size: int) -> str:
    for suffix, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if size % (1 << shift) == 0:
            return f"{size >> shift}{suffix}"
    return str(size)


def read_machine_info(paths: HostPaths | None = None) -> MachineInfo:
    """Read the machine; never raises (missing values stay empty)."""
    paths = paths or HostPaths()
    info = MachineInfo(operating_system=go_os(), architecture=go_arch(platform.machine()))
    info.kernel_version = platform.release()
    if sys.platform == "darwin":
        info.num_cores = _sysctl("hw.ncpu") or (os.cpu_count() or 0)
        info.cpu_millis = info.num_cores * 1000
        info.memory_bytes = _sysctl("hw.memsize")
        info.os_image = f"macOS {platform.mac_ver()[0]}".strip()
        return info

    try:
        info.num_cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info.num_cores = os.cpu_count() or 0
    machine_mem = read_meminfo(paths.proc).get("MemTotal", 0)
    quota, period, mem_limit = cgroup_limits(paths)
    info.cpu_millis = cap_cpu_millis(info.num_cores, quota, period)
    info.memory_bytes = cap_memory(machine_mem, mem_limit)
    info.hugepages = _hugepages(paths)
    info.machine_id = (_read(paths.etc / "machine-id") or "").strip()
    info.system_uuid = (_read(paths.sys / "class" / "dmi" / "id" / "product_uuid") or "").strip()
    info.boot_id = (_read(paths.proc / "sys" / "kernel" / "random" / "boot_id") or "").strip()
    kv = (_read(paths.proc / "sys" / "kernel" / "osrelease") or "").strip()
    if kv:
        info.kernel_version = kv
    info.os_image = parse_os_release(_read(paths.etc / "os-release") or "") or "Linux"
    return info


def filesystem_capacity(path: str | os.PathLike[str]) -> int:
    """Total bytes of the filesystem holding ``path`` (or its nearest existing parent)."""
    p = Path(path)
    while True:
        try:
            st = os.statvfs(p)
            return st.f_blocks * st.f_frsize
        except OSError:
            if p.parent == p:
                return 0
            p = p.parent


# --------------------------------------------------------------------------- addresses


def _interface_ipv4s() -> list[str]:
    """IPv4 addresses of the host's interfaces (Linux SIOCGIFADDR), in interface index order."""
    out: list[str] = []
    try:
        names = socket.if_nameindex()
    except OSError:
        return out
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in names:
            try:
                res = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name[:15].encode()))
                out.append(socket.inet_ntoa(res[20:24]))
            except OSError:
                continue
    return out


def pick_node_ip(candidates: list[str]) -> str | None:
    """First usable, non-loopback, non-link-local address (IPv4 preferred like upstream)."""
    parsed = []
    for c in candidates:
        try:
            ip = ipaddress.ip_address(c)
        except ValueError:
            continue
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
            continue
        parsed.append(ip)
    parsed.sort(key=lambda ip: ip.version)  # stable: keeps discovery order within a family
    return str(parsed[0]) if parsed else None


def discover_node_ip(hostname: str) -> str:
    """Upstream order: resolve the host name, else the interfaces; loopback as a last resort."""
    candidates: list[str] = []
    try:
        for info in socket.getaddrinfo(hostname, None):
            candidates.append(str(info[4][0]))
    except OSError:
        pass
    ip = pick_node_ip(candidates) or pick_node_ip(_interface_ipv4s())
    if ip is None:
        log.warning("no non-loopback address found for node %s; using 127.0.0.1", hostname)
        return "127.0.0.1"
    return ip
