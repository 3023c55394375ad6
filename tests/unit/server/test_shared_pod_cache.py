"""The in-process controllers share one watch and one cache per collection (client-go's
SharedInformerFactory): the scheduler, the node lifecycle controller and the PV controller see a pod
change once it is written, from a single watch of pods, holding the same decoded object."""

import asyncio
from pathlib import Path

from pykubelet.server.controllers import kit
from pykubelet.server.nodelifecycle import NodeLifecycleController
from pykubelet.server.persistentvolume import PersistentVolumeController
from pykubelet.server.scheduler import Scheduler
from tests.builders import node, pod, pod_path
from tests.fakes import FakeApi, eventually

ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "pods": "110"}


async def test_scheduler_node_lifecycle_and_pv_controller_share_one_pod_watch_and_cache(tmp_path: Path) -> None:
    api = FakeApi()
    api.put("/api/v1/nodes/n1", node("n1", allocatable=ALLOCATABLE))
    shared = kit.SharedInformers(api)  # type: ignore[arg-type]
    sched = Scheduler(api, informers=shared)  # type: ignore[arg-type]
    lifecycle = NodeLifecycleController(api, informers=shared)  # type: ignore[arg-type]
    pv = PersistentVolumeController(api, base_dir=tmp_path, informers=shared)  # type: ignore[arg-type]
    tasks = [asyncio.create_task(c.run()) for c in (sched, lifecycle, pv)]
    try:
        await asyncio.wait_for(sched.synced.wait(), 10)
        web = pod("web")
        api.put(pod_path(web), web, notify="ADDED")
        await api.wait_for(lambda a: any(p.endswith("/web/binding") for _, p, _ in a.calls))
        key = "default/web"
        # the binding written by the scheduler comes back through the one watch to all three
        await eventually(lambda: all(
            (c.get(key) or {}).get("spec", {}).get("nodeName") == "n1"
            for c in (sched.pods, lifecycle.pods, pv.cache["pods"])), timeout=10)
        assert lifecycle.pods[key] is pv.cache["pods"][key]  # one decoded copy, not one each
        assert [p for p, _ in api.watches].count("/api/v1/pods") == 1
        assert [p for p, _ in api.watches].count("/api/v1/nodes") == 1

        await api.delete(pod_path(web))
        await eventually(lambda: all(key not in c for c in (sched.pods, lifecycle.pods, pv.cache["pods"])),
                         timeout=10)
        assert key not in sched.pods
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await shared.close()


async def test_a_controller_that_follows_a_synced_informer_late_gets_its_objects_and_stops_cleanly() -> None:
    api = FakeApi()
    api.put("/api/v1/namespaces/default/pods/a", pod("a"))
    shared = kit.SharedInformers(api)  # type: ignore[arg-type]
    first: list[tuple[str, str]] = []
    late: list[tuple[str, str]] = []
    t1 = asyncio.create_task(kit.follow(shared, "/api/v1/pods", lambda e, o: first.append((e, o["metadata"]["name"]))))
    try:
        await eventually(lambda: first == [("ADDED", "a")], timeout=5)
        synced: list[bool] = []
        t2 = asyncio.create_task(kit.follow(shared, "/api/v1/pods", lambda e, o: late.append((e, o["metadata"]["name"])),
                                            on_synced=lambda: synced.append(True)))
        await eventually(lambda: late == [("ADDED", "a")] and synced == [True], timeout=5)
        t2.cancel()
        await asyncio.gather(t2, return_exceptions=True)
        api.put("/api/v1/namespaces/default/pods/b", pod("b"), notify="ADDED")
        await eventually(lambda: ("ADDED", "b") in first, timeout=5)
        assert late == [("ADDED", "a")]  # a stopped follower's handlers are gone
        assert len(api.watches) == 1
    finally:
        t1.cancel()
        await asyncio.gather(t1, return_exceptions=True)
        await shared.close()
