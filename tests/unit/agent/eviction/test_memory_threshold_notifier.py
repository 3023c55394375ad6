"""Memory threshold notifications: the usage value armed on the v1 memory cgroup, and an event wakes
the eviction manager at once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pykubelet.agent.eviction.memcg import MemcgThresholdNotifier, usage_threshold

Mi = 1024 * 1024


def test_usage_threshold_adds_inactive_file_back() -> None:
    # memory.available = capacity - (usage - inactive_file) < T  <=>  usage > capacity - T + inactive_file
    assert usage_threshold(1000 * Mi, 100 * Mi, 50 * Mi) == 950 * Mi


async def test_arming_writes_the_event_control_line_and_an_event_fires_the_callback(tmp_path: Path) -> None:
    (tmp_path / "cgroup.event_control").write_text("")
    (tmp_path / "memory.usage_in_bytes").write_text("0")
    (tmp_path / "memory.stat").write_text("cache 1\ntotal_inactive_file 1048576\n")
    fired = asyncio.Event()
    n = MemcgThresholdNotifier.create(tmp_path, asyncio.get_running_loop(), fired.set)
    assert n is not None
    await asyncio.to_thread(n.arm, 1000 * Mi, 100 * Mi)
    efd, _fd, value = (tmp_path / "cgroup.event_control").read_text().split()
    assert int(value) == 901 * Mi
    await asyncio.sleep(0)  # the reader is added on the loop
    os.eventfd_write(int(efd), 1)  # what the kernel does when usage crosses the value
    async with asyncio.timeout(5):
        await fired.wait()
    n.close()
    await asyncio.sleep(0)


def test_no_notifier_without_a_v1_memory_cgroup(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    try:
        assert MemcgThresholdNotifier.create(tmp_path, loop, lambda: None) is None
    finally:
        loop.close()
