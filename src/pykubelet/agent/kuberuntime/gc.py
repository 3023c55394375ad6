"""Container garbage collection over the whole node (upstream ``kuberuntime/kuberuntime_gc.go``).

Per-pod cleanup (``RuntimeManager.gc_pod`` after each sync) keeps a pod's own containers tidy; this
is the node-wide pass upstream runs every ``ContainerGCPeriod`` (1 min) with its ``GCPolicy``:

* ``min_age`` (``--minimum-container-ttl-duration``, 0): dead containers younger than this are left
  alone;
* evict units are (pod uid, container name), newest dead container first. Units of pods that are
  gone (not wanted by any source and without a pod worker) lose all their dead containers;
* ``max_per_pod_container`` (``--maximum-dead-containers-per-container``, 1; negative = no limit):
  each unit keeps at most that many;
* ``max_containers`` (``--maximum-dead-containers``, -1 = no limit): when the node still holds more
  dead containers, every unit is cut to ``max_containers // units`` (at least 1), then the oldest
  over the limit go. Unlike upstream, the newest dead container of a pod that still exists is never
  removed by the global limit: ``kubectl logs --previous`` and the ``lastState`` of its status need
  it (upstream may remove it when ``maxContainers`` is smaller than the number of units);
* sandboxes: not ready and without containers (after the removals above); a pod that still exists keeps its newest one, a gone
  pod keeps none;
* a removed container's log files (rotated ones too) and its ``/var/log/containers`` link go with it
  (upstream ``removeContainerLog``); pod log directories of gone pods are removed by the housekeeping
  step ``pod log directories`` (upstream ``evictPodLogsDirectories``).

It runs as a housekeeping step (so only once every source delivered its pods, upstream's
``allSourcesReady``), throttled to ``period``. The decision is the pure :func:`plan`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from pykubelet.agent.interfaces import ContainerRuntime, HousekeepingContext
from pykubelet.agent.logs import symlinks
from pykubelet.agent.logs.manager import clean_rotated
from pykubelet.common import labels as names
from pykubelet.cri import CRIError, pb

log = logging.getLogger(__name__)

DEFAULT_PERIOD = 60.0  # upstream ContainerGCPeriod


@dataclass(frozen=True)
class ContainerGCPolicy:
    min_age: float = 0.0
    max_per_pod_container: int = 1
    max_containers: int = -1


@dataclass(frozen=True)
class DeadContainer:
    id: str
    uid: str
    name: str
    created: float


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    uid: str
    created: float
    ready: bool
    containers: frozenset[str] = frozenset()  # ids of the containers that belong to it


@dataclass
class Plan:
    containers: list[DeadContainer]
    sandboxes: list[str]


def plan(dead: list[DeadContainer], sandboxes: list[SandboxInfo], policy: ContainerGCPolicy,
         pod_gone: Callable[[str], bool], now: float) -> Plan:
    """Which dead containers and sandboxes to remove (upstream evictContainers + evictSandboxes)."""
    units: dict[tuple[str, str], list[DeadContainer]] = {}
    for c in dead:
        if now - c.created < policy.min_age:
            continue
        units.setdefault((c.uid, c.name), []).append(c)
    for group in units.values():
        group.sort(key=lambda c: (c.created, c.id), reverse=True)  # newest first
    remove: list[DeadContainer] = []

    def cut(key: tuple[str, str], keep: int) -> None:
        group = units[key]
        if len(group) > keep:
            remove.extend(group[keep:])
            units[key] = group[:keep]

    for key in list(units):
        if pod_gone(key[0]):
            cut(key, 0)
    if policy.max_per_pod_container >= 0:
        for key in list(units):
            cut(key, policy.max_per_pod_container)
    live = {k: g for k, g in units.items() if g}
    total = sum(len(g) for g in live.values())
    if policy.max_containers >= 0 and total > policy.max_containers:
        per_unit = max(1, policy.max_containers // max(1, len(live)))
        for key in live:
            cut(key, per_unit)
        rest = sorted((c for g in units.values() for c in g), key=lambda c: (c.created, c.id), reverse=True)
        if len(rest) > policy.max_containers:
            newest = {(g[0].uid, g[0].name): g[0].id for g in units.values() if g}
            for c in rest[policy.max_containers:]:
                if newest.get((c.uid, c.name)) != c.id:  # never the newest dead one of a unit
                    remove.append(c)

    removed = {c.id for c in remove}
    by_pod: dict[str, list[SandboxInfo]] = {}
    for sb in sandboxes:
        by_pod.setdefault(sb.uid, []).append(sb)
    drop: list[str] = []
    for uid, sbs in by_pod.items():
        sbs.sort(key=lambda s: (s.created, s.id), reverse=True)
        candidates = sbs if pod_gone(uid) else sbs[1:]
        drop.extend(s.id for s in candidates if not s.ready and not (s.containers - removed))
    return Plan(remove, drop)


class ContainerGC:
    """The housekeeping step: list the runtime, :func:`plan`, remove."""

    def __init__(self, runtime: ContainerRuntime, policy: ContainerGCPolicy, *, pod_exists: Callable[[str], bool],
                 containers_log_dir: str, period: float = DEFAULT_PERIOD,
                 clock: Callable[[], float] = time.time) -> None:
        self.runtime = runtime
        self.policy = policy
        self.pod_exists = pod_exists
        self.containers_log_dir = containers_log_dir
        self.period = period
        self.clock = clock
        self._last = float("-inf")

    async def step(self, ctx: HousekeepingContext) -> None:
        now = self.clock()
        if now - self._last < self.period:
            return
        self._last = now
        await self.garbage_collect(ctx.desired)

    async def reclaim(self, resource: str) -> int:
        """NodeResourceReclaimer (upstream DeleteAllUnusedContainers): under node or container file
        system pressure every dead container goes. Returns 0: CRI reports no per-container disk use."""
        if resource.startswith(("nodefs.", "containerfs.")):
            await self.garbage_collect(all_dead=True)
        return 0

    async def garbage_collect(self, desired: frozenset[str] = frozenset(), *, all_dead: bool = False) -> Plan:
        now = self.clock()
        sandboxes, containers = await asyncio.gather(self.runtime.list_pod_sandbox(), self.runtime.list_containers())
        dead = []
        members: dict[str, set[str]] = {}
        for c in containers:
            members.setdefault(c.pod_sandbox_id, set()).add(c.id)
            uid = c.labels.get(names.POD_UID_LABEL)
            if c.state == pb.CONTAINER_EXITED and uid:
                dead.append(DeadContainer(c.id, uid, c.labels.get(names.CONTAINER_NAME_LABEL) or c.metadata.name,
                                          c.created_at / 1e9))
        infos = [SandboxInfo(sb.id, sb.labels.get(names.POD_UID_LABEL) or sb.metadata.uid, sb.created_at / 1e9,
                             sb.state == pb.SANDBOX_READY, frozenset(members.get(sb.id, ())))
                 for sb in sandboxes]

        def gone(uid: str) -> bool:
            return all_dead or (uid not in desired and not self.pod_exists(uid))

        p = plan(dead, infos, self.policy, gone, now)
        for d in p.containers:
            await self._remove_container(d)
        for sid in p.sandboxes:
            try:
                await self.runtime.remove_pod_sandbox(sid)
            except CRIError as e:
                if not e.not_found:
                    log.warning("container GC: removing sandbox %s: %s", sid, e)
        if p.containers or p.sandboxes:
            log.info("container GC removed %d dead container(s) and %d sandbox(es)", len(p.containers),
                     len(p.sandboxes))
        return p

    async def _remove_container(self, c: DeadContainer) -> None:
        try:
            st = (await self.runtime.container_status(c.id)).status
        except CRIError as e:
            if not e.not_found:
                log.warning("container GC: status of %s: %s", c.id, e)
            return
        try:
            await self.runtime.remove_container(c.id)
        except CRIError as e:
            if not e.not_found:
                log.warning("container GC: removing %s: %s", c.id, e)
                return
        link = symlinks.legacy_log_symlink(self.containers_log_dir, st.labels.get(names.POD_NAME_LABEL, ""),
                                           st.labels.get(names.POD_NAMESPACE_LABEL, ""), c.name, c.id)

        def remove_logs() -> None:
            symlinks.remove_symlink(link)
            if st.log_path:
                clean_rotated(st.log_path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(st.log_path)

        try:
            await asyncio.to_thread(remove_logs)
        except OSError as e:
            log.warning("container GC: removing the logs of %s: %s", c.id, e)
