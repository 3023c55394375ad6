"""The PLEG and the pods the agent is making: a relist leaves a pod whose first sync is in flight to
that sync's own targeted update (no status fetch, no event twice), finds it as before if the sync
ends without one, and tells the agent which pods its last relist saw nothing of."""

from __future__ import annotations

import asyncio

from pykubelet.agent.container.runtime import ContainerState, RuntimePodStatus
from pykubelet.agent.pleg import GenericPLEG, PodLifecycleEvent, PodStatusCache
from tests.unit.agent.test_pleg_targeted_update import Runtime

RUNNING = ContainerState.RUNNING


async def pleg_with_a_pod_being_made() -> tuple[Runtime, GenericPLEG, list[PodLifecycleEvent], set[str]]:
    """A relisted, empty runtime; then pod ``a`` appears while its sync is in flight."""
    runtime = Runtime()
    events: list[PodLifecycleEvent] = []
    pleg = GenericPLEG(runtime, PodStatusCache(), events.append)
    making: set[str] = set()
    pleg.making = making.__contains__
    await pleg.relist()
    making.add("a")
    runtime.pods["a"] = {"c1": RUNNING}
    return runtime, pleg, events, making


async def test_a_relist_leaves_a_pod_being_made_to_its_sync_and_nothing_is_reported_twice() -> None:
    runtime, pleg, events, making = await pleg_with_a_pod_being_made()
    await pleg.relist()
    assert events == [] and runtime.status_queries == []  # no fetch, no event: the sync reports it
    status = await pleg.update_pod("a")  # the sync's targeted update after starting c1
    making.discard("a")
    assert status.find_container("c1") is not None
    assert sorted(e.container_id for e in events) == ["c1", "sb-a"]
    events.clear()
    runtime.status_queries.clear()
    await pleg.relist()
    assert events == [] and runtime.status_queries == []


async def test_a_pod_whose_sync_ended_without_reporting_it_is_found_by_the_next_relist() -> None:
    _, pleg, events, making = await pleg_with_a_pod_being_made()
    await pleg.relist()
    making.discard("a")  # e.g. the image could not be pulled: nothing started, no targeted update
    await pleg.relist()
    assert sorted(e.container_id for e in events) == ["c1", "sb-a"]
    assert pleg.cache.get("a").find_container("c1") is not None


async def test_a_targeted_update_that_began_before_a_relist_that_left_the_pod_alone_is_kept() -> None:
    runtime, pleg, events, _ = await pleg_with_a_pod_being_made()
    gate = asyncio.Event()

    async def slow_read() -> RuntimePodStatus:
        status = await runtime.get_pod_status("a")
        await gate.wait()  # the relist below runs while this answer is on its way
        return status

    update = asyncio.create_task(pleg.update_pod("a", slow_read))
    await asyncio.sleep(0)
    await pleg.relist()
    gate.set()
    await update
    assert sorted(e.container_id for e in events) == ["c1", "sb-a"]
    assert pleg.cache.get("a").find_container("c1") is not None


async def test_the_pleg_says_which_pods_its_last_relist_saw_nothing_of() -> None:
    runtime = Runtime(b={"c2": RUNNING})
    pleg = GenericPLEG(runtime, PodStatusCache(), lambda e: None, clock=lambda: 100.0)
    assert pleg.listed_without("a") is None  # no relist yet: it cannot tell
    await pleg.relist()
    assert pleg.listed_without("a") == 100.0
    assert pleg.listed_without("b") is None
    making = {"a"}
    pleg.making = making.__contains__
    runtime.pods["a"] = {"c1": RUNNING}
    await pleg.relist()  # left to its sync, but listed: not "nothing"
    assert pleg.listed_without("a") is None
