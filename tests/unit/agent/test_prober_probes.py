"""The probe mechanisms against real local servers on 127.0.0.1 (HTTP, TCP, gRPC) and a stub CRI."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from aiohttp import web
from cri_api.v1 import api_pb2 as pb
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pykubelet.agent.prober import Outcome, ProbeError, Prober, probes
from pykubelet.agent.prober.probes import probe_grpc, probe_tcp
from pykubelet.cri import CRIClient, CRIError
from tests.fakes import FakeExecRuntime


@pytest.fixture
async def http_server() -> AsyncIterator[tuple[int, list[Any]]]:
    seen: list[Any] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        p = request.path
        if p == "/ok":
            return web.Response(text="all good")
        if p == "/big":
            return web.Response(text="x" * 50_000)
        if p == "/fail":
            return web.Response(status=500, text="boom")
        if p == "/slow":
            await asyncio.sleep(1)
            return web.Response(text="late")
        if p == "/hop":
            raise web.HTTPFound("/ok")
        if p == "/loop":
            raise web.HTTPFound("/loop")
        if p == "/away":
            raise web.HTTPFound("http://elsewhere.invalid/x")
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield port, seen
    finally:
        await runner.cleanup()


def _http_probe(port: Any, path: str, timeout: float = 2, **kw: Any) -> dict[str, Any]:
    return {"httpGet": {"port": port, "path": path, **kw}, "timeoutSeconds": timeout}


async def test_http_probe_outcomes(http_server: Any) -> None:
    port, seen = http_server
    prober = Prober(FakeExecRuntime())
    container = {"name": "app", "ports": [{"name": "web", "containerPort": port}]}
    try:
        out, body = await prober.run(_http_probe("web", "/ok", httpHeaders=[{"name": "X-Probe", "value": "1"}]),
                                     container, "cid", "127.0.0.1")
        assert (out, body) == (Outcome.SUCCESS, "all good")
        req = seen[-1]
        assert req.headers["User-Agent"] == "kube-probe/1.33"
        assert req.headers["Accept"] == "*/*" and req.headers["X-Probe"] == "1"

        out, msg = await prober.run(_http_probe(port, "/fail"), container, "cid", "127.0.0.1")
        assert out is Outcome.FAILURE and msg == "HTTP probe failed with statuscode: 500"

        out, body = await prober.run(_http_probe(port, "/big"), container, "cid", "127.0.0.1")
        assert out is Outcome.SUCCESS and len(body) == 10 * 1024

        out, msg = await prober.run(_http_probe(port, "/slow", timeout=0.2), container, "cid", "127.0.0.1")
        assert out is Outcome.FAILURE and "context deadline exceeded" in msg

        # a same-host redirect is followed
        out, body = await prober.run(_http_probe(port, "/hop"), container, "cid", "127.0.0.1")
        assert (out, body) == (Outcome.SUCCESS, "all good")
        # a redirect to another host is not followed: success with a warning
        n = len(seen)
        out, msg = await prober.run(_http_probe(port, "/away"), container, "cid", "127.0.0.1")
        assert out is Outcome.WARNING and msg.startswith("Probe terminated redirects")
        assert len(seen) == n + 1
        out, msg = await prober.run(_http_probe(port, "/loop"), container, "cid", "127.0.0.1")
        assert out is Outcome.FAILURE and "stopped after 10 redirects" in msg

        # custom Host header overrides the request host
        await prober.run(_http_probe(port, "/ok", httpHeaders=[{"name": "Host", "value": "example.test"}]),
                         container, "cid", "127.0.0.1")
        assert seen[-1].host == "example.test"
    finally:
        await prober.close()


async def test_http_probe_connection_refused_and_bad_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens
    prober = Prober(FakeExecRuntime())
    try:
        out, msg = await prober.run(_http_probe(port, "/"), {"name": "app"}, "cid", "127.0.0.1")
        assert out is Outcome.FAILURE and "connection refused" in msg
        with pytest.raises(ProbeError):
            await prober.run(_http_probe("nope", "/"), {"name": "app"}, "cid", "127.0.0.1")
    finally:
        await prober.close()


async def test_tcp_probe() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert (await probe_tcp("127.0.0.1", port, 1))[0] is Outcome.SUCCESS
        prober = Prober(FakeExecRuntime())
        out, _ = await prober.run({"tcpSocket": {"port": "p"}, "timeoutSeconds": 1},
                                  {"name": "c", "ports": [{"name": "p", "containerPort": port}]}, "cid", "127.0.0.1")
        assert out is Outcome.SUCCESS
    finally:
        server.close()
        await server.wait_closed()
    out, msg = await probe_tcp("127.0.0.1", port, 1)
    assert out is Outcome.FAILURE and "connection refused" in msg


async def test_exec_probe_via_stub_runtime() -> None:
    rt = FakeExecRuntime(exit_code=0, stdout=b"fine")
    prober = Prober(rt)
    spec = {"exec": {"command": ["check", "$(MODE)"]}, "timeoutSeconds": 3}
    container = {"name": "c", "env": [{"name": "MODE", "value": "deep"}]}
    assert await prober.run(spec, container, "containerd://abc", "") == (Outcome.SUCCESS, "fine")
    assert rt.calls == [("abc", ["check", "deep"], 3)]
    rt.exit_code, rt.stderr = 1, b"bad"
    assert await prober.run(spec, container, "abc", "") == (Outcome.FAILURE, "finebad")
    rt.error = CRIError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline")
    out, msg = await prober.run(spec, container, "abc", "")
    assert out is Outcome.FAILURE and msg == 'command "check deep" timed out'
    rt.error = CRIError(grpc.StatusCode.NOT_FOUND, "no such container")
    n = len(rt.calls)
    with pytest.raises(ProbeError, match="no such container"):
        await prober.run(spec, container, "abc", "")
    assert len(rt.calls) == n + 3  # retried like upstream (maxProbeRetries)


async def test_exec_probe_through_cri_client_times_out_when_the_runtime_never_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime enforces timeoutSeconds; if it hangs, the call's own deadline ends the probe."""
    seen: list[pb.ExecSyncRequest] = []

    async def exec_sync(request: pb.ExecSyncRequest, context: grpc.aio.ServicerContext) -> pb.ExecSyncResponse:
        seen.append(request)
        if request.cmd[0] == "hang":
            await asyncio.Event().wait()
        return pb.ExecSyncResponse(stdout=b"up", exit_code=0)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", {
        "ExecSync": grpc.unary_unary_rpc_method_handler(
            exec_sync, request_deserializer=pb.ExecSyncRequest.FromString,
            response_serializer=pb.ExecSyncResponse.SerializeToString)})])
    sock = tmp_path / "cri.sock"
    server.add_insecure_port(f"unix://{sock}")
    await server.start()
    client = CRIClient(f"unix://{sock}")
    monkeypatch.setattr(probes, "EXEC_GUARD_MARGIN", 0.3)
    try:
        prober = Prober(client)
        spec = {"exec": {"command": ["check"]}, "timeoutSeconds": 1}
        assert await prober.run(spec, {"name": "c"}, "containerd://abc", "") == (Outcome.SUCCESS, "up")
        assert (seen[-1].container_id, list(seen[-1].cmd), seen[-1].timeout) == ("abc", ["check"], 1)
        spec = {"exec": {"command": ["hang", "now"]}, "timeoutSeconds": 1}
        async with asyncio.timeout(10):
            assert await prober.run(spec, {"name": "c"}, "abc", "") == (
                Outcome.FAILURE, 'command "hang now" timed out')
    finally:
        await client.close()
        await server.stop(None)


class _Health(health.aio.HealthServicer):
    """grpcio-health-checking's own asyncio servicer, also recording each caller's user-agent."""

    def __init__(self) -> None:
        super().__init__()
        self.user_agents: list[str] = []

    async def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> Any:
        md = dict(context.invocation_metadata() or ())
        self.user_agents.append(str(md.get("user-agent", "")))
        return await super().Check(request, context)


@pytest.fixture
async def grpc_health() -> AsyncIterator[tuple[int, _Health]]:
    servicer = _Health()  # "" is SERVING from the start
    await servicer.set("db", health_pb2.HealthCheckResponse.NOT_SERVING)
    await servicer.set("odd", 7)  # a status this proto version does not know
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port, servicer
    finally:
        await server.stop(None)


async def test_grpc_probe(grpc_health: Any) -> None:
    port, health = grpc_health
    assert await probe_grpc("127.0.0.1", port, "", 2) == (Outcome.SUCCESS, "service healthy")
    assert health.user_agents[-1].startswith("kube-probe/1.33")
    out, msg = await probe_grpc("127.0.0.1", port, "db", 2)
    assert out is Outcome.FAILURE and msg == 'service unhealthy (responded with "NOT_SERVING")'
    out, msg = await probe_grpc("127.0.0.1", port, "odd", 2)
    assert out is Outcome.FAILURE and msg == 'service unhealthy (responded with "7")'
    out, msg = await probe_grpc("127.0.0.1", port, "other", 2)
    assert out is Outcome.FAILURE and "NotFound" in msg
    prober = Prober(FakeExecRuntime())
    assert (await prober.run({"grpc": {"port": port}, "timeoutSeconds": 2}, {"name": "c"}, "cid",
                             "127.0.0.1"))[0] is Outcome.SUCCESS


async def test_grpc_probe_unimplemented_and_unreachable() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        out, msg = await probe_grpc("127.0.0.1", port, "", 2)
        assert out is Outcome.FAILURE and "does not implement the grpc health protocol" in msg
    finally:
        await server.stop(None)
    out, msg = await probe_grpc("127.0.0.1", port, "", 0.3)
    assert out is Outcome.FAILURE and msg.startswith("timeout: failed to connect service")
