"""Transparent HTTP upgrade proxy (SPDY/3.1 or websocket) from our client to a backend.

Both hops of the streaming chain do the same thing when they do not translate a protocol: the API
server forwards ``pods/{name}/exec|attach|portforward`` (and upgrade requests on ``nodes/{n}/proxy``)
to the kubelet, and the kubelet forwards what it does not bridge itself to the runtime's streaming
server URL. Upstream's ``UpgradeAwareHandler`` (k8s.io/apimachinery/pkg/util/proxy) does this by
dialling the backend, replaying the client's upgrade request, and, on ``101 Switching Protocols``,
repeating the backend's answer to the client and copying bytes both ways until either side closes;
any other answer is relayed as is, so the client sees the backend's own error.

Design: ``proxy_upgrade`` is that whole exchange for one aiohttp request, built on the raw upgrade
plumbing of ``wsstream`` (``open_upgrade``, ``hijack``, ``pipe``). Only the request headers that
matter for an upgrade are forwarded (an allow-list: the connection/upgrade negotiation, websocket
keys and protocols, ``X-Stream-Protocol-Version``, User-Agent); credentials of the incoming hop are
never passed on. Each caller names its backend in the dial-error message and chooses TLS settings
and timeouts. A backend that cannot be dialled becomes a ``500 InternalError`` Status, never an
exception escaping to the client.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Collection

from aiohttp import web

from pykubelet.common import wsstream
from pykubelet.common.apistatus import status_object

UPGRADE_REQUEST_HEADERS = frozenset({
    "connection", "upgrade", "x-stream-protocol-version", "sec-websocket-key", "sec-websocket-version",
    "sec-websocket-protocol", "sec-websocket-extensions", "user-agent",
})


def is_upgrade_request(request: web.BaseRequest) -> bool:
    """``Connection: Upgrade`` plus a non-empty ``Upgrade`` header (upstream httpstream.IsUpgradeRequest)."""
    return "upgrade" in request.headers.get("Connection", "").lower() and bool(request.headers.get("Upgrade"))


async def proxy_upgrade(
    request: web.Request,
    url: str,
    *,
    dial_error: str,
    forward_headers: Collection[str] = UPGRADE_REQUEST_HEADERS,
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float = 30.0,
) -> web.StreamResponse:
    """Replay the client's upgrade request to ``url`` and splice the two connections on 101.

    ``dial_error`` prefixes the message of the 500 Status returned when the backend cannot be
    reached; ``forward_headers`` are the lower-case names of the request headers passed on."""
    headers = [(k, v) for k, v in request.headers.items() if k.lower() in forward_headers]
    try:
        up = await wsstream.open_upgrade(url, method=request.method, headers=headers, ssl_context=ssl_context,
                                         connect_timeout=connect_timeout)
    except (OSError, TimeoutError, ValueError) as e:  # ssl.SSLError is an OSError
        body = status_object(500, "InternalError", f"{dial_error}: {e}")
        return web.Response(status=500, text=json.dumps(body), content_type="application/json")
    if up.status != 101:
        raw = await up.read_body()
        await up.conn.close()
        ctype = up.header("Content-Type") or "text/plain"
        return web.Response(status=up.status, body=raw, headers={"Content-Type": ctype})
    resp, client = await wsstream.hijack(request, wsstream.upgrade_response_headers(up))
    await wsstream.pipe(client, up.conn)
    return resp
