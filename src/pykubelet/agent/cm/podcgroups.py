"""Pod and QoS cgroups on cgroup v1 and v2, with the cgroupfs and systemd drivers (upstream
``pkg/kubelet/cm``: ``pod_container_manager_linux.go``, ``qos_container_manager_linux.go``,
``node_container_manager_linux.go``).

Layout follows upstream's QoS hierarchy (``cgroupsPerQOS``) below the configured cgroup root
(``cgroupRoot``; for cgroupfs ``/pykubelet`` when empty so the agent never touches the host's top
level):

    cgroupfs                                   systemd
    <root>/kubepods/pod<uid>                   kubepods.slice/kubepods-pod<uid>.slice
    <root>/kubepods/burstable/pod<uid>         kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice
    <root>/kubepods/besteffort/pod<uid>        kubepods.slice/kubepods-besteffort.slice/...

The pod cgroup path is handed to the runtime as the sandbox's ``linux.cgroup_parent``; runc creates
the container cgroups below it but never removes the pod level, so ``destroy`` does (after the pod is
gone; on v1 in every mounted hierarchy, ``name=systemd`` and ``unified`` included) and housekeeping
removes pod cgroups of pods the agent does not know. The values come from the pure ``cgroups``
module (``ResourceConfigForPod``, QoS tiers, v1/v2 files); with the systemd driver each slice is
first created as a transient unit through the ``SystemdUnits`` seam (systemd's D-Bus API), then the
same files are written, as upstream's libcontainer systemd manager does.

- ``kubepods`` is limited to node allocatable (capacity - system/kube reserved, cpu shares and
  memory) when ``enforceNodeAllocatable`` contains ``pods``; ``system-reserved`` /
  ``kube-reserved`` in it limit ``systemReservedCgroup`` / ``kubeReservedCgroup`` to their
  reservation (the cgroups must exist: a clear startup error otherwise, as upstream);
- the Burstable / BestEffort tiers are updated when pods come and go (only changed values are
  written), and at least every ``QOS_RESYNC_PERIOD`` (upstream ``periodicQOSCgroupUpdateInterval``,
  1 min) — not on every housekeeping pass: with the same pods the values cannot have changed, and
  recomputing them walked every pod and stat'ed the tier directories in every hierarchy every 2 s.

Housekeeping's orphan scan (``cleanup``) lists the pod cgroups of every hierarchy. An orphan appears
only when a pod leaves the node's known pods (or a removal failed, or something outside the agent made
one), so a pass with the same known pods as the last scan that found none skips the scan, and a full
scan still runs at least every ``QOS_RESYNC_PERIOD`` (upstream lists every 2 s; at 110 pods on cgroup
v1 that was ~2 ms of a worker thread per pass, the largest part of an idle node's housekeeping).
An orphan that cannot be removed (``EBUSY``: processes still in it, which the agent did not start,
since its own containers are stopped through the runtime first) is logged once and tried again after
``ORPHAN_RETRY_FIRST`` seconds, the wait doubling up to ``QOS_RESYNC_PERIOD``: retried with a full
scan on every pass, one such cgroup cost ~10 % of a core in the executor threads. (Upstream kills
the processes in an orphan pod cgroup, ``tryKillingCgroupProcesses``, and retries every 2 s.)

All filesystem work runs in a thread (``asyncio.to_thread``). Without root or a cgroup hierarchy
the manager is a logged no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from pykubelet.agent.interfaces import HousekeepingContext
from pykubelet.common import podutil

from . import cgroups as cg
from .cgroups import CgroupDriver, CgroupVersion, ResourceConfig

log = logging.getLogger(__name__)

V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "cpuset", "hugetlb", "blkio", "devices", "freezer")
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "pids", "hugetlb", "io")
QOS_CLASSES = (podutil.QOS_GUARANTEED, podutil.QOS_BURSTABLE, podutil.QOS_BEST_EFFORT)
MIN_SHARES = cg.MIN_SHARES
CPU_PERIOD = cg.DEFAULT_PERIOD_US
QOS_RESYNC_PERIOD = 60.0  # upstream periodicQOSCgroupUpdateInterval; also the orphan scan's safety net
ORPHAN_RETRY_FIRST = 2.0  # seconds before an orphan that could not be removed is tried again (doubling)


def cpu_shares_for_millis(millis: int) -> int:
    """Upstream MilliCPUToShares (kept for callers of the old name)."""
    return cg.milli_cpu_to_shares(millis)


def cpu_quota_for_millis(millis: int, period: int = CPU_PERIOD) -> int:
    """Upstream MilliCPUToQuota (minimum 1000 µs)."""
    return cg.milli_cpu_to_quota(millis, period)


class SystemdUnits(Protocol):
    """The systemd D-Bus calls the systemd driver makes (``StartTransientUnit`` / ``StopUnit`` of
    slices); unit tests use a fake."""

    def ensure_slice(self, name: str) -> None: ...
    def remove_slice(self, name: str) -> None: ...


class PodCgroupManager:
    def __init__(
        self,
        cgroup_root: str = "",
        *,
        enabled: bool = True,
        mount: str = "/sys/fs/cgroup",
        driver: CgroupDriver | str = CgroupDriver.CGROUPFS,
        systemd: SystemdUnits | None = None,
        cfs_quota: bool = True,
        cfs_period_us: int = CPU_PERIOD,
        pod_pids_limit: int = -1,
        swap_behavior: str = "",
        qos_reserved: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.driver = CgroupDriver(driver)
        if self.driver is CgroupDriver.SYSTEMD:
            self.root = "/" + cgroup_root.strip("/") if cgroup_root.strip("/") else ""
        else:
            self.root = "/" + (cgroup_root or "/pykubelet").strip("/")
        self.mount = Path(mount)
        self.systemd = systemd
        self.cfs_quota = cfs_quota
        self.cfs_period_us = cfs_period_us
        self.pod_pids_limit = pod_pids_limit
        self.swap_behavior = swap_behavior
        self.qos_reserved = dict(qos_reserved or {})
        self.version: CgroupVersion | None = None
        self.enabled = enabled and self._usable()
        self._ensured: set[str] = set()
        self._written: dict[str, str] = {}  # path/file -> value last written (QoS tiers)
        self.clock = clock
        # what the last QoS update and orphan scan saw, and when (see the module docstring)
        self._qos_seen: tuple[frozenset[str], float] | None = None
        self._scan_seen: tuple[frozenset[str], float] | None = None
        self._stuck: dict[str, tuple[float, float]] = {}  # orphan uid -> (next try, its wait) after a failed removal
        # node allocatable for kubepods (cpu millis, memory bytes), when enforced; set by the kubelet
        self.node_allocatable: dict[str, int] | None = None
        self.node_memory = 0
        self.node_swap = 0

    def _usable(self) -> bool:
        if str(self.mount) == "/sys/fs/cgroup" and os.geteuid() != 0:
            log.info("pod cgroups disabled: not running as root")
            return False
        self.version = cg.detect_version(self.mount)
        if self.version is None:
            log.info("pod cgroups disabled: no cgroup v1 or v2 hierarchy at %s", self.mount)
            return False
        log.info("pod cgroups: cgroup %s, %s driver, below %s", self.version.value, self.driver.value,
                 self.root or "/")
        return True

    # -- naming -----------------------------------------------------------------------------
    def _path(self, parts: list[str]) -> str:
        return cg.cgroup_path(self.driver, self.root, parts)

    def qos_parent(self, qos: str) -> str:
        return self._path(cg.qos_parts(qos))

    def pod_cgroup(self, pod: dict[str, Any]) -> str:
        uid = (pod.get("metadata") or {}).get("uid", "")
        return self._path([*cg.qos_parts(podutil.qos_class(pod)), f"pod{uid}"])

    def cgroup_parent(self, pod: dict[str, Any]) -> str:
        return self.pod_cgroup(pod) if self.enabled else ""

    def _uid_from_dir(self, name: str) -> str | None:
        if self.driver is CgroupDriver.SYSTEMD:
            if not name.endswith(".slice") or "-pod" not in name:
                return None
            return name[:-len(".slice")].rsplit("-pod", 1)[1].replace("_", "-")
        return name[3:] if name.startswith("pod") else None

    # -- filesystem ---------------------------------------------------------------------------
    def _controllers(self) -> list[Path]:
        return [self.mount / c for c in V1_CONTROLLERS if (self.mount / c).is_dir()]

    def _hierarchies(self) -> list[Path]:
        """v1: every mounted hierarchy, not only the controllers the agent writes to (runc also
        creates the pod's path under ``name=systemd`` and ``unified``); v2: the one tree."""
        if self.version is CgroupVersion.V2:
            return [self.mount]
        try:
            return [p for p in self.mount.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return self._controllers()

    def _ensure_units(self, rel: str) -> None:
        if self.driver is not CgroupDriver.SYSTEMD or self.systemd is None:
            return
        for part in rel.strip("/").split("/"):
            if part.endswith(".slice"):
                self.systemd.ensure_slice(part)

    def _mkdir_v1(self, ctrl: Path, rel: str) -> None:
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

    def _mkdir_v2(self, rel: str) -> None:
        """Create the path, enabling the parent's controllers for each level (cgroup.subtree_control)."""
        path = self.mount
        for part in rel.strip("/").split("/"):
            self._enable_controllers(path)
            path = path / part
            if not path.exists():
                path.mkdir()

    def _enable_controllers(self, path: Path) -> None:
        try:
            available = (path / "cgroup.controllers").read_text().split()
            enabled = set((path / "cgroup.subtree_control").read_text().split())
        except OSError:
            return
        for c in V2_CONTROLLERS:
            if c in available and c not in enabled:
                try:
                    (path / "cgroup.subtree_control").write_text(f"+{c}")
                except OSError as e:
                    log.debug("cannot enable controller %s in %s: %s", c, path, e)

    def _make(self, rel: str) -> None:
        self._ensure_units(rel)
        if self.version is CgroupVersion.V2:
            try:
                self._mkdir_v2(rel)
            except OSError as e:
                log.warning("cannot create cgroup %s: %s", rel, e)
            return
        for ctrl in self._controllers():
            try:
                self._mkdir_v1(ctrl, rel)
            except OSError as e:
                log.warning("cannot create cgroup %s in %s: %s", rel, ctrl.name, e)

    def _file(self, rel: str, name: str) -> Path:
        if self.version is CgroupVersion.V2:
            return self.mount / rel.strip("/") / name
        ctrl, _, fname = name.partition("/")
        return self.mount / ctrl / rel.strip("/") / fname

    def _apply(self, rel: str, config: ResourceConfig, *, only_changed: bool = False) -> None:
        assert self.version is not None
        for name, value in cg.files_for(config, self.version).items():
            path = self._file(rel, name)
            key = str(path)
            if only_changed and self._written.get(key) == value:
                continue
            try:
                path.write_text(value)
                if only_changed:  # remembered for the long-lived QoS/node cgroups only, not per pod
                    self._written[key] = value
            except OSError as e:
                log.debug("cgroup write %s=%s failed: %s", path, value, e)

    def pod_config(self, pod: dict[str, Any]) -> ResourceConfig:
        conf = cg.resource_config_for_pod(pod, cfs_quota=self.cfs_quota, period_us=self.cfs_period_us,
                                          pids_limit=self.pod_pids_limit)
        if self.version is CgroupVersion.V2:
            swap = cg.swap_limit(pod, self.swap_behavior, node_memory=self.node_memory, node_swap=self.node_swap)
            if swap is not None and self.node_swap > 0:
                conf = ResourceConfig(conf.cpu_shares, conf.cpu_quota, conf.cpu_period, conf.memory,
                                      conf.pids_limit, conf.hugepages, swap)
        return conf

    def _ensure_sync(self, pod: dict[str, Any]) -> None:
        rel = self.pod_cgroup(pod)
        self._make(rel)
        self._apply(rel, self.pod_config(pod))

    def _ensure_qos_sync(self, pods: list[dict[str, Any]]) -> None:
        """kubepods (node allocatable when enforced) and the Burstable/BestEffort tiers."""
        top = self.qos_parent(podutil.QOS_GUARANTEED)
        for q in QOS_CLASSES:
            self._make(self.qos_parent(q))
        if self.node_allocatable is not None:
            self._apply(top, ResourceConfig(
                cpu_shares=cg.milli_cpu_to_shares(self.node_allocatable.get("cpu", 0)),
                memory=self.node_allocatable.get("memory") or None,
                pids_limit=self.node_allocatable.get("pid")), only_changed=True)
        mem = self.node_allocatable.get("memory") if self.node_allocatable else None
        tiers = cg.qos_configs(pods, allocatable_memory=mem, qos_reserved=self.qos_reserved)
        for q, conf in tiers.items():
            self._apply(self.qos_parent(q), conf, only_changed=True)

    def enforce_reserved(self, cgroup: str, reserved: dict[str, int]) -> None:
        """Limit a reserved cgroup (systemReservedCgroup / kubeReservedCgroup) to its reservation
        (cpu millis → shares, memory bytes, pids). Raises FileNotFoundError when it does not exist."""
        if not self.enabled:
            return
        probe = self.mount / cgroup.strip("/") if self.version is CgroupVersion.V2 else \
            self.mount / "memory" / cgroup.strip("/")
        if not probe.is_dir():
            raise FileNotFoundError(str(probe))
        self._apply(cgroup, ResourceConfig(
            cpu_shares=cg.milli_cpu_to_shares(reserved["cpu"]) if "cpu" in reserved else None,
            memory=reserved.get("memory"), pids_limit=reserved.get("pid")))

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

    def _destroy_sync(self, uid: str) -> bool:
        """Remove the pod's cgroups in every hierarchy; whether none is left."""
        gone = True
        for rel in self._paths_for_uid(uid):
            for hierarchy in self._hierarchies():
                self._rmtree(hierarchy / rel.strip("/"))
            if any((h / rel.strip("/")).exists() for h in self._hierarchies()):
                gone = False
                continue
            if self.driver is CgroupDriver.SYSTEMD and self.systemd is not None:
                self.systemd.remove_slice(rel.rsplit("/", 1)[-1])
        return gone

    def _paths_for_uid(self, uid: str) -> list[str]:
        return [self._path([*cg.qos_parts(q), f"pod{uid}"]) for q in QOS_CLASSES]

    def _list_sync(self) -> set[str]:
        out: set[str] = set()
        for hierarchy in self._hierarchies():
            for q in QOS_CLASSES:
                try:
                    with os.scandir(hierarchy / self.qos_parent(q).strip("/")) as entries:
                        # d_type from the directory listing: no stat per pod (this runs every 2 s)
                        for e in entries:
                            uid = self._uid_from_dir(e.name)
                            if uid and e.is_dir():
                                out.add(uid)
                except OSError:
                    continue
        return out

    # -- async API ------------------------------------------------------------------------------
    async def ensure(self, pod: dict[str, Any]) -> None:
        """Create the pod cgroup and set its limits, once per pod (every sync calls this; the limits
        follow the spec, which cannot change resources without a new pod)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        if self.enabled and uid not in self._ensured:
            await asyncio.to_thread(self._ensure_sync, pod)
            self._ensured.add(uid)

    async def update_qos(self, pods: Iterable[dict[str, Any]]) -> None:
        if self.enabled:
            await asyncio.to_thread(self._ensure_qos_sync, list(pods))

    async def destroy(self, uid: str) -> None:
        self._ensured.discard(uid)
        if self.enabled:
            await asyncio.to_thread(self._destroy_sync, uid)

    def cleanup_step(self, active_pods: Callable[[], list[dict[str, Any]]]) -> Callable[
            [HousekeepingContext], Any]:
        """Housekeeping step: orphan pod cgroups go, and the QoS tiers follow the active pods."""
        async def step(ctx: HousekeepingContext) -> None:
            await self.cleanup(ctx)
            await self.update_qos_if_changed(active_pods())
        return step

    def _due(self, seen: tuple[frozenset[str], float] | None, uids: frozenset[str]) -> bool:
        """Whether work last done for ``seen`` must be done again for ``uids``: other pods, or
        ``QOS_RESYNC_PERIOD`` passed."""
        return seen is None or seen[0] != uids or self.clock() - seen[1] >= QOS_RESYNC_PERIOD

    async def update_qos_if_changed(self, pods: list[dict[str, Any]]) -> None:
        """``update_qos`` when the active pods are not those of the last update, or it is a
        ``QOS_RESYNC_PERIOD`` old (upstream: on pod start/stop and every minute). The minute's
        update writes every value again, as upstream's does, so a value changed behind the agent's
        back is restored; between those only changed values are written."""
        uids = frozenset(str((p.get("metadata") or {}).get("uid", "")) for p in pods)
        if not self.enabled or not self._due(self._qos_seen, uids):
            return
        if self._qos_seen is None or self.clock() - self._qos_seen[1] >= QOS_RESYNC_PERIOD:
            self._written.clear()
        await self.update_qos(pods)
        self._qos_seen = (uids, self.clock())

    async def cleanup(self, ctx: HousekeepingContext) -> None:
        """Housekeeping step: remove the cgroups of pods the node no longer knows (orphans). Skipped
        while the node knows the same pods as at the last scan that found no orphan (a scan at least
        every ``QOS_RESYNC_PERIOD``)."""
        if not self.enabled:
            return
        now = self.clock()
        retry_due = any(now >= at for at, _ in self._stuck.values())
        if not retry_due and not self._due(self._scan_seen, ctx.known):
            return
        stuck: dict[str, tuple[float, float]] = {}
        for uid in await self.list_pod_uids():
            if uid in ctx.known:
                continue
            at, wait = self._stuck.get(uid, (now, 0.0))
            if now < at:  # backing off (module docstring)
                stuck[uid] = (at, wait)
            elif not await asyncio.to_thread(self._destroy_sync, uid):
                if not wait:
                    log.warning("cannot remove the cgroups of pod %s, which the node does not know (processes "
                                "still in them?); trying again with a back-off up to %.0f s", uid, QOS_RESYNC_PERIOD)
                wait = min(max(2 * wait, ORPHAN_RETRY_FIRST), QOS_RESYNC_PERIOD)
                stuck[uid] = (now + wait, wait)
        self._stuck = stuck
        self._scan_seen = (ctx.known, now)

    async def list_pod_uids(self) -> set[str]:
        if not self.enabled:
            return set()
        return await asyncio.to_thread(self._list_sync)

    # -- PodLifecycleHook: the pod cgroup exists before its sandbox, and goes with its containers
    async def prepare_pod(self, pod: dict[str, Any]) -> None:
        await self.ensure(pod)

    async def release_pod(self, uid: str) -> None:
        await self.destroy(uid)
