"""CPU manager with the ``static`` policy (upstream ``pkg/kubelet/cm/cpumanager``).

With ``cpuManagerPolicy: static`` every container of a Guaranteed pod whose cpu request is an
integer gets that many CPUs of its own (its cpuset); every other container runs on the *shared pool*
(all CPUs minus the exclusive ones, the reserved CPUs included). ``none`` (the default) leaves
cpusets alone.

Upstream behaviour followed:
- reserved CPUs: ``reservedSystemCPUs`` when set, else ``ceil(systemReserved.cpu + kubeReserved.cpu)``
  CPUs taken by topology; the static policy refuses to start with none ("the static policy requires
  systemreserved.cpu + kubereserved.cpu to be greater than zero"); reserved CPUs are never exclusive;
- allocation happens at admission (the CPU manager is an admit handler through the topology
  manager): not enough free CPUs → ``UnexpectedAdmissionError`` "Allocate failed due to not enough
  cpus available to satisfy request: requested=N, available=M, which is unexpected";
- ``takeByTopology``: whole sockets, then whole physical cores, then single threads, lowest ids
  first, so siblings of a core go to the same container;
- a container's cpuset goes into its CRI config (``linux.resources.cpuset_cpus``); the shared pool
  shrinks and grows as exclusive CPUs are taken and freed, and ``reconcile`` (every
  ``cpuManagerReconcilePeriod``) updates running shared containers with ``UpdateContainerResources``;
- state: ``<root-dir>/cpu_manager_state``, upstream's JSON (``policyName``, ``defaultCpuSet``,
  ``entries`` pod uid → container → cpuset, ``checksum``), rewritten atomically on every change and
  read back at start, so exclusive CPUs survive an agent restart; a state file written under another
  policy is a startup error naming ``cpuManagerPolicy`` (upstream asks to remove the file). The
  checksum is an FNV-1a hash of the other fields' JSON (upstream's hashes Go's printed struct, which
  Python cannot reproduce: a file written by upstream's kubelet is not accepted).

The cpuset arithmetic and the topology choice are pure functions; the manager keeps the state and
does the file and CRI I/O.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from pykubelet.agent.config import ConfigError, KubeletConfiguration
from pykubelet.agent.interfaces import PodAdmitAttributes, PodAdmitResult
from pykubelet.common import podutil
from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.cri import pb

log = logging.getLogger(__name__)

STATE_FILE = "cpu_manager_state"
Pod = dict[str, Any]


# --------------------------------------------------------------------------- cpusets


def parse_cpuset(s: str) -> frozenset[int]:
    """``"0-3,8"`` → {0, 1, 2, 3, 8}; ValueError for garbage."""
    out: set[int] = set()
    for part in s.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        start, end = int(lo), int(hi) if sep else int(lo)
        if end < start:
            raise ValueError(f"invalid cpuset range {part!r}")
        out.update(range(start, end + 1))
    return frozenset(out)


def format_cpuset(cpus: Iterable[int]) -> str:
    xs = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class CPUInfo:
    cpu: int
    core: int
    socket: int


def read_topology(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> list[CPUInfo]:
    """Online CPUs with their core and socket; a flat topology when sysfs does not say."""
    try:
        online = parse_cpuset((sys_cpu / "online").read_text())
    except (OSError, ValueError):
        online = frozenset(range(os.cpu_count() or 1))
    out = []
    for c in sorted(online):
        try:
            core = int((sys_cpu / f"cpu{c}" / "topology" / "core_id").read_text())
            sock = int((sys_cpu / f"cpu{c}" / "topology" / "physical_package_id").read_text())
        except (OSError, ValueError):
            core, sock = c, 0
        out.append(CPUInfo(c, core, sock))
    return out


def take_by_topology(topology: list[CPUInfo], available: frozenset[int], n: int) -> frozenset[int] | None:
    """Upstream ``takeByTopology`` (simplified): free whole sockets, then free whole cores, then any
    free threads, lowest ids first; None when fewer than ``n`` are available."""
    if n <= 0:
        return frozenset()
    if len(available) < n:
        return None
    infos = [i for i in topology if i.cpu in available]
    taken: list[int] = []

    def groups(key: str) -> dict[tuple[int, ...], list[int]]:
        g: dict[tuple[int, ...], list[int]] = {}
        for i in topology:
            k = (i.socket,) if key == "socket" else (i.socket, i.core)
            g.setdefault(k, []).append(i.cpu)
        return g

    for key in ("socket", "core"):
        for cpus in sorted(groups(key).values(), key=lambda cs: min(cs)):
            free = [c for c in cpus if c in available and c not in taken]
            if len(free) == len(cpus) and len(taken) + len(cpus) <= n:
                taken.extend(free)
    for i in infos:
        if len(taken) >= n:
            break
        if i.cpu not in taken:
            taken.append(i.cpu)
    return frozenset(taken[:n])


def exclusive_cpus(pod: Pod, container: Mapping[str, Any]) -> int:
    """Upstream ``guaranteedCPUs``: the integer cpu request of a Guaranteed pod's container, else 0."""
    if podutil.qos_class(pod) != podutil.QOS_GUARANTEED:
        return 0
    req = podutil.container_requests(dict(container)).get("cpu")
    if req is None or req <= 0 or req != req.to_integral_value():
        return 0
    return int(req)


def reserved_cpu_count(system_reserved: Mapping[str, str], kube_reserved: Mapping[str, str]) -> int:
    total = Decimal(0)
    for res in (system_reserved, kube_reserved):
        try:
            total += parse_quantity(res.get("cpu", "0")).value
        except (QuantityError, ValueError):
            continue
    return math.ceil(total)


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


# --------------------------------------------------------------------------- manager


class CPUManager:
    """The static policy's state and its admission, container-config and reconcile hooks."""

    def __init__(self, cfg: KubeletConfiguration, root_dir: Path, *, topology: list[CPUInfo] | None = None) -> None:
        self.policy = cfg.cpu_manager_policy or "none"
        if self.policy not in ("none", "static"):
            raise ConfigError(f"cpuManagerPolicy: unknown policy {self.policy!r} (none, static)")
        self.state_path = root_dir / STATE_FILE
        self.topology = topology if topology is not None else (read_topology() if self.policy == "static" else [])
        self.all_cpus = frozenset(i.cpu for i in self.topology)
        self.reserved: frozenset[int] = frozenset()
        self.assignments: dict[str, dict[str, frozenset[int]]] = {}
        self._applied: dict[str, str] = {}  # container id -> cpuset last sent to the runtime
        if self.policy == "static":
            self.reserved = self._reserved(cfg)
            self._load()

    @property
    def enabled(self) -> bool:
        return self.policy == "static"

    def _reserved(self, cfg: KubeletConfiguration) -> frozenset[int]:
        if cfg.reserved_system_cpus:
            try:
                cpus = parse_cpuset(cfg.reserved_system_cpus)
            except ValueError as e:
                raise ConfigError(f"reservedSystemCPUs: {e}") from None
            if not cpus <= self.all_cpus:
                raise ConfigError(f"reservedSystemCPUs: {cfg.reserved_system_cpus!r} is not a subset of the "
                                  f"online CPUs {format_cpuset(self.all_cpus)}")
            return cpus
        n = reserved_cpu_count(cfg.system_reserved, cfg.kube_reserved)
        if n <= 0:
            raise ConfigError("cpuManagerPolicy: the static policy requires systemreserved.cpu + kubereserved.cpu "
                              "to be greater than zero (or reservedSystemCPUs)")
        taken = take_by_topology(self.topology, self.all_cpus, n)
        if taken is None:
            raise ConfigError(f"cpuManagerPolicy: cannot reserve {n} CPUs out of {len(self.all_cpus)}")
        return taken

    # -- state --------------------------------------------------------------------------------
    def default_set(self) -> frozenset[int]:
        used = frozenset().union(*(c for cs in self.assignments.values() for c in cs.values()))
        return self.all_cpus - used

    def state(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "policyName": self.policy,
            "defaultCpuSet": format_cpuset(self.default_set()),
            "entries": {uid: {n: format_cpuset(c) for n, c in cs.items()} for uid, cs in self.assignments.items()},
        }
        body["checksum"] = fnv1a32(json.dumps(body, sort_keys=True).encode())
        return body

    def _save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(self.state()))
        os.replace(tmp, self.state_path)

    def _load(self) -> None:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            self._save()
            return
        except (OSError, ValueError) as e:
            raise ConfigError(f"cpuManagerPolicy: cannot read {self.state_path}: {e}") from None
        if data.get("policyName") != self.policy:
            raise ConfigError(f"cpuManagerPolicy: configured policy {self.policy!r} differs from state checkpoint "
                              f"policy {data.get('policyName')!r}; remove {self.state_path} to change it")
        body = {k: v for k, v in data.items() if k != "checksum"}
        if data.get("checksum") != fnv1a32(json.dumps(body, sort_keys=True).encode()):
            raise ConfigError(f"cpuManagerPolicy: {self.state_path} is corrupt (checksum mismatch); remove it")
        try:
            self.assignments = {uid: {n: parse_cpuset(c) for n, c in cs.items()}
                                for uid, cs in (data.get("entries") or {}).items()}
        except (ValueError, AttributeError) as e:
            raise ConfigError(f"cpuManagerPolicy: {self.state_path}: {e}") from None

    # -- admission / allocation ---------------------------------------------------------------
    def allocate(self, pod: Pod) -> str | None:
        """Exclusive CPUs for the pod's containers; an error message when they do not fit."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        want = [(str(c.get("name", "")), exclusive_cpus(pod, c)) for c in podutil.all_containers(pod)]
        have = self.assignments.get(uid, {})
        need = [(n, k) for n, k in want if k > 0 and n not in have]
        if not need:
            return None
        free = self.default_set() - self.reserved
        new: dict[str, frozenset[int]] = {}
        for name, k in need:
            cpus = take_by_topology(self.topology, free, k)
            if cpus is None:
                return (f"Allocate failed due to not enough cpus available to satisfy request: requested={k}, "
                        f"available={len(free)}, which is unexpected")
            new[name] = cpus
            free = free - cpus
        self.assignments[uid] = {**have, **new}
        self._save()
        return None

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        if not self.enabled:
            return PodAdmitResult(True)
        err = self.allocate(attrs.pod)
        if err is None:
            return PodAdmitResult(True)
        return PodAdmitResult(False, "UnexpectedAdmissionError", err)

    def release(self, uid: str) -> None:
        if self.assignments.pop(uid, None) is not None:
            self._save()

    def cpuset_for(self, pod: Pod, container: Mapping[str, Any]) -> frozenset[int] | None:
        if not self.enabled:
            return None
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        got = self.assignments.get(uid, {}).get(str(container.get("name", "")))
        return got if got is not None else self.default_set()

    # -- runtime hooks ------------------------------------------------------------------------
    def apply(self, pod: Pod, container: Mapping[str, Any], resources: pb.LinuxContainerResources) -> None:
        """Container-config hook: the container's cpuset (exclusive CPUs or the shared pool)."""
        cpus = self.cpuset_for(pod, container)
        if cpus is not None:
            resources.cpuset_cpus = format_cpuset(cpus)

    async def reconcile(self, runtime: Any, pods: Mapping[str, Pod]) -> int:
        """Upstream ``reconcileState``: bring running containers' cpusets in line; returns updates made."""
        if not self.enabled:
            return 0
        for uid in [u for u in self.assignments if u not in pods]:
            self.release(uid)
        updated = 0
        live: set[str] = set()
        for c in await runtime.list_containers():
            if c.state != pb.CONTAINER_RUNNING:
                continue
            pod = pods.get(c.labels.get("io.kubernetes.pod.uid", ""))
            spec = podutil.find_container(pod, c.metadata.name) if pod is not None else None
            if pod is None or spec is None:
                continue
            live.add(c.id)
            want = format_cpuset(self.cpuset_for(pod, spec) or frozenset())
            if self._applied.get(c.id) == want:
                continue
            try:
                await runtime.update_container_resources(c.id, pb.LinuxContainerResources(cpuset_cpus=want))
                self._applied[c.id] = want
                updated += 1
            except Exception as e:
                log.warning("cpu manager: updating cpuset of container %s: %s", c.id, e)
        self._applied = {k: v for k, v in self._applied.items() if k in live}
        return updated
