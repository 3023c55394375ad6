"""emptyDir volumes (upstream ``pkg/volume/emptydir``).

- ``medium: ""`` (disk): the directory ``volumes/kubernetes.io~empty-dir/<name>`` with mode 0777
  (chmod'ed, so the umask does not matter), shared by all containers of the pod.
- ``medium: Memory``: the same directory with a tmpfs mounted on it, ``size=`` the smallest positive
  of node allocatable memory, the pod's memory limit and ``sizeLimit`` (upstream
  ``calculateEmptyDirMemorySize``): the kernel refuses writes beyond it (ENOSPC). The tmpfs root is
  mode 1777, as upstream's.
- Hugepage media are not supported here and say so (FailedMount), as does any unknown medium
  (upstream: ``unknown storage medium "X"``).

A ``ready`` marker under ``plugins/kubernetes.io~empty-dir/<name>`` records a finished setup (upstream
``SetReady``): a later setup of a ready volume only checks it (dir present; tmpfs still mounted), so
restarting the agent never wipes or remounts a running pod's emptyDir. fsGroup ownership is applied
once, at the first setup (upstream passes no change policy for emptyDir).

``sizeLimit`` of a disk emptyDir is enforced upstream by the eviction manager; the volume manager's
refresh reports a volume over its limit with a Warning event (see ``manager``).
"""

from __future__ import annotations

import asyncio

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.ownership import set_volume_ownership
from pykubelet.agent.volumemanager.plugins.base import PodContext, setup_dir, source_of, tmpfs_size
from pykubelet.agent.volumemanager.types import Medium, MountedVolume, MountError, PluginName, plugin_dir
from pykubelet.common.quantity import QuantityError, parse_quantity

READY = "ready"


def size_limit_of(src: JSONObj) -> int | None:
    raw = src.get("sizeLimit")
    if raw is None:
        return None
    try:
        value = parse_quantity(raw).value
    except (QuantityError, TypeError, ValueError) as e:
        raise MountError(f'invalid emptyDir sizeLimit "{raw}": {e}') from e
    if value < 0:
        raise MountError(f'invalid emptyDir sizeLimit "{raw}": must be greater than or equal to 0')
    return int(value) or None


def medium_of(src: JSONObj) -> Medium:
    raw = src.get("medium") or ""
    if raw == "Memory":
        return Medium.MEMORY
    if raw == "":
        return Medium.DISK
    if isinstance(raw, str) and raw.startswith("HugePages"):
        raise MountError(f'emptyDir medium "{raw}" (hugepages) is not supported by this kubelet')
    raise MountError(f'unknown storage medium "{raw}"')


class EmptyDirPlugin:
    name = PluginName.EMPTY_DIR
    source_key = "emptyDir"
    requires_remount = False

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        vol_name = str(volume.get("name", ""))
        medium = medium_of(src)
        limit = size_limit_of(src)
        path = ctx.volume_dir(self.name, vol_name)
        ready = plugin_dir(ctx.pods_dir, ctx.uid, self.name, vol_name) / READY
        size = tmpfs_size(ctx, limit) if medium is Medium.MEMORY else limit

        def run() -> None:
            if ready.exists() and path.is_dir():
                if medium is Medium.DISK or ctx.mounter.is_mount_point(str(path)):
                    return
            made = setup_dir(path)
            if medium is Medium.MEMORY and (made or not ctx.mounter.is_mount_point(str(path))):
                try:
                    ctx.mounter.mount_tmpfs(str(path), size)
                except OSError as e:
                    raise MountError(str(e.strerror or e)) from e
            if ctx.fs_group is not None:
                set_volume_ownership(path, ctx.fs_group, read_only=False)
            ready.parent.mkdir(parents=True, exist_ok=True)
            ready.touch()

        try:
            await asyncio.to_thread(run)
        except OSError as e:
            raise MountError(f"setting up emptyDir: {e}") from e
        return MountedVolume(name=vol_name, plugin=self.name, host_path=str(path), dir=path, medium=medium,
                             size_limit=limit, spec=volume)
