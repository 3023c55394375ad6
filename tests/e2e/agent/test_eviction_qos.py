"""End to end on a real containerd: QoS cgroups with upstream's values, node-side admission, and
node-pressure eviction (memory, an emptyDir over its sizeLimit, nodefs).

The engine runs in-process (an in-memory API stub records status patches) against the session's
private containerd. Thresholds are computed from what the machine has *now* (memory.available as the
eviction manager observes it, a small tmpfs made by the test as the agent's root dir), so the test is
safe on any machine: it only ever evicts its own pods. Which cgroup version and driver ran is printed.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pykubelet.agent.cm.cgroups import CgroupVersion, cpu_shares_to_weight
from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.events import EventRecorder
from pykubelet.agent.eviction import Signal, parse_thresholds
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient
from tests.builders import container, fresh_uid, pod, pod_path
from tests.fakes import FakeApi, eventually

BUSYBOX = "docker.io/library/busybox:latest"
Mi = 1024 * 1024
Status = Callable[[dict[str, Any]], dict[str, Any]]


def busybox(name: str, command: str, **fields: Any) -> dict[str, Any]:
    return container(name, BUSYBOX, imagePullPolicy="IfNotPresent", command=["sh", "-c", command], **fields)


def api_pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return pod(name, uid=fresh_uid(), containers=containers, annotations={"kubernetes.io/config.source": "api"},
               status={}, terminationGracePeriodSeconds=1, node_name="e2e-evict", **spec)


async def run_engine(containerd: Any, root: Path, tmp_path: Path, config: dict[str, Any],
                     check: Callable[[Kubelet, Callable[..., Awaitable[None]], Status], Awaitable[None]]) -> None:
    cfg = KubeletConfiguration.from_dict({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cgroupRoot": containerd.cgroup_parent, "podLogsDir": str(tmp_path / "logs"),
        "evictionPressureTransitionPeriod": "4s", **config})
    opts = AgentOptions(config=cfg, node_name="e2e-evict", node_ip="127.0.0.1", root_dir=root)
    api = FakeApi()
    runtime = CRIClient(containerd.endpoint, timeout=30)
    await runtime.connect(wait=10)
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    k = Kubelet(options=opts, api=api, runtime=runtime, recorder=EventRecorder(None), updates=updates,  # type: ignore[arg-type]
                pleg_period=0.5, housekeeping_period=1.0, eviction_monitoring_period=1.0)
    await k.start()
    added: list[dict[str, Any]] = []

    async def add(*pods: dict[str, Any]) -> None:
        for p in pods:
            api.put(pod_path(p), p)
            added.append(p)
        await updates.put(PodUpdate(PodOp.ADD, "api", copy.deepcopy(list(pods))))
        k.mark_source_ready("api")

    def status(p: dict[str, Any]) -> dict[str, Any]:
        return (api.objects.get(pod_path(p)) or {}).get("status") or {}

    try:
        await check(k, add, status)
    finally:
        await updates.put(PodUpdate(PodOp.REMOVE, "api", copy.deepcopy(added)))
        uids = {p["metadata"]["uid"] for p in added}
        async with asyncio.timeout(60):
            while {s.labels.get("io.kubernetes.pod.uid") for s in await runtime.list_pod_sandbox()} & uids:  # noqa: ASYNC110 - polling the runtime under test
                await asyncio.sleep(0.2)
        await k.stop()
        await runtime.close()


def cgroup_value(k: Kubelet, rel: str, v1: str, v2: str) -> str:
    cm = k.cgroups
    if cm.version is CgroupVersion.V2:
        return (cm.mount / rel.strip("/") / v2).read_text().strip()
    ctrl, _, name = v1.partition("/")
    return (cm.mount / ctrl / rel.strip("/") / name).read_text().strip()


def test_memory_hog_is_evicted_not_the_guaranteed_pod_and_qos_cgroups_have_upstream_values(
        containerd: Any, tmp_path: Path) -> None:
    res = {"cpu": "100m", "memory": "64Mi"}
    guaranteed = api_pod("steady", busybox("c", "sleep 3600", requests=res, limits=res))
    # burstable, no memory limit: one 800Mi line buffered by tail, then it waits
    hog = api_pod("hog", busybox("x", "(head -c 800m /dev/zero; sleep 3600) | tail", requests={"cpu": "10m"}))

    async def check(k: Kubelet, add: Callable[..., Awaitable[None]], status: Status) -> None:
        cm = k.cgroups
        print(f"\ncgroup {cm.version.value if cm.version else 'none'}, driver {cm.driver.value}, "
              f"memory notifications {'on' if k.eviction.notifier else 'off (polling)'}")
        # node-side admission: too much cpu, an untolerated NoExecute taint
        greedy = api_pod("greedy", busybox("c", "sleep 1", requests={"cpu": "1000"}))
        await add(greedy)
        st = await eventually(lambda: status(greedy).get("phase") == "Failed" and status(greedy), timeout=20)
        assert st["reason"] == "OutOfcpu"
        local = k.node_for_admission() or {}
        k.node_source = lambda: {**local, "spec": {"taints": [{"key": "maint", "effect": "NoExecute"}]}}
        tainted = api_pod("tainted", busybox("c", "sleep 1"))
        await add(tainted)
        st = await eventually(lambda: status(tainted).get("phase") == "Failed" and status(tainted), timeout=20)
        assert st["reason"] == "TaintToleration"
        k.node_source = None

        await add(guaranteed)
        await eventually(lambda: status(guaranteed).get("phase") == "Running", timeout=30)
        # QoS cgroups as upstream: pod limits; burstable = sum of burstable requests; besteffort minimum
        pod_cg = cm.pod_cgroup(guaranteed)
        assert cgroup_value(k, pod_cg, "memory/memory.limit_in_bytes", "memory.max") == str(64 * Mi)
        quota = cgroup_value(k, pod_cg, "cpu/cpu.cfs_quota_us", "cpu.max").split()[0]
        assert quota == "10000"
        besteffort = cm.qos_parent("BestEffort")
        assert cgroup_value(k, besteffort, "cpu/cpu.shares", "cpu.weight") in ("2", str(cpu_shares_to_weight(2)))
        alloc = cm.node_allocatable or {}
        top = cm.qos_parent("Guaranteed")
        assert cgroup_value(k, top, "memory/memory.limit_in_bytes", "memory.max") == str(alloc["memory"])

        # threshold just below what is available now: the hog's 800Mi crosses it, with 400Mi of slack
        # either way for what other processes on a shared machine allocate or free meanwhile
        before = (await k.eviction.observe_signals())[Signal.MEMORY_AVAILABLE].available
        threshold = before - 400 * Mi
        k.eviction.config.thresholds = parse_thresholds({"memory.available": f"{threshold // Mi}Mi"})
        await add(hog)
        await eventually(lambda: status(hog).get("phase") == "Running", timeout=30)
        burstable = cm.qos_parent("Burstable")
        await eventually(lambda: cgroup_value(k, burstable, "cpu/cpu.shares", "cpu.weight")
                         in ("10", str(cpu_shares_to_weight(10))), timeout=10)
        st = await eventually(lambda: status(hog).get("phase") == "Failed" and status(hog), timeout=30)
        assert st["reason"] == "Evicted"
        assert st["message"].startswith(f"The node was low on resource: memory. Threshold quantity: "
                                        f"{threshold // Mi}Mi, available: ")
        assert "Container x was using" in st["message"]
        assert status(guaranteed).get("phase") == "Running"
        assert (k.pressure_conditions() or {})["MemoryPressure"] is True
        # the hog is gone: MemoryPressure clears once the transition period (4 s) has passed
        await eventually(lambda: (k.pressure_conditions() or {}).get("MemoryPressure") is False, timeout=30)

    # memory only (evictionHard replaces the defaults): the disk the test runs on is none of its business
    asyncio.run(run_engine(containerd, tmp_path / "root", tmp_path, {"evictionHard": {"memory.available": "1Mi"},
                                                                  "kernelMemcgNotification": True},
                           check))


def test_emptydir_over_its_size_limit_and_a_full_nodefs_are_evicted(containerd: Any, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "pk-evict", str(root)], check=True)
    scratch = {"name": "scratch", "emptyDir": {"sizeLimit": "2Mi"}}
    over_limit = api_pod("overlimit", busybox("w", "dd if=/dev/zero of=/data/f bs=1M count=6; sleep 3600",
                                              volumeMounts=[{"name": "scratch", "mountPath": "/data"}]),
                         volumes=[scratch])
    filler = api_pod("filler", busybox("w", "dd if=/dev/zero of=/data/f bs=1M count=40; sleep 3600",
                                       volumeMounts=[{"name": "data", "mountPath": "/data"}]),
                     volumes=[{"name": "data", "emptyDir": {}}])
    quiet = api_pod("quiet", busybox("c", "sleep 3600"))

    async def check(k: Kubelet, add: Callable[..., Awaitable[None]], status: Status) -> None:
        # node-level reclaim comes first; the real image GC would remove the session containerd's unused
        # images, which other tests need, so a reclaimer that frees nothing stands in for it here
        calls: list[str] = []

        class NothingToReclaim:
            async def reclaim(self, resource: str) -> int:
                calls.append(resource)
                return 0

        k.eviction.reclaimers = [NothingToReclaim()]
        await add(over_limit, quiet)
        st = await eventually(lambda: status(over_limit).get("phase") == "Failed" and status(over_limit), timeout=40)
        assert (st["reason"], st["message"]) == ("Evicted", 'Usage of EmptyDir volume "scratch" exceeds the limit "2Mi". ')
        await add(filler)
        st = await eventually(lambda: status(filler).get("phase") == "Failed" and status(filler), timeout=40)
        assert st["reason"] == "Evicted"
        assert st["message"].startswith("The node was low on resource: ephemeral-storage. Threshold quantity: 64Mi")
        assert "nodefs.available" in calls  # reclaimed before evicting
        assert status(quiet).get("phase") == "Running"

    try:
        asyncio.run(run_engine(containerd, root, tmp_path, {
            "evictionHard": {"nodefs.available": "64Mi", "imagefs.available": "0", "memory.available": "0"},
        }, check))
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
