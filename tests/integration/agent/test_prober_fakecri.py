"""Exec probes and exec lifecycle hooks through CRIClient against the fake CRI runtime (unix socket)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pykubelet.agent.lifecycle import HandlerRunner
from pykubelet.agent.prober import ProbeManager, ProbeType, Result
from pykubelet.cri import CRIClient, pb
from pykubelet.fakecri import FakeRuntime, serve
from tests.fakes import FakeEventRecorder


@pytest.fixture
async def cri() -> AsyncIterator[tuple[CRIClient, str, str]]:
    d = tempfile.mkdtemp(prefix="prb", dir="/tmp")
    sock = os.path.join(d, "cri.sock")
    server, _rt = await serve(sock, FakeRuntime())
    client = CRIClient(f"unix://{sock}", timeout=10)
    try:
        await client.connect(wait=5)
        labels = {"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default",
                  "io.kubernetes.pod.uid": "uid1"}
        scfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="web", namespace="default", uid="uid1"),
                                   labels=labels)
        sid = await client.run_pod_sandbox(scfg)
        ccfg = pb.ContainerConfig(metadata=pb.ContainerMetadata(name="app"), image=pb.ImageSpec(image="busybox"),
                                  command=["sleep", "3600"],
                                  labels={**labels, "io.kubernetes.container.name": "app"})
        cid = await client.create_container(sid, ccfg, scfg)
        await client.start_container(cid)
        ip = (await client.pod_sandbox_status(sid)).status.network.ip
        yield client, cid, ip
    finally:
        await client.close()
        await server.stop(None)
        shutil.rmtree(d, ignore_errors=True)


async def test_exec_probes_via_fake_cri(cri: Any) -> None:
    client, cid, ip = cri
    rec = FakeEventRecorder()
    changed: list[str] = []
    woke = asyncio.Event()

    def on_change(uid: str) -> None:
        changed.append(uid)
        woke.set()

    m = ProbeManager(client, rec, on_change=on_change, rand=lambda: 0.0)
    probe = {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 1, "timeoutSeconds": 2}
    pod = {"metadata": {"name": "web", "namespace": "default", "uid": "uid1"},
           "spec": {"containers": [{"name": "app", "readinessProbe": probe, "livenessProbe": probe}]},
           "status": {"phase": "Running"}}
    try:
        m.add_pod(pod)
        m.update_pod_status(pod, {"app": (f"containerd://{cid}", True, None)}, ip)
        async with asyncio.timeout(10):
            while not m.is_ready("uid1", "app"):
                await woke.wait()
                woke.clear()
        assert m.liveness("uid1", "app") is Result.SUCCESS
        assert m.result_for(ProbeType.READINESS, f"containerd://{cid}") is Result.SUCCESS
        assert "uid1" in changed and rec.events == []
        assert m.kill_decision(pod, "app") is None
    finally:
        await m.stop()
    assert m.workers() == []


async def test_exec_lifecycle_hooks_via_fake_cri(cri: Any) -> None:
    client, cid, ip = cri
    runner = HandlerRunner(client, FakeEventRecorder())
    container = {"name": "app", "lifecycle": {"postStart": {"exec": {"command": ["touch", "/started"]}},
                                              "preStop": {"exec": {"command": ["sh", "-c", "drain"]}}}}
    pod = {"metadata": {"name": "web", "namespace": "default", "uid": "uid1"}}
    assert await runner.run_post_start(pod, container, cid, pod_ip=ip, timeout=5) is None
    left = await runner.run_pre_stop(pod, container, cid, pod_ip=ip, grace_seconds=30)
    assert 2 <= left <= 30
    await client.stop_container(cid, 0)
    # exec in a stopped container fails: the message is returned in upstream wording
    msg = await runner.run_post_start(pod, container, cid, pod_ip=ip, timeout=5)
    assert msg is not None and msg.startswith('Exec lifecycle hook ([touch /started]) for Container "app"')
