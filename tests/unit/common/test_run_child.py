"""A child process run by ``common.aio.run_child`` never outlives its caller."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from pykubelet.common.aio import run_child
from tests.fakes import eventually

SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_child_returns_its_exit_code_and_output() -> None:
    rc, out, err = await run_child(sys.executable, "-c", "import sys; print('out'); sys.exit(3)")
    assert (rc, out, err) == (3, b"out\n", b"")


async def test_a_cancelled_caller_takes_its_child_down_and_reaps_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    task = asyncio.create_task(run_child(sys.executable, "-c", SLEEPER, str(pidfile)))
    pid = int(await eventually(lambda: pidfile.exists() and pidfile.read_text(), timeout=30))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(pid)  # killed and reaped (a zombie would still answer signal 0)


async def test_a_child_past_its_timeout_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with pytest.raises(TimeoutError):
        await run_child(sys.executable, "-c", SLEEPER, str(pidfile), timeout=3)
    assert gone(int(pidfile.read_text()))
