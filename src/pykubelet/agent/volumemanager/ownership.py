"""fsGroup ownership of volume contents (upstream ``pkg/volume/volume_linux.go``).

With ``spec.securityContext.fsGroup`` set, every file and directory of a volume the kubelet manages
(emptyDir, configMap, secret, downwardAPI, projected, local PersistentVolumes) is given to that group
so the pod's processes — which run with the fsGroup as a supplemental group — can use it:

- ``lchown(path, -1, fsGroup)`` on everything, symlinks included;
- permission bits ``|= 0660`` (``rwMask``), or ``|= 0440`` (``roMask``) for volumes the plugin
  mounts read-only (configMap, secret, downwardAPI, projected); symlinks are never chmod'ed;
- directories also get the setgid bit and ``|= 0110`` so new files inherit the group.

``fsGroupChangePolicy: OnRootMismatch`` skips the walk when the volume's root already has the group,
the mask bits and setgid (upstream ``requiresPermissionChange``); ``Always`` (the default) walks every
time. Upstream applies the policy to the volumes it is meant for (local/persistent volumes); the
kubelet's own emptyDir/configMap/secret/... volumes always walk. Blocking: run off the event loop.
"""

from __future__ import annotations

import enum
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

RW_MASK = 0o660
RO_MASK = 0o440
EXEC_MASK = 0o110


class FSGroupChangePolicy(enum.Enum):
    ALWAYS = "Always"
    ON_ROOT_MISMATCH = "OnRootMismatch"


def requires_permission_change(root: Path, fs_group: int, *, read_only: bool) -> bool:
    try:
        st = root.stat()
    except OSError:
        return True
    if st.st_gid != fs_group or not stat.S_ISDIR(st.st_mode):
        return True
    perms = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    if stat.S_IMODE(st.st_mode) & perms != perms:
        return True
    return not st.st_mode & stat.S_ISGID


def _change(path: str, fs_group: int, mask: int) -> None:
    try:
        st = os.lstat(path)
        os.lchown(path, -1, fs_group)
    except OSError as e:
        log.warning("chown of %s to group %d failed: %s", path, fs_group, e)
        return
    if stat.S_ISLNK(st.st_mode):
        return
    mode = stat.S_IMODE(st.st_mode) | mask
    if stat.S_ISDIR(st.st_mode):
        mode |= stat.S_ISGID | EXEC_MASK
    try:
        os.chmod(path, mode)
    except OSError as e:
        log.warning("chmod of %s failed: %s", path, e)


def set_volume_ownership(root: Path, fs_group: int, *, read_only: bool,
                         policy: FSGroupChangePolicy = FSGroupChangePolicy.ALWAYS) -> bool:
    """Give ``root`` and everything below it to ``fs_group``; False when the policy skipped it."""
    if policy is FSGroupChangePolicy.ON_ROOT_MISMATCH and not requires_permission_change(
            root, fs_group, read_only=read_only):
        return False
    mask = RO_MASK if read_only else RW_MASK
    _change(str(root), fs_group, mask)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            _change(os.path.join(dirpath, name), fs_group, mask)
    return True
