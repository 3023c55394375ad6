"""ContainerLogManager: size-based rotation of CRI container logs (upstream pkg/kubelet/logs).

Design: the runtime (containerd) writes each container's stdout/stderr to the CRI log file
``<podLogsDir>/<ns>_<pod>_<uid>/<container>/<restart>.log`` and never rotates it; the kubelet does.
Every ``containerLogMonitorInterval`` (10 s by default; runs on multiples of it on the loop clock,
``common.ticks``, so an idle agent wakes for it with its other loops) the manager lists the RUNNING
containers over CRI, knows each one's ``log_path`` (see below) and, when the file has reached
``containerLogMaxSize``, rotates it. What to do with the files is decided by the pure ``plan_rotation``
(unit-tested); the manager only executes the plan, with all blocking file work (stat, rename, gzip,
unlink) in a worker thread so the event loop never waits on the disk.

Upstream behaviour followed (containerLogManager.rotateLog), in this order:
1. clean up leftovers of an interrupted earlier rotation: ``*.tmp`` files (a half-written gzip) and
   uncompressed rotated files whose ``.gz`` already exists;
2. remove the oldest rotated files so at most ``containerLogMaxFiles - 2`` remain (after this
   rotation there are then ``containerLogMaxFiles`` files counting the live one);
3. gzip every remaining uncompressed rotated file (written to ``<f>.gz.tmp`` then renamed), so only
   the newest rotated file — the one renamed now, which the runtime may still be flushing — stays
   uncompressed;
4. rename the live log to ``<log>.<UTC YYYYMMDD-HHMMSS>`` and call CRI ``ReopenContainerLog`` so
   the runtime starts a fresh file; if that fails the file is renamed back (upstream does the same,
   so no output is lost to a file the runtime no longer writes).
A live log that is missing (e.g. deleted by hand) gets a ``ReopenContainerLog`` too, as upstream.
Rotation happens when the size is at least the limit (upstream skips only ``size < max``). Rotated
files of removed containers are deleted by ``clean`` (upstream ``Clean``), called when the runtime
manager removes a container.

Where the log path comes from: upstream asks ``ContainerStatus`` for it in every pass. A container's
log path never changes, and for the containers this agent creates the agent itself built it
(``ContainerConfig.log_path`` joined to the sandbox's ``log_directory``, as the runtime joins them),
so the runtime manager hands it over at creation (``add``, before StartContainer, so no pass can see
the container running without it) and no CRI call is made for it. A running container the manager
was not told about (one adopted after an agent restart, or whose hand-over expired) is asked for
once with ``ContainerStatus``, as upstream does, and remembered while it runs. A handed path waits
for its container to be listed running at most ``HANDED_TTL`` seconds (a container whose start
failed is never listed running); after that the container is simply asked about if it ever runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gzip
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.quantity import parse_quantity
from pykubelet.common.ticks import run_on_ticks
from pykubelet.cri import CRIError, pb

log = logging.getLogger(__name__)

TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"  # Go's "20060102-150405"
COMPRESS_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"
_ROTATED = re.compile(r"^\d{8}-\d{6}(\.gz)?(\.tmp)?$")
HANDED_TTL = 120.0  # seconds a handed log path waits for its container to be listed running


@dataclass(frozen=True)
class RotationPlan:
    """What one rotation does, as full paths, in order: remove, compress, then rename the live log."""

    remove: tuple[str, ...]
    compress: tuple[str, ...]
    rotate_to: str


def rotated_names(log_name: str, siblings: Iterable[str]) -> list[str]:
    """Names in ``siblings`` that are rotated files (or leftovers) of ``log_name``, sorted."""
    prefix = log_name + "."
    return sorted(n for n in siblings if n.startswith(prefix) and _ROTATED.match(n[len(prefix):]))


def plan_rotation(log_path: str, siblings: Iterable[str], max_files: int, now: dt.datetime) -> RotationPlan:
    """Plan the rotation of ``log_path`` given the file names in its directory (pure).

    ``max_files`` counts the live log; ``now`` is rendered in UTC for the rotated file's suffix.
    """
    directory, base = os.path.split(log_path)
    names = set(siblings)
    remove: list[str] = []
    rotated: list[str] = []
    for n in rotated_names(base, names):
        if n.endswith(TMP_SUFFIX) or (not n.endswith(COMPRESS_SUFFIX) and n + COMPRESS_SUFFIX in names):
            remove.append(n)  # unused: interrupted compression, or already compressed
        else:
            rotated.append(n)
    rotated.sort(key=lambda n: n.removesuffix(COMPRESS_SUFFIX))  # the timestamp orders them
    keep = max(max_files - 2, 0)
    excess = len(rotated) - keep
    if excess > 0:
        remove.extend(rotated[:excess])
        rotated = rotated[excess:]
    compress = [n for n in rotated if not n.endswith(COMPRESS_SUFFIX)]
    stamp = now.astimezone(dt.UTC).strftime(TIMESTAMP_FORMAT)

    def full(n: str) -> str:
        return os.path.join(directory, n)

    return RotationPlan(
        remove=tuple(full(n) for n in remove),
        compress=tuple(full(n) for n in compress),
        rotate_to=f"{log_path}.{stamp}",
    )


def compress_file(path: str) -> None:
    """gzip ``path`` to ``path.gz`` via a ``.tmp`` file, then remove ``path``."""
    tmp = path + COMPRESS_SUFFIX + TMP_SUFFIX
    try:
        with open(path, "rb") as src, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.rename(tmp, path + COMPRESS_SUFFIX)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.unlink(path)


def _prepare(plan: RotationPlan) -> None:
    for p in plan.remove:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    for p in plan.compress:
        try:
            compress_file(p)
        except OSError as e:
            log.warning("compressing rotated log %s: %s", p, e)


def _plan_and_prepare(log_path: str, max_files: int, now: dt.datetime) -> RotationPlan:
    siblings = os.listdir(os.path.dirname(log_path) or ".")
    plan = plan_rotation(log_path, siblings, max_files, now)
    _prepare(plan)
    return plan


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def clean_rotated(log_path: str) -> None:
    """Remove every rotated file of ``log_path`` (not the live one)."""
    directory, base = os.path.split(log_path)
    try:
        names = os.listdir(directory or ".")
    except FileNotFoundError:
        return
    for n in rotated_names(base, names):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, n))


class ContainerLogManager:
    """Rotates the logs of running containers every ``interval`` seconds (see the module doc)."""

    def __init__(self, runtime: Any, *, max_size: str, max_files: int, interval: float = 10.0,
                 now: Callable[[], dt.datetime] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.max_size = parse_quantity(max_size).int_value()
        self.max_files = max_files
        self.interval = max(0.1, interval)
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._paths: dict[str, str] = {}  # running container id -> its log path
        self._handed: dict[str, tuple[str, float]] = {}  # created, not yet listed running -> (log path, when)
        self.rotations = 0

    @property
    def enabled(self) -> bool:
        return self.max_size > 0 and self.max_files > 1

    def add(self, container_id: str, log_path: str) -> None:
        """Hand over the log path of a container this agent has just created (before it starts), so
        the rotation pass needs no ContainerStatus for it ("" = the container has no log)."""
        if self.enabled:
            self._handed[container_id] = (log_path, self._clock())

    def start(self) -> None:
        if not self.enabled or self._task is not None:
            return
        self._task = run_on_ticks(self.rotate_logs, self.interval, name="container-log-manager", log=log)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def rotate_logs(self) -> None:
        """One pass over the running containers (upstream rotateLogs).

        A container's log path never changes: it is the one handed over at creation (``add``), else
        asked for once (ContainerStatus), and remembered while the container runs; the sizes of all
        logs are read in one hop off the loop. A pass over 1,000 idle containers is then one
        ListContainers call and one thread hop."""
        running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
        containers = await self.runtime.list_containers(running)
        ids = {c.id for c in containers}
        for cid in [cid for cid in self._paths if cid not in ids]:
            del self._paths[cid]
        expired = self._clock() - HANDED_TTL
        for cid in [cid for cid, (_, at) in self._handed.items() if at < expired and cid not in ids]:
            del self._handed[cid]
        for c in containers:
            if c.id in self._paths:
                continue
            handed = self._handed.pop(c.id, None)
            if handed is not None:
                self._paths[c.id] = handed[0]
                continue
            try:
                resp = await self.runtime.container_status(c.id)
            except CRIError as e:
                if not e.not_found:
                    log.warning("container status %s: %s", c.id, e)
                continue
            if resp.status.state == pb.CONTAINER_RUNNING:
                self._paths[c.id] = resp.status.log_path
        paths = {cid: path for cid, path in self._paths.items() if path}
        sizes = await asyncio.to_thread(lambda: {cid: _size(path) for cid, path in paths.items()})
        for cid, size in sizes.items():
            if size is not None and size < self.max_size:
                continue
            try:
                await self._rotate_if_needed(cid, paths[cid], size)
            except Exception as e:
                log.warning("rotating log %s of container %s: %s", paths[cid], cid, e)

    async def _rotate_if_needed(self, cid: str, path: str, size: int | None) -> None:
        if size is None:
            # the live log disappeared: have the runtime create it again
            with contextlib.suppress(CRIError):
                await self.runtime.reopen_container_log(cid)
            return
        if size < self.max_size:
            return
        plan = await asyncio.to_thread(_plan_and_prepare, path, self.max_files, self._now())
        if await asyncio.to_thread(os.path.lexists, plan.rotate_to):
            return  # rotated within this very second already; next pass
        await asyncio.to_thread(os.rename, path, plan.rotate_to)
        try:
            await self.runtime.reopen_container_log(cid)
        except Exception:
            # the runtime still writes to the renamed file: give it its name back (upstream)
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.rename, plan.rotate_to, path)
            raise
        self.rotations += 1
        log.debug("rotated log of container %s to %s", cid, plan.rotate_to)

    async def clean(self, log_path: str) -> None:
        """Remove the rotated files of a container that is being removed (upstream Clean)."""
        if log_path:
            await asyncio.to_thread(clean_rotated, log_path)
