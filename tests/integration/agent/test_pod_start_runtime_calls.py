"""What a pod start asks the runtime, on the fake CRI runtime: a pod the runtime never had is started
without listing the runtime for it, its image is inspected once per container, the report of a clean
start wakes no second sync, and the facts that
let the agent skip the listing never make it start a pod twice (an agent restart adopts running
containers; a sync that failed after making the sandbox is retried with that sandbox)."""

from __future__ import annotations

import asyncio
import collections
import copy
from typing import Any

from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from pykubelet.common import labels
from pykubelet.cri import CRIClient, pb
from tests.builders import container, pod_path
from tests.fakes import eventually
from tests.integration.agent.test_kubelet_on_fake_runtime import Harness, busybox, harness, node_pod

__all__ = ["harness"]  # the fixture


class CountingRuntime:
    """The CRI client, counting the calls the agent makes by method name."""

    def __init__(self, inner: CRIClient) -> None:
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)
        return counted


async def start_kubelet(h: Harness, runtime: Any, *, pleg_period: float) -> Kubelet:
    h.updates = asyncio.Queue()
    k = Kubelet(options=h.options(), api=h.api, runtime=runtime,
                recorder=EventRecorder(None, host="node1"), updates=h.updates, mirror=None,
                pleg_period=pleg_period, housekeeping_period=0.3, status_reconcile_period=1.0)
    await k.start()
    h.kubelet = k
    return k


def ready(h: Harness, pod: dict[str, Any]) -> bool:
    conds = h.api_status(pod).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def pod_filter(uid: str) -> pb.PodSandboxFilter:
    return pb.PodSandboxFilter(label_selector={labels.POD_UID_LABEL: uid})


async def test_a_pod_the_runtime_never_had_is_started_without_listing_the_runtime(harness: Harness) -> None:
    h = harness
    runtime = CountingRuntime(h.runtime)
    # relists far apart: after the first ones, any listing would be the pod start's own
    k = await start_kubelet(h, runtime, pleg_period=3600.0)
    await eventually(lambda: k.pleg.relist_count >= 2)
    runtime.calls.clear()
    pods = [node_pod(f"web-{i}", [busybox("a"), busybox("b")]) for i in range(5)]
    await h.add(*pods)
    await eventually(lambda: all(ready(h, p) for p in pods), timeout=10)
    assert runtime.calls["list_pod_sandbox"] == 0 and runtime.calls["list_containers"] == 0
    assert runtime.calls["run_pod_sandbox"] == 5 and runtime.calls["start_container"] == 10
    assert runtime.calls["image_status"] == 10  # once per container: the image check's answer is reused
    # per pod after the start: one ContainerStatus per container; the sandbox as read after its creation
    assert runtime.calls["pod_sandbox_status"] == 5 and runtime.calls["container_status"] == 10
    for p in pods:
        names = {c["name"]: c for c in h.api_status(p)["containerStatuses"]}
        assert set(names) == {"a", "b"} and all(c["ready"] and "running" in c["state"] for c in names.values())


async def test_a_clean_start_is_synced_once_its_own_report_wakes_no_second_sync(harness: Harness) -> None:
    h = harness
    k = await start_kubelet(h, h.runtime, pleg_period=3600.0)
    await eventually(lambda: k.pleg.relist_count >= 2)
    syncs: collections.Counter[str] = collections.Counter()
    sync_pod = k.syncer.sync_pod

    async def counted(update_type: Any, pod: dict[str, Any], mirror_pod: Any) -> Any:
        syncs[pod["metadata"]["name"]] += 1
        return await sync_pod(update_type, pod, mirror_pod)

    k.syncer.sync_pod = counted  # type: ignore[method-assign]
    pods = [node_pod(f"once-{i}", [busybox("a")]) for i in range(3)]
    await h.add(*pods)
    await eventually(lambda: all(ready(h, p) for p in pods), timeout=10)
    await asyncio.sleep(0.5)  # a woken sync would run now (the next resync is seconds away)
    assert syncs == {p["metadata"]["name"]: 1 for p in pods}


async def test_after_an_agent_restart_running_containers_are_adopted_not_restarted(harness: Harness) -> None:
    h = harness
    await h.start()
    pod = node_pod("steady", [busybox("a"), busybox("b")])
    await h.add(pod)
    await eventually(lambda: h.api_status(pod).get("phase") == "Running")
    containers = {c.id for c in await h.runtime.list_containers()}
    sandboxes = {s.id for s in await h.runtime.list_pod_sandbox()}
    assert h.kubelet is not None
    await h.kubelet.stop()
    # the new agent has relisted the runtime before it hears of the pod (the case where it could
    # otherwise take a pod it never synced as one the runtime has nothing of)
    k2 = await start_kubelet(h, h.runtime, pleg_period=0.2)
    await eventually(lambda: k2.pleg.relist_count >= 1)
    await h.add(copy.deepcopy(h.api.objects[pod_path(pod)]))
    runs = k2.housekeeping.runs
    await eventually(lambda: k2.housekeeping.runs >= runs + 3 and k2.pleg.relist_count >= 5)
    after = await h.runtime.list_containers()
    assert {c.id for c in after} == containers
    assert all(c.state == pb.CONTAINER_RUNNING for c in after)
    assert {s.id for s in await h.runtime.list_pod_sandbox()} == sandboxes
    assert h.api_status(pod)["phase"] == "Running"


async def test_a_pod_whose_first_start_failed_is_retried_in_the_sandbox_it_already_has(harness: Harness) -> None:
    h = harness
    k = await start_kubelet(h, h.runtime, pleg_period=0.2)
    await eventually(lambda: k.pleg.relist_count >= 1)
    pod = node_pod("absent-image", [container("a", "example.com/not-here:1", imagePullPolicy="Never")])
    await h.add(pod)
    uid = pod["metadata"]["uid"]

    def waiting_reason() -> str:
        statuses = h.api_status(pod).get("containerStatuses") or [{}]
        return str(((statuses[0].get("state") or {}).get("waiting") or {}).get("reason", ""))

    await eventually(lambda: waiting_reason() == "ErrImageNeverPull")
    seen = k.pleg.relist_count
    await eventually(lambda: k.pleg.relist_count >= seen + 5)  # several relists and retried syncs later
    sandboxes = await h.runtime.list_pod_sandbox(pod_filter(uid))
    assert len(sandboxes) == 1 and sandboxes[0].state == pb.SANDBOX_READY
    assert waiting_reason() == "ErrImageNeverPull"
