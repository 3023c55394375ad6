"""Atomic projection of files into a volume directory (upstream ``pkg/volume/util/atomic_writer.go``).

ConfigMap, Secret, downwardAPI and projected volumes change while containers read them, so a reader
must see either the old set of files or the new one, never a mix. Upstream's layout, kept exactly
(applications and tools such as reloaders depend on it)::

    <dir>/..2024_05_01_12_00_00.482913775/   the payload, one timestamped directory per version
    <dir>/..data -> ..2024_05_01_12_00_00.482913775
    <dir>/<key>  -> ..data/<key>                 one user-visible link per top-level path

Writing a new version: create a new timestamped directory with every file (mode, optional owner),
create any missing user-visible links, point a temporary ``..data_tmp`` link at the new directory
and ``rename(2)`` it over ``..data`` — the one atomic step — then remove links of paths that left
the payload and the old directory. When the payload equals what ``..data`` holds (same paths,
bytes) nothing is written: the refresh of an unchanged ConfigMap costs a few reads.

Paths are checked like upstream's ``validatePath`` (relative, no ``..`` element, not starting with
``..``, at most 4096 characters and 255 per element) and a bad one fails the whole write with
upstream's message. Blocking: run it off the event loop.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = "..data"
DATA_DIR_TMP = "..data_tmp"
MAX_PATH_LENGTH = 4096
MAX_FILE_NAME_LENGTH = 255


class AtomicWriteError(Exception):
    pass


@dataclass(frozen=True)
class FileProjection:
    """One file of a payload (upstream ``volumeutil.FileProjection``)."""

    data: bytes
    mode: int
    fs_user: int | None = None


def validate_path(target: str) -> None:
    if target == "":
        raise AtomicWriteError(f'invalid path: must not be empty: "{target}"')
    if target.startswith("/"):
        raise AtomicWriteError(f"invalid path: must be relative path: {target}")
    if len(target) > MAX_PATH_LENGTH:
        raise AtomicWriteError(f"invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters")
    items = target.split("/")
    for item in items:
        if item == "..":
            raise AtomicWriteError(f"invalid path: must not contain '..': {target}")
        if len(item) > MAX_FILE_NAME_LENGTH:
            raise AtomicWriteError(f"invalid path: filenames must be less than or equal to "
                                   f"{MAX_FILE_NAME_LENGTH} characters")
    if items[0].startswith("..") and len(items[0]) > 2:
        raise AtomicWriteError(f"invalid path: must not start with '..': {target}")


def _clean(p: str) -> str:
    """filepath.Clean for relative payload paths (``a//b/./c`` → ``a/b/c``)."""
    parts = [x for x in p.split("/") if x not in ("", ".")]
    return "/".join(parts)


def _current_files(ts_dir: Path) -> dict[str, tuple[bytes, int, int]]:
    """relative path → (content, permission bits, owner uid) of the files a data directory holds."""
    out: dict[str, tuple[bytes, int, int]] = {}
    for root, _dirs, files in os.walk(ts_dir):
        for name in files:
            full = Path(root) / name
            st = full.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue
            out[str(full.relative_to(ts_dir))] = (full.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid)
    return out


def _same(old: tuple[bytes, int, int], new: FileProjection) -> bool:
    """Upstream ``shouldWriteFile`` compares content only: modes and owners come from the pod spec,
    which cannot change, and fsGroup ownership adjusts modes after the write."""
    return old[0] == new.data


def _new_ts_dir(target: Path) -> Path:
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    for _ in range(100):
        d = target / f"{stamp}{random.randrange(10**9, 10**10)}"
        try:
            d.mkdir(mode=0o755)
        except FileExistsError:
            continue
        os.chmod(d, 0o755)
        return d
    raise AtomicWriteError(f"cannot create a new data directory in {target}")


def write(target: Path, payload: dict[str, FileProjection]) -> bool:
    """Make ``target`` show exactly ``payload``; returns False when it already did (nothing written)."""
    cleaned: dict[str, FileProjection] = {}
    for path, proj in payload.items():
        validate_path(path)
        if not 0 <= proj.mode <= 0o777:
            raise AtomicWriteError(f"invalid mode {proj.mode:#o} for {path}: must be between 0 and 0777")
        cleaned[_clean(path)] = proj
    target.mkdir(parents=True, exist_ok=True)
    data_link = target / DATA_DIR
    old_ts: Path | None = None
    if data_link.is_symlink():
        old_ts = target / os.readlink(data_link)
        if not old_ts.is_dir():
            old_ts = None
    old_files = _current_files(old_ts) if old_ts is not None else {}
    if old_ts is not None and set(old_files) == set(cleaned) and all(_same(old_files[p], proj)
                                                                    for p, proj in cleaned.items()):
        _ensure_visible(target, cleaned)
        return False
    ts = _new_ts_dir(target)
    try:
        for path, proj in cleaned.items():
            full = ts / path
            full.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, proj.mode)
            try:
                os.write(fd, proj.data)
                os.fchmod(fd, proj.mode)
                if proj.fs_user is not None:
                    os.fchown(fd, proj.fs_user, -1)
            finally:
                os.close(fd)
    except OSError:
        shutil.rmtree(ts, ignore_errors=True)
        raise
    _ensure_visible(target, cleaned)
    tmp = target / DATA_DIR_TMP
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(ts.name, tmp)
    os.rename(tmp, data_link)
    new_top = {p.split("/", 1)[0] for p in cleaned}
    for old in {p.split("/", 1)[0] for p in old_files} - new_top:
        link = target / old
        if link.is_symlink():
            link.unlink()
    if old_ts is not None and old_ts != ts:
        shutil.rmtree(old_ts, ignore_errors=True)
    return True


def _ensure_visible(target: Path, payload: dict[str, FileProjection]) -> None:
    """``<target>/<top>`` → ``..data/<top>`` for every top-level path of the payload."""
    for top in {p.split("/", 1)[0] for p in payload}:
        link = target / top
        if not link.is_symlink() and not link.exists():
            os.symlink(f"{DATA_DIR}/{top}", link)
