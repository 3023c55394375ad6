"""Node-side admission and eviction through the whole kubelet on the fake CRI runtime: a refused pod
is Failed with upstream's reason and never started; an evicted pod is Failed/Evicted and its
containers are stopped."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient, pb
from pykubelet.fakecri.server import serve
from tests import builders
from tests.builders import container, pod_path
from tests.fakes import FakeApi, FakeEventRecorder, eventually

JSON = dict[str, Any]
Mi = 1024 * 1024


def node_pod(name: str, **fields: Any) -> JSON:
    c = fields.pop("containers", [container("c", "busybox:latest", imagePullPolicy="IfNotPresent",
                                            command=["sleep", "infinity"])])
    return builders.pod(name, containers=c, node_name="node1", annotations={"kubernetes.io/config.source": "api"},
                        status={"phase": "Pending"}, terminationGracePeriodSeconds=1, **fields)


class Harness:
    def __init__(self, tmp: Path, runtime: CRIClient) -> None:
        self.tmp, self.runtime, self.api = tmp, runtime, FakeApi()
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self.recorder = FakeEventRecorder()
        cfg = KubeletConfiguration()
        cfg.cgroups_per_qos = False
        cfg.pod_logs_dir = str(tmp / "logs")
        self.kubelet = Kubelet(
            options=AgentOptions(config=cfg, node_name="node1", node_ip="127.0.0.1", root_dir=tmp / "root"),
            api=self.api, runtime=runtime, recorder=self.recorder, updates=self.updates,  # type: ignore[arg-type]
            mirror=None, pleg_period=0.2, housekeeping_period=0.3, status_reconcile_period=1.0,
            eviction_monitoring_period=3600, startup_checks=False)

    async def add(self, *pods: JSON) -> None:
        for p in pods:
            self.api.put(pod_path(p), p)
        await self.updates.put(PodUpdate(PodOp.ADD, "api", [copy.deepcopy(p) for p in pods]))
        self.kubelet.mark_source_ready("api")

    def status(self, pod: JSON) -> JSON:
        return (self.api.objects.get(pod_path(pod)) or {}).get("status") or {}


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    sock = str(tmp_path / "cri.sock")
    server, _rt = await serve(sock)
    client = CRIClient(f"unix://{sock}", timeout=10)
    await client.connect(wait=5)
    h = Harness(tmp_path, client)
    await h.kubelet.start()
    try:
        yield h
    finally:
        await h.kubelet.stop()
        await client.close()
        await server.stop(0)


async def test_pod_bound_to_the_node_asking_more_cpu_than_allocatable_fails_out_of_cpu(harness: Harness) -> None:
    big = node_pod("big", containers=[container("c", "busybox:latest", requests={"cpu": "100000"})])
    await harness.add(big)
    st = await eventually(lambda: harness.status(big).get("phase") == "Failed" and harness.status(big))
    assert st["reason"] == "OutOfcpu"
    assert st["message"].startswith("Node didn't have enough resource: cpu, requested: 100000000, used: 0, capacity: ")
    assert ("Warning", "OutOfcpu") in [(t, r) for t, r, _ in harness.recorder.events]
    assert await harness.runtime.list_pod_sandbox() == []


async def test_pod_not_tolerating_a_no_execute_taint_of_the_api_node_is_refused(harness: Harness) -> None:
    api_node = builders.node("node1", allocatable={"cpu": "4", "memory": "4Gi", "pods": "110"},
                             taints=[{"key": "dedicated", "value": "db", "effect": "NoExecute"}])
    harness.kubelet.node_source = lambda: api_node
    p = node_pod("web")
    await harness.add(p)
    st = await eventually(lambda: harness.status(p).get("phase") == "Failed" and harness.status(p))
    assert (st["reason"], st["message"]) == (
        "TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
    assert await harness.runtime.list_pod_sandbox() == []


async def test_memory_pressure_evicts_the_best_effort_pod_and_stops_its_containers(harness: Harness) -> None:
    be = node_pod("be")
    guaranteed = node_pod("g", containers=[container("c", "busybox:latest", command=["sleep", "infinity"],
                                                     requests={"cpu": "100m", "memory": "10Mi"},
                                                     limits={"cpu": "100m", "memory": "10Mi"})])
    await harness.add(be, guaranteed)
    for p in (be, guaranteed):
        await eventually(lambda p=p: harness.status(p).get("phase") == "Running")  # type: ignore[misc]
    harness.kubelet.eviction.read_signals = lambda: ({"memory.available": 10 * Mi}, {"memory.available": 8192 * Mi})
    result = await harness.kubelet.eviction.synchronize()
    assert result.evicted == (be["metadata"]["uid"],)
    st = await eventually(lambda: harness.status(be).get("phase") == "Failed" and harness.status(be))
    assert st["reason"] == "Evicted"
    assert st["message"].startswith("The node was low on resource: memory. Threshold quantity: 100Mi, available: 10Mi.")
    assert harness.kubelet.pressure_conditions() == {"MemoryPressure": True, "DiskPressure": False,
                                                     "PIDPressure": False}

    async def stopped() -> bool:
        cs = await harness.runtime.list_containers()
        return all(c.state != pb.CONTAINER_RUNNING for c in cs if c.labels.get("io.kubernetes.pod.name") == "be")
    async with asyncio.timeout(20):
        while not await stopped():  # noqa: ASYNC110 - polling the runtime under test
            await asyncio.sleep(0.1)
    assert harness.status(guaranteed).get("phase") == "Running"
    # under MemoryPressure a new BestEffort pod is refused by eviction admission
    late = node_pod("late")
    await harness.add(late)
    st = await eventually(lambda: harness.status(late).get("phase") == "Failed" and harness.status(late))
    assert (st["reason"], st["message"]) == ("Evicted", "The node had condition: [MemoryPressure]. ")


async def test_admitted_pods_count_against_the_node_until_they_finish_or_go_and_rejected_ones_never(
        harness: Harness) -> None:
    api_node = builders.node("node1", allocatable={"cpu": "1", "memory": "4Gi", "pods": "110"})
    harness.kubelet.node_source = lambda: api_node

    def cpu_pod(name: str, cpu: str, command: list[str] | None = None, **fields: Any) -> JSON:
        return node_pod(name, containers=[container("c", "busybox:latest", requests={"cpu": cpu},
                                                    command=command or ["sleep", "infinity"])], **fields)

    def phase(p: JSON) -> str:
        return str(harness.status(p).get("phase"))

    short = cpu_pod("short", "600m", ["sh", "-c", "sleep 1"], restartPolicy="Never")
    await harness.add(short)
    await eventually(lambda: phase(short) == "Running")
    too_big, small = cpu_pod("too-big", "600m"), cpu_pod("small", "300m")
    await harness.add(too_big, small)  # in arrival order: too-big is refused, small still fits
    st = await eventually(lambda: phase(too_big) == "Failed" and harness.status(too_big))
    assert (st["reason"], st["message"]) == (
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 600, used: 600, capacity: 1000")
    await eventually(lambda: phase(small) == "Running")
    await eventually(lambda: phase(short) == "Succeeded", timeout=15)
    after = cpu_pod("after", "600m")  # short's 600m is free again; the refused pod never counted
    await harness.add(after)
    await eventually(lambda: phase(after) == "Running")
    late = cpu_pod("late", "300m")
    await harness.add(late)
    st = await eventually(lambda: phase(late) == "Failed" and harness.status(late))
    assert st["message"] == "Node didn't have enough resource: cpu, requested: 300, used: 900, capacity: 1000"
    await harness.updates.put(PodUpdate(PodOp.REMOVE, "api", [copy.deepcopy(small)]))
    again = cpu_pod("again", "300m")  # small was removed: its 300m is free
    await harness.add(again)
    await eventually(lambda: phase(again) == "Running")
