"""Unit tests for pykubelet.cri: endpoint parsing, error mapping, observer and deadlines."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest

from pykubelet.cri import CRIClient, CRIError, StatusCode, is_not_found, parse_endpoint, pb, socket_path
from pykubelet.cri.client import from_rpc_error


@pytest.mark.parametrize(
    ("endpoint", "target"),
    [
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("unix:/tmp/x.sock", "unix:///tmp/x.sock"),
        ("  unix:///tmp/y.sock ", "unix:///tmp/y.sock"),
    ],
)
def test_parse_endpoint(endpoint: str, target: str) -> None:
    assert parse_endpoint(endpoint) == target


def test_parse_endpoint_relative_path_made_absolute(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert socket_path("cri.sock") == str(tmp_path / "cri.sock")
    assert parse_endpoint("unix://cri.sock") == f"unix://{tmp_path}/cri.sock"


@pytest.mark.parametrize("bad", ["", "tcp://127.0.0.1:1234", "npipe:////./pipe/x", "localhost:1234", "unix://"])
def test_parse_endpoint_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_endpoint(bad)


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def test_error_mapping() -> None:
    err = from_rpc_error(_rpc_error(grpc.StatusCode.NOT_FOUND, "container x not found"), "container_status")
    assert isinstance(err, CRIError)
    assert err.code is StatusCode.NOT_FOUND  # grpcio's code, as the grpc-free enum of the same name
    assert err.not_found and is_not_found(err)
    assert err.details == "container x not found"
    assert err.op == "container_status"
    assert "code = NotFound" in str(err) and "container x not found" in str(err)
    other = from_rpc_error(_rpc_error(grpc.StatusCode.UNIMPLEMENTED, "nope"))
    assert other.unimplemented and not other.not_found
    assert not is_not_found(other) and not is_not_found(ValueError("x")) and not is_not_found(None)


class _FakeStub:
    """Records requests/deadlines; answers with a queued response or raises a queued error."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        self.result: Any = None

    def __getattr__(self, name: str) -> Any:
        async def call(request: Any, timeout: Any = None) -> Any:  # noqa: ASYNC109 - mimics a grpc stub
            self.calls.append((name, request, timeout))
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

        return call


def _client_with_stub(**kw: Any) -> tuple[CRIClient, _FakeStub, list[tuple[str, float, Exception | None]]]:
    seen: list[tuple[str, float, Exception | None]] = []
    c = CRIClient("/nonexistent/cri.sock", observer=lambda op, s, e: seen.append((op, s, e)), **kw)
    stub = _FakeStub()
    c._ensure_channel()
    c._rt = stub  # type: ignore[assignment]
    c._img = stub  # type: ignore[assignment]
    return c, stub, seen


async def test_observer_and_error_mapping_through_calls() -> None:
    c, stub, seen = _client_with_stub(timeout=7.0)
    try:
        stub.result = _rpc_error(grpc.StatusCode.NOT_FOUND, "sandbox abc not found")
        with pytest.raises(CRIError) as ei:
            await c.pod_sandbox_status("abc")
        assert ei.value.not_found
        assert seen[-1][0] == "podsandbox_status" and seen[-1][2] is ei.value

        stub.result = pb.RunPodSandboxResponse(pod_sandbox_id="sb1")
        assert await c.run_pod_sandbox(pb.PodSandboxConfig()) == "sb1"
        assert seen[-1][0] == "run_podsandbox" and seen[-1][2] is None and seen[-1][1] >= 0
        assert stub.calls[-1][2] == 7.0  # default deadline

        stub.result = pb.ListContainersResponse(containers=[pb.Container(id="c1")])
        assert [x.id for x in await c.list_containers()] == ["c1"]
        assert seen[-1][0] == "list_containers"
    finally:
        await c.close()


async def test_upstream_operation_names_and_deadlines() -> None:
    c, stub, seen = _client_with_stub(timeout=10.0)
    try:
        stub.result = pb.StopContainerResponse()
        await c.stop_container("c1", 30)
        assert stub.calls[-1][0] == "StopContainer"
        assert stub.calls[-1][1].timeout == 30
        assert stub.calls[-1][2] == 40.0  # grace period + default, as upstream
        assert seen[-1][0] == "stop_container"

        stub.result = pb.PullImageResponse(image_ref="sha256:abc")
        assert await c.pull_image("busybox") == "sha256:abc"
        assert stub.calls[-1][1].image.image == "busybox"
        assert stub.calls[-1][2] is None  # no deadline for pulls
        assert seen[-1][0] == "pull_image"

        stub.result = pb.ExecSyncResponse(exit_code=0)
        await c.exec_sync("c1", ["true"], 0)
        assert stub.calls[-1][2] is None
        await c.exec_sync("c1", ["true"], 5)
        assert stub.calls[-1][2] == 15.0

        stub.result = pb.UpdateContainerResourcesResponse()
        await c.update_container_resources("c1", pb.LinuxContainerResources(cpu_shares=512))
        assert stub.calls[-1][1].linux.cpu_shares == 512
        assert seen[-1][0] == "update_container"
        ops = {o for o, _, _ in seen}
        assert {"stop_container", "pull_image", "exec_sync", "update_container"} <= ops
    finally:
        await c.close()


async def test_malformed_responses_are_errors() -> None:
    c, stub, _seen = _client_with_stub()
    try:
        stub.result = pb.RunPodSandboxResponse()
        with pytest.raises(CRIError):
            await c.run_pod_sandbox(pb.PodSandboxConfig())
        stub.result = pb.ContainerStatusResponse()
        with pytest.raises(CRIError):
            await c.container_status("x")
    finally:
        await c.close()


async def test_observer_exception_does_not_break_call() -> None:
    def bad(op: str, s: float, e: Exception | None) -> None:
        raise RuntimeError("observer bug")

    c = CRIClient("/nonexistent/cri.sock", observer=bad)
    stub = _FakeStub()
    c._ensure_channel()
    c._rt = stub  # type: ignore[assignment]
    stub.result = pb.VersionResponse(runtime_name="x")
    try:
        assert (await c.version()).runtime_name == "x"
    finally:
        await c.close()


async def test_connect_to_missing_socket_fails_with_unavailable(tmp_path: Any) -> None:
    c = CRIClient(str(tmp_path / "missing.sock"), timeout=2.0)
    try:
        with pytest.raises(CRIError) as ei:
            await c.connect(wait=0)
        assert ei.value.unavailable or ei.value.deadline_exceeded
    finally:
        await c.close()


def test_status_codes_have_grpcios_names_and_values() -> None:
    assert [c.name for c in StatusCode] == [c.name for c in grpc.StatusCode]
    for code in grpc.StatusCode:
        assert StatusCode[code.name].value == code.value
        assert StatusCode.of(code) is StatusCode[code.name] is StatusCode.of(code.value[0])
    assert StatusCode.of(99) is StatusCode.UNKNOWN and StatusCode.NOT_FOUND.go_name == "NotFound"
    assert CRIError(grpc.StatusCode.ABORTED, "x").code is StatusCode.ABORTED


async def test_exec_sync_sends_the_same_bytes_as_the_message_and_reuses_them() -> None:
    cri = CRIClient("unix:///nonexistent/cri.sock")
    cri._ensure_channel()
    assert cri._h2 is not None
    sent: list[tuple[bytes, float | None]] = []

    async def call(prefix: bytes, request: bytes, seconds: float | None, parse: Any = bytes) -> Any:
        sent.append((request, seconds))
        return parse(pb.ExecSyncResponse(exit_code=3).SerializeToString())

    cri._h2.call = call  # type: ignore[method-assign]
    resp = await cri.exec_sync("c1", iter(["sh", "-c", "true"]), 2, deadline=12.0)
    again = await cri.exec_sync("c1", ["sh", "-c", "true"], 2, deadline=12.0)
    other = await cri.exec_sync("c2", ("ls",), 0)
    assert resp.exit_code == 3 and again.exit_code == 3 and other.exit_code == 3
    expected = pb.ExecSyncRequest(container_id="c1", cmd=["sh", "-c", "true"], timeout=2).SerializeToString()
    assert sent[0] == (expected, 12.0) and sent[1][0] is sent[0][0]  # built once, reused
    assert sent[2] == (pb.ExecSyncRequest(container_id="c2", cmd=["ls"]).SerializeToString(), None)
    await cri.close()


def _configs() -> list[tuple[pb.ContainerConfig, pb.PodSandboxConfig]]:
    """Empty configs, small ones, and ones whose lengths need 2- and 3-byte varints."""
    big = {f"label-{i}": "v" * 40 for i in range(400)}  # ~20 kB: a 3-byte length
    sb = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", uid="u", namespace="ns", attempt=1),
                             hostname="p", log_directory="/var/log/pods/ns_p_u", labels={"a": "b", "c": ""},
                             annotations={"x": "ü"})
    c = pb.ContainerConfig(metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image="busybox"),
                           command=["sh"], args=["-c", "sleep 1"], envs=[pb.KeyValue(key="K", value="V")],
                           mounts=[pb.Mount(container_path="/etc/hosts", host_path="/tmp/h", readonly=True)],
                           labels={"io.kubernetes.container.name": "c"}, log_path="c/0.log")
    return [(pb.ContainerConfig(), pb.PodSandboxConfig()), (c, sb),
            (pb.ContainerConfig(labels=big), pb.PodSandboxConfig(annotations=big))]


def _canonical(message: Any, data: bytes) -> bytes:
    """``data`` parsed as ``message`` and written again with map entries in key order: the same for
    two requests with the same fields (a map's entries are written in its table's order, which a
    copy of the map may not keep)."""
    parsed = message.FromString(data)
    assert parsed.ByteSize() == len(data)  # nothing parsed twice or dropped
    return bytes(parsed.SerializeToString(deterministic=True))


@pytest.mark.parametrize("sandbox_id", ["", "s" * 64])
async def test_create_container_and_run_pod_sandbox_send_the_same_bytes_as_their_messages(sandbox_id: str) -> None:
    cri = CRIClient("unix:///nonexistent/cri.sock")
    cri._ensure_channel()
    assert cri._h2 is not None
    sent: list[bytes] = []

    async def call(prefix: bytes, request: bytes, seconds: float | None, parse: Any = bytes) -> Any:
        sent.append(request)
        if b"CreateContainer" in prefix:
            return parse(pb.CreateContainerResponse(container_id="c1").SerializeToString())
        return parse(pb.RunPodSandboxResponse(pod_sandbox_id="s1").SerializeToString())

    cri._h2.call = call  # type: ignore[method-assign]
    for config, sandbox_config in _configs():
        for handler in ("", "runc"):
            assert await cri.run_pod_sandbox(sandbox_config, handler) == "s1"
            expected = pb.RunPodSandboxRequest(config=sandbox_config, runtime_handler=handler)
            assert _canonical(pb.RunPodSandboxRequest, sent[-1]) == expected.SerializeToString(deterministic=True)
        assert await cri.create_container(sandbox_id, config, sandbox_config) == "c1"
        message = pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config)
        assert _canonical(pb.CreateContainerRequest, sent[-1]) == message.SerializeToString(deterministic=True)
    await cri.close()


async def test_create_container_and_run_pod_sandbox_over_a_grpc_stub_send_their_request_messages() -> None:
    c, stub, _ = _client_with_stub()
    config, sandbox_config = _configs()[1]
    stub.result = pb.CreateContainerResponse(container_id="c1")
    try:
        assert await c.create_container("s1", config, sandbox_config) == "c1"
        assert stub.calls[-1][:2] == ("CreateContainer", pb.CreateContainerRequest(
            pod_sandbox_id="s1", config=config, sandbox_config=sandbox_config))
        stub.result = pb.RunPodSandboxResponse(pod_sandbox_id="s1")
        assert await c.run_pod_sandbox(sandbox_config, "kata") == "s1"
        assert stub.calls[-1][:2] == ("RunPodSandbox", pb.RunPodSandboxRequest(config=sandbox_config,
                                                                                runtime_handler="kata"))
    finally:
        await c.close()
