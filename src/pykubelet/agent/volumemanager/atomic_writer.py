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

The calls are few (a pod start writes one such volume per pod, ~1,000 in a burst): a first write of
three files into an empty directory is 20 syscalls (the ``..data`` probe, the new directory and its
mode, open/write/fchmod/close per file, one link per file, the temporary link and its rename), on
``str`` paths. A link that already exists is found by ``symlink(2)`` failing with EEXIST, not by a
``lstat`` and a ``stat`` first, and a payload directory is made only for a nested path.
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


def _new_ts_dir(target: str) -> str:
    """Make the next timestamped data directory in ``target``; its name (not its path)."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    for _ in range(100):
        name = f"{stamp}{random.randrange(10**9, 10**10)}"
        d = os.path.join(target, name)
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            continue
        os.chmod(d, 0o755)
        return name
    raise AtomicWriteError(f"cannot create a new data directory in {target}")


def _old_data_dir(target: str) -> str | None:
    """The directory ``..data`` points to, if it is a link to a directory."""
    try:
        old = os.path.join(target, os.readlink(os.path.join(target, DATA_DIR)))
    except OSError:  # no link (or not a link, or no target directory yet)
        return None
    return old if os.path.isdir(old) else None


def write(target: Path | str, payload: dict[str, FileProjection]) -> bool:
    """Make ``target`` show exactly ``payload``; returns False when it already did (nothing written)."""
    cleaned: dict[str, FileProjection] = {}
    for path, proj in payload.items():
        validate_path(path)
        if not 0 <= proj.mode <= 0o777:
            raise AtomicWriteError(f"invalid mode {proj.mode:#o} for {path}: must be between 0 and 0777")
        cleaned[_clean(path)] = proj
    t = os.fspath(target)
    old_ts = _old_data_dir(t)
    old_files = _current_files(Path(old_ts)) if old_ts is not None else {}
    if old_ts is not None and set(old_files) == set(cleaned) and all(_same(old_files[p], proj)
                                                                    for p, proj in cleaned.items()):
        _ensure_visible(t, cleaned)
        return False
    if old_ts is None:  # maybe no target yet: made when the new directory cannot be
        try:
            ts_name = _new_ts_dir(t)
        except (FileNotFoundError, NotADirectoryError):
            os.makedirs(t, exist_ok=True)  # raises FileExistsError for a file in its place, as before
            ts_name = _new_ts_dir(t)
    else:
        ts_name = _new_ts_dir(t)
    ts = os.path.join(t, ts_name)
    try:
        made: set[str] = set()
        for path, proj in cleaned.items():
            full = f"{ts}/{path}"
            if "/" in path:
                parent = os.path.dirname(full)
                if parent not in made:
                    os.makedirs(parent, mode=0o755, exist_ok=True)
                    made.add(parent)
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
    _ensure_visible(t, cleaned)
    tmp = os.path.join(t, DATA_DIR_TMP)
    try:
        os.symlink(ts_name, tmp)
    except FileExistsError:  # left by an interrupted write
        os.unlink(tmp)
        os.symlink(ts_name, tmp)
    os.rename(tmp, os.path.join(t, DATA_DIR))
    if old_files:
        new_top = {p.split("/", 1)[0] for p in cleaned}
        for old in {p.split("/", 1)[0] for p in old_files} - new_top:
            link = os.path.join(t, old)
            if os.path.islink(link):
                os.unlink(link)
    if old_ts is not None and old_ts != ts:
        shutil.rmtree(old_ts, ignore_errors=True)
    return True


def _ensure_visible(target: str, payload: dict[str, FileProjection]) -> None:
    """``<target>/<top>`` → ``..data/<top>`` for every top-level path of the payload (kept as it is
    when anything has that name already, a dangling link included)."""
    for top in {p.split("/", 1)[0] for p in payload}:
        try:
            os.symlink(f"{DATA_DIR}/{top}", os.path.join(target, top))
        except FileExistsError:
            pass
