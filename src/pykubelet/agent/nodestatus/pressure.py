"""Node pressure: eviction signals observed on the host, compared with the hard eviction thresholds.

Design: upstream's eviction manager (``pkg/kubelet/eviction``) observes signals on every pass and
the node-status setters report MemoryPressure / DiskPressure / PIDPressure from what it saw.  We do
the observing here (``read_signals``, I/O only) and the deciding in the pure
``pressure_conditions``; ``manager.build_status`` turns the result into conditions through the
existing setters, so reasons, messages, transition times and node events are handled there.

Signals follow upstream ``helpers.go`` (available amounts; a threshold is crossed when the signal is
*less than* it):

- ``memory.available`` = memory capacity (already capped by the agent's cgroup limits, see
  ``machine.py``) - working set; working set = root memory cgroup (v1) ``memory.usage_in_bytes`` -
  ``total_inactive_file``, or, when that is unavailable (cgroup v2 root, macOS), MemTotal -
  MemAvailable from ``/proc/meminfo``;
- ``nodefs.available`` / ``nodefs.inodesFree`` from ``statvfs`` of the kubelet root dir;
- ``imagefs.*``: we do not know the runtime's image filesystem, so it is taken to be the nodefs
  (the common single-disk layout, where upstream observes the same device twice);
- ``pid.available`` = min(``kernel.pid_max``, ``kernel.threads-max``) - processes in ``/proc``.

Thresholds are quantities or percentages of the signal's capacity; a signal that could not be
observed, or a percentage whose capacity is unknown, never signals pressure.

The conditions the node reports are the eviction manager's (``agent/eviction``: hard and soft
thresholds, minimum reclaim, ``evictionPressureTransitionPeriod``), handed in through the
``NodePressureProvider`` seam (``node_pressure``); the comparison with ``evictionHard`` here is only
the fallback before its first pass (or for a status manager run without an engine). The readers below
are also the eviction manager's memory/filesystem/pid observations.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

from pykubelet.common.procfs import read_meminfo
from pykubelet.common.quantity import QuantityError, parse_quantity

from . import setters
from .machine import HostPaths

log = logging.getLogger(__name__)

SIGNAL_CONDITION = {
    "memory.available": setters.MEMORY_PRESSURE,
    "allocatableMemory.available": setters.MEMORY_PRESSURE,
    "nodefs.available": setters.DISK_PRESSURE,
    "nodefs.inodesFree": setters.DISK_PRESSURE,
    "imagefs.available": setters.DISK_PRESSURE,
    "imagefs.inodesFree": setters.DISK_PRESSURE,
    "containerfs.available": setters.DISK_PRESSURE,
    "containerfs.inodesFree": setters.DISK_PRESSURE,
    "pid.available": setters.PID_PRESSURE,
}


# --------------------------------------------------------------------------- pure decision


def threshold_value(threshold: str, capacity: int | None) -> Decimal | None:
    """A threshold in the signal's unit; None when it is a percentage of an unknown capacity."""
    t = str(threshold).strip()
    try:
        if t.endswith("%"):
            if not capacity or capacity <= 0:
                return None
            return Decimal(capacity) * Decimal(t[:-1]) / Decimal(100)
        return parse_quantity(t).value
    except (QuantityError, ArithmeticError, ValueError):
        return None


def pressure_conditions(
    signals: Mapping[str, int], thresholds: Mapping[str, str], capacity: Mapping[str, int]
) -> dict[str, bool]:
    """Condition type → under pressure, for MemoryPressure, DiskPressure and PIDPressure.

    ``signals`` maps a signal to its observed available amount, ``capacity`` to its total (the base
    of percentage thresholds), ``thresholds`` is ``evictionHard``.  Crossed means available < threshold.
    """
    out = {setters.MEMORY_PRESSURE: False, setters.DISK_PRESSURE: False, setters.PID_PRESSURE: False}
    for signal, threshold in thresholds.items():
        cond = SIGNAL_CONDITION.get(signal)
        observed = signals.get(signal)
        if cond is None or observed is None:
            continue
        limit = threshold_value(threshold, capacity.get(signal))
        if limit is not None and Decimal(observed) < limit:
            out[cond] = True
    return out


def node_pressure(
    decided: Mapping[str, bool] | None, signals: Mapping[str, int], thresholds: Mapping[str, str],
    capacity: Mapping[str, int],
) -> dict[str, bool]:
    """The conditions to report: the eviction manager's decision when it has one, else the hard
    thresholds against the signals observed here."""
    if decided is not None:
        out = {setters.MEMORY_PRESSURE: False, setters.DISK_PRESSURE: False, setters.PID_PRESSURE: False}
        out.update({k: bool(v) for k, v in decided.items() if k in out})
        return out
    return pressure_conditions(signals, thresholds, capacity)


def parse_memory_stat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        k, _, v = line.strip().partition(" ")
        with contextlib.suppress(ValueError):
            out[k] = int(v)
    return out


# --------------------------------------------------------------------------- readers


def _read(p: Path) -> str | None:
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def working_set_bytes(paths: HostPaths) -> int | None:
    """Working set of the whole node as upstream computes it for memory.available."""
    mem = paths.cgroup_root / "memory"
    usage = _read(mem / "memory.usage_in_bytes")
    stat = _read(mem / "memory.stat")
    if usage is not None and stat is not None:
        with contextlib.suppress(ValueError):
            inactive = parse_memory_stat(stat).get("total_inactive_file", 0)
            return max(0, int(usage.strip()) - inactive)
    info = read_meminfo(paths.proc)
    if "MemTotal" in info and "MemAvailable" in info:
        return max(0, info["MemTotal"] - info["MemAvailable"])
    return None


def _statvfs(path: Path) -> os.statvfs_result | None:
    p = path
    while True:
        try:
            return os.statvfs(p)
        except OSError:
            if p.parent == p:
                return None
            p = p.parent


def _pid_max(paths: HostPaths) -> int | None:
    values = []
    for name in ("pid_max", "threads-max"):
        with contextlib.suppress(TypeError, ValueError):
            values.append(int((_read(paths.proc / "sys" / "kernel" / name) or "").strip()))
    return min(values) if values else None


def _process_count(paths: HostPaths) -> int | None:
    try:
        with os.scandir(paths.proc) as it:
            return sum(1 for e in it if e.name.isdigit())
    except OSError:
        return None


def read_signals(
    memory_capacity: int, root_dir: str | os.PathLike[str], paths: HostPaths | None = None, *, pids: bool = True,
) -> tuple[dict[str, int], dict[str, int]]:
    """Observe (signal → available, signal → capacity); unobservable signals are left out.

    ``pids=False`` skips ``pid.available`` (a scan of ``/proc``) when no threshold uses it."""
    paths = paths or HostPaths()
    signals: dict[str, int] = {}
    capacity: dict[str, int] = {}
    ws = working_set_bytes(paths)
    if ws is not None and memory_capacity > 0:
        signals["memory.available"] = max(0, memory_capacity - ws)
        capacity["memory.available"] = memory_capacity
    st = _statvfs(Path(root_dir))
    if st is not None:
        for fs in ("nodefs", "imagefs"):
            signals[f"{fs}.available"] = st.f_bavail * st.f_frsize
            capacity[f"{fs}.available"] = st.f_blocks * st.f_frsize
            if st.f_files > 0:  # filesystems without inode limits report 0 inodes
                signals[f"{fs}.inodesFree"] = st.f_favail
                capacity[f"{fs}.inodesFree"] = st.f_files
    pid_max = _pid_max(paths) if pids else None
    procs = _process_count(paths) if pid_max is not None else None
    if pid_max is not None and procs is not None:
        signals["pid.available"] = max(0, pid_max - procs)
        capacity["pid.available"] = pid_max
    return signals, capacity
