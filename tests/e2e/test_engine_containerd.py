"""Kubelet engine on a real containerd: a two-container pod shares one IP; an OOM is reported.

Runs the engine in-process (no API server: an in-memory API stub records status patches) against the
session's private containerd, with pod cgroups below the fixture's cgroup parent so cleanup finds them.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient


class MemApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if path not in self.objects:
            err = Exception("not found")
            err.status = 404  # type: ignore[attr-defined]
            raise err
        return copy.deepcopy(self.objects[path])

    async def patch(self, path: str, body: dict[str, Any], patch_type: str = "merge", params: Any = None) -> dict[str, Any]:
        obj = self.objects[path.removesuffix("/status")]
        obj["status"] = copy.deepcopy(body["status"])
        return obj

    async def create(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        return body

    async def delete(self, path: str, body: Any = None, params: Any = None) -> dict[str, Any]:
        self.objects.pop(path, None)
        return {}


def make_pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"containers": containers, "terminationGracePeriodSeconds": 2, **spec},
        "status": {},
    }


async def eventually(pred: Callable[[], Any], wait: float = 60.0) -> Any:
    async with asyncio.timeout(wait):
        while not (v := pred()):  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(0.1)
        return v


async def _run(containerd: Any, tmp_path: Path, pods: list[dict[str, Any]], check: Callable[..., Any]) -> None:
    cfg = KubeletConfiguration()
    cfg.cgroup_root = containerd.cgroup_parent
    cfg.pod_logs_dir = str(tmp_path / "logs")
    opts = AgentOptions(config=cfg, node_name="e2e-engine", node_ip="127.0.0.1", root_dir=tmp_path / "root")
    api = MemApi()
    runtime = CRIClient(containerd.endpoint, timeout=30)
    await runtime.connect(wait=10)
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    k = Kubelet(options=opts, api=api, runtime=runtime, recorder=EventRecorder(None), updates=updates,
                pleg_period=0.5)
    await k.start()
    try:
        for p in pods:
            api.objects[f"/api/v1/namespaces/default/pods/{p['metadata']['name']}"] = copy.deepcopy(p)
        await updates.put(PodUpdate(PodOp.ADD, "api", copy.deepcopy(pods)))
        k.mark_source_ready("api")

        def status(p: dict[str, Any]) -> dict[str, Any]:
            return api.objects[f"/api/v1/namespaces/default/pods/{p['metadata']['name']}"].get("status") or {}

        await check(k, runtime, status)
    finally:
        # tear everything down: REMOVE the pods and wait for the runtime to be empty of them
        await updates.put(PodUpdate(PodOp.REMOVE, "api", copy.deepcopy(pods)))
        uids = {p["metadata"]["uid"] for p in pods}
        async with asyncio.timeout(60):
            while {s.labels.get("io.kubernetes.pod.uid") for s in await runtime.list_pod_sandbox()} & uids:  # noqa: ASYNC110 - polling the runtime/API under test
                await asyncio.sleep(0.2)
        await k.stop()
        await runtime.close()


def test_two_containers_share_ip(containerd: Any, tmp_path: Path) -> None:
    pod = make_pod("pair", [
        {"name": "server", "image": "docker.io/library/busybox:latest", "imagePullPolicy": "IfNotPresent",
         "command": ["sh", "-c", "echo hello > /tmp/index.html; httpd -f -p 8080 -h /tmp"]},
        {"name": "client", "image": "docker.io/library/busybox:latest", "imagePullPolicy": "IfNotPresent",
         "command": ["sleep", "3600"],
         "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}},
    ])

    async def check(k: Kubelet, runtime: CRIClient, status: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        st = await eventually(lambda: status(pod).get("phase") == "Running" and status(pod))
        assert st["podIP"].startswith("198.19.")
        assert st["qosClass"] == "Burstable"
        cs = {c["name"]: c for c in st["containerStatuses"]}
        client_id = cs["client"]["containerID"].split("://", 1)[1]
        for _ in range(50):
            resp = await runtime.exec_sync(client_id, ["wget", "-qO-", "http://127.0.0.1:8080/index.html"], 10)
            if resp.exit_code == 0:
                break
            await asyncio.sleep(0.2)
        assert resp.stdout.decode().strip() == "hello"
        pod_cg = Path("/sys/fs/cgroup/memory") / containerd.cgroup_parent.strip("/") / "kubepods" / "burstable" / (
            "pod" + pod["metadata"]["uid"])
        assert pod_cg.is_dir()
        limits = {p.name: (p / "memory.limit_in_bytes").read_text().strip() for p in pod_cg.iterdir() if p.is_dir()}
        assert str(64 * 1024 * 1024) in limits.values()

    asyncio.run(_run(containerd, tmp_path, [pod], check))
    pod_cg = Path("/sys/fs/cgroup/memory") / containerd.cgroup_parent.strip("/") / "kubepods" / "burstable" / (
        "pod" + pod["metadata"]["uid"])
    assert not pod_cg.exists()


def test_oom_killed(containerd: Any, tmp_path: Path) -> None:
    pod = make_pod("oom", [
        {"name": "hog", "image": "docker.io/library/busybox:latest", "imagePullPolicy": "IfNotPresent",
         "command": ["sh", "-c", "head -c 64m /dev/zero | tail > /dev/null"],
         "resources": {"limits": {"memory": "16Mi"}}},
    ], restartPolicy="Never")

    async def check(k: Kubelet, runtime: CRIClient, status: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        st = await eventually(lambda: status(pod).get("phase") == "Failed" and status(pod))
        term = st["containerStatuses"][0]["state"]["terminated"]
        assert term["reason"] == "OOMKilled"
        assert term["exitCode"] == 137

    asyncio.run(_run(containerd, tmp_path, [pod], check))


def test_termination_message_file(containerd: Any, tmp_path: Path) -> None:
    pod = make_pod("tmsg", [
        {"name": "w", "image": "docker.io/library/busybox:latest", "imagePullPolicy": "IfNotPresent",
         "command": ["sh", "-c", "echo -n bye > /dev/termination-log; exit 4"]},
    ], restartPolicy="Never")

    async def check(k: Kubelet, runtime: CRIClient, status: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        st = await eventually(lambda: status(pod).get("phase") == "Failed" and status(pod))
        term = st["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 4 and term["message"] == "bye"

    asyncio.run(_run(containerd, tmp_path, [pod], check))
