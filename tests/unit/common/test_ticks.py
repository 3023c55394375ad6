"""Periodic loops on a shared grid of the loop clock (common/ticks.py): loops whose periods divide one
another run in the same loop wake-up, keep their period, and never pile up runs."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.ticks import due_on_sync_tick, run_on_ticks, tick_at_or_after


def test_a_due_time_is_rounded_up_to_the_grid() -> None:
    assert tick_at_or_after(3.2, 1.0) == 4.0
    assert tick_at_or_after(4.0, 1.0) == 4.0
    assert tick_at_or_after(3 * 0.3, 0.3) == pytest.approx(0.9)  # float error never skips a grid point
    assert tick_at_or_after(7.25, 0.0) == 7.25  # no grid: the time itself


def test_a_heartbeat_is_due_on_a_whole_second_never_later_than_its_period() -> None:
    assert due_on_sync_tick(3.4, 10.0) == 13.0  # rounded down: 9.6 s, not 10.6 s
    assert due_on_sync_tick(13.0005, 10.0) == 23.0  # once on the grid, a period apart
    assert due_on_sync_tick(3.4, 1.0) == 4.0
    assert due_on_sync_tick(3.4, 0.25) == pytest.approx(3.65)  # shorter than the grid: not rounded


async def test_a_period_read_from_a_setting_applies_from_the_next_run() -> None:
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    period = 0.05

    async def record() -> None:
        nonlocal period
        starts.append(loop.time())
        period = 0.1

    task = run_on_ticks(record, lambda: period, name="setting", first_delay=0)
    try:
        await asyncio.sleep(0.38)
    finally:
        await cancel_and_wait(task)
    assert len(starts) >= 3
    assert all(b - a > 0.08 for a, b in itertools.pairwise(starts[1:]))
    assert all(-0.001 < t - round(t / 0.1) * 0.1 < 0.02 for t in starts[1:])


async def test_loops_with_periods_dividing_one_another_start_on_the_same_ticks() -> None:
    loop = asyncio.get_running_loop()
    fast: list[float] = []
    slow: list[float] = []

    async def record(into: list[float]) -> None:
        into.append(loop.time())

    tasks = [run_on_ticks(lambda: record(fast), 0.05, name="fast"),
             run_on_ticks(lambda: record(slow), 0.1, name="slow")]
    try:
        await asyncio.sleep(0.45)
    finally:
        await cancel_and_wait(*tasks)
    assert len(fast) >= 5 and len(slow) >= 2
    # every run starts on a multiple of its period (late by what a loaded machine makes a timer late)
    assert all(-0.001 < t - round(t / 0.05) * 0.05 < 0.02 for t in fast)
    # and each run of the slow loop in the same loop iteration as one of the fast loop
    assert all(min(abs(s - f) for f in fast) < 0.002 for s in slow)


async def test_a_run_longer_than_the_period_never_piles_up_runs() -> None:
    loop = asyncio.get_running_loop()
    runs: list[tuple[float, float]] = []

    async def slow() -> None:
        start = loop.time()
        await asyncio.sleep(0.07)
        runs.append((start, loop.time()))

    task = run_on_ticks(slow, 0.05, name="slow", first_delay=0)
    try:
        await asyncio.sleep(0.4)
    finally:
        await cancel_and_wait(task)
    assert len(runs) >= 2
    # each run starts after the previous one ended, on the first grid point after it
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert end <= start + 1e-3 and start - end < 0.05 + 0.02


async def test_a_failing_run_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def fail() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    task = run_on_ticks(fail, 0.02, name="failing", first_delay=0)
    try:
        await asyncio.sleep(0.1)
    finally:
        await cancel_and_wait(task)
    assert calls >= 2
    assert "failing failed" in caplog.text
