"""The agent's file worker: a pod start's small file operations (its directories, /etc/hosts, the log
symlink) run off the event loop, in the order they were asked for, and each caller gets its own
result or exception, as with ``asyncio.to_thread``."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pykubelet.agent.container.filework import FileWorker, run


async def test_calls_run_off_the_loop_in_order_and_each_caller_gets_its_result() -> None:
    worker = FileWorker()
    seen: list[int] = []

    def op(i: int, *, square: bool = False) -> tuple[int, bool]:
        seen.append(i)
        return (i * i if square else i), threading.current_thread() is threading.main_thread()

    got = await asyncio.gather(*(worker.run(op, i, square=i % 2 == 0) for i in range(200)))
    assert seen == list(range(200))
    assert got == [((i * i if i % 2 == 0 else i), False) for i in range(200)]
    assert await run(op, 3) == (3, False)


async def test_an_exception_is_the_callers_and_the_worker_goes_on() -> None:
    worker = FileWorker()

    def fail() -> None:
        raise FileNotFoundError("gone")

    def stop() -> None:
        raise StopIteration

    with pytest.raises(FileNotFoundError, match="gone"):
        await worker.run(fail)
    with pytest.raises(RuntimeError, match="StopIteration"):
        await worker.run(stop)
    assert await worker.run(lambda: 7) == 7


async def test_a_cancelled_caller_leaves_the_call_running_and_drops_its_result() -> None:
    worker = FileWorker()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(5)
        finished.set()
        return 1

    task = asyncio.ensure_future(worker.run(slow))
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await worker.run(lambda: 2) == 2
    assert finished.is_set()


def test_a_closed_loop_does_not_stop_the_worker_for_the_next_one() -> None:
    worker = FileWorker()
    gate = threading.Event()
    left: list[asyncio.Future[bool]] = []

    async def leave_one_behind() -> None:
        left.append(asyncio.ensure_future(worker.run(gate.wait, 5)))
        await asyncio.sleep(0)

    asyncio.run(leave_one_behind())  # its loop closes with the call still queued
    gate.set()

    async def next_loop() -> int:
        return await worker.run(lambda: 3)

    assert asyncio.run(next_loop()) == 3
