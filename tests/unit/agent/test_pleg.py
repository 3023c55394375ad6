"""The PLEG's relist: events for every changed pod, statuses fetched side by side, failures retried."""

from __future__ import annotations

import asyncio

from pykubelet.agent.container.runtime import ContainerState, RuntimePodStatus
from pykubelet.agent.kuberuntime.manager import RuntimeListing
from pykubelet.agent.pleg import GenericPLEG, PodLifecycleEvent, PodLifecycleEventType, PodStatusCache


class SlowRuntime:
    """Forty pods whose container just started; each status query takes a round trip."""

    def __init__(self, pods: int = 40, failing: frozenset[str] = frozenset()) -> None:
        self.listing = RuntimeListing(pods={f"uid-{i}": {f"c-{i}": ContainerState.RUNNING} for i in range(pods)})
        self.failing = failing
        self.in_flight = 0
        self.most_in_flight = 0

    async def list_runtime(self) -> RuntimeListing:
        return self.listing

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if uid in self.failing:
                raise RuntimeError("runtime hiccup")
            return RuntimePodStatus(uid=uid)
        finally:
            self.in_flight -= 1


async def test_a_relist_reports_every_started_container_and_asks_for_statuses_side_by_side() -> None:
    runtime = SlowRuntime()
    cache = PodStatusCache()
    events: list[PodLifecycleEvent] = []
    await GenericPLEG(runtime, cache, events.append).relist()
    assert sorted(e.pod_uid for e in events) == sorted(f"uid-{i}" for i in range(40))
    assert {e.type for e in events} == {PodLifecycleEventType.CONTAINER_STARTED}
    assert all(cache.has(f"uid-{i}") for i in range(40))
    assert runtime.most_in_flight > 1


async def test_a_pod_whose_status_fails_is_retried_at_the_next_relist() -> None:
    runtime = SlowRuntime(pods=3, failing=frozenset({"uid-1"}))
    cache = PodStatusCache()
    events: list[PodLifecycleEvent] = []
    pleg = GenericPLEG(runtime, cache, events.append)
    await pleg.relist()
    assert sorted(e.pod_uid for e in events) == ["uid-0", "uid-2"] and not cache.has("uid-1")
    runtime.failing = frozenset()
    events.clear()
    await pleg.relist()
    assert [e.pod_uid for e in events] == ["uid-1"]


class IdleRuntime(SlowRuntime):
    """Hands back each pod's previous map in a fresh outer dict, as ``list_runtime`` does while
    nothing changed; counts the status queries."""

    def __init__(self, pods: int) -> None:
        super().__init__(pods=pods)
        self.queries: list[str] = []

    async def list_runtime(self) -> RuntimeListing:
        return RuntimeListing(pods=dict(self.listing.pods))

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        self.queries.append(uid)
        return RuntimePodStatus(uid=uid)


async def test_an_idle_relist_fetches_nothing_and_a_pod_dropped_from_the_cache_is_fetched_again() -> None:
    runtime = IdleRuntime(pods=5)
    cache = PodStatusCache()
    events: list[PodLifecycleEvent] = []
    pleg = GenericPLEG(runtime, cache, events.append)
    await pleg.relist()
    assert len(runtime.queries) == 5 and len(events) == 5
    runtime.queries.clear()
    events.clear()
    for _ in range(3):
        await pleg.relist()
    assert runtime.queries == [] and events == []  # nothing changed: no status query, no event

    cache.delete("uid-3")  # e.g. housekeeping forgot it while the runtime still lists it
    await pleg.relist()
    assert runtime.queries == ["uid-3"] and cache.has("uid-3")
    assert [(e.pod_uid, e.type) for e in events] == [("uid-3", PodLifecycleEventType.POD_SYNC)]

    runtime.queries.clear()
    runtime.listing.pods["uid-1"] = {"c-1": ContainerState.EXITED}  # a change after idle relists
    await pleg.relist()
    assert runtime.queries == ["uid-1"]
    assert [(e.pod_uid, e.type) for e in events[1:]] == [("uid-1", PodLifecycleEventType.CONTAINER_DIED)]
