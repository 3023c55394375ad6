"""Small asyncio helpers shared by the long-running loops of the agent and the control plane.

Every subsystem owns one or more background tasks and must stop them without leaking a task or an
exception into the caller's shutdown path: cancel, then wait until each task has really finished
(so nothing runs after ``stop()`` returns), and ignore what the cancelled tasks raised on the way out.
Periodic work goes through ``run_every`` so that every loop logs its errors, keeps running and stops
on cancellation the same way.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (``None`` entries are skipped) and wait until all have finished."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    await asyncio.gather(*live, return_exceptions=True)


def run_every(
    fn: Callable[[], Awaitable[None]],
    period: float | Callable[[], float],
    *,
    name: str,
    log: logging.Logger | None = None,
    first_delay: float | None = None,
) -> asyncio.Task[None]:
    """Start a task that awaits ``fn()`` every ``period`` seconds until cancelled.

    The periodic loops of the kubelet (housekeeping, resync, relist, log rotation, …) all need the
    same three properties, as upstream's ``wait.Until``: an error in one run is logged and the next
    run still happens; cancellation always propagates (``stop()`` must be able to end the loop); the
    period is measured from the end of one run to the start of the next, so a slow run never piles
    up. ``period`` may be a callable, read before every sleep, for settings that change at run time.
    ``first_delay`` (default: one period) is the wait before the first run.
    """
    logger = log or logging.getLogger(__name__)

    def current_period() -> float:
        return period() if callable(period) else period

    async def loop() -> None:
        await asyncio.sleep(current_period() if first_delay is None else first_delay)
        while True:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s failed", name)
            await asyncio.sleep(current_period())

    return asyncio.get_running_loop().create_task(loop(), name=name)


def run(main: Awaitable[T]) -> T:
    """Run the process's one event loop: the stdlib's, or uvloop's when ``PYKUBELET_EVENT_LOOP=uvloop``.

    Every long-running command (agent, server, fakecri) starts here so that the choice of loop is made
    in one place. uvloop runs the loop, timers and socket transports in C; the agent's per-call
    cost is mostly loop wake-ups and transport callbacks (docs/benchmarks-scale.md, "Probes").
    """
    loop = os.environ.get("PYKUBELET_EVENT_LOOP", "asyncio")
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)  # type: ignore[arg-type]
    if loop != "asyncio":
        raise SystemExit(f"PYKUBELET_EVENT_LOOP={loop!r}: expected 'asyncio' or 'uvloop'")
    return asyncio.run(main)  # type: ignore[arg-type]
