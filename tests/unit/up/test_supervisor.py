"""Supervisor behaviour with dummy child processes: restart on crash, ordered stop, back-off."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pykubelet.up.supervisor import Backoff, ComponentFailed, ComponentSpec, Supervisor


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
