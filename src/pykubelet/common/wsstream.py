"""Streaming helpers shared by the kubelet API and the API server's kubelet proxy.

Two things live here:

1. The *channel protocols* of apimachinery ``wsstream``/remotecommand: a websocket binary message is
   ``<channel byte><payload>`` with channels 0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize;
   ``v5.channel.k8s.io`` adds channel 255 = "close the stream named by the next byte" (kubectl sends
   ``ff 00`` to close stdin). From ``v4`` on, channel 3 carries a JSON ``metav1.Status``; a failed
   command is ``reason: NonZeroExitCode`` with a cause ``{reason: ExitCode, message: "<n>"}`` (what
   kubectl turns into "command terminated with exit code n"). Plain ``channel.k8s.io`` carries the
   error text only.

2. *Raw HTTP upgrade plumbing*: taking over an aiohttp server connection after answering ``101``
   (aiohttp only knows websocket upgrades; SPDY/3.1 is hijacked by installing our own payload parser,
   the same hook aiohttp's WebSocketResponse uses), opening an upgrade request to a backend over a
   plain asyncio stream (optionally TLS), and piping bytes both ways until either side closes. This is
   what upstream's ``UpgradeAwareHandler`` does for the apiserver→kubelet→runtime chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

STDIN = 0
STDOUT = 1
STDERR = 2
ERROR = 3
RESIZE = 4
CLOSE = 255

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V3 = "v3.channel.k8s.io"
V2 = "v2.channel.k8s.io"
V1 = "channel.k8s.io"
PORT_FORWARD = "portforward.k8s.io"
SPDY_PORT_FORWARD_TUNNEL = "SPDY/3.1+portforward.k8s.io"
STREAM_PROTOCOL_HEADER = "X-Stream-Protocol-Version"


def encode(channel: int, data: bytes) -> bytes:
    return bytes([channel]) + data


def decode(message: bytes) -> tuple[int, bytes]:
    if not message:
        raise ValueError("empty channel message")
    return message[0], message[1:]


def status_success() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def status_exit_code(code: int, message: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {},
        "status": "Failure",
        "message": message or f"command terminated with non-zero exit code: error executing command, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def status_failure(message: str, reason: str = "InternalError", code: int = 500) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def status_bytes(status: dict[str, Any]) -> bytes:
    return json.dumps(status, separators=(",", ":")).encode()


def exit_code_of(status: dict[str, Any]) -> int | None:
    """Exit code carried by a remotecommand Status (0 for Success, None if not an exit)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                with contextlib.suppress(TypeError, ValueError):
                    return int(cause.get("message"))
    return None


# ----------------------------------------------------------------------------- raw upgrade plumbing


class _Feeder:
    """Payload parser installed into aiohttp's protocol after a 101: queues raw bytes."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if data:
            self.queue.put_nowait(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        self.queue.put_nowait(b"")


class RawConnection:
    """A byte pipe: read() returns b"" at EOF; write() raises ConnectionError when closed."""

    async def read(self) -> bytes:
        raise NotImplementedError

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class HijackedConnection(RawConnection):
    def __init__(self, request: web.BaseRequest, feeder: _Feeder) -> None:
        self._request = request
        self._feeder = feeder
        self._eof = False

    async def read(self) -> bytes:
        if self._eof:
            return b""
        data = await self._feeder.queue.get()
        if not data:
            self._eof = True
        return data

    async def write(self, data: bytes) -> None:
        t = self._request.transport
        if t is None or t.is_closing():
            raise ConnectionResetError("client connection closed")
        t.write(data)
        proto = self._request.protocol
        drain = getattr(proto, "_drain_helper", None)
        if drain is not None:
            await drain()

    async def close(self) -> None:
        t = self._request.transport
        if t is not None and not t.is_closing():
            t.close()


async def hijack(request: web.Request, headers: Iterable[tuple[str, str]]) -> tuple[web.StreamResponse, HijackedConnection]:
    """Answer 101 with ``headers`` and take over the connection (see module docstring).

    The returned StreamResponse must be returned by the handler once the connection is done."""
    resp = web.StreamResponse(status=101)
    for k, v in headers:
        resp.headers.add(k, v)
    resp.force_close()
    feeder = _Feeder()
    writer = await resp.prepare(request)
    request.protocol.set_parser(feeder)  # type: ignore[arg-type]
    request.protocol.keep_alive(False)
    if writer is not None:
        await writer.drain()
    return resp, HijackedConnection(request, feeder)


class StreamConnection(RawConnection):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes = b"") -> None:
        self.reader = reader
        self.writer = writer
        self._initial = initial

    async def read(self) -> bytes:
        if self._initial:
            data, self._initial = self._initial, b""
            return data
        try:
            return await self.reader.read(65536)
        except (ConnectionError, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


class UpgradeResponse:
    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], conn: StreamConnection) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.conn = conn

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    async def read_body(self, limit: int = 1 << 20) -> bytes:
        """Body of a non-101 answer (Content-Length or until close)."""
        length = self.header("Content-Length")
        try:
            if length is not None:
                n = min(int(length), limit)
                buf = self.conn._initial[:n]
                self.conn._initial = b""
                if len(buf) < n:
                    buf += await asyncio.wait_for(self.conn.reader.readexactly(n - len(buf)), 10)
                return buf
            buf = self.conn._initial
            self.conn._initial = b""
            while len(buf) < limit:
                chunk = await asyncio.wait_for(self.conn.reader.read(65536), 10)
                if not chunk:
                    break
                buf += chunk
            return buf
        except (TimeoutError, asyncio.IncompleteReadError, ValueError, ConnectionError):
            return b""


async def open_upgrade(
    url: str,
    *,
    method: str,
    headers: list[tuple[str, str]],
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float = 30.0,
) -> UpgradeResponse:
    """Send an HTTP/1.1 upgrade request to ``url`` and read the response head.

    ``url`` may be http:// or https:// (then ``ssl_context`` is used). Raises OSError/TimeoutError
    when the backend is unreachable, ValueError on a malformed answer."""
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    host = u.hostname or "127.0.0.1"
    ctx = ssl_context if u.scheme == "https" else None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=ctx, server_hostname=host if ctx else None, limit=1 << 20),
        connect_timeout,
    )
    target = (u.path or "/") + (("?" + u.query) if u.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {u.netloc}"]
    for k, v in headers:
        if k.lower() in ("host", "content-length", "transfer-encoding"):
            continue
        if "\r" in k or "\n" in k or "\r" in v or "\n" in v:
            continue
        lines.append(f"{k}: {v}")
    lines.append("Content-Length: 0")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    try:
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), connect_timeout)
    except BaseException:
        writer.close()
        raise
    text = head.decode("latin-1").split("\r\n")
    parts = text[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        writer.close()
        raise ValueError(f"malformed response from {host}:{port}")
    status = int(parts[1])
    reason = parts[2] if len(parts) > 2 else ""
    resp_headers: list[tuple[str, str]] = []
    for line in text[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        resp_headers.append((k.strip(), v.strip()))
    return UpgradeResponse(status, reason, resp_headers, StreamConnection(reader, writer))


async def pipe(a: RawConnection, b: RawConnection) -> None:
    """Copy bytes both ways until either side reaches EOF or fails, then close both."""

    async def copy(src: RawConnection, dst: RawConnection) -> None:
        try:
            while True:
                data = await src.read()
                if not data:
                    break
                await dst.write(data)
        except (ConnectionError, OSError, RuntimeError):
            pass

    t1 = asyncio.ensure_future(copy(a, b))
    t2 = asyncio.ensure_future(copy(b, a))
    try:
        await asyncio.wait({t1, t2}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        t1.cancel()
        t2.cancel()
        await asyncio.gather(t1, t2, return_exceptions=True)
        await a.close()
        await b.close()


HOP_BY_HOP_RESPONSE = {"date", "server", "content-length", "transfer-encoding", "keep-alive"}


def upgrade_response_headers(resp: UpgradeResponse) -> list[tuple[str, str]]:
    """Headers of a backend's 101 to repeat to our client (hop-by-hop bookkeeping dropped)."""
    return [(k, v) for k, v in resp.headers if k.lower() not in HOP_BY_HOP_RESPONSE]
