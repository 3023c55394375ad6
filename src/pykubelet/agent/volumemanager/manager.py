"""The volume manager (upstream ``pkg/kubelet/volumemanager``): a pod's volumes are set up before any
of its containers is created, kept up to date while it runs, and removed once its containers stopped.

Upstream runs three loops (a desired-state populator, a reconciler, the operation executor) around two
caches. pykubelet keeps the two states and plugs the work into the agent's seams instead of loops:

- **desired state** — the pods that should run (the newest pod object of each, from ``prepare_pod``);
- **actual state** — per pod, the ``MountedVolume`` of each volume (``types``), on disk under
  ``<root-dir>/pods/<uid>/volumes/<plugin>/<name>``.

``prepare_pod(pod)`` (a ``PodLifecycleHook``, run in every sync of a pod that should run, before any
container is created: upstream's ``WaitForAttachAndMount``) sets up every volume a container of the pod
uses (upstream also skips volumes no container mounts) and is not yet set up — or whose content depends
on pod metadata that changed (downwardAPI/projected labels and annotations). If any fails, the pod
waits: ``PodNotReadyError("FailedMount", 'MountVolume.SetUp failed for volume "cfg" : configmap "x" not
found')`` makes the pod syncer record the Warning event and retry with an exponential back-off (1 s
doubling to 10 s), so the pod stays ContainerCreating and starts on the first retry after the missing
object appears; it never runs without its mounts. A further failing volume gets its own event.

``refresh()`` runs every refresh period (upstream's remount happens in each pod sync, every
``syncFrequency``: 60 s by default; a constructor argument here, 1 s in tests): ConfigMap, Secret,
downwardAPI and projected volumes of every desired pod are set up again from one shared snapshot of the
API objects, which the atomic writer turns into nothing (unchanged) or one atomic switch (changed);
service-account tokens are renewed there too. A failure on a running pod is a FailedMount event, the
pod keeps its last content. The refresh also reports emptyDir volumes over their ``sizeLimit``.

ConfigMaps and Secrets are read as ``configMapAndSecretChangeDetectionStrategy`` says
(``objects``): with ``Watch`` (the kubelet's default) one watch per referenced object, released
with the last pod's volumes; with ``Get``/``Cache`` a GET per read. A refresh pass rewrites nothing
whose content is unchanged (``plugins.base.project``): a token younger than 80 % of its lifetime and
an unchanged CA bundle cost no file I/O. And a pass computes nothing for a volume whose sources did
not change since its last setup: each volume keeps the pod object it was made from and what it read
(``objects.SourceReads``: the watch generation of each ConfigMap/Secret, the renewal time of its
tokens), so a volume of the same pod object (labels and annotations unchanged: a metadata change
arrives as a new pod object through ``prepare_pod``), with no watched object changed and no token due
before the next round, is skipped without a read, a payload or a fingerprint — what upstream gets from
its watch-based object cache and the token manager's expiry check. Anything read without a watch
(``Get``/``Cache``, persistent volumes) is recomputed every round as before. ``refresh_counts`` says
how many volumes the passes recomputed and skipped.

``mounts_for(pod, container, env)`` turns the container's ``volumeMounts`` into CRI mounts (``mounts``),
passed to the runtime manager as a plain callable.

``release_pod(uid)`` (all containers stopped) unmounts and removes every volume of the pod. The
housekeeping step ``cleanup`` does the same for pods the node no longer knows — including what a
crashed or restarted agent left behind — and retries teardowns that failed. Every volume this process
sets up is in its desired/actual state before anything is written, and stays there until
``release_pod``, so the step needs no listing to find those. It lists ``<root>/pods`` (in a thread)
for what it cannot know otherwise — the reconstruction's leftovers, mounts made outside the agent —
only when the known pods differ from those of the last listing that found nothing, or
``DISK_RESCAN_PERIOD`` (60 s) after it, as the pod directory steps do (``housekeeping``): an idle node
lists nothing every 2 s.

The refresh runs on the loop clock's grid of its period (``common.ticks.run_on_ticks``), so an idle
agent wakes for it together with its other periodic loops.

After a restart ``start()`` rebuilds the actual state from the directories and
``/proc/self/mountinfo`` (upstream's reconstruction): a running pod's next sync finds its volumes
(emptyDir contents and tmpfs mounts intact, nothing rewritten unless its source changed) and its
containers are left alone; volumes of pods that are gone are removed by housekeeping.

Everything that touches the filesystem runs off the event loop; one lock per pod serializes its
setup, refresh and teardown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from pykubelet.agent.interfaces import EventRecorder, HousekeepingContext, PodNotReadyError
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.agent.volumemanager import stats as volume_stats
from pykubelet.agent.volumemanager.mounter import Mounter, SystemMounter
from pykubelet.agent.volumemanager.mounts import container_mounts, needs_filesystem
from pykubelet.agent.volumemanager.objects import (
    ChangeDetectionStrategy,
    ObjectApi,
    ObjectSource,
    SourceReads,
    TokenManager,
)
from pykubelet.agent.volumemanager.plugins import find_plugin
from pykubelet.agent.volumemanager.plugins.base import PodContext, side_by_side
from pykubelet.agent.volumemanager.plugins.downwardapi import metadata_fingerprint
from pykubelet.agent.volumemanager.types import (
    REMOUNTED_PLUGINS,
    Medium,
    MountedVolume,
    MountError,
    PluginName,
    VolumeState,
)
from pykubelet.agent.volumemanager.watchcache import WatchApi, WatchedObjects
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.procfs import read_meminfo
from pykubelet.common.ticks import run_on_ticks
from pykubelet.cri import pb

log = logging.getLogger(__name__)

DEFAULT_REFRESH_PERIOD = 60.0
RETRY_INITIAL = 1.0
RETRY_MAX = 10.0
# housekeeping lists <root>/pods at least this often while the known pods do not change
DISK_RESCAN_PERIOD = 60.0
FAILED_MOUNT = "FailedMount"
SIZE_LIMIT_EXCEEDED = "EmptyDirSizeLimitExceeded"


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def used_volume_names(pod: Pod) -> set[str]:
    """Volumes some container mounts or uses as a device (upstream ``GetPodVolumeNames``)."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            if not isinstance(c, dict):
                continue
            for key in ("volumeMounts", "volumeDevices"):
                for m in c.get(key) or []:
                    if isinstance(m, dict) and m.get("name"):
                        names.add(str(m["name"]))
    return names


def failure_message(name: str, err: MountError, unmounted: list[str]) -> str:
    if err.phase == MountError.PROCESSING:
        names = " ".join(unmounted)
        return (f"Unable to attach or mount volumes: unmounted volumes=[{names}], unattached volumes=[{names}]: "
                f"{err.message}")
    return f'MountVolume.SetUp failed for volume "{name}" : {err.message}'


def _strategy(value: ChangeDetectionStrategy | str) -> ChangeDetectionStrategy:
    try:
        return ChangeDetectionStrategy(value)
    except ValueError:
        log.warning("configMapAndSecretChangeDetectionStrategy %r is not one of Watch, Cache, Get: using Watch",
                    value)
        return ChangeDetectionStrategy.WATCH


def _node_allocatable() -> dict[str, Decimal]:
    return {"cpu": Decimal(os.cpu_count() or 1), "memory": Decimal(read_meminfo().get("MemTotal", 0))}


class VolumeManager:
    """Implements ``PodLifecycleHook``; see the module docstring."""

    def __init__(
        self,
        *,
        root_dir: Path,
        api: ObjectApi | None,
        recorder: EventRecorder,
        mounter: Mounter | None = None,
        refresh_period: float | Callable[[], float] = DEFAULT_REFRESH_PERIOD,
        node_allocatable: dict[str, Decimal] | None = None,
        retry_initial: float = RETRY_INITIAL,
        retry_max: float = RETRY_MAX,
        clock: Callable[[], float] = time.time,
        change_detection: ChangeDetectionStrategy | str = ChangeDetectionStrategy.GET,
    ) -> None:
        self.pods_dir = Path(root_dir) / "pods"
        self.recorder = recorder
        self.strategy = _strategy(change_detection)
        self.watched = (WatchedObjects(api) if self.strategy is ChangeDetectionStrategy.WATCH
                        and isinstance(api, WatchApi) else None)
        self.objects = ObjectSource(api, watched=self.watched)
        self.refresh_period = refresh_period
        self.tokens = TokenManager(api, clock=clock, lookahead=self._refresh_period)
        self.mounter: Mounter = mounter if mounter is not None else SystemMounter()
        self.node_allocatable = node_allocatable if node_allocatable is not None else _node_allocatable()
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._actual: dict[str, dict[str, MountedVolume]] = {}
        self._desired: dict[str, Pod] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._failures: dict[str, int] = {}
        self._touched: dict[str, float] = {}  # uid → wall time its last setup started
        self._teardown_pending: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self.refresh_counts = {"recomputed": 0, "unchanged": 0}  # volumes, over all refresh passes
        self.disk_rescan_period = DISK_RESCAN_PERIOD
        self.disk_listings = 0  # how many times housekeeping listed <root>/pods
        self._disk_clean: tuple[frozenset[str], float] | None = None  # known pods, time of a clean listing

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        await self.reconstruct()
        self._task = run_on_ticks(self.refresh, self._refresh_period, name="volume-manager-refresh", log=log)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self.watched is not None:
            await self.watched.stop()

    def _refresh_period(self) -> float:
        p = self.refresh_period
        return float(p() if callable(p) else p)

    def _lock(self, uid: str) -> asyncio.Lock:
        lock = self._locks.get(uid)
        if lock is None:
            lock = self._locks[uid] = asyncio.Lock()
        return lock

    def _context(self, pod: Pod, objects: ObjectSource, uid: str) -> PodContext:
        """The context of one volume's setup, recording what it reads."""
        reads = SourceReads()
        return PodContext(pod=pod, pods_dir=self.pods_dir, objects=objects.for_pod(uid, reads), tokens=self.tokens,
                          mounter=self.mounter, node_allocatable=self.node_allocatable, reads=reads)

    async def _setup(self, pod: Pod, uid: str, objects: ObjectSource, volume: JSONObj,
                     current: MountedVolume | None) -> MountedVolume:
        ctx = self._context(pod, objects, uid)
        mv = await find_plugin(volume).setup(ctx, volume, current)
        mv.pod_seen, mv.reads = pod, ctx.reads
        return mv

    @staticmethod
    def _unchanged(mv: MountedVolume, pod: Pod, watched: WatchedObjects | None, now: float) -> bool:
        """Its setup would compute the same content (see the module docstring): made from this pod
        object (or another copy of the same ``resourceVersion``, e.g. from a re-list), no watched
        object changed, no token due."""
        if mv.reads is None or not mv.reads.current(watched, now):
            return False
        seen = mv.pod_seen
        if seen is pod:
            return True
        rv = (pod.get("metadata") or {}).get("resourceVersion")
        if seen is None or not rv or (seen.get("metadata") or {}).get("resourceVersion") != rv:
            return False
        mv.pod_seen = pod
        return True

    # ------------------------------------------------------------------ queries
    def mounted_volumes(self, uid: str) -> dict[str, MountedVolume]:
        """The actual state of one pod (a copy)."""
        return dict(self._actual.get(uid, {}))

    def pods_with_volumes(self) -> set[str]:
        return {uid for uid, vols in self._actual.items() if vols}

    # ------------------------------------------------------------------ PodLifecycleHook
    @staticmethod
    def _needs_setup(current: MountedVolume | None, volume: JSONObj, pod: Pod) -> bool:
        if current is None or current.state is VolumeState.RECONSTRUCTED or current.spec != volume:
            return True
        return (current.plugin in (PluginName.DOWNWARD_API, PluginName.PROJECTED)
                and current.metadata_seen != metadata_fingerprint(pod))

    async def prepare_pod(self, pod: Pod) -> None:
        uid = _uid(pod)
        raw = (pod.get("spec") or {}).get("volumes") or []
        if not isinstance(raw, list) or not all(isinstance(v, dict) for v in raw):
            raise PodNotReadyError(FAILED_MOUNT, "Unable to attach or mount volumes: spec.volumes must be a list "
                                   "of objects", retry_after=self.retry_max)
        used = used_volume_names(pod)
        volumes = [v for v in raw if str(v.get("name", "")) in used]
        async with self._lock(uid):
            self._desired[uid] = pod
            self._touched[uid] = time.time()
            mounted = self._actual.setdefault(uid, {})
            todo = [v for v in volumes if self._needs_setup(mounted.get(str(v.get("name", ""))), v, pod)]

            async def one(vol: JSONObj) -> tuple[str, MountError] | None:
                name = str(vol.get("name", ""))
                try:
                    mounted[name] = await self._setup(pod, uid, self.objects, vol, mounted.get(name))
                except MountError as e:
                    return name, e
                return None

            # a pod's volumes are set up concurrently, as upstream's operation executor does
            # (the last, or only, one in this task: ``side_by_side``)
            errors = [r for r in await side_by_side([one(v) for v in todo]) if r is not None]
            if not errors:
                self._failures.pop(uid, None)
                return
            n = self._failures[uid] = self._failures.get(uid, 0) + 1
            unmounted = sorted(str(v.get("name", "")) for v in volumes
                               if (mv := mounted.get(str(v.get("name", "")))) is None
                               or mv.state is VolumeState.RECONSTRUCTED)
            messages = [failure_message(name, e, unmounted) for name, e in errors]
            for extra in messages[1:]:
                self.recorder.event(pod, "Warning", FAILED_MOUNT, extra)
            retry = min(self.retry_initial * 2 ** (n - 1), self.retry_max)
            raise PodNotReadyError(FAILED_MOUNT, messages[0], retry_after=retry)

    async def release_pod(self, uid: str) -> None:
        async with self._lock(uid):
            self._desired.pop(uid, None)
            self._failures.pop(uid, None)
            self._actual.pop(uid, None)
            self.tokens.forget_pod(uid)
            if self.watched is not None:
                self.watched.release(uid)
            try:
                await asyncio.to_thread(self._teardown_pod, uid)
            except OSError as e:
                log.warning("removing the volumes of pod %s: %s (retried by housekeeping)", uid, e)
                self._teardown_pending.add(uid)
            else:
                self._teardown_pending.discard(uid)
        self._locks.pop(uid, None)
        self._touched.pop(uid, None)

    def _teardown_pod(self, uid: str) -> None:
        """Unmount everything below ``pods/<uid>/volumes`` (deepest first), then remove the volume
        directories and emptyDir ready markers — never through a mount that is still there."""
        base = self.pods_dir / uid
        vdir = base / "volumes"
        real = os.path.realpath(vdir)
        errors: list[str] = []
        for m in self.mounter.mount_points_under(real):
            try:
                self.mounter.unmount(m.path)
            except OSError as e:
                errors.append(str(e))
        left = self.mounter.mount_points_under(real)
        if left:
            raise OSError(f"still mounted: {', '.join(m.path for m in left)}" + (f" ({'; '.join(errors)})"
                                                                                 if errors else ""))
        if vdir.is_dir():
            for plugin_dir in vdir.iterdir():
                if plugin_dir.is_dir() and not plugin_dir.is_symlink():
                    shutil.rmtree(plugin_dir)
                else:
                    plugin_dir.unlink()
        shutil.rmtree(base / "plugins" / PluginName.EMPTY_DIR.escaped, ignore_errors=True)

    # ------------------------------------------------------------------ container mounts
    async def mounts_for(self, pod: Pod, container: JSONObj, env: dict[str, str]) -> list[pb.Mount]:
        """CRI mounts of one container; raises ``criconfig.ConfigError`` (CreateContainerConfigError)."""
        if not container.get("volumeMounts"):
            return []
        spec = pod.get("spec") or {}
        kind, index = "containers", 0
        for k in ("initContainers", "containers", "ephemeralContainers"):
            for i, c in enumerate(spec.get(k) or []):
                if isinstance(c, dict) and c.get("name") == container.get("name"):
                    kind, index = k, i
        volumes = self.mounted_volumes(_uid(pod))
        if not needs_filesystem(container):  # paths only: no thread hop (one per started container)
            return container_mounts(kind, index, container, volumes, env)
        return await asyncio.to_thread(container_mounts, kind, index, container, volumes, env)

    # ------------------------------------------------------------------ refresh
    async def refresh(self) -> None:
        """Set up again the volumes whose sources changed; report emptyDirs over their sizeLimit."""
        objects = self.objects.snapshot()
        counts = self.refresh_counts
        for uid in list(self._desired):
            pod = self._desired.get(uid)
            mounted = self._actual.get(uid)
            if pod is None or mounted is None:
                continue
            # tokens due before the next round are renewed in this one (the token manager's lookahead)
            now = self.tokens.clock() + self._refresh_period()
            if all(mv.plugin not in REMOUNTED_PLUGINS or mv.state is VolumeState.RECONSTRUCTED
                   or self._unchanged(mv, pod, self.watched, now) for mv in mounted.values()):
                counts["unchanged"] += sum(1 for mv in mounted.values() if mv.plugin in REMOUNTED_PLUGINS)
                if any(mv.size_limit for mv in mounted.values()):
                    async with self._lock(uid):
                        await self._check_size_limits(pod, mounted)
                continue
            async with self._lock(uid):
                pod = self._desired.get(uid)
                if pod is None or self._actual.get(uid) is not mounted:
                    continue
                for name, mv in list(mounted.items()):
                    if mv.state is VolumeState.RECONSTRUCTED or mv.plugin not in REMOUNTED_PLUGINS:
                        continue
                    if self._unchanged(mv, pod, self.watched, now):
                        counts["unchanged"] += 1
                        continue
                    counts["recomputed"] += 1
                    try:
                        mounted[name] = await self._setup(pod, uid, objects, mv.spec, mv)
                    except MountError as e:
                        self.recorder.event(pod, "Warning", FAILED_MOUNT, failure_message(name, e, [name]))
                await self._check_size_limits(pod, mounted)

    async def _check_size_limits(self, pod: Pod, mounted: dict[str, MountedVolume]) -> None:
        for mv in mounted.values():
            if mv.plugin is not PluginName.EMPTY_DIR or not mv.size_limit or mv.dir is None:
                continue
            limit_text = str((mv.spec.get("emptyDir") or {}).get("sizeLimit", mv.size_limit))
            if mv.medium is Medium.MEMORY:
                fs = await asyncio.to_thread(volume_stats.fs_usage, mv.dir)
                over = fs is not None and fs.available == 0
                message = (f'Memory-backed EmptyDir volume "{mv.name}" is full: its sizeLimit "{limit_text}" is the '
                           'size of its tmpfs, further writes fail with "No space left on device"')
            else:
                used = await asyncio.to_thread(volume_stats.disk_usage, mv.dir)
                over = used.bytes > mv.size_limit
                # the eviction manager evicts the pod for it (agent/eviction, local storage limits)
                message = f'Usage of EmptyDir volume "{mv.name}" exceeds the limit "{limit_text}"'
            if over and not mv.limit_reported:
                self.recorder.event(pod, "Warning", SIZE_LIMIT_EXCEEDED, message)
            mv.limit_reported = over

    # ------------------------------------------------------------------ housekeeping
    async def cleanup(self, ctx: HousekeepingContext) -> None:
        """Housekeeping step: remove the volumes of pods the node no longer knows."""
        def stale(uid: str) -> bool:
            # a pod whose setup started after the pass listed the node's pods is not debris
            return uid not in ctx.known and self._touched.get(uid, 0.0) < ctx.listed_at

        candidates = {u for u in (*self._actual, *self._desired) if stale(u)}
        now = time.monotonic()
        clean = self._disk_clean
        if clean is None or clean[0] != ctx.known or now - clean[1] >= self.disk_rescan_period:
            self.disk_listings += 1
            on_disk = await asyncio.to_thread(self._uids_on_disk, ctx.known)
            self._disk_clean = None if on_disk else (ctx.known, now)
            candidates |= {u for u in on_disk if stale(u)}
        candidates |= self._teardown_pending
        for uid in sorted(candidates):
            log.info("removing the volumes of pod %s (no longer on this node)", uid)
            await self.release_pod(uid)

    def _uids_on_disk(self, known: frozenset[str]) -> set[str]:
        """Pods the node does not know with anything under ``volumes/`` or any mount below their
        directory. Known pods are skipped without a syscall, and mountinfo is read only when an
        unknown pod directory exists (a mount needs a directory): the usual pass is one scandir."""
        out: set[str] = set()
        try:
            unknown = [e.name for e in os.scandir(self.pods_dir) if e.name not in known and e.is_dir()]
        except OSError:
            return out
        if not unknown:
            return out
        for name in unknown:
            v = self.pods_dir / name / "volumes"
            if v.is_dir() and any(v.iterdir()):
                out.add(name)
        base = os.path.realpath(self.pods_dir)
        for m in self.mounter.mount_points_under(base):
            rel = os.path.relpath(m.path, base).split(os.sep)
            if rel and rel[0] not in (".", ".."):
                out.add(rel[0])
        return out

    # ------------------------------------------------------------------ reconstruction
    async def reconstruct(self) -> None:
        found = await asyncio.to_thread(self._scan)
        for uid, vols in found.items():
            self._actual.setdefault(uid, {}).update(vols)
        if found:
            log.info("reconstructed the volumes of %d pod(s) from %s", len(found), self.pods_dir)

    def _scan(self) -> dict[str, dict[str, MountedVolume]]:
        out: dict[str, dict[str, MountedVolume]] = {}
        if not self.pods_dir.is_dir():
            return out
        tmpfs = {m.path for m in self.mounter.mount_points() if m.fstype == "tmpfs"}
        for pod_dir in self.pods_dir.iterdir():
            vdir = pod_dir / "volumes"
            if not vdir.is_dir():
                continue
            for plugin_dir in vdir.iterdir():
                plugin = PluginName.from_escaped(plugin_dir.name)
                if plugin is None or not plugin_dir.is_dir():
                    continue
                for d in plugin_dir.iterdir():
                    medium = Medium.MEMORY if os.path.realpath(d) in tmpfs else Medium.DISK
                    out.setdefault(pod_dir.name, {})[d.name] = MountedVolume(
                        name=d.name, plugin=plugin, host_path=str(d), dir=d, medium=medium,
                        read_only=plugin in REMOUNTED_PLUGINS, state=VolumeState.RECONSTRUCTED)
        return out
