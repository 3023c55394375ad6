"""The example manifests run on the offline images (driven straight through CRI, no agent)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pbg

from pykubelet.up.containerd import PrivateContainerd

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


async def _run_pod(cd: PrivateContainerd, pod: dict[str, Any], logs: Path) -> tuple[Any, str, dict[str, str]]:
    uid = uuid.uuid4().hex
    name = pod["metadata"]["name"]
    cfg = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid=uid),
        hostname=name,
        log_directory=str(logs),
        linux=pb.LinuxPodSandboxConfig(cgroup_parent=f"{cd.cgroup_parent}/pod{uid}"),
    )
    ch = grpc.aio.insecure_channel(cd.endpoint)
    rt = pbg.RuntimeServiceStub(ch)
    sb = await rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg))
    ids = {}
    for c in pod["spec"]["containers"]:
        created = await rt.CreateContainer(
            pb.CreateContainerRequest(
                pod_sandbox_id=sb.pod_sandbox_id,
                sandbox_config=cfg,
                config=pb.ContainerConfig(
                    metadata=pb.ContainerMetadata(name=c["name"]),
                    image=pb.ImageSpec(image=c["image"]),
                    command=c.get("command", []),
                    args=c.get("args", []),
                    log_path=f"{c['name']}/0.log",
                ),
            )
        )
        await rt.StartContainer(pb.StartContainerRequest(container_id=created.container_id))
        ids[c["name"]] = created.container_id
    return (ch, rt), sb.pod_sandbox_id, ids


async def _remove(rt: Any, sandbox: str) -> None:
    await rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox))
    await rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox))


async def _wait_log(path: Path, text: str) -> str:
    async with asyncio.timeout(30):
        while True:
            content = path.read_text() if path.exists() else ""  # noqa: ASYNC240
            if text in content:
                return content
            await asyncio.sleep(0.2)


async def test_two_container_example_shares_localhost(containerd: PrivateContainerd, tmp_path: Path) -> None:
    pod = yaml.safe_load((EXAMPLES / "two-container-pod.yaml").read_text())
    (ch, rt), sb, _ = await _run_pod(containerd, pod, tmp_path)
    try:
        log = await _wait_log(tmp_path / "client" / "0.log", "got: hello from the web container")
        assert "got: hello from the web container" in log  # the client reached the web container on localhost
    finally:
        await _remove(rt, sb)
        await ch.close()


@pytest.mark.parametrize("example", ["busybox-pod.yaml", "static-pod.yaml"])
async def test_single_container_examples_keep_running(
    containerd: PrivateContainerd, tmp_path: Path, example: str
) -> None:
    pod = yaml.safe_load((EXAMPLES / example).read_text())
    (ch, rt), sb, ids = await _run_pod(containerd, pod, tmp_path)
    try:
        await asyncio.sleep(1)
        for cid in ids.values():
            st = await rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid))
            assert st.status.state == pb.CONTAINER_RUNNING, st.status
    finally:
        await _remove(rt, sb)
        await ch.close()
