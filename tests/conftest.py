"""Suite-wide checks: an async test must not leave asyncio tasks running behind it.

The project's rule is that whoever starts a background task stops it (common/aio.cancel_and_wait),
and the tests hold the code to it: a leaked task would keep running into the next test's time, or be
cancelled silently when pytest-asyncio closes the loop, hiding a missing stop() in the code under
test. So after each async test *and its fixtures' teardown* (the fixture below is set up first, so it
is torn down last), the test's event loop is given a few iterations to let finishing tasks finish, and
any task still pending fails the test with its name and where it is suspended. The leaked tasks are
then cancelled so they do not disturb the tests that follow.

Loops shared by several tests (a non-function ``loop_scope``) may legitimately hold tasks of wider
fixtures; only tasks created during the test count there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pytest_asyncio import is_async_test

# Event-loop iterations a finishing task gets to complete (e.g. a cancelled task running its
# `finally`, a done-callback scheduling one last step) before it counts as leaked.
SETTLE_ITERATIONS = 10


async def _pending_tasks(baseline: set[asyncio.Task[object]]) -> list[asyncio.Task[object]]:
    for _ in range(SETTLE_ITERATIONS):
        await asyncio.sleep(0)
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and t not in baseline and not t.done()]


async def _cancel(tasks: list[asyncio.Task[object]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.wait(tasks, timeout=5)


def _describe(task: asyncio.Task[object]) -> str:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", repr(coro))
    frames = task.get_stack(limit=1)
    where = f" (suspended at {frames[0].f_code.co_filename}:{frames[0].f_lineno})" if frames else ""
    return f"{task.get_name()}: {name}{where}"


@pytest.fixture(autouse=True)
def no_leaked_asyncio_tasks(request: pytest.FixtureRequest) -> Iterator[None]:
    item = request.node
    if not is_async_test(item):
        yield
        return
    # The runner (and its loop) of the test's loop scope: requesting it here makes it outlive this
    # fixture's teardown, so the loop is still open when the check runs.
    runner: asyncio.Runner = request.getfixturevalue(f"_{item._loop_scope}_scoped_runner")
    loop = runner.get_loop()
    baseline = set() if item._loop_scope == "function" else set(asyncio.all_tasks(loop))
    yield
    leaked = runner.run(_pending_tasks(baseline))
    if leaked:
        runner.run(_cancel(leaked))
        pytest.fail(
            f"{len(leaked)} asyncio task(s) still running after the test and its fixtures finished "
            "(stop what you start, e.g. with common.aio.cancel_and_wait):\n  "
            + "\n  ".join(sorted(_describe(t) for t in leaked)),
            pytrace=False,
        )
