"""Small asyncio helpers shared by the long-running loops of the agent and the control plane.

Every subsystem owns one or more background tasks and must stop them without leaking a task or an
exception into the caller's shutdown path: cancel, then wait until each task has really finished (so
nothing runs after ``stop()`` returns), and ignore what the cancelled tasks raised on the way out.
Periodic work goes through ``common.ticks.run_on_ticks``, whose runs go through ``run_logged`` here, so
that every loop logs its errors, keeps running and stops on cancellation the same way. A short-lived
child process goes through ``run_child``: a caller that is cancelled or times out takes the child down
with it, and the child's pipes are read to their end, so neither a process nor its transport outlives
the call (an unread pipe would otherwise keep the transport until the garbage collector closes it, on
whatever loop is current then).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (``None`` entries are skipped) and wait until all have finished."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    await asyncio.gather(*live, return_exceptions=True)


async def run_child(*argv: str, timeout: float | None = None) -> tuple[int, bytes, bytes]:  # noqa: ASYNC109
    """Run ``argv`` to its end: (exit code, stdout, stderr). On cancellation or after ``timeout``
    seconds (``TimeoutError``) the child is killed and reaped before the exception goes on."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
        await asyncio.shield(proc.communicate())
        raise
    return proc.returncode or 0, out, err


async def run_logged(fn: Callable[[], Awaitable[None]], name: str, logger: logging.Logger) -> None:
    """One run of a periodic loop: an error is logged (the loop goes on), cancellation propagates."""
    try:
        await fn()
    except Exception:  # not CancelledError, a BaseException
        logger.exception("%s failed", name)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run the process's one event loop: uvloop's by default, the stdlib's with
    ``PYKUBELET_EVENT_LOOP=asyncio``.

    Every long-running command (agent, server, fakecri, hollow nodes) starts here so that the choice
    of loop is made in one place. uvloop (libuv under asyncio's API) runs the loop, its timers and the
    socket and TLS transports in C. At probe load the agent's cost per CRI call is mostly loop
    wake-ups and transport callbacks, and uvloop takes 13-20 % off it (docs/benchmarks-scale.md,
    "Event loop"). The stdlib loop stays one variable away, and the test suite's in-process tests run
    on it, so the code never depends on uvloop's behaviour.
    """
    choice = os.environ.get("PYKUBELET_EVENT_LOOP", "uvloop")
    if choice == "uvloop":
        import uvloop

        return uvloop.run(main)
    if choice != "asyncio":
        raise SystemExit(f"pykubelet: PYKUBELET_EVENT_LOOP={choice!r}: expected 'uvloop' or 'asyncio'")
    return asyncio.run(main)
