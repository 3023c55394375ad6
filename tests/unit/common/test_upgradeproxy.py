"""The shared upgrade proxy replays upgrades to a backend and splices the connections on 101."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from pykubelet.common.upgradeproxy import is_upgrade_request, proxy_upgrade

Backend = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def tcp_server(handler: Backend) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def proxy_to(url: str) -> AsyncIterator[int]:
    async def handler(request: web.Request) -> web.StreamResponse:
        if not is_upgrade_request(request):
            return web.Response(status=400, text="not an upgrade")
        return await proxy_upgrade(request, url, dial_error="error dialing backend", connect_timeout=5)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        yield port
    finally:
        await runner.cleanup()


async def send_upgrade(port: int, extra: str = "") -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST /exec/ns/pod/c?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                  f"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n{extra}"
                  f"Content-Length: 0\r\n\r\n").encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return reader, writer, head


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return await asyncio.wait_for(reader.readexactly(length), 5)


async def test_switching_protocols_pipes_bytes_both_ways_and_forwards_only_upgrade_headers() -> None:
    seen: list[bytes] = []

    async def backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                     b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    async with tcp_server(backend) as bport, proxy_to(f"http://127.0.0.1:{bport}/stream/abc") as pport:
        reader, writer, head = await send_upgrade(pport, "Authorization: Bearer secret\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        assert b"X-Stream-Protocol-Version: v4.channel.k8s.io" in head
        writer.write(b"hello")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"HELLO"
        writer.close()
    request = seen[0].decode()
    assert request.startswith("POST /stream/abc HTTP/1.1")
    assert "X-Stream-Protocol-Version: v4.channel.k8s.io" in request
    assert "Authorization" not in request


async def test_backend_refusal_is_relayed_with_its_status_and_body() -> None:
    async def backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nno way")
        await writer.drain()
        writer.close()

    async with tcp_server(backend) as bport, proxy_to(f"http://127.0.0.1:{bport}/x") as pport:
        reader, writer, head = await send_upgrade(pport)
        assert head.startswith(b"HTTP/1.1 403")
        assert b"Content-Type: text/plain" in head
        assert await read_body(reader, head) == b"no way"
        writer.close()


async def test_unreachable_backend_is_an_internal_error_status() -> None:
    async with tcp_server(lambda r, w: asyncio.sleep(0)) as bport:
        pass  # the port is now closed
    async with proxy_to(f"http://127.0.0.1:{bport}/x") as pport:
        reader, writer, head = await send_upgrade(pport)
        assert head.startswith(b"HTTP/1.1 500")
        body = json.loads(await read_body(reader, head))
        writer.close()
    assert body["kind"] == "Status"
    assert body["reason"] == "InternalError"
    assert body["message"].startswith("error dialing backend: ")
