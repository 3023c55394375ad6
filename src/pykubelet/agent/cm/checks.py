"""Container-manager startup checks (upstream ``cm.NewContainerManager`` / ``validateSystemRequirements``
and the CRI ``RuntimeConfig`` cgroup-driver check in ``kubelet.go``).

The agent refuses to start, with a message naming the setting, when:
- swap is on and ``failSwapOn`` is true (upstream: "running with swap on is not supported, please
  disable swap! or set --fail-swap-on flag to false. /proc/swaps contained: [...]");
- ``cgroupDriver: systemd`` but systemd is not PID 1 (nothing would own the slices);
- the runtime reports a different cgroup driver than ``cgroupDriver`` (pods would land in two trees).
  Upstream reads it from CRI ``RuntimeConfig``; runtimes without that call (containerd 1.6) are asked
  through their verbose ``Status`` (containerd's CRI config: ``SystemdCgroup`` of the default runc
  runtime); when neither says, a log line tells that the driver could not be checked.
The decisions are pure functions of the text read; ``run_startup_checks`` does the reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from pykubelet.agent.config import ConfigError, KubeletConfiguration
from pykubelet.common.quantity import QuantityError, parse_quantity

from .podcgroups import PodCgroupManager

log = logging.getLogger(__name__)


def swap_error(fail_swap_on: bool, proc_swaps: str | None) -> str | None:
    if not fail_swap_on or not proc_swaps:
        return None
    lines = [ln for ln in proc_swaps.splitlines()[1:] if ln.strip()]
    if not lines:
        return None
    return ("failSwapOn: running with swap on is not supported, please disable swap! or set --fail-swap-on "
            f"flag to false. /proc/swaps contained: {lines}")


def systemd_error(driver: str, pid1_comm: str | None) -> str | None:
    if driver != "systemd" or (pid1_comm or "").strip() == "systemd":
        return None
    return (f"cgroupDriver: systemd requires systemd running as PID 1 (PID 1 is {(pid1_comm or '?').strip()!r}); "
            "use cgroupDriver: cgroupfs")


def runtime_cgroup_driver(status_info: dict[str, str]) -> str | None:
    """The runtime's cgroup driver from containerd's verbose CRI Status ``config``; None if unknown."""
    raw = status_info.get("config")
    if not raw:
        return None
    try:
        config: Any = json.loads(raw)
        cd = config.get("containerd") or {}
        default = cd.get("defaultRuntimeName") or "runc"
        runtime = (cd.get("runtimes") or {}).get(default) or {}
        opts = runtime.get("options") or {}
    except (ValueError, AttributeError):
        return None
    if "SystemdCgroup" in opts:
        return "systemd" if opts["SystemdCgroup"] else "cgroupfs"
    if config.get("systemdCgroup") is not None:  # containerd 1.x CRI plugin top-level option
        return "systemd" if config["systemdCgroup"] else "cgroupfs"
    return None


def driver_mismatch_error(agent_driver: str, runtime_driver: str | None) -> str | None:
    if runtime_driver is None or runtime_driver == agent_driver:
        return None
    return (f"cgroupDriver: the agent is configured with {agent_driver!r} but the container runtime uses "
            f"{runtime_driver!r}; set cgroupDriver: {runtime_driver} (or change the runtime's driver)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


async def run_startup_checks(cfg: KubeletConfiguration, runtime: Any, *, proc: Path = Path("/proc")) -> None:
    """Raise ``ConfigError`` for a configuration this node cannot run."""
    swaps, pid1 = await asyncio.to_thread(lambda: (_read(proc / "swaps"), _read(proc / "1" / "comm")))
    for err in (swap_error(cfg.fail_swap_on, swaps), systemd_error(cfg.cgroup_driver, pid1)):
        if err:
            raise ConfigError(err)
    runtime_driver: str | None = None
    try:
        resp = await runtime.status(verbose=True)
        runtime_driver = runtime_cgroup_driver(dict(getattr(resp, "info", {}) or {}))
    except Exception as e:
        log.debug("runtime status for the cgroup driver: %s", e)
    if runtime_driver is None:
        log.info("the container runtime does not report its cgroup driver (no CRI RuntimeConfig): "
                 "cgroupDriver %s not checked against it", cfg.cgroup_driver)
    err = driver_mismatch_error(cfg.cgroup_driver, runtime_driver)
    if err:
        raise ConfigError(err)


def reserved_amounts(*reservations: dict[str, str]) -> dict[str, int]:
    """Sum of reservations: cpu in millicores, memory/ephemeral-storage in bytes, pid as a count."""
    out: dict[str, int] = {}
    for res in reservations:
        for name, raw in res.items():
            try:
                q = parse_quantity(raw)
            except (QuantityError, ValueError):
                continue
            out[name] = out.get(name, 0) + (q.milli_value() if name == "cpu" else q.int_value())
    return out


async def enforce_node_allocatable(cgroups: PodCgroupManager, cfg: KubeletConfiguration, *,
                                   cpu_millis: int, memory_bytes: int) -> None:
    """Upstream ``enforceNodeAllocatableCgroups``: kubepods limited to capacity - reservations
    (``pods``), the reserved cgroups to their reservations (``system-reserved``/``kube-reserved``)."""
    enforce = set(cfg.enforce_node_allocatable)
    unknown = enforce - {"pods", "system-reserved", "kube-reserved", "none"}
    if unknown:
        raise ConfigError(f"enforceNodeAllocatable: unsupported value(s) {sorted(unknown)}")
    reserved = reserved_amounts(cfg.system_reserved, cfg.kube_reserved)
    if "pods" in enforce and cfg.cgroups_per_qos:
        alloc = {"cpu": max(0, cpu_millis - reserved.get("cpu", 0)),
                 "memory": max(0, memory_bytes - reserved.get("memory", 0))}
        cgroups.node_allocatable = alloc
    for key, cgroup, amounts in (
        ("system-reserved", cfg.system_reserved_cgroup, reserved_amounts(cfg.system_reserved)),
        ("kube-reserved", cfg.kube_reserved_cgroup, reserved_amounts(cfg.kube_reserved)),
    ):
        if key not in enforce:
            continue
        setting = "systemReservedCgroup" if key == "system-reserved" else "kubeReservedCgroup"
        if not cgroup:
            raise ConfigError(f"enforceNodeAllocatable: {key} requires {setting} to be set")
        try:
            await asyncio.to_thread(cgroups.enforce_reserved, cgroup, amounts)
        except FileNotFoundError as e:
            raise ConfigError(f"{setting}: cgroup {cgroup!r} does not exist ({e})") from None
