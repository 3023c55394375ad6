"""hostPath volumes (upstream ``pkg/volume/hostpath``).

Nothing is materialized: containers bind-mount ``hostPath.path`` itself. SetUp refuses a path with a
``..`` element (``invalid HostPath `p`: must not contain '..'``) and checks ``type`` exactly as
upstream's ``checkType``:

- unset / ``""``: no check at all;
- ``DirectoryOrCreate``: create it (mode 0755, parents too) if nothing exists, then it must be a directory;
- ``FileOrCreate``: create an empty file (mode 0644; the parent must exist) if nothing exists, then
  it must be a file;
- ``Directory``, ``File``, ``Socket``, ``CharDevice``, ``BlockDevice``: it must exist and be that,
  else ``hostPath type check failed: <path> is not a <kind>, it's a <type>`` or
  ``hostPath <path> doesn't exist``;
- anything else: ``<type> is an invalid volume type``.

Types are read with stat(2), which follows symlinks, like upstream's ``GetFileType``. The same checks
serve PersistentVolumes with a ``hostPath`` source.
"""

from __future__ import annotations

import asyncio
import os
import stat

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.plugins.base import PodContext, source_of
from pykubelet.agent.volumemanager.types import MountedVolume, MountError, PluginName

_KINDS = {
    "Directory": "directory",
    "File": "file",
    "Socket": "socket file",
    "CharDevice": "character device",
    "BlockDevice": "block device",
}


def file_type(path: str) -> str:
    """Upstream ``hostutil.GetFileType``."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return "Directory"
    if stat.S_ISREG(mode):
        return "File"
    if stat.S_ISSOCK(mode):
        return "Socket"
    if stat.S_ISCHR(mode):
        return "CharDevice"
    if stat.S_ISBLK(mode):
        return "BlockDevice"
    raise OSError("only recognise file, directory, socket, block device and character device")


def _matched(path: str, expected: str) -> None:
    if not os.path.exists(path):
        raise MountError(f"hostPath {path} doesn't exist")
    kind = _KINDS[expected]
    try:
        actual = file_type(path)
    except OSError as e:
        raise MountError(f"hostPath type check failed, {path} is not a {kind}, unable to determine its type: "
                         f"{e.strerror or e}") from e
    if actual != expected:
        raise MountError(f"hostPath type check failed: {path} is not a {kind}, it's a {actual}")


def check_type(path: str, path_type: str) -> None:
    """Upstream ``checkType`` (blocking)."""
    try:
        if path_type == "DirectoryOrCreate":
            if not os.path.exists(path):
                os.makedirs(path, mode=0o755, exist_ok=True)
            _matched(path, "Directory")
        elif path_type == "FileOrCreate":
            if not os.path.exists(path):
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
                os.close(fd)
            _matched(path, "File")
        elif path_type in _KINDS:
            _matched(path, path_type)
        else:
            raise MountError(f"{path_type} is an invalid volume type")
    except OSError as e:
        raise MountError(str(e)) from e


def validate_host_path(path: object) -> str:
    if not isinstance(path, str) or not path:
        raise MountError("invalid HostPath: the path must be a non-empty string")
    if ".." in path.split("/"):
        raise MountError(f"invalid HostPath `{path}`: must not contain '..'")
    return path


class HostPathPlugin:
    name = PluginName.HOST_PATH
    source_key = "hostPath"
    requires_remount = False

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        path = validate_host_path(src.get("path"))
        path_type = src.get("type") or ""
        if not isinstance(path_type, str):
            raise MountError(f"{path_type!r} is an invalid volume type")
        if path_type:
            await asyncio.to_thread(check_type, path, path_type)
        return MountedVolume(name=str(volume.get("name", "")), plugin=self.name, host_path=path, spec=volume)
