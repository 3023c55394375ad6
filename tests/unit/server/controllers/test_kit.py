"""The controller kit: work-queue semantics (client-go's), back-off, informer cache and relist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers.kit import (
    Controller,
    Expectations,
    Informer,
    ItemExponentialFailureRateLimiter,
    SharedInformers,
    WorkQueue,
    key_of,
    sharing,
)

Obj = dict[str, Any]


def _obj(name: str, rv: str = "1", ns: str = "default") -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}


def test_a_key_added_twice_is_queued_once() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get_nowait() == "a"
    assert q.get_nowait() == "b"
    assert q.get_nowait() is None


def test_a_key_added_while_processing_is_handed_out_again_only_after_done() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a")
    assert q.get_nowait() is None  # no second worker gets it meanwhile
    q.done("a")
    assert q.get_nowait() == "a"
    q.done("a")
    assert q.get_nowait() is None


def test_failure_backoff_doubles_per_key_up_to_the_cap_and_forget_resets_it() -> None:
    rl = ItemExponentialFailureRateLimiter(base=0.005, maximum=1.0)
    assert [rl.when("a") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert rl.when("b") == 0.005
    for _ in range(20):
        rl.when("a")
    assert rl.when("a") == 1.0
    assert rl.num_requeues("a") == 25
    rl.forget("a")
    assert rl.when("a") == 0.005


async def test_add_after_hands_the_key_out_once_the_delay_passed() -> None:
    q = WorkQueue()
    q.add_after("late", 0.05)
    assert q.get_nowait() is None
    key = await asyncio.wait_for(q.get(), 2)
    assert key == "late"


async def test_shutdown_releases_waiting_workers() -> None:
    q = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    assert await asyncio.wait_for(waiter, 1) is None


def test_expectations_hold_until_observed() -> None:
    e = Expectations()
    assert e.satisfied("rs")
    e.expect("rs", adds=2)
    assert not e.satisfied("rs")
    e.creation_observed("rs")
    assert not e.satisfied("rs")
    e.creation_observed("rs")
    assert e.satisfied("rs")


class FakeApi:
    """A list answer and scripted watch streams; ``lists`` counts relists."""

    def __init__(self, items: list[Obj], streams: list[list[tuple[str, Obj]] | Exception]) -> None:
        self.items = items
        self.streams = streams
        self.lists = 0
        self.idle = asyncio.Event()

    async def list(self, path: str, params: Any = None) -> Obj:
        self.lists += 1
        return {"metadata": {"resourceVersion": "10"}, "items": list(self.items)}

    async def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
                    timeout_seconds: int | None = None) -> AsyncIterator[tuple[str, Obj]]:
        if not self.streams:
            self.idle.set()
            await asyncio.Event().wait()
        s = self.streams.pop(0)
        if isinstance(s, Exception):
            raise s
        for ev in s:
            yield ev


async def test_informer_caches_objects_calls_handlers_and_relists_after_410() -> None:
    api = FakeApi([_obj("a"), _obj("b")], [
        [("MODIFIED", _obj("a", "11")), ("DELETED", _obj("b", "12")), ("ADDED", _obj("c", "13"))],
        ApiError(410, "Expired", "too old resource version"),
    ])
    inf = Informer(api, "/api/v1/pods")  # type: ignore[arg-type]
    seen: list[str] = []
    inf.add_handlers(on_add=lambda o: seen.append("add " + key_of(o)),
                     on_update=lambda old, new: seen.append("update " + key_of(new)),
                     on_delete=lambda o: seen.append("delete " + key_of(o)))
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(api.idle.wait(), 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert inf.synced.is_set()
    assert api.lists == 2  # the 410 made it relist
    # after the relist, "c" (not in the fresh list) is gone and "b" is back
    assert sorted(inf.cache) == ["default/a", "default/b"]
    assert seen[:5] == ["add default/a", "add default/b", "update default/a", "delete default/b",
                        "add default/c"]
    assert "delete default/c" in seen[5:] and "add default/b" in seen[5:]


class _Counting(Controller):
    name = "counting"

    def __init__(self, api: Any, fail_first: int) -> None:
        super().__init__(api, workers=2)
        self.fail_first = fail_first
        self.calls: list[str] = []
        self.running: set[str] = set()
        self.overlap = False
        self.finished = asyncio.Event()

    async def reconcile(self, key: str) -> float | None:
        if key in self.running:
            self.overlap = True
        self.running.add(key)
        try:
            await asyncio.sleep(0.01)
            self.calls.append(key)
            if len(self.calls) <= self.fail_first:
                raise RuntimeError("transient")
            self.finished.set()
            return None
        finally:
            self.running.discard(key)


async def test_controller_retries_a_failing_key_with_backoff_and_stops_on_cancel() -> None:
    ctl = _Counting(FakeApi([], []), fail_first=3)
    ctl.queue.rate_limiter = ItemExponentialFailureRateLimiter(base=0.001, maximum=0.01)
    task = asyncio.create_task(ctl.run())
    for _ in range(5):
        ctl.queue.add("ns/x")
    await asyncio.wait_for(ctl.finished.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ctl.calls[:4] == ["ns/x"] * 4
    assert not ctl.overlap
    assert ctl.queue.num_requeues("ns/x") == 0  # forgotten after success


class _PodWatcher(Controller):
    name = "pod-watcher"

    def __init__(self, api: Any) -> None:
        super().__init__(api, workers=1)
        self.pods = self.informer("/api/v1/pods")
        self.seen: list[str] = []
        self.pods.add_handlers(on_add=lambda o: self.seen.append(key_of(o)))

    async def reconcile(self, key: str) -> float | None:
        return None


async def test_controllers_built_together_share_one_watch_and_a_stopped_one_leaves_no_handler() -> None:
    api = FakeApi([_obj("a"), _obj("b")], [])
    shared = SharedInformers(api)  # type: ignore[arg-type]
    with sharing(shared):
        first = _PodWatcher(api)
    with sharing(shared):
        second = _PodWatcher(api)
    assert first.pods is second.pods
    t1 = asyncio.create_task(first.run())
    await asyncio.wait_for(api.idle.wait(), 2)
    t2 = asyncio.create_task(second.run())
    with sharing(shared):
        late = _PodWatcher(api)  # e.g. a restarted controller: what exists is replayed to it as adds
    t3 = asyncio.create_task(late.run())
    await asyncio.sleep(0.05)
    assert api.lists == 1
    assert sorted(first.seen) == sorted(second.seen) == sorted(late.seen) == ["default/a", "default/b"]
    t3.cancel()
    t2.cancel()
    await asyncio.gather(t2, t3, return_exceptions=True)
    first.pods.apply("ADDED", _obj("c"))
    assert "default/c" in first.seen and "default/c" not in second.seen
    t1.cancel()
    await asyncio.gather(t1, return_exceptions=True)
    await shared.close()
