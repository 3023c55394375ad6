"""Lifecycle hooks: exec/httpGet/sleep handlers, postStart and preStop helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from aiohttp import web

from pykubelet.agent.lifecycle import HandlerRunner, format_pod
from pykubelet.cri import CRIError, pb
from tests.builders import pod
from tests.fakes import FakeClock, FakeEventRecorder, FakeExecRuntime

POD = pod("web", uid="u1")


@pytest.fixture
async def http_port() -> AsyncIterator[tuple[int, list[web.Request]]]:
    seen: list[web.Request] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request)
        return web.Response(status=500 if request.path == "/bad" else 200)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1], seen  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def test_format_pod() -> None:
    assert format_pod(POD) == "web_default(u1)"


async def test_exec_handler() -> None:
    rt = FakeExecRuntime()
    r = HandlerRunner(rt)
    c = {"name": "app"}
    assert await r.run(POD, c, "containerd://abc", {"exec": {"command": ["touch", "/x"]}}, pod_ip="", timeout=5) is None
    assert rt.calls == [("abc", ["touch", "/x"], 5)]
    rt.exit_code, rt.stdout, rt.stderr = 3, b"out", b"err"
    msg = await r.run(POD, c, "abc", {"exec": {"command": ["sh", "-c", "exit 3"]}}, pod_ip="", timeout=5)
    assert msg == ('Exec lifecycle hook ([sh -c exit 3]) for Container "app" in Pod "web_default(u1)" failed - '
                   "error: command 'sh -c exit 3' exited with 3: err, message: \"outerr\"")
    rt.error = CRIError(grpc.StatusCode.NOT_FOUND, "gone")
    msg = await r.run(POD, c, "abc", {"exec": {"command": ["x"]}}, pod_ip="", timeout=5)
    assert msg is not None and "gone" in msg


async def test_http_handler(http_port: Any) -> None:
    port, seen = http_port
    r = HandlerRunner(FakeExecRuntime())
    c = {"name": "app", "ports": [{"name": "web", "containerPort": port}]}
    try:
        assert await r.run(POD, c, "id", {"httpGet": {"port": "web", "path": "/hook"}},
                           pod_ip="127.0.0.1", timeout=5) is None
        assert seen[-1].path == "/hook" and seen[-1].headers["User-Agent"] == "kube-lifecycle/1.33"
        msg = await r.run(POD, c, "id", {"httpGet": {"port": port, "path": "/bad"}}, pod_ip="127.0.0.1", timeout=5)
        assert msg is not None and msg.startswith(
            'HTTP lifecycle hook (/bad) for Container "app" in Pod "web_default(u1)" failed - error: ')
        assert "500" in msg
        msg = await r.run(POD, c, "id", {"httpGet": {"port": "missing"}}, pod_ip="127.0.0.1", timeout=5)
        assert msg is not None and "couldn't find port" in msg
    finally:
        await r.close()


async def test_sleep_and_invalid_handler() -> None:
    r = HandlerRunner(FakeExecRuntime())
    assert await r.run(POD, {"name": "app"}, "id", {"sleep": {"seconds": 0}}, pod_ip="", timeout=5) is None
    msg = await r.run(POD, {"name": "app"}, "id", {"sleep": {"seconds": 30}}, pod_ip="", timeout=0.01)
    assert msg is not None and "container terminated before sleep hook finished" in msg
    assert (await r.run(POD, {"name": "app"}, "id", {}, pod_ip="", timeout=1) or "").startswith("Cannot run handler")


async def test_post_start() -> None:
    rt = FakeExecRuntime(exit_code=1)
    r = HandlerRunner(rt)
    assert await r.run_post_start(POD, {"name": "app"}, "id", pod_ip="") is None  # no hook
    c = {"name": "app", "lifecycle": {"postStart": {"exec": {"command": ["false"]}}}}
    msg = await r.run_post_start(POD, c, "id", pod_ip="")
    assert msg is not None and msg.startswith("Exec lifecycle hook ([false])")


async def test_pre_stop_returns_remaining_grace_and_reports_failure() -> None:
    clock = FakeClock(0.0)
    rec = FakeEventRecorder()
    rt = FakeExecRuntime(exit_code=0)
    r = HandlerRunner(rt, rec, clock=clock)
    c = {"name": "app", "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}}}
    assert await r.run_pre_stop(POD, {"name": "app"}, "id", pod_ip="", grace_seconds=30) == 30  # no hook

    async def slow_exec(container_id: str, cmd: Any, timeout: int = 0) -> pb.ExecSyncResponse:  # noqa: ASYNC109
        clock.now += 10  # the hook "took" 10 seconds
        return pb.ExecSyncResponse(exit_code=0)

    rt.exec_sync = slow_exec  # type: ignore[method-assign]
    assert await r.run_pre_stop(POD, c, "id", pod_ip="", grace_seconds=30) == 20
    assert rec.events == []

    async def failing_exec(container_id: str, cmd: Any, timeout: int = 0) -> pb.ExecSyncResponse:  # noqa: ASYNC109
        clock.now += 29
        return pb.ExecSyncResponse(exit_code=2)

    rt.exec_sync = failing_exec  # type: ignore[method-assign]
    assert await r.run_pre_stop(POD, c, "id", pod_ip="", grace_seconds=30) == 2  # never below the minimum
    assert rec.events == [("Warning", "FailedPreStopHook", "PreStopHook failed")]


async def test_pre_stop_bounded_by_grace() -> None:
    rt = FakeExecRuntime(block=True)
    r = HandlerRunner(rt)
    c = {"name": "app", "lifecycle": {"preStop": {"exec": {"command": ["hang"]}}}}
    async with asyncio.timeout(5):
        left = await r.run_pre_stop(POD, c, "id", pod_ip="", grace_seconds=0.05)
    assert left == 2
