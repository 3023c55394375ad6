"""exec / attach / portForward / run on the kubelet API, bridged to the CRI streaming server.

Upstream's kubelet asks the runtime for a streaming URL (CRI ``Exec``/``Attach``/``PortForward``)
and proxies the client's upgrade request to it (``proxyStream`` with an upgrade-aware handler); the
runtime's streaming server (k8s.io/kubelet/pkg/cri/streaming, vendored in containerd 1.6) speaks
SPDY/3.1 with remotecommand ``v4``..``v1`` and ``portforward.k8s.io``, and old-style websockets. It
predates the 1.30 websocket protocols, so we bridge those here (upstream does it in the API server's
StreamTranslator/tunnelling handlers; we do it one hop later with the same wire behaviour):

* websocket ``v5.channel.k8s.io`` / ``v4.channel.k8s.io`` / ``channel.k8s.io`` exec/attach → we open
  SPDY to the runtime with ``v4.channel.k8s.io``, create the error/stdin/stdout/stderr/resize streams
  in upstream's client order, and translate channel messages ↔ stream data. v5's ``ff 00`` half-closes
  the stdin stream (so ``echo x | kubectl exec -i … cat`` terminates). The runtime's v4 status JSON is
  relayed on channel 3 (plain text for ``channel.k8s.io``).
* websocket ``SPDY/3.1+portforward.k8s.io`` (kubectl ≥ 1.30 port-forward) → the websocket's binary
  messages already carry raw SPDY frames, so we open a SPDY upgrade (``portforward.k8s.io``) to the
  runtime and relay bytes unchanged.
* anything else carrying ``Upgrade`` (SPDY exec/attach/port-forward of older kubectl, legacy websocket
  protocols) → transparent upgrade proxy to the runtime URL (``common.upgradeproxy``, the same helper
  the API server uses for its hop to us), exactly like upstream.

Query names follow upstream (``command`` repeated, ``input``/``output``/``error``/``tty``; ``port``
for legacy port-forward). With ``tty`` stderr is off (the terminal merges it), as upstream does.
Errors before the upgrade are Status objects with 4xx/5xx, which makes kubectl fall back or print.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
from collections.abc import Callable
from typing import Any

from aiohttp import WSMsgType, web

from pykubelet.agent.interfaces import ContainerRuntime
from pykubelet.agent.server import cri_helpers
from pykubelet.agent.server.status import StatusError, status_response
from pykubelet.common import upgradeproxy, wsstream
from pykubelet.common.labels import POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from pykubelet.common.podutil import find_container
from pykubelet.common.spdy import SpdySession, SpdyStream
from pykubelet.cri import CRIError, pb

log = logging.getLogger(__name__)

WS_CHANNEL_PROTOCOLS = (wsstream.V5, wsstream.V4, wsstream.V1)
# The kubelet also passes Origin on to the runtime (its legacy websocket server may check it).
_FORWARDED_REQUEST_HEADERS = upgradeproxy.UPGRADE_REQUEST_HEADERS | {"origin"}


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true", "t", "yes")


def _ws_protocols(request: web.Request) -> list[str]:
    raw = ",".join(request.headers.getall("Sec-WebSocket-Protocol", []))
    return [p.strip() for p in raw.split(",") if p.strip()]


def _is_websocket(request: web.Request) -> bool:
    return upgradeproxy.is_upgrade_request(request) and request.headers.get("Upgrade", "").lower() == "websocket"


class StreamingHandlers:
    """aiohttp handlers for the streaming endpoints; ``find_pod(ns, name)`` returns the API pod or None."""

    def __init__(self, *, runtime: ContainerRuntime, find_pod: Callable[[str, str], dict[str, Any] | None],
                 bridge_timeout: float = 30.0) -> None:
        self.runtime = runtime
        self.find_pod = find_pod
        self.timeout = bridge_timeout

    # ------------------------------------------------------------------ helpers
    def _pod_or_404(self, ns: str, name: str) -> dict[str, Any]:
        pod = self.find_pod(ns, name)
        if pod is None:
            raise StatusError(404, "NotFound", f'pod "{name}" not found', name=name, kind="pods")
        return pod

    async def _container_id(self, pod: dict[str, Any], ns: str, name: str, container: str) -> str:
        if find_container(pod, container) is None:
            raise StatusError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        uid = (pod.get("metadata") or {}).get("uid")
        try:
            c = await cri_helpers.running_container(self.runtime, ns, name, container, uid)
        except cri_helpers.NotFound as e:
            raise StatusError(400, "BadRequest", str(e)) from e
        except CRIError as e:
            raise StatusError(500, "InternalError", f"runtime error: {e}") from e
        return str(c.id)

    async def _sandbox_id(self, pod: dict[str, Any], ns: str, name: str) -> str:
        labels = {POD_NAMESPACE_LABEL: ns, POD_NAME_LABEL: name}
        uid = (pod.get("metadata") or {}).get("uid")
        if uid:
            labels[POD_UID_LABEL] = uid
        try:
            items = await self.runtime.list_pod_sandbox(pb.PodSandboxFilter(label_selector=labels))
        except CRIError as e:
            raise StatusError(500, "InternalError", f"runtime error: {e}") from e
        ready = [s for s in items if s.state == pb.SANDBOX_READY
                 and all(s.labels.get(k) == v for k, v in labels.items())]
        if not ready:
            raise StatusError(400, "BadRequest", f'pod "{name}" has no running sandbox')
        ready.sort(key=lambda s: s.created_at, reverse=True)
        return str(ready[0].id)

    # ------------------------------------------------------------------ exec / attach
    async def exec(self, request: web.Request) -> web.StreamResponse:
        return await self._exec_or_attach(request, attach=False)

    async def attach(self, request: web.Request) -> web.StreamResponse:
        return await self._exec_or_attach(request, attach=True)

    async def _exec_or_attach(self, request: web.Request, *, attach: bool) -> web.StreamResponse:
        ns, name, container = (request.match_info["namespace"], request.match_info["pod"],
                               request.match_info["container"])
        stdin, stdout, stderr, tty = (_flag(request, "input"), _flag(request, "output"),
                                      _flag(request, "error"), _flag(request, "tty"))
        if tty:
            stderr = False
        command = request.query.getall("command", [])
        if not attach and not command:
            return status_response(400, "BadRequest", "you must specify at least 1 command")
        if not (stdin or stdout or stderr):
            return status_response(400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr")
        if not upgradeproxy.is_upgrade_request(request):
            return status_response(400, "BadRequest", "Upgrade request required")
        pod = self._pod_or_404(ns, name)
        cid = await self._container_id(pod, ns, name, container)
        try:
            if attach:
                resp = await self.runtime.attach(pb.AttachRequest(container_id=cid, stdin=stdin, tty=tty,
                                                                  stdout=stdout, stderr=stderr))
            else:
                resp = await self.runtime.exec(pb.ExecRequest(container_id=cid, cmd=command, tty=tty, stdin=stdin,
                                                              stdout=stdout, stderr=stderr))
            url = str(resp.url)
        except Exception as e:
            return status_response(500, "InternalError", f"unable to upgrade connection: {e}")
        if _is_websocket(request):
            offered = _ws_protocols(request)
            proto = next((p for p in offered if p in WS_CHANNEL_PROTOCOLS), None)
            if proto is not None:
                return await self._bridge_channels(request, url, proto, stdin=stdin, stdout=stdout,
                                                   stderr=stderr, tty=tty)
        return await self._proxy_upgrade(request, url)

    async def _open_runtime_spdy(self, url: str, protocol: str) -> wsstream.UpgradeResponse:
        try:
            up = await wsstream.open_upgrade(url, method="POST", connect_timeout=self.timeout, headers=[
                ("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"),
                (wsstream.STREAM_PROTOCOL_HEADER, protocol)])
        except (OSError, TimeoutError, ValueError) as e:
            raise StatusError(500, "InternalError",
                              f"error dialing container runtime streaming server: {e}") from e
        if up.status != 101:
            body = await up.read_body()
            await up.conn.close()
            raise StatusError(500, "InternalError",
                              f"runtime streaming server refused upgrade: {up.status} {body[:200]!r}")
        return up

    async def _bridge_channels(self, request: web.Request, url: str, proto: str, *, stdin: bool,
                               stdout: bool, stderr: bool, tty: bool) -> web.StreamResponse:
        up = await self._open_runtime_spdy(url, wsstream.V4)
        session = SpdySession(up.conn.read, up.conn.write, client=True)
        run_task = asyncio.ensure_future(session.run())
        streams: dict[str, SpdyStream] = {}
        try:
            for kind, wanted in (("error", True), ("stdin", stdin), ("stdout", stdout), ("stderr", stderr),
                                 ("resize", tty)):
                if wanted:
                    streams[kind] = await asyncio.wait_for(session.open_stream({"streamtype": [kind]}),
                                                           self.timeout)
        except Exception as e:
            await session.close()
            await up.conn.close()
            run_task.cancel()
            return status_response(500, "InternalError", f"error creating streams to the runtime: {e}")

        ws = web.WebSocketResponse(protocols=(proto,), heartbeat=None, max_msg_size=0)
        await ws.prepare(request)

        async def out_pump(stream: SpdyStream, channel: int) -> None:
            while True:
                data = await stream.read()
                if not data:
                    return
                if ws.closed:
                    return
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_bytes(wsstream.encode(channel, data))

        async def in_pump() -> None:
            stdin_s = streams.get("stdin")
            resize_s = streams.get("resize")
            async for msg in ws:
                # Like upstream's wsstream (x/net/websocket Message.Receive), text frames carry channel
                # data too: the official Python client sends str stdin as text frames.
                if msg.type == WSMsgType.TEXT and msg.data:
                    raw = msg.data.encode()
                elif msg.type == WSMsgType.BINARY and msg.data:
                    raw = msg.data
                else:
                    continue
                ch, data = wsstream.decode(raw)
                try:
                    if ch == wsstream.STDIN and stdin_s is not None and data:
                        await stdin_s.write(data)
                    elif ch == wsstream.RESIZE and resize_s is not None:
                        await resize_s.write(data)
                    elif ch == wsstream.CLOSE and proto == wsstream.V5 and data[:1] == bytes([wsstream.STDIN]):
                        if stdin_s is not None:
                            await stdin_s.close()
                except Exception:
                    return
            # websocket closed by the client: stop the remote side too.
            if stdin_s is not None:
                await stdin_s.close()

        async def error_reader() -> bytes:
            buf = b""
            while True:
                data = await streams["error"].read()
                if not data:
                    return buf
                buf += data

        pumps = [asyncio.ensure_future(out_pump(streams[k], ch))
                 for k, ch in (("stdout", wsstream.STDOUT), ("stderr", wsstream.STDERR)) if k in streams]
        in_task = asyncio.ensure_future(in_pump())
        err_task = asyncio.ensure_future(error_reader())
        try:
            await asyncio.wait({err_task, in_task}, return_when=asyncio.FIRST_COMPLETED)
            if err_task.done():
                err = err_task.result()
                # The runtime closes the connection right after the status; drain output first.
                if pumps:
                    await asyncio.wait(pumps, timeout=self.timeout)
                await self._send_status(ws, proto, err)
                with contextlib.suppress(Exception):
                    await ws.close(code=1000)
            else:
                # Client went away: abandon the remote session.
                pass
        finally:
            for t in [*pumps, in_task, err_task]:
                t.cancel()
            await session.close()
            await up.conn.close()
            run_task.cancel()
            await asyncio.gather(*pumps, in_task, err_task, run_task, return_exceptions=True)
            with contextlib.suppress(Exception):
                await ws.close()
        return ws

    @staticmethod
    async def _send_status(ws: web.WebSocketResponse, proto: str, err: bytes) -> None:
        status: dict[str, Any]
        try:
            status = json.loads(err) if err.strip() else wsstream.status_success()
            if not isinstance(status, dict):
                raise ValueError
        except ValueError:
            status = wsstream.status_failure(err.decode("utf-8", "replace"))
        if ws.closed:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            if proto == wsstream.V1:
                if status.get("status") != "Success":
                    await ws.send_bytes(wsstream.encode(wsstream.ERROR, str(status.get("message", "")).encode()))
            else:
                await ws.send_bytes(wsstream.encode(wsstream.ERROR, wsstream.status_bytes(status)))

    async def _proxy_upgrade(self, request: web.Request, url: str) -> web.StreamResponse:
        return await upgradeproxy.proxy_upgrade(
            request, url, dial_error="error dialing container runtime streaming server",
            forward_headers=_FORWARDED_REQUEST_HEADERS, connect_timeout=self.timeout)

    # ------------------------------------------------------------------ port-forward
    async def port_forward(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["namespace"], request.match_info["pod"]
        if not upgradeproxy.is_upgrade_request(request):
            return status_response(400, "BadRequest", "Upgrade request required")
        ports: list[int] = []
        try:
            for p in request.query.getall("port", []):
                port = int(p)
                if not 0 < port < 65536:
                    raise ValueError
                ports.append(port)
        except ValueError:
            return status_response(400, "BadRequest", "invalid port")
        pod = self._pod_or_404(ns, name)
        sid = await self._sandbox_id(pod, ns, name)
        try:
            resp = await self.runtime.port_forward(pb.PortForwardRequest(pod_sandbox_id=sid, port=ports))
            url = str(resp.url)
        except Exception as e:
            return status_response(500, "InternalError", f"unable to upgrade connection: {e}")
        if _is_websocket(request) and wsstream.SPDY_PORT_FORWARD_TUNNEL in _ws_protocols(request):
            return await self._tunnel_port_forward(request, url)
        return await self._proxy_upgrade(request, url)

    async def _tunnel_port_forward(self, request: web.Request, url: str) -> web.StreamResponse:
        up = await self._open_runtime_spdy(url, wsstream.PORT_FORWARD)
        ws = web.WebSocketResponse(protocols=(wsstream.SPDY_PORT_FORWARD_TUNNEL,), heartbeat=None, max_msg_size=0)
        await ws.prepare(request)

        class _WsConn(wsstream.RawConnection):
            async def read(self) -> bytes:
                async for msg in ws:
                    if msg.type == WSMsgType.BINARY and msg.data:
                        return bytes(msg.data)
                return b""

            async def write(self, data: bytes) -> None:
                if ws.closed:
                    raise ConnectionResetError("websocket closed")
                await ws.send_bytes(data)

            async def close(self) -> None:
                with contextlib.suppress(Exception):
                    await ws.close()

        await wsstream.pipe(_WsConn(), up.conn)
        return ws

    # ------------------------------------------------------------------ run (ExecSync)
    async def run(self, request: web.Request) -> web.StreamResponse:
        ns, name, container = (request.match_info["namespace"], request.match_info["pod"],
                               request.match_info["container"])
        raw = request.query.get("cmd", "")
        if not raw and request.can_read_body:
            with contextlib.suppress(Exception):
                form = await request.post()
                raw = str(form.get("cmd", ""))
        try:
            cmd = shlex.split(raw)
        except ValueError:
            cmd = raw.split()
        if not cmd:
            return status_response(400, "BadRequest", "you must specify a command (cmd)")
        pod = self._pod_or_404(ns, name)
        cid = await self._container_id(pod, ns, name, container)
        try:
            resp = await self.runtime.exec_sync(cid, cmd, timeout=60)
        except CRIError as e:
            return status_response(500, "InternalError", f"failed to exec in container: {e}")
        return web.Response(body=bytes(resp.stdout) + bytes(resp.stderr), content_type="text/plain")
