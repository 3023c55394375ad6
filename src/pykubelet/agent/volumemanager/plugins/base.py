"""What every volume plugin gets and promises (upstream ``volume.VolumePlugin`` / ``Mounter``).

A plugin turns one pod volume (the JSON of ``spec.volumes[i]``) into a ``MountedVolume``:
``setup(ctx, volume, current)`` is idempotent — called again for a volume that is already set up it
checks or refreshes and returns the (possibly updated) entry, which is how ConfigMap/Secret/downward
API content follows its source (``requires_remount``). Failures raise ``MountError`` with upstream's
wording; plugins never raise anything else for bad input.

``PodContext`` is upstream's ``VolumeHost`` plus ``MounterArgs`` for one pod: where its directories
are, how to read API objects and tokens, the mounter, node allocatable memory (the default tmpfs
size), and the pod's fsGroup settings.

Shared helpers implement upstream's "wrapped emptyDir": configMap and downwardAPI volumes are a disk
emptyDir, secret and projected volumes a memory (tmpfs) one, into which the atomic writer projects
the files; ``tmpfs_size`` is upstream's ``calculateEmptyDirMemorySize``. ``project`` returns a
fingerprint of what it wrote (files, modes, owners, fsGroup); given the volume's current entry with
the same fingerprint it touches nothing, so a refresh pass over 1,000 pods whose token is still young
and whose ConfigMap did not change costs no thread hop and no file read (upstream's atomic writer
compares with the files on disk each time; the content here can only change through ``project``).
The file work of ``project`` runs in the volume manager's own ``FileWorker`` thread (one queue put
and one future per volume, results handed back once per batch; a ``to_thread`` hop costs 30-130 µs
of CPU here and its pool's threads contend for the GIL): a directory made just now is not checked
for a mount point before its tmpfs is mounted.

``side_by_side`` runs a few coroutines concurrently like ``asyncio.gather`` but the last one in the
caller's own task: a pod's one volume, or the one source of a projected volume that makes a round
trip besides its token, costs no task (a task and gather's bookkeeping are 6-22 µs of CPU each in
process, ~4 % of the agent's samples in a 1,000-pod start for the kube-api-access volume alone).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Coroutine
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Protocol, TypeVar

from pykubelet.agent.container.filework import FileWorker
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.agent.volumemanager import atomic_writer
from pykubelet.agent.volumemanager.mounter import Mounter
from pykubelet.agent.volumemanager.objects import ObjectSource, SourceReads, TokenManager
from pykubelet.agent.volumemanager.ownership import FSGroupChangePolicy, set_volume_ownership
from pykubelet.agent.volumemanager.types import (
    Medium,
    MountedVolume,
    MountError,
    PluginName,
    VolumeState,
    volume_dir,
)
from pykubelet.common import podutil

EMPTY_DIR_PERM = 0o777
_WRITER = FileWorker("pykubelet-volumes")  # the projected volumes' directories, tmpfs mounts and files

_T = TypeVar("_T")


async def side_by_side(coros: list[Coroutine[object, object, _T]]) -> list[_T]:
    """The results of ``coros``, run concurrently, in their order (as ``asyncio.gather``): all but
    the last as tasks, the last in the caller's task, so one coroutine costs no task at all. An
    exception (the first in list order) propagates after the other tasks were cancelled and have
    finished; so does a cancellation of the caller (gather cancels its children the same way)."""
    if len(coros) <= 1:
        return [await c for c in coros]
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(c) for c in coros[:-1]]
    try:
        last = await coros[-1]
        results = [await t for t in tasks]
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    results.append(last)
    return results


@dataclass
class PodContext:
    pod: Pod
    pods_dir: Path
    objects: ObjectSource
    tokens: TokenManager
    mounter: Mounter
    node_allocatable: dict[str, Decimal] = field(default_factory=dict)
    reads: SourceReads | None = None  # what the volume is made from (``objects`` records into it too)

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid", ""))

    @property
    def namespace(self) -> str:
        return str((self.pod.get("metadata") or {}).get("namespace") or "default")

    @property
    def name(self) -> str:
        return str((self.pod.get("metadata") or {}).get("name", ""))

    def volume_dir(self, plugin: PluginName, name: str) -> Path:
        return volume_dir(self.pods_dir, self.uid, plugin, name)

    @property
    def _psc(self) -> JSONObj:
        psc = (self.pod.get("spec") or {}).get("securityContext")
        return psc if isinstance(psc, dict) else {}

    @property
    def fs_group(self) -> int | None:
        g = self._psc.get("fsGroup")
        return g if isinstance(g, int) and not isinstance(g, bool) else None

    @property
    def fs_group_change_policy(self) -> FSGroupChangePolicy:
        try:
            return FSGroupChangePolicy(self._psc.get("fsGroupChangePolicy") or "Always")
        except ValueError:
            return FSGroupChangePolicy.ALWAYS

    @property
    def fs_user(self) -> int | None:
        """Upstream ``FsUserFrom``: the runAsUser every container shares, if they all share one."""
        users: set[int | None] = set()
        pod_user = self._psc.get("runAsUser")
        for c in podutil.all_containers(self.pod):
            sc = c.get("securityContext") or {}
            users.add(sc.get("runAsUser", pod_user) if isinstance(sc, dict) else pod_user)
        if len(users) != 1:
            return None
        (u,) = users
        return u if isinstance(u, int) and not isinstance(u, bool) else None


class VolumePlugin(Protocol):
    name: PluginName
    source_key: str  # the field of the pod volume this plugin handles (emptyDir, hostPath, ...)
    requires_remount: bool

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume: ...


def source_of(volume: JSONObj, key: str) -> JSONObj:
    src = volume.get(key)
    if src is None:
        return {}
    if not isinstance(src, dict):
        raise MountError(f"{key}: must be an object", phase=MountError.PROCESSING)
    return src


def parse_mode(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise MountError(f"{what}: Invalid value: {value!r}: must be a number between 0 and 0777 (octal), "
                         "both inclusive")
    return value


def pod_memory_limit(pod: Pod) -> int | None:
    """The pod cgroup's memory limit, set only when every container has one (``ResourceConfigForPod``)."""
    if not all("memory" in podutil.container_limits(c) for c in podutil.all_containers(pod)):
        return None
    v = podutil.pod_limits(pod).get("memory")
    return int(v) if v is not None and v > 0 else None


def tmpfs_size(ctx: PodContext, size_limit: int | None) -> int | None:
    """Upstream ``calculateEmptyDirMemorySize``: node allocatable memory, lowered to the pod's memory
    limit, lowered to the volume's sizeLimit (each only when positive and smaller)."""
    size = int(ctx.node_allocatable.get("memory", 0)) or None
    pod_limit = pod_memory_limit(ctx.pod)
    if pod_limit and (size is None or pod_limit <= size):
        size = pod_limit
    if size_limit and size_limit > 0 and (size is None or size_limit <= size):
        size = size_limit
    return size


def setup_dir(path: Path | str, perm: int = EMPTY_DIR_PERM) -> bool:
    """Upstream ``emptyDir.setupDir``: create with 0777 and chmod it (the umask would lower it).
    Returns whether it made the directory (then nothing can be mounted on it yet)."""
    p = os.fspath(path)
    try:
        try:
            os.mkdir(p)
        except FileNotFoundError:  # the parents first, as ``mkdir -p``
            os.makedirs(os.path.dirname(p), exist_ok=True)
            os.mkdir(p)
    except FileExistsError:
        if not os.path.isdir(p):
            raise
        if (os.lstat(p).st_mode & 0o7777) != perm:
            os.chmod(p, perm)
        return False
    os.chmod(p, perm)
    return True


def setup_wrapped_dir(ctx: PodContext, path: Path | str, medium: Medium, size: int | None) -> None:
    """The emptyDir under a configMap/secret/downwardAPI/projected volume (blocking). A directory
    made just now needs no mount-point check before its tmpfs is mounted."""
    p = os.fspath(path)
    made = setup_dir(p)
    if medium is Medium.MEMORY and (made or not ctx.mounter.is_mount_point(p)):
        try:
            ctx.mounter.mount_tmpfs(p, size)
        except OSError as e:
            raise MountError(str(e.strerror or e)) from e


def fingerprint(payload: dict[str, atomic_writer.FileProjection], *extra: object) -> str:
    """A digest of the files, their modes and owners and ``extra`` (what else shapes the content)."""
    h = hashlib.sha256(repr(extra).encode())
    for name in sorted(payload):
        f = payload[name]
        h.update(f"\0{name}\0{f.mode}\0{f.fs_user}\0{len(f.data)}\0".encode())
        h.update(f.data)
    return h.hexdigest()


async def project(ctx: PodContext, path: Path, medium: Medium, payload: dict[str, atomic_writer.FileProjection],
                  *, size: int | None = None, current: MountedVolume | None = None) -> str:
    """Set up the wrapped emptyDir, write ``payload`` atomically, apply fsGroup ownership; returns the
    content's fingerprint. Nothing is done when ``current`` (the volume as set up before) already has
    that content at ``path``."""
    fs_group = ctx.fs_group
    fp = fingerprint(payload, medium.value, size, fs_group)
    if (current is not None and current.content == fp and current.dir == path
            and current.state is VolumeState.MOUNTED):
        return fp

    def run() -> bool:
        setup_wrapped_dir(ctx, path, medium, size)
        written = atomic_writer.write(path, payload)
        if written and fs_group is not None:
            set_volume_ownership(path, fs_group, read_only=True)
        return written

    try:
        await _WRITER.run(run)
        return fp
    except atomic_writer.AtomicWriteError as e:
        raise MountError(str(e)) from e
    except OSError as e:
        raise MountError(f"writing volume content: {e}") from e


def go_quote(s: str) -> str:
    """Go's ``%q`` (``strconv.Quote``), which the downward API uses for label and annotation values."""
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = ['"']
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in escapes:
            out.append(escapes[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)
