"""The PLEG's targeted update of one pod: its events come at once, and the relist never repeats them."""

from __future__ import annotations

import asyncio

from pykubelet.agent.container.runtime import (
    ContainerRuntimeStatus,
    ContainerState,
    RuntimePodStatus,
    SandboxRuntimeStatus,
)
from pykubelet.agent.kuberuntime.manager import RuntimeListing
from pykubelet.agent.pleg import GenericPLEG, PodLifecycleEvent, PodLifecycleEventType, PodStatusCache

RUNNING, CREATED = ContainerState.RUNNING, ContainerState.CREATED


class Runtime:
    """Pods with a ready sandbox ``sb-<uid>`` and containers whose states a test changes."""

    def __init__(self, **pods: dict[str, ContainerState]) -> None:
        self.pods = pods
        self.status_queries: list[str] = []
        self.listed = asyncio.Event()
        self.hold_listing: asyncio.Event | None = None  # set: the relist waits after listing

    def _states(self, uid: str) -> dict[str, ContainerState]:
        return {f"sb-{uid}": RUNNING, **self.pods[uid]}

    async def list_runtime(self) -> RuntimeListing:
        listing = RuntimeListing(pods={uid: self._states(uid) for uid in self.pods})
        self.listed.set()
        if self.hold_listing is not None:
            await self.hold_listing.wait()
        return listing

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        self.status_queries.append(uid)
        return RuntimePodStatus(
            uid=uid, sandboxes=[SandboxRuntimeStatus(id=f"sb-{uid}", ready=True)],
            containers=[ContainerRuntimeStatus(id=cid, name=cid, state=st) for cid, st in self.pods[uid].items()])


def started(uid: str, cid: str) -> PodLifecycleEvent:
    return PodLifecycleEvent(uid, PodLifecycleEventType.CONTAINER_STARTED, cid)


async def seeded(runtime: Runtime) -> tuple[GenericPLEG, list[PodLifecycleEvent]]:
    events: list[PodLifecycleEvent] = []
    pleg = GenericPLEG(runtime, PodStatusCache(), events.append)
    await pleg.relist()
    events.clear()
    runtime.status_queries.clear()
    return pleg, events


async def test_a_started_container_is_reported_at_once_and_the_next_relist_neither_repeats_nor_refetches() -> None:
    runtime = Runtime(a={"c1": CREATED}, b={"c2": CREATED})
    pleg, events = await seeded(runtime)
    runtime.pods["a"]["c1"] = RUNNING
    status = await pleg.update_pod("a")
    assert events == [started("a", "c1")]
    assert status.find_container("c1") is not None and pleg.cache.get("a").containers[0].state is RUNNING
    events.clear()
    runtime.status_queries.clear()
    await pleg.relist()
    assert events == [] and runtime.status_queries == []


async def test_a_change_the_targeted_update_missed_is_still_reported_by_the_relist() -> None:
    runtime = Runtime(a={"c1": CREATED, "c2": CREATED})
    pleg, events = await seeded(runtime)
    runtime.pods["a"]["c1"] = RUNNING
    await pleg.update_pod("a")
    runtime.pods["a"]["c2"] = RUNNING  # after the targeted update
    events.clear()
    await pleg.relist()
    assert events == [started("a", "c2")]


async def test_a_targeted_update_during_a_relist_is_not_reported_twice() -> None:
    runtime = Runtime(a={"c1": CREATED})
    pleg, events = await seeded(runtime)
    runtime.pods["a"]["c1"] = RUNNING
    # the relist lists the started container, then the targeted update reports it before the relist ends
    runtime.hold_listing = asyncio.Event()
    runtime.listed.clear()
    relist = asyncio.create_task(pleg.relist())
    await runtime.listed.wait()
    await pleg.update_pod("a")
    runtime.hold_listing.set()
    await relist
    assert events == [started("a", "c1")]
    events.clear()
    await pleg.relist()
    assert events == []
