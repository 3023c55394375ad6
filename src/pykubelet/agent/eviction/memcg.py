"""Memory threshold notifications through the cgroup v1 memory controller (upstream
``pkg/kubelet/eviction/threshold_notifier_linux.go``, enabled by ``kernelMemcgNotification``).

Polling every ``evictionMonitoringPeriod`` (10 s) is slow for memory, which runs out in seconds. The
v1 memory controller can signal an ``eventfd`` when ``memory.usage_in_bytes`` crosses a value: write
``"<eventfd> <fd of memory.usage_in_bytes> <bytes>"`` to ``cgroup.event_control``. As upstream, the
usage value for a ``memory.available`` threshold T on a node of capacity C is ``C - T +
total_inactive_file`` (memory.available = C - (usage - inactive file)), re-armed after every pass since
the inactive file size moves. The event only wakes the eviction manager for an immediate pass; the
decision is still made on fresh observations.

cgroup v2 has no usage-threshold events (upstream polls there too), so ``create`` returns None and
the manager keeps polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def usage_threshold(capacity: int, available_threshold: int, inactive_file: int) -> int:
    """memory.usage_in_bytes at which memory.available drops below ``available_threshold``."""
    return max(0, capacity - available_threshold + inactive_file)


def _inactive_file(memory_stat: str) -> int:
    for line in memory_stat.splitlines():
        k, _, v = line.partition(" ")
        if k == "total_inactive_file":
            with contextlib.suppress(ValueError):
                return int(v)
    return 0


class MemcgThresholdNotifier:
    """One armed eventfd on a v1 memory cgroup; ``on_event`` runs on the event loop when it fires."""

    def __init__(self, cgroup_dir: Path, loop: asyncio.AbstractEventLoop, on_event: Callable[[], None]) -> None:
        self.dir = cgroup_dir
        self.loop = loop
        self.on_event = on_event
        self._efd: int | None = None
        self._usage_fd: int | None = None
        self.armed_at: int | None = None

    @classmethod
    def create(cls, cgroup_dir: Path, loop: asyncio.AbstractEventLoop,
               on_event: Callable[[], None]) -> MemcgThresholdNotifier | None:
        if not (cgroup_dir / "cgroup.event_control").exists() or not (cgroup_dir / "memory.usage_in_bytes").exists():
            return None
        if not hasattr(os, "eventfd"):
            return None
        return cls(cgroup_dir, loop, on_event)

    def arm(self, capacity: int, available_threshold: int) -> None:
        """(Re)arm for a memory.available threshold; blocking (runs in a thread)."""
        try:
            inactive = _inactive_file((self.dir / "memory.stat").read_text())
        except OSError:
            inactive = 0
        value = usage_threshold(capacity, available_threshold, inactive)
        if value == self.armed_at:
            return
        self.close()
        try:
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            usage_fd = os.open(self.dir / "memory.usage_in_bytes", os.O_RDONLY | os.O_CLOEXEC)
            (self.dir / "cgroup.event_control").write_text(f"{efd} {usage_fd} {value}")
        except OSError as e:
            log.info("memory threshold notifications unavailable (%s): polling only", e)
            return
        self._efd, self._usage_fd, self.armed_at = efd, usage_fd, value
        self.loop.call_soon_threadsafe(self.loop.add_reader, efd, self._fired)

    def _fired(self) -> None:
        if self._efd is None:
            return
        with contextlib.suppress(OSError):
            os.eventfd_read(self._efd)
        self.on_event()

    def close(self) -> None:
        efd, usage_fd = self._efd, self._usage_fd
        self._efd = self._usage_fd = self.armed_at = None
        if efd is not None:
            def drop() -> None:
                self.loop.remove_reader(efd)
                os.close(efd)
            if self.loop.is_closed():
                os.close(efd)
            else:
                self.loop.call_soon_threadsafe(drop)
        if usage_fd is not None:
            os.close(usage_fd)
