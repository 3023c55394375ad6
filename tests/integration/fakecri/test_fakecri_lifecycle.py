"""Drive the fake CRI runtime through CRIClient over a real unix socket (full pod lifecycle)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pykubelet.cri import CRIClient, CRIError, StatusCode, pb
from pykubelet.fakecri import FakeRuntime, serve
from pykubelet.fakecri.runtime import Context


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)


@pytest.fixture
def sockdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="fcri", dir="/tmp")  # short: unix socket paths max ~107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def env(sockdir: str, clock: Clock) -> AsyncIterator[tuple[CRIClient, FakeRuntime, list[Any]]]:
    sock = os.path.join(sockdir, "cri.sock")
    server, rt = await serve(sock, FakeRuntime(clock=clock))
    seen: list[Any] = []
    client = CRIClient(f"unix://{sock}", timeout=10, observer=lambda op, s, e: seen.append((op, e)))
    try:
        await client.connect(wait=5)
        yield client, rt, seen
    finally:
        await client.close()
        await server.stop(None)


def sandbox_config(name: str, uid: str, log_dir: str = "", host_network: bool = False,
                   labels: dict[str, str] | None = None) -> pb.PodSandboxConfig:
    cfg = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid=uid, attempt=0),
        hostname=name,
        log_directory=log_dir,
        labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": uid, **(labels or {})},
        annotations={"kubernetes.io/config.source": "api"},
    )
    if host_network:
        cfg.linux.security_context.namespace_options.network = pb.NODE
    return cfg


def container_config(name: str, pod: str, uid: str, command: list[str], image: str = "busybox",
                     attempt: int = 0) -> pb.ContainerConfig:
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=attempt),
        image=pb.ImageSpec(image=image),
        command=command,
        log_path=f"{name}/{attempt}.log",
        labels={"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": name},
        annotations={"io.kubernetes.container.restartCount": str(attempt)},
    )


async def test_version_and_status(env: Any) -> None:
    client, rt, seen = env
    v = await client.version()
    assert v.runtime_name == "fakecri" and v.runtime_api_version == "v1"
    st = await client.status()
    conds = {c.type: c.status for c in st.status.conditions}
    assert conds == {"RuntimeReady": True, "NetworkReady": True}
    rt.network_ready = False
    conds = {c.type: c.status for c in (await client.status()).status.conditions}
    assert conds["NetworkReady"] is False
    assert ("version", None) in seen and ("status", None) in seen


async def test_full_pod_lifecycle(env: Any, sockdir: str, clock: Clock) -> None:
    client, _rt, seen = env
    log_dir = os.path.join(sockdir, "pods", "default_web_uid1")
    os.makedirs(log_dir)
    scfg = sandbox_config("web", "uid1", log_dir)
    sid = await client.run_pod_sandbox(scfg)

    sst = (await client.pod_sandbox_status(sid)).status
    assert sst.state == pb.SANDBOX_READY
    assert sst.network.ip.startswith("198.18.")
    assert sst.metadata.name == "web" and sst.labels["io.kubernetes.pod.uid"] == "uid1"
    assert sst.annotations["kubernetes.io/config.source"] == "api"
    assert sst.created_at > 0

    ccfg = container_config("app", "web", "uid1", ["sh", "-c", "echo hello; sleep 3600 & wait"])
    cid = await client.create_container(sid, ccfg, scfg)
    cst = (await client.container_status(cid)).status
    assert cst.state == pb.CONTAINER_CREATED and cst.created_at > 0 and cst.started_at == 0
    assert cst.log_path == os.path.join(log_dir, "app/0.log")

    await client.start_container(cid)
    cst = (await client.container_status(cid)).status
    assert cst.state == pb.CONTAINER_RUNNING and cst.started_at >= cst.created_at
    assert cst.image.image == "docker.io/library/busybox:latest"
    assert cst.image_ref and cst.labels["io.kubernetes.container.name"] == "app"
    with open(cst.log_path) as f:  # noqa: ASYNC230 - tiny local file
        line = f.readline()
    ts, stream, tag, msg = line.rstrip("\n").split(" ", 3)
    assert ts.endswith("Z") and "T" in ts and stream == "stdout" and tag == "F" and msg == "hello"

    # still running after a long time (no planned exit)
    clock.advance(10_000)
    assert (await client.container_status(cid)).status.state == pb.CONTAINER_RUNNING

    r = await client.exec_sync(cid, ["cat", "/etc/hostname"], 5)
    assert r.exit_code == 0
    await client.update_container_resources(cid, pb.LinuxContainerResources(cpu_shares=256, memory_limit_in_bytes=1 << 26))
    assert (await client.container_status(cid)).status.resources.linux.memory_limit_in_bytes == 1 << 26
    await client.reopen_container_log(cid)
    stats = await client.container_stats(cid)
    assert stats.attributes.id == cid and stats.memory.working_set_bytes.value == 0
    assert [s.attributes.id for s in await client.list_pod_sandbox_stats()] == [sid]
    assert [s.attributes.id for s in await client.list_container_stats()] == [cid]
    assert (await client.pod_sandbox_stats(sid)).attributes.id == sid

    await client.stop_container(cid, 30)
    cst = (await client.container_status(cid)).status
    assert cst.state == pb.CONTAINER_EXITED and cst.exit_code == 137 and cst.reason == "Error"
    assert cst.finished_at >= cst.started_at
    await client.stop_container(cid, 0)  # idempotent on an exited container
    await client.remove_container(cid)
    with pytest.raises(CRIError) as ei:
        await client.container_status(cid)
    assert ei.value.not_found
    await client.remove_container(cid)  # idempotent

    await client.stop_pod_sandbox(sid)
    assert (await client.pod_sandbox_status(sid)).status.state == pb.SANDBOX_NOTREADY
    await client.remove_pod_sandbox(sid)
    with pytest.raises(CRIError) as ei:
        await client.pod_sandbox_status(sid)
    assert ei.value.not_found
    with pytest.raises(CRIError) as ei:  # containerd answers NotFound for unknown sandboxes
        await client.stop_pod_sandbox(sid)
    assert ei.value.not_found
    await client.remove_pod_sandbox(sid)  # idempotent
    assert await client.list_pod_sandbox() == []

    ops = {op for op, _ in seen}
    for op in ("run_podsandbox", "podsandbox_status", "create_container", "start_container",
               "container_status", "stop_container", "remove_container", "stop_podsandbox",
               "remove_podsandbox", "list_podsandbox", "exec_sync", "update_container",
               "reopen_container_log", "container_stats", "list_container_stats",
               "list_podsandbox_stats", "podsandbox_stats"):
        assert op in ops, op


async def test_exit_codes_and_timed_exit(env: Any, clock: Clock) -> None:
    client, _rt, _ = env
    scfg = sandbox_config("job", "uid2")
    sid = await client.run_pod_sandbox(scfg)

    c1 = await client.create_container(sid, container_config("fail", "job", "uid2", ["sh", "-c", "exit 1"]), scfg)
    await client.start_container(c1)
    st = (await client.container_status(c1)).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 1 and st.reason == "Error"
    assert st.finished_at >= st.started_at > 0

    c2 = await client.create_container(sid, container_config("sleeper", "job", "uid2", ["sleep", "5"]), scfg)
    await client.start_container(c2)
    assert (await client.container_status(c2)).status.state == pb.CONTAINER_RUNNING
    clock.advance(4)
    assert (await client.container_status(c2)).status.state == pb.CONTAINER_RUNNING
    clock.advance(2)
    st = (await client.container_status(c2)).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 0 and st.reason == "Completed"
    assert st.finished_at - st.started_at == 5_000_000_000

    # a container can't be started twice
    with pytest.raises(CRIError) as ei:
        await client.start_container(c2)
    assert ei.value.code is StatusCode.FAILED_PRECONDITION

    # stopping the sandbox kills running containers
    c3 = await client.create_container(sid, container_config("srv", "job", "uid2", ["nginx"]), scfg)
    await client.start_container(c3)
    await client.stop_pod_sandbox(sid)
    st = (await client.container_status(c3)).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 137
    # removing the sandbox removes its containers
    await client.remove_pod_sandbox(sid)
    assert await client.list_containers() == []


async def test_list_filters(env: Any) -> None:
    client, _rt, _ = env
    cfg_a = sandbox_config("a", "ua", labels={"app": "x"})
    cfg_b = sandbox_config("b", "ub", labels={"app": "y"})
    sa = await client.run_pod_sandbox(cfg_a)
    sb = await client.run_pod_sandbox(cfg_b)
    await client.stop_pod_sandbox(sb)

    def ids(items: list[Any]) -> set[str]:
        return {i.id for i in items}

    assert ids(await client.list_pod_sandbox()) == {sa, sb}
    assert ids(await client.list_pod_sandbox(pb.PodSandboxFilter(id=sa))) == {sa}
    assert ids(await client.list_pod_sandbox(pb.PodSandboxFilter(id="nope"))) == set()
    # state READY is enum 0: the filter must apply when the wrapper is set
    ready = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
    assert ids(await client.list_pod_sandbox(ready)) == {sa}
    notready = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_NOTREADY))
    assert ids(await client.list_pod_sandbox(notready)) == {sb}
    assert ids(await client.list_pod_sandbox(pb.PodSandboxFilter(label_selector={"app": "y"}))) == {sb}
    assert ids(await client.list_pod_sandbox(
        pb.PodSandboxFilter(label_selector={"app": "x", "io.kubernetes.pod.uid": "ua"}))) == {sa}
    assert ids(await client.list_pod_sandbox(
        pb.PodSandboxFilter(label_selector={"app": "x", "io.kubernetes.pod.uid": "ub"}))) == set()
    listed = (await client.list_pod_sandbox(pb.PodSandboxFilter(id=sa)))[0]
    assert listed.metadata.uid == "ua" and listed.labels["app"] == "x" and listed.state == pb.SANDBOX_READY

    c1 = await client.create_container(sa, container_config("one", "a", "ua", ["nginx"]), cfg_a)
    c2 = await client.create_container(sa, container_config("two", "a", "ua", ["nginx"]), cfg_a)
    await client.start_container(c1)
    assert ids(await client.list_containers()) == {c1, c2}
    assert ids(await client.list_containers(pb.ContainerFilter(pod_sandbox_id=sa))) == {c1, c2}
    assert ids(await client.list_containers(pb.ContainerFilter(pod_sandbox_id=sb))) == set()
    assert ids(await client.list_containers(pb.ContainerFilter(id=c2))) == {c2}
    assert ids(await client.list_containers(pb.ContainerFilter(id=c2, pod_sandbox_id=sb))) == set()
    created = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_CREATED))
    assert ids(await client.list_containers(created)) == {c2}
    running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    assert ids(await client.list_containers(running)) == {c1}
    assert ids(await client.list_containers(
        pb.ContainerFilter(label_selector={"io.kubernetes.container.name": "two"}))) == {c2}
    listed_c = (await client.list_containers(pb.ContainerFilter(id=c1)))[0]
    assert listed_c.pod_sandbox_id == sa and listed_c.metadata.name == "one" and listed_c.image_ref

    # creating into a not-ready sandbox fails; duplicate names are rejected
    with pytest.raises(CRIError):
        await client.create_container(sb, container_config("x", "b", "ub", ["nginx"]), cfg_b)
    with pytest.raises(CRIError) as ei:
        await client.create_container(sa, container_config("one", "a", "ua", ["nginx"]), cfg_a)
    assert ei.value.code is StatusCode.ALREADY_EXISTS
    with pytest.raises(CRIError):
        await client.run_pod_sandbox(cfg_a)


async def test_ips_unique_and_host_network(env: Any) -> None:
    client, _rt, _ = env
    ips = set()
    for i in range(300):
        sid = await client.run_pod_sandbox(sandbox_config(f"p{i}", f"u{i}"))
        ips.add((await client.pod_sandbox_status(sid)).status.network.ip)
    assert len(ips) == 300 and all(ip.startswith("198.18.") for ip in ips)
    hcfg = sandbox_config("h", "uh", host_network=True)
    hid = await client.run_pod_sandbox(hcfg)
    st = (await client.pod_sandbox_status(hid)).status
    assert st.network.ip == ""
    assert st.linux.namespaces.options.network == pb.NODE


async def test_images(env: Any) -> None:
    client, _rt, _ = env
    names = {t for img in await client.list_images() for t in img.repo_tags}
    assert "docker.io/library/busybox:latest" in names and "registry.k8s.io/pause:3.9" in names

    assert not (await client.image_status("docker.io/example/app:v1")).HasField("image")
    ref = await client.pull_image("example/app:v1")
    st = (await client.image_status("docker.io/example/app:v1")).image
    assert st.id == ref and st.size > 0
    assert st.repo_tags == ["docker.io/example/app:v1"]
    assert st.repo_digests[0].startswith("docker.io/example/app@sha256:")
    assert (await client.image_status(ref)).image.id == ref
    assert (await client.image_status(st.repo_digests[0])).image.id == ref
    assert [i.id for i in await client.list_images(pb.ImageFilter(image=pb.ImageSpec(image="example/app:v1")))] == [ref]

    for bad in ("example/nonexistent:1", "invalid-image"):
        with pytest.raises(CRIError) as ei:
            await client.pull_image(bad)
        assert ei.value.code is StatusCode.UNKNOWN  # as containerd 1.6
        assert "failed to pull and unpack image" in ei.value.details and "not found" in ei.value.details

    fs = await client.image_fs_info()
    assert fs.image_filesystems[0].used_bytes.value > 0

    await client.remove_image("example/app:v1")
    assert not (await client.image_status("example/app:v1")).HasField("image")
    await client.remove_image("example/app:v1")  # idempotent

    # containers need their image present
    scfg = sandbox_config("img", "ui")
    sid = await client.run_pod_sandbox(scfg)
    with pytest.raises(CRIError) as ei:
        await client.create_container(sid, container_config("c", "img", "ui", [], image="example/app:v1"), scfg)
    assert ei.value.not_found


async def test_streaming_and_events_unimplemented(env: Any) -> None:
    client, _, seen = env
    with pytest.raises(CRIError) as ei:
        async for _ in client.get_container_events():
            pass
    assert ei.value.unimplemented
    assert seen[-1][0] == "get_container_events" and seen[-1][1] is ei.value
    with pytest.raises(CRIError) as ei:
        await client.exec(pb.ExecRequest(container_id="x", cmd=["sh"]))
    assert ei.value.unimplemented


async def test_connect_waits_for_late_runtime(sockdir: str) -> None:
    sock = os.path.join(sockdir, "late.sock")
    client = CRIClient(sock, timeout=5)
    holder: list[Any] = []

    async def start_later() -> None:
        await asyncio.sleep(0.3)
        holder.append(await serve(sock))

    task = asyncio.create_task(start_later())
    try:
        v = await client.connect(wait=20)
        assert v.runtime_name == "fakecri"
        assert client.runtime_version is not None
    finally:
        await task
        await client.close()
        for server, _ in holder:
            await server.stop(None)


def test_main_serves_until_sigterm(sockdir: str) -> None:
    sock = os.path.join(sockdir, "main.sock")
    proc = subprocess.Popen([sys.executable, "-c",
                             "import sys; from pykubelet.fakecri.main import main; sys.exit(main(sys.argv[1:]))",
                             "--listen", f"unix://{sock}"])
    try:
        async def check() -> str:
            c = CRIClient(sock, timeout=5)
            try:
                return str((await c.connect(wait=30)).runtime_name)
            finally:
                await c.close()

        assert asyncio.run(check()) == "fakecri"
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert not os.path.exists(sock)  # removed on shutdown
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class SlowToUnwindRuntime(FakeRuntime):
    """A ListPodSandbox that is still busy when the server stops, and slow to unwind once cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.unwound = False

    async def ListPodSandbox(self, request: pb.ListPodSandboxRequest, context: Context) -> pb.ListPodSandboxResponse:
        self.entered.set()
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.3)  # a handler whose cancellation takes a while to reach its end
            self.unwound = True
        return await super().ListPodSandbox(request, context)


async def test_stopping_the_fake_runtime_leaves_none_of_its_handlers_running(sockdir: str) -> None:
    sock = os.path.join(sockdir, "stop.sock")
    rt = SlowToUnwindRuntime()
    server, _ = await serve(sock, rt)
    client = CRIClient(sock, timeout=10)
    await client.connect(wait=5)
    call = asyncio.create_task(client.list_pod_sandbox())
    await asyncio.wait_for(rt.entered.wait(), 5)
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)
    await client.close()
    await server.stop(0)
    assert rt.unwound
