"""Pod-level cgroups on cgroup v1 with the cgroupfs driver (upstream pkg/kubelet/cm, pod_container_manager).

Layout follows upstream's QoS hierarchy (``cgroupsPerQOS``) below the configured cgroup root
(``cgroupRoot``; ``/pykubelet`` when empty so the agent never touches the host's top level):

    <root>/kubepods/pod<uid>                 Guaranteed
    <root>/kubepods/burstable/pod<uid>       Burstable
    <root>/kubepods/besteffort/pod<uid>      BestEffort

The pod cgroup path is handed to the runtime as the sandbox's ``linux.cgroup_parent``; runc creates the
container cgroups below it, in every mounted hierarchy (``name=systemd`` and ``unified`` included), but
never removes the pod level, so ``destroy`` does in all of them (after the pod is gone) and
housekeeping removes pod cgroups of pods the agent does not know. Pod-level limits follow upstream
``ResourceConfigForPod``: cpu.shares from requests, a CFS quota and a memory limit only when every
container declares that limit. All filesystem work runs in a thread (``asyncio.to_thread``). Without
root or a cgroup v1 hierarchy the manager is a logged no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from pykubelet.agent.interfaces import HousekeepingContext
from pykubelet.common import podutil

log = logging.getLogger(__name__)

CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "cpuset", "hugetlb", "blkio", "devices", "freezer")
MIN_SHARES = 2
CPU_PERIOD = 100000


def cpu_shares_for_millis(millis: int) -> int:
    """Upstream MilliCPUToShares."""
    if millis == 0:
        return MIN_SHARES
    return max(MIN_SHARES, (millis * 1024) // 1000)


def cpu_quota_for_millis(millis: int, period: int = CPU_PERIOD) -> int:
    """Upstream MilliCPUToQuota (minimum 1000 µs)."""
    if millis == 0:
        return 0
    return max(1000, (millis * period) // 1000)


class PodCgroupManager:
    def __init__(self, cgroup_root: str = "", *, enabled: bool = True, mount: str = "/sys/fs/cgroup") -> None:
        self.root = "/" + (cgroup_root or "/pykubelet").strip("/")
        self.mount = Path(mount)
        self.enabled = enabled and self._usable()
        self._ensured: set[str] = set()

    def _usable(self) -> bool:
        if str(self.mount) == "/sys/fs/cgroup" and os.geteuid() != 0:
            log.info("pod cgroups disabled: not running as root")
            return False
        if not (self.mount / "memory").is_dir() or not (self.mount / "cpu").is_dir():
            log.info("pod cgroups disabled: no cgroup v1 hierarchy at %s", self.mount)
            return False
        return True

    # -- naming -----------------------------------------------------------------------------
    def qos_parent(self, qos: str) -> str:
        base = f"{self.root}/kubepods"
        if qos == "Guaranteed":
            return base
        return f"{base}/{qos.lower()}"

    def pod_cgroup(self, pod: dict[str, Any]) -> str:
        uid = (pod.get("metadata") or {}).get("uid", "")
        return f"{self.qos_parent(podutil.qos_class(pod))}/pod{uid}"

    def cgroup_parent(self, pod: dict[str, Any]) -> str:
        return self.pod_cgroup(pod) if self.enabled else ""

    # -- operations -------------------------------------------------------------------------
    def _controllers(self) -> list[Path]:
        return [self.mount / c for c in CONTROLLERS if (self.mount / c).is_dir()]

    def _hierarchies(self) -> list[Path]:
        """Every mounted hierarchy, not only the controllers the agent writes to: runc also creates
        the pod's path under ``name=systemd`` and ``unified``, and nobody else removes it there."""
        try:
            return [p for p in self.mount.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return self._controllers()

    def _mkdir(self, ctrl: Path, rel: str) -> None:
        path = ctrl
        for part in rel.strip("/").split("/"):
            parent, path = path, path / part
            if not path.exists():
                path.mkdir()
                if ctrl.name == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        try:
                            (path / f).write_text((parent / f).read_text())
                        except OSError:
                            pass

    def _write(self, ctrl: str, rel: str, name: str, value: int) -> None:
        try:
            (self.mount / ctrl / rel.strip("/") / name).write_text(str(value))
        except OSError as e:
            log.debug("cgroup write %s/%s=%s failed: %s", rel, name, value, e)

    def _ensure_sync(self, pod: dict[str, Any]) -> None:
        rel = self.pod_cgroup(pod)
        for ctrl in self._controllers():
            try:
                self._mkdir(ctrl, rel)
            except OSError as e:
                log.warning("cannot create cgroup %s in %s: %s", rel, ctrl.name, e)
        containers = (pod.get("spec") or {}).get("containers") or []
        req = podutil.pod_requests(pod)
        lim = podutil.pod_limits(pod)
        self._write("cpu", rel, "cpu.shares", cpu_shares_for_millis(podutil.to_millis(req.get("cpu") or Decimal(0))))
        all_cpu = bool(containers) and all(podutil.container_limits(c).get("cpu") for c in containers)
        all_mem = bool(containers) and all(podutil.container_limits(c).get("memory") for c in containers)
        if all_cpu and lim.get("cpu"):
            self._write("cpu", rel, "cpu.cfs_period_us", CPU_PERIOD)
            self._write("cpu", rel, "cpu.cfs_quota_us", cpu_quota_for_millis(podutil.to_millis(lim["cpu"])))
        if all_mem and lim.get("memory"):
            self._write("memory", rel, "memory.limit_in_bytes", int(lim["memory"]))

    def _rmtree(self, path: Path) -> None:
        if not path.is_dir():
            return
        for child in path.iterdir():
            if child.is_dir():
                self._rmtree(child)
        try:
            path.rmdir()
        except OSError as e:
            if str(self.mount) == "/sys/fs/cgroup":
                log.debug("cannot remove cgroup %s: %s", path, e)
                return
            # not a real cgroupfs (tests): control "files" are plain files
            for f in path.iterdir():
                if f.is_file():
                    f.unlink(missing_ok=True)
            try:
                path.rmdir()
            except OSError as e2:
                log.debug("cannot remove cgroup %s: %s", path, e2)

    def _destroy_sync(self, uid: str) -> None:
        for rel in self._paths_for_uid(uid):
            for hierarchy in self._hierarchies():
                self._rmtree(hierarchy / rel.strip("/"))

    def _paths_for_uid(self, uid: str) -> list[str]:
        return [f"{self.qos_parent(q)}/pod{uid}" for q in ("Guaranteed", "Burstable", "BestEffort")]

    def _list_sync(self) -> set[str]:
        out: set[str] = set()
        for hierarchy in self._hierarchies():
            for q in ("Guaranteed", "Burstable", "BestEffort"):
                try:
                    with os.scandir(hierarchy / self.qos_parent(q).strip("/")) as entries:
                        # d_type from the directory listing: no stat per pod (this runs every 2 s)
                        out.update(e.name[3:] for e in entries if e.name.startswith("pod") and e.is_dir())
                except OSError:
                    continue
        return out

    async def ensure(self, pod: dict[str, Any]) -> None:
        """Create the pod cgroup and set its limits, once per pod (every sync calls this; the limits
        follow the spec, which cannot change resources without a new pod)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        if self.enabled and uid not in self._ensured:
            await asyncio.to_thread(self._ensure_sync, pod)
            self._ensured.add(uid)

    async def destroy(self, uid: str) -> None:
        self._ensured.discard(uid)
        if self.enabled:
            await asyncio.to_thread(self._destroy_sync, uid)

    async def cleanup(self, ctx: HousekeepingContext) -> None:
        """Housekeeping step: remove the cgroups of pods the node no longer knows (orphans)."""
        for uid in await self.list_pod_uids():
            if uid not in ctx.known:
                await self.destroy(uid)

    async def list_pod_uids(self) -> set[str]:
        if not self.enabled:
            return set()
        return await asyncio.to_thread(self._list_sync)

    # -- PodLifecycleHook: the pod cgroup exists before its sandbox, and goes with its containers
    async def prepare_pod(self, pod: dict[str, Any]) -> None:
        await self.ensure(pod)

    async def release_pod(self, uid: str) -> None:
        await self.destroy(uid)
