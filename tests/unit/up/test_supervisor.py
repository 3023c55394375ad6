"""Supervisor behaviour with dummy child processes: restart on crash, ordered stop, back-off."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pykubelet.up.supervisor import Backoff, ComponentFailed, ComponentSpec, Supervisor, describe_exit


def test_backoff_doubles_caps_and_resets_after_a_stable_run() -> None:
    b = Backoff(initial=1, factor=2, maximum=5, reset_after=60)
    assert [b.next_delay(0.5) for _ in range(5)] == [1, 2, 4, 5, 5]
    assert b.next_delay(61) == 1
    assert b.next_delay(1) == 2


def _fast() -> Backoff:
    return Backoff(initial=0.05, factor=2, maximum=0.2, reset_after=60)


async def _until(pred: Callable[[], bool], seconds: float = 20) -> None:
    async with asyncio.timeout(seconds):
        while True:
            if pred():
                return
            await asyncio.sleep(0.05)


def _runs(path: Path) -> int:
    return path.read_text().count("run") if path.exists() else 0


def _exited_child() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


async def test_a_crashing_child_is_reported_and_restarted(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = f"echo run >> {counter}; echo boom-output; exit 3"
    messages: list[str] = []
    sup = Supervisor(
        [ComponentSpec("crashy", ["sh", "-c", script], log_path=tmp_path / "crashy.log")],
        log=messages.append,
        backoff_factory=_fast,
    )
    await sup.start()
    try:
        await _until(lambda: _runs(counter) >= 3)
    finally:
        await sup.stop()
    assert sup["crashy"].restarts >= 2
    report = next(m for m in messages if "exited with code 3" in m)
    assert "boom-output" in report and "restarting" in report


async def test_stop_goes_in_reverse_order_and_kills_stubborn_children(tmp_path: Path) -> None:
    order = tmp_path / "order"
    # "first" exits on SIGTERM and records it; "second" ignores SIGTERM and must be SIGKILLed.
    first = f"trap 'echo first >> {order}; exit 0' TERM; while :; do sleep 0.05; done"
    second = f"trap 'echo second >> {order}' TERM; while :; do sleep 0.05; done"
    sup = Supervisor(
        [
            ComponentSpec("first", ["sh", "-c", first]),
            ComponentSpec("second", ["sh", "-c", second], stop_grace=0.5),
        ],
        log=lambda _: None,
    )
    await sup.start()
    await asyncio.sleep(0.3)  # let the shells install their traps
    pids = [c.pid for c in sup.components]
    await sup.stop()
    assert order.read_text().split() == ["second", "first"]
    for c in sup.components:
        assert c.pid is None
    assert all(pid is not None and _gone(pid) for pid in pids)


async def test_stopped_children_are_not_restarted(tmp_path: Path) -> None:
    sup = Supervisor([ComponentSpec("s", ["sleep", "30"])], log=lambda _: None, backoff_factory=_fast)
    await sup.start()
    await sup.stop()
    await asyncio.sleep(0.3)
    assert sup["s"].restarts == 0 and sup["s"].pid is None


async def test_readiness_failure_is_an_error_and_nothing_keeps_running(tmp_path: Path) -> None:
    async def never() -> bool:
        return False

    sup = Supervisor(
        [
            ComponentSpec("ok", ["sleep", "30"]),
            ComponentSpec("dies", [sys.executable, "-c", "print('bad flag'); raise SystemExit(2)"],
                          log_path=tmp_path / "dies.log", ready=never),
        ],
        log=lambda _: None,
    )
    with pytest.raises(ComponentFailed, match="bad flag"):
        await sup.start()
    assert all(c.pid is None for c in sup.components)


def test_exit_reports_name_the_signal_that_killed_the_child() -> None:
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(0) == "exited with code 0"


async def test_an_adopted_child_killed_with_sigkill_is_restarted_through_its_spawner(tmp_path: Path) -> None:
    """What `up` does for containerd: started before the supervisor, restarted by its own spawner."""
    spawned: list[subprocess.Popen[bytes]] = []

    def spawn() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
        spawned.append(proc)
        return proc

    async def ready() -> bool:
        return len(spawned) >= 2

    messages: list[str] = []
    sup = Supervisor([ComponentSpec("containerd", ["sleep"], spawn=spawn, ready=ready)],
                     log=messages.append, backoff_factory=_fast)
    first = spawn()
    sup["containerd"].adopt(first)
    try:
        os.kill(first.pid, signal.SIGKILL)
        await _until(lambda: any("is ready again" in m for m in messages))
        assert sup["containerd"].pid == spawned[1].pid
    finally:
        await sup.stop()
    assert sup["containerd"].restarts == 1
    assert any("containerd was killed by SIGKILL" in m and "restarting in" in m for m in messages)
    assert all(_gone(p.pid) for p in spawned)


async def test_a_failing_spawner_is_retried_with_back_off(tmp_path: Path) -> None:
    attempts: list[int] = []

    def spawn() -> subprocess.Popen[bytes]:
        attempts.append(1)
        if len(attempts) < 3:
            raise FileNotFoundError("containerd: not found")
        return subprocess.Popen(["sleep", "30"], start_new_session=True)

    messages: list[str] = []
    sup = Supervisor([ComponentSpec("containerd", ["containerd"], spawn=spawn)],
                     log=messages.append, backoff_factory=_fast)
    sup["containerd"].adopt(_exited_child())
    try:
        await _until(lambda: sup["containerd"].pid is not None and len(attempts) == 3)
    finally:
        await sup.stop()
    assert sum("restarting containerd failed" in m for m in messages) == 2
