"""The agent's engine on a real containerd: a two-container pod shares one IP; an OOM is reported.

Runs the engine in-process (no API server: an in-memory API stub records status patches) against the
session's private containerd, with pod cgroups below the fixture's cgroup parent so cleanup finds them.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient
from tests.builders import container, fresh_uid, pod, pod_path
from tests.fakes import FakeApi, eventually

BUSYBOX = "docker.io/library/busybox:latest"


def busybox(name: str, command: list[str], **fields: Any) -> dict[str, Any]:
    return container(name, BUSYBOX, imagePullPolicy="IfNotPresent", command=command, **fields)


def api_pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod as the API server hands it to the agent, with a fresh uid and a 2 s grace period."""
    return pod(name, uid=fresh_uid(), containers=containers, annotations={"kubernetes.io/config.source": "api"},
               status={}, terminationGracePeriodSeconds=2, **spec)


async def _run(containerd: Any, tmp_path: Path, pods: list[dict[str, Any]], check: Callable[..., Any]) -> None:
    cfg = KubeletConfiguration()
    cfg.cgroup_root = containerd.cgroup_parent
    cfg.pod_logs_dir = str(tmp_path / "logs")
    opts = AgentOptions(config=cfg, node_name="e2e-engine", node_ip="127.0.0.1", root_dir=tmp_path / "root")
    api = FakeApi()
    runtime = CRIClient(containerd.endpoint, timeout=30)
    await runtime.connect(wait=10)
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    k = Kubelet(options=opts, api=api, runtime=runtime, recorder=EventRecorder(None), updates=updates,
                pleg_period=0.5)
    await k.start()
    try:
        for p in pods:
            api.put(pod_path(p), p)
        await updates.put(PodUpdate(PodOp.ADD, "api", copy.deepcopy(pods)))
        k.mark_source_ready("api")

        def status(p: dict[str, Any]) -> dict[str, Any]:
            return (api.objects.get(pod_path(p)) or {}).get("status") or {}

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
    pod = api_pod(
        "pair",
        busybox("server", ["sh", "-c", "echo hello > /tmp/index.html; httpd -f -p 8080 -h /tmp"]),
        busybox("client", ["sleep", "3600"], requests={"cpu": "100m", "memory": "32Mi"}, limits={"memory": "64Mi"}),
    )

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
    pod = api_pod("oom", busybox("hog", ["sh", "-c", "head -c 64m /dev/zero | tail > /dev/null"],
                                 limits={"memory": "16Mi"}), restart_policy="Never")

    async def check(k: Kubelet, runtime: CRIClient, status: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        st = await eventually(lambda: status(pod).get("phase") == "Failed" and status(pod))
        term = st["containerStatuses"][0]["state"]["terminated"]
        assert term["reason"] == "OOMKilled"
        assert term["exitCode"] == 137

    asyncio.run(_run(containerd, tmp_path, [pod], check))


def test_termination_message_file(containerd: Any, tmp_path: Path) -> None:
    pod = api_pod("tmsg", busybox("w", ["sh", "-c", "echo -n bye > /dev/termination-log; exit 4"]),
                  restart_policy="Never")

    async def check(k: Kubelet, runtime: CRIClient, status: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        st = await eventually(lambda: status(pod).get("phase") == "Failed" and status(pod))
        term = st["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 4 and term["message"] == "bye"

    asyncio.run(_run(containerd, tmp_path, [pod], check))
