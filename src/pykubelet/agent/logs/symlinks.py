"""Legacy container log symlinks: ``/var/log/containers/<pod>_<ns>_<container>-<id>.log``.

Design: before CRI, the kubelet/dockershim kept one flat directory of container logs, and cluster
log shippers (fluentd, fluent-bit, promtail, ...) still tail ``/var/log/containers/*.log`` and parse
pod, namespace and container out of the file name. Upstream's kuberuntime therefore keeps a symlink
there for every container it starts, pointing at the CRI log file
``<podLogsDir>/<ns>_<pod>_<uid>/<container>/<restart>.log``; the name is
``<pod>_<namespace>_<container>-<containerID>.log`` (``legacyLogSymlink``), cut to 255 bytes, the
longest file name ext4 allows. The directory is the ``containers`` folder next to ``podLogsDir``
(``/var/log/containers`` for the default ``/var/log/pods``).

Upstream behaviour followed:
- the link is made right after StartContainer, and only if the log file exists (otherwise it would
  dangle, e.g. with runtimes that log elsewhere);
- it is removed with the container (``removeContainerLog``) and the container GC removes links left
  behind (here: housekeeping removes links whose container the runtime no longer lists).

Everything here is synchronous file work; callers run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable

log = logging.getLogger(__name__)

LEGACY_SUFFIX = ".log"
MAX_FILENAME = 255  # ext4


def containers_log_dir(pod_logs_dir: str) -> str:
    """The ``containers`` folder next to ``pod_logs_dir`` (/var/log/pods → /var/log/containers)."""
    return os.path.join(os.path.dirname(os.path.normpath(os.path.abspath(pod_logs_dir))), "containers")


def legacy_log_symlink(containers_dir: str, pod_name: str, namespace: str, container_name: str,
                       container_id: str) -> str:
    """Path of the link for one container, as upstream names it (cut to the ext4 limit)."""
    name = f"{pod_name}_{namespace}_{container_name}-{container_id}"
    name = name[: MAX_FILENAME - len(LEGACY_SUFFIX)]
    return os.path.join(containers_dir, name + LEGACY_SUFFIX)


def parse_symlink_container_id(filename: str) -> str | None:
    """The container id (possibly cut short) at the end of a link name, or None if not ours."""
    if not filename.endswith(LEGACY_SUFFIX):
        return None
    stem = filename[: -len(LEGACY_SUFFIX)]
    if "_" not in stem or "-" not in stem:
        return None
    cid = stem.rsplit("-", 1)[1]
    return cid or None


def create_symlink(link: str, target: str) -> bool:
    """Point ``link`` at ``target`` if the target exists; an old link of the same name is replaced."""
    if not os.path.exists(target):
        return False
    os.makedirs(os.path.dirname(link), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if os.path.islink(link):
            os.unlink(link)
    os.symlink(target, link)
    return True


def remove_symlink(link: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)


def _known(cid: str, known_ids: set[str]) -> bool:
    return cid in known_ids or any(k.startswith(cid) for k in known_ids)


def cleanup_symlinks(containers_dir: str, known_ids: Iterable[str], *, created_before: float) -> list[str]:
    """Remove links of containers not in ``known_ids``; returns the removed paths.

    Only links older than ``created_before`` (a wall-clock time taken before the runtime was listed)
    are considered: a link is made after its container was created, so an older link whose container
    is missing from the listing is stale, while a newer one may belong to a container started after
    the listing. Regular files and names that are not ours are never touched.
    """
    ids = set(known_ids)
    removed: list[str] = []
    try:
        entries = list(os.scandir(containers_dir))
    except FileNotFoundError:
        return removed
    for e in entries:
        cid = parse_symlink_container_id(e.name)
        if cid is None or not e.is_symlink() or _known(cid, ids):
            continue
        try:
            if e.stat(follow_symlinks=False).st_mtime >= created_before:
                continue
            os.unlink(e.path)
            removed.append(e.path)
        except FileNotFoundError:
            continue
        except OSError as err:
            log.warning("removing log symlink %s: %s", e.path, err)
    return removed
