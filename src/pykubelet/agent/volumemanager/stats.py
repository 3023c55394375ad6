"""Volume usage for ``/stats/summary`` and the sizeLimit checks (upstream ``volume.MetricsDu`` /
``MetricsStatFS`` and the summary's ``VolumeStats``).

Upstream reports, per pod, every volume whose plugin has metrics — the directories under
``pods/<uid>/volumes`` (emptyDir, configMap, secret, downwardAPI, projected; hostPath has none):

- ``usedBytes`` and ``inodesUsed`` by walking the directory (``du``: allocated blocks, every inode
  once, never crossing into another filesystem below it or following symlinks);
- ``capacityBytes``, ``availableBytes``, ``inodes`` and ``inodesFree`` from statfs(2) of the
  directory: the tmpfs itself for memory-backed volumes, the node's filesystem otherwise.

The field names are k8s.io/kubelet/pkg/apis/stats/v1alpha1 ``VolumeStats`` (``name`` is the pod's
volume name). Blocking: callers run it off the event loop.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from pykubelet.agent.types import JSONObj


@dataclass(frozen=True)
class DiskUsage:
    bytes: int
    inodes: int


@dataclass(frozen=True)
class FsUsage:
    capacity: int
    available: int
    inodes: int
    inodes_free: int


def disk_usage(path: Path) -> DiskUsage:
    """``du -s`` in bytes plus the inode count, staying on ``path``'s filesystem."""
    try:
        root = os.lstat(path)
    except OSError:
        return DiskUsage(0, 0)
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(path)]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode) and st.st_dev == root.st_dev:
                stack.append(e.path)
    return DiskUsage(total + root.st_blocks * 512, len(seen) + 1)


def fs_usage(path: Path) -> FsUsage | None:
    try:
        s = os.statvfs(path)
    except OSError:
        return None
    return FsUsage(capacity=s.f_blocks * s.f_frsize, available=s.f_bavail * s.f_frsize, inodes=s.f_files,
                   inodes_free=s.f_ffree)


def _rfc3339_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def pod_volume_stats(pods_dir: Path, uid: str) -> list[JSONObj]:
    """``VolumeStats`` of every materialized volume of pod ``uid``, sorted by name."""
    out: list[JSONObj] = []
    vdir = pods_dir / uid / "volumes"
    try:
        plugin_dirs = [p for p in vdir.iterdir() if p.is_dir()]
    except OSError:
        return out
    now = _rfc3339_now()
    for plugin_dir in plugin_dirs:
        try:
            vols = [v for v in plugin_dir.iterdir() if v.is_dir() and not v.is_symlink()]
        except OSError:
            continue
        for v in vols:
            du = disk_usage(v)
            fs = fs_usage(v)
            entry: JSONObj = {"time": now, "name": v.name, "usedBytes": du.bytes, "inodesUsed": du.inodes}
            if fs is not None:
                entry.update({"availableBytes": fs.available, "capacityBytes": fs.capacity,
                              "inodesFree": fs.inodes_free, "inodes": fs.inodes})
            out.append(entry)
    return sorted(out, key=lambda e: str(e["name"]))
