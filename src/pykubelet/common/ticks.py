"""Periodic work on a shared grid of the loop clock, so that idle periodic tasks share wake-ups.

Each ``asyncio.sleep`` of a periodic loop is a loop timer of its own, and on this VM every wake-up of
an idle event loop costs ~150 µs of CPU (more than the idle work it runs). An idle agent's loops
(PLEG relist every 1 s, housekeeping every 2 s, pod resyncs, runtime status every 5 s, eviction
every 10 s, …) each started at their own phase, so the loop woke separately for each of them.
``run_on_ticks`` keeps a loop's period but starts each run on a multiple of that period on the loop
clock (``loop.time()``), so loops whose periods divide one another fire in the same loop iteration:
the relist's second is also housekeeping's every other second and the runtime check's every fifth.
The prober's wake grid (100 ms multiples of the same clock) holds every whole second too, so with
probes these runs add no wake-up at all.

Runs are never piled up: a run that overran its period starts the next one at the first grid point after
it ended. As upstream's ``wait.Until``, an error in a run is logged and the loop goes on, and
cancellation propagates (``stop()`` must be able to end the loop). Start to start the period is the
configured one (upstream's ``wait.Until`` measures it from the end of a run; with millisecond idle runs
the two agree). ``tick_at_or_after`` rounds any due time (a pod's jittered resync) up onto a grid the
same way (upstream's pod workers resync on the sync loop's 1 s ``syncTicker``).

A loop that keeps its own wait (it also wakes on an event, or backs off after a failure: the node
status, its Lease, the status manager) takes its next due time from ``due_on_sync_tick``: its period
after the run, rounded *down* onto the 1 s grid (``SYNC_TICK``) that the PLEG relist wakes the loop on
every second anyway. A heartbeat is so never later than its period (upstream's lease and node status
intervals are a period plus jitter), and once on the grid its runs start exactly a period apart.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from pykubelet.common.aio import run_logged

# grid points closer than this (relative to the period) count as reached: float error of k * period
_EPS = 1e-9

# the grid of the agent's 1 s loops (the PLEG relist, the sync loop's resync tick): every whole second
SYNC_TICK = 1.0


def tick_at_or_after(when: float, period: float) -> float:
    """The first multiple of ``period`` at or after ``when`` (``when`` itself when ``period`` <= 0)."""
    if period <= 0:
        return when
    return math.ceil(when / period - _EPS) * period


def due_on_sync_tick(after: float, period: float, grid: float = SYNC_TICK) -> float:
    """``after + period`` rounded down onto multiples of ``grid``: the last grid point at most a period
    after ``after`` (and after it). A period shorter than ``grid`` is not rounded."""
    due = after + period
    if grid <= 0 or period < grid:
        return due
    return math.floor(due / grid + _EPS) * grid


def run_on_ticks(
    fn: Callable[[], Awaitable[None]],
    period: float | Callable[[], float],
    *,
    name: str,
    log: logging.Logger | None = None,
    first_delay: float | None = None,
) -> asyncio.Task[None]:
    """Start a task that awaits ``fn()`` every ``period`` seconds, each run on a multiple of
    ``period`` of the loop clock (see the module docstring), until cancelled. ``first_delay``
    (default: one period): the first run is at the first grid point at least this far away; 0 runs
    it at once (then on the grid). ``period`` may be a callable, read after every run, for
    settings that change at run time."""
    logger = log or logging.getLogger(__name__)

    def current_period() -> float:
        return period() if callable(period) else period

    async def loop() -> None:
        lp = asyncio.get_running_loop()
        now = lp.time()
        p = current_period()
        due = now if first_delay == 0 else tick_at_or_after(now + (p if first_delay is None else first_delay), p)
        while True:
            delay = due - lp.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await run_logged(fn, name, logger)
            now = lp.time()
            p = current_period()
            # the next grid point one period on; after an overrun the first one after now (no backlog)
            due = tick_at_or_after(due + p, p)
            if due <= now:
                due = tick_at_or_after(now, p)
                if due <= now:
                    due += p

    return asyncio.get_running_loop().create_task(loop(), name=name)
