"""Pods with volumes through the whole kubelet, on the fake CRI runtime over gRPC.

The volume manager runs for real: volumes are created under the agent's root dir, and as root the
memory-backed ones (secret, emptyDir medium Memory) are real tmpfs mounts checked in
/proc/self/mountinfo (without root, the test mode stands a plain directory in for them). What a
container would see is read from the CRI mounts the agent gave the fake runtime.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.agent.volumemanager import SystemMounter, TmpfsMode
from pykubelet.agent.volumemanager.mounter import read_mountinfo
from pykubelet.cri import CRIClient, pb
from pykubelet.fakecri.server import serve
from tests.builders import container, pod, pod_path
from tests.fakes import FakeApi, FakeEventRecorder

JSON = dict[str, Any]
CM_PATH = "/api/v1/namespaces/default/configmaps/app-config"
SECRET_PATH = "/api/v1/namespaces/default/secrets/app-secret"
ROOT = os.geteuid() == 0


def sleeper(name: str, *mounts: JSON, **fields: Any) -> JSON:
    return container(name, image="busybox:latest", imagePullPolicy="IfNotPresent", command=["sleep", "infinity"],
                     volumeMounts=list(mounts), **fields)


def volume_pod(name: str) -> JSON:
    return pod(name, uid=f"uid-{name}", node_name="node1", restart_policy="Always",
               terminationGracePeriodSeconds=1,
               containers=[
                   sleeper("writer", {"name": "shared", "mountPath": "/shared"},
                           {"name": "cfg", "mountPath": "/etc/app"}, {"name": "secret", "mountPath": "/etc/secret"}),
                   sleeper("reader", {"name": "shared", "mountPath": "/in", "readOnly": True},
                           {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"}),
               ],
               volumes=[{"name": "shared", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "app-config"}},
                        {"name": "secret", "secret": {"secretName": "app-secret"}}])


class Harness:
    def __init__(self, tmp: Path, runtime: CRIClient) -> None:
        self.tmp, self.runtime = tmp, runtime
        self.api = FakeApi()
        self.recorder = FakeEventRecorder()
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self.kubelet: Kubelet | None = None
        self.root = tmp / "root"

    async def start(self) -> Kubelet:
        cfg = KubeletConfiguration()
        cfg.cgroups_per_qos = False
        cfg.pod_logs_dir = str(self.tmp / "logs")
        options = AgentOptions(config=cfg, node_name="node1", node_ip="127.0.0.1", root_dir=self.root)
        self.updates = asyncio.Queue()
        k = Kubelet(options=options, api=self.api, runtime=self.runtime,  # type: ignore[arg-type]
                    recorder=self.recorder, updates=self.updates,
                    mirror=None, pleg_period=0.2, housekeeping_period=0.3, status_reconcile_period=1.0,
                    volume_mounter=SystemMounter(TmpfsMode.FALLBACK_WITHOUT_ROOT), volume_refresh_period=0.3)
        await k.start()
        self.kubelet = k
        return k

    async def stop(self) -> None:
        if self.kubelet is not None:
            await self.kubelet.stop()
            self.kubelet = None

    async def add(self, *pods: JSON) -> None:
        for p in pods:
            self.api.put(pod_path(p), p)
        await self.updates.put(PodUpdate(PodOp.ADD, "api", [copy.deepcopy(p) for p in pods]))
        assert self.kubelet is not None
        self.kubelet.mark_source_ready("api")

    def phase(self, p: JSON) -> str:
        return str(((self.api.objects.get(pod_path(p)) or {}).get("status") or {}).get("phase", ""))

    async def mounts(self, container_name: str) -> list[pb.Mount]:
        for c in await self.runtime.list_containers():
            if c.metadata.name == container_name and c.state == pb.CONTAINER_RUNNING:
                return list((await self.runtime.container_status(c.id)).status.mounts)
        return []

    def volume(self, uid: str, plugin: str, name: str) -> Path:
        return self.root / "pods" / uid / "volumes" / plugin / name

    def tmpfs_under_root(self) -> list[str]:
        base = os.path.realpath(self.root)
        return [m.path for m in read_mountinfo() if m.path.startswith(base + "/")]


async def eventually(pred: Callable[[], Any], wait: float = 20.0) -> Any:
    async with asyncio.timeout(wait):
        while True:
            v = pred()
            if v:
                return v
            await asyncio.sleep(0.05)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    sock = str(tmp_path / "cri.sock")
    server, _rt = await serve(sock)
    client = CRIClient(f"unix://{sock}", timeout=10)
    await client.connect(wait=5)
    h = Harness(tmp_path, client)
    try:
        yield h
    finally:
        await h.stop()
        # nothing mounted may outlive the test, whatever happened in it
        await asyncio.to_thread(unmount_all, h.tmpfs_under_root())
        await client.close()
        await server.stop(0)


def unmount_all(paths: list[str]) -> None:
    mounter = SystemMounter()
    for path in sorted(paths, key=len, reverse=True):
        mounter.unmount(path)


def read(path: str | Path) -> str:
    return Path(path).read_text()


def real(path: Path) -> str:
    return os.path.realpath(path)


def put_objects(h: Harness, conf: str = "level=info") -> None:
    """Create or change the ConfigMap and Secret, telling watchers as the API server does (the agent
    reads them through watches, its default configMapAndSecretChangeDetectionStrategy)."""
    for path, obj in [(CM_PATH, {"metadata": {"name": "app-config"}, "data": {"app.conf": conf}}),
                      (SECRET_PATH, {"metadata": {"name": "app-secret"},
                                     "data": {"token": base64.b64encode(b"s3cr3t").decode()}})]:
        h.api.put(path, obj, notify="MODIFIED" if path in h.api.objects else "ADDED")


async def test_containers_get_their_volumes_and_the_secret_lives_on_tmpfs(harness: Harness) -> None:
    put_objects(harness)
    await harness.start()
    p = volume_pod("web")
    await harness.add(p)
    await eventually(lambda: harness.phase(p) == "Running")
    writer = {m.container_path: m for m in await harness.mounts("writer")}
    reader = {m.container_path: m for m in await harness.mounts("reader")}
    shared = harness.volume("uid-web", "kubernetes.io~empty-dir", "shared")
    cfg = harness.volume("uid-web", "kubernetes.io~configmap", "cfg")
    secret = harness.volume("uid-web", "kubernetes.io~secret", "secret")
    assert writer["/shared"].host_path == reader["/in"].host_path == str(shared)  # one emptyDir, two containers
    assert not writer["/shared"].readonly and reader["/in"].readonly
    assert writer["/etc/app"].host_path == str(cfg) and writer["/etc/app"].readonly
    assert (cfg / "app.conf").read_text() == "level=info"
    assert (secret / "token").read_bytes() == b"s3cr3t"
    assert read(reader["/etc/app.conf"].host_path) == "level=info"  # subPath: the file itself
    if ROOT:
        assert real(secret) in harness.tmpfs_under_root()


async def test_a_missing_config_map_holds_the_pod_until_it_is_created(harness: Harness) -> None:
    harness.api.put(SECRET_PATH, {"metadata": {"name": "app-secret"}, "data": {}})
    await harness.start()
    p = volume_pod("waits")
    await harness.add(p)
    message = 'MountVolume.SetUp failed for volume "cfg" : configmap "app-config" not found'
    await eventually(lambda: ("Warning", "FailedMount", message) in harness.recorder.events)
    await asyncio.sleep(1.0)
    assert not await harness.runtime.list_containers()  # never started without its mounts
    assert harness.phase(p) == "Pending"
    put_objects(harness)
    await eventually(lambda: harness.phase(p) == "Running", wait=40)


async def test_a_config_map_edit_reaches_the_running_pod(harness: Harness) -> None:
    put_objects(harness)
    await harness.start()
    p = volume_pod("follows")
    await harness.add(p)
    await eventually(lambda: harness.phase(p) == "Running")
    cfg = harness.volume("uid-follows", "kubernetes.io~configmap", "cfg")
    put_objects(harness, conf="level=debug")
    await eventually(lambda: (cfg / "app.conf").read_text() == "level=debug")


async def test_a_restarted_agent_keeps_running_pods_and_their_mounts_and_cleans_up_gone_pods(harness: Harness) -> None:
    put_objects(harness)
    await harness.start()
    stay, gone = volume_pod("stay"), volume_pod("gone")
    await harness.add(stay, gone)
    await eventually(lambda: harness.phase(stay) == "Running" and harness.phase(gone) == "Running")
    (harness.volume("uid-stay", "kubernetes.io~empty-dir", "shared") / "work").write_text("half done")
    before = {c.id for c in await harness.runtime.list_containers()}
    mounts_before = harness.tmpfs_under_root()
    await harness.stop()

    harness.api.objects.pop(pod_path(gone))  # deleted while the agent was down
    k = await harness.start()
    await harness.add(copy.deepcopy(harness.api.objects[pod_path(stay)]))
    runs = k.housekeeping.runs
    await eventually(lambda: k.housekeeping.runs >= runs + 3)
    await eventually(lambda: not (harness.root / "pods" / "uid-gone").exists())
    stay_ids = {c.id for c in await harness.runtime.list_containers() if c.labels["io.kubernetes.pod.name"] == "stay"}
    assert stay_ids and stay_ids <= before  # nothing of the running pod was restarted
    assert (harness.volume("uid-stay", "kubernetes.io~empty-dir", "shared") / "work").read_text() == "half done"
    assert not [m for m in harness.tmpfs_under_root() if "uid-gone" in m]
    if ROOT:
        assert sorted(m for m in mounts_before if "uid-stay" in m) == sorted(harness.tmpfs_under_root())


async def test_removing_a_pod_unmounts_and_removes_its_volumes(harness: Harness) -> None:
    put_objects(harness)
    await harness.start()
    p = volume_pod("bye")
    await harness.add(p)
    await eventually(lambda: harness.phase(p) == "Running")
    await harness.updates.put(PodUpdate(PodOp.REMOVE, "api", [copy.deepcopy(p)]))
    await eventually(lambda: not (harness.root / "pods" / "uid-bye").exists(), wait=30)
    assert harness.tmpfs_under_root() == []


async def test_a_sub_path_leaving_its_volume_is_a_container_config_error(harness: Harness) -> None:
    await harness.start()
    p = pod("escape", uid="uid-escape", node_name="node1", restart_policy="Always",
            containers=[sleeper("c", {"name": "host", "mountPath": "/x", "subPath": "../etc"})],
            volumes=[{"name": "host", "hostPath": {"path": str(harness.tmp), "type": "Directory"}}])
    await harness.add(p)

    def waiting() -> JSON | None:
        for cs in ((harness.api.objects.get(pod_path(p)) or {}).get("status") or {}).get("containerStatuses") or []:
            w = (cs.get("state") or {}).get("waiting") or {}
            if w.get("reason") == "CreateContainerConfigError":
                return dict(w)
        return None

    w = await eventually(waiting)
    assert w["message"] == "unable to provision SubPath `../etc`: must not contain '..'"
    assert not await harness.runtime.list_containers()
