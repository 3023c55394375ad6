"""Mounting tmpfs and reading the mount table (upstream ``k8s.io/mount-utils``).

Memory-backed volumes (``emptyDir.medium: Memory``, and the secret and projected volumes, which
upstream wraps in a memory emptyDir so secrets never touch the disk) are tmpfs mounts made by the
agent on the host at ``pods/<uid>/volumes/<plugin>/<name>``; containers then bind-mount that
directory. Upstream calls ``mount -t tmpfs -o size=<bytes> tmpfs <dir>``; here the same mount(2)
call is made through ctypes (no child process per volume), with the same single option ``size=``
and no flags. Unmounting is ``umount2(dir, 0)``; a busy mount (a process still holding it) is
detached lazily with a warning rather than left behind.

The calls block, so callers run them off the event loop (``asyncio.to_thread``).

``/proc/self/mountinfo`` (proc(5)) is the source of truth for "is this a mount point and of which
type": it is what the reconstruction after a restart and the teardown of unknown pods read. A
teardown asks only for the mounts below one pod's directory (``mount_points_under``): of the table's
lines (one per tmpfs volume of every pod, and the host's) only those naming that directory are
parsed, so removing 1,000 pods does not parse a 1,000-line table twice per pod (~34 ms of CPU per
pod with ~1,700 lines).

Mounting needs CAP_SYS_ADMIN. ``TmpfsMode`` says what to do without it: production uses ``MOUNT``
(a failure is a FailedMount event naming the cause); tests choose ``PLAIN_DIRS`` (never mount: a
plain directory stands in for the tmpfs, with a logged warning) or ``FALLBACK_WITHOUT_ROOT`` (mount
when running as root, else behave like ``PLAIN_DIRS``). The fallback is never chosen implicitly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import errno
import logging
import os
import re
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

MNT_DETACH = 2
MOUNTINFO = "/proc/self/mountinfo"


class TmpfsMode(enum.Enum):
    MOUNT = "mount"  # real tmpfs mounts (needs root)
    FALLBACK_WITHOUT_ROOT = "fallback-without-root"  # tests: mount if root, else plain directories
    PLAIN_DIRS = "plain-dirs"  # tests: never mount


@dataclass(frozen=True)
class MountPoint:
    path: str
    fstype: str
    source: str = ""
    options: str = ""


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo``."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountPoint]:
    """``/proc/<pid>/mountinfo`` → mount points, in mount order (later entries stack on earlier)."""
    out: list[MountPoint] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        rest = right.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        out.append(MountPoint(path=_unescape(fields[4]), fstype=rest[0],
                              source=_unescape(rest[1]) if len(rest) > 1 else "",
                              options=rest[2] if len(rest) > 2 else ""))
    return out


def escape_mount_path(path: str) -> str:
    """A path as mountinfo writes it (space, tab, newline and backslash as ``\\ooo``)."""
    if not any(c in path for c in " \t\n\\"):
        return path
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def read_mountinfo(path: str = MOUNTINFO, *, naming: str = "") -> list[MountPoint]:
    """The mount table; with ``naming``, only the lines that contain it (escaped as mountinfo does):
    a superset of the mounts at or below that path, for ``mounts_under`` to narrow down."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        log.warning("cannot read %s: %s", path, e)
        return []
    if naming:
        key = escape_mount_path(naming)
        if key not in text:
            return []
        text = "\n".join(line for line in text.splitlines() if key in line)
    return parse_mountinfo(text)


def mounts_under(mounts: list[MountPoint], base: str) -> list[MountPoint]:
    """Mount points at or below ``base`` (a real path), deepest first: the order to unmount them."""
    prefix = base.rstrip("/") + "/"
    found = [m for m in mounts if m.path == base or m.path.startswith(prefix)]
    return sorted(found, key=lambda m: m.path.count("/"), reverse=True)


class Mounter(Protocol):
    """What the volume plugins need from the mount table (blocking calls)."""

    def mount_tmpfs(self, target: str, size: int | None) -> None: ...
    def unmount(self, target: str) -> None: ...
    def is_mount_point(self, path: str) -> bool: ...
    def mount_points(self) -> list[MountPoint]: ...
    def mount_points_under(self, base: str) -> list[MountPoint]:
        """``mounts_under(self.mount_points(), base)``, maybe cheaper."""
        ...


class SystemMounter:
    """mount(2)/umount2(2) through libc, and ``/proc/self/mountinfo``."""

    def __init__(self, mode: TmpfsMode = TmpfsMode.MOUNT, *, mountinfo: str = MOUNTINFO) -> None:
        self.mode = mode
        self.mountinfo = mountinfo
        self._plain: set[str] = set()  # directories standing in for tmpfs (test modes only)
        self._libc: ctypes.CDLL | None = None

    def _use_plain_dirs(self) -> bool:
        if self.mode is TmpfsMode.PLAIN_DIRS:
            return True
        return self.mode is TmpfsMode.FALLBACK_WITHOUT_ROOT and os.geteuid() != 0

    def _lib(self) -> ctypes.CDLL:
        if self._libc is None:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                                  ctypes.c_char_p]
            lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
            self._libc = lib
        return self._libc

    def mount_tmpfs(self, target: str, size: int | None) -> None:
        if self._use_plain_dirs():
            log.warning("tmpfs NOT mounted at %s (%s mode, for tests): the volume is a plain directory on disk",
                        target, self.mode.value)
            self._plain.add(os.path.realpath(target))
            return
        opts = f"size={size}" if size else ""
        rc = self._lib().mount(b"tmpfs", os.fsencode(target), b"tmpfs", 0, opts.encode() or None)
        if rc != 0:
            err = ctypes.get_errno()
            hint = " (mounting tmpfs needs root)" if err == errno.EPERM else ""
            raise OSError(err, f"mount -t tmpfs -o {opts or 'defaults'} tmpfs {target}: {os.strerror(err)}{hint}")

    def unmount(self, target: str) -> None:
        real = os.path.realpath(target)
        if real in self._plain:
            self._plain.discard(real)
            return
        lib = self._lib()
        if lib.umount2(os.fsencode(target), 0) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # not a mount point (any more)
            return
        if err == errno.EBUSY:
            log.warning("unmounting %s: busy; detaching it lazily", target)
            if lib.umount2(os.fsencode(target), MNT_DETACH) == 0:
                return
            err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")

    def is_mount_point(self, path: str) -> bool:
        # realpath walks every component with lstat: only when there are stand-ins to look up
        return (bool(self._plain) and os.path.realpath(path) in self._plain) or os.path.ismount(path)

    def mount_points(self) -> list[MountPoint]:
        return self._points(read_mountinfo(self.mountinfo))

    def mount_points_under(self, base: str) -> list[MountPoint]:
        return mounts_under(self._points(read_mountinfo(self.mountinfo, naming=base)), base)

    def _points(self, points: list[MountPoint]) -> list[MountPoint]:
        points.extend(MountPoint(p, "tmpfs", "plain-directory") for p in sorted(self._plain) if os.path.isdir(p))
        return points
