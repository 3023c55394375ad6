"""API server side of ``pods/{name}/log|exec|attach|portforward`` and ``nodes/{name}/proxy/*``.

Upstream's pod REST storage (pkg/registry/core/pod/strategy.go ``LogLocation``/``ExecLocation``/
``AttachLocation``/``PortForwardLocation``) turns these subresources into a URL on the node's kubelet
(``status.addresses`` InternalIP, port ``status.daemonEndpoints.kubeletEndpoint.Port``) and proxies:

* log → ``GET /containerLogs/{ns}/{pod}/{container}`` with the PodLogOptions query names passed
  through; the body is streamed back (chunked) as it arrives, so ``kubectl logs -f`` follows.
* exec/attach → ``/exec|attach/{ns}/{pod}/{container}?command=…&input=1&output=1&error=1&tty=1``
  (upstream's kubelet-side names for stdin/stdout/stderr/tty), portforward →
  ``/portForward/{ns}/{pod}`` (+ ``port=`` for each requested port). These are *upgrade* requests:
  like upstream's UpgradeAwareHandler we forward the client's upgrade (method, Upgrade/Connection,
  Sec-WebSocket-*, X-Stream-Protocol-Version) unchanged to the kubelet and, on ``101``, pipe raw bytes
  both ways until either side closes (``common.upgradeproxy``, shared with the kubelet's own hop). Protocol translation (websocket v5, port-forward tunnelling)
  happens in the kubelet, so whatever kubectl negotiates ends to end.
* nodes/{n}/proxy/{path} → the same path on the kubelet (GET and friends), streamed back.

The API server authenticates to the kubelet with its ``apiserver-kubelet-client`` certificate
(``request.app[PKI_DIR]``).  The kubelet's serving certificate is verified against the cluster CA
when the CA issued it (a kubelet with ``serverTLSBootstrap`` got it through a
``kubernetes.io/kubelet-serving`` CSR): :func:`kubelet_ssl_context` looks at the certificate the
kubelet presents and, if the cluster CA signed it, dials with full verification (chain, validity,
and the dialled address among its SANs), so another node's certificate or an expired one is
refused; a self-signed one (the kubelet's fallback) is accepted unverified, as upstream does
without ``--kubelet-certificate-authority``.  Failures become Status objects, never exceptions
escaping to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import web
from cryptography.exceptions import InvalidSignature

from pykubelet.common import upgradeproxy
from pykubelet.common.apistatus import status_object
from pykubelet.common.podutil import find_container

LOG_PARAMS = ("follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime", "limitBytes",
              "stream", "insecureSkipTLSVerifyBackend")
_TRUE = ("1", "true", "t", "yes")


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.Response(status=code, text=json.dumps(status_object(code, reason, message)),
                        content_type="application/json")


def kubelet_base_url(node: dict[str, Any]) -> str | None:
    status = node.get("status") or {}
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or [] if a.get("address")}
    host = addrs.get("InternalIP") or addrs.get("ExternalIP") or addrs.get("Hostname")
    if not host:
        return None
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 10250
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"https://{host}:{int(port)}"


PKI_DIR = web.AppKey("pki_dir", Path)


def _pki_dir(request: web.Request) -> Path | None:
    return request.app.get(PKI_DIR)


_ISSUED_BY_CA: dict[tuple[str, int], tuple[bool, float]] = {}  # (host, port) -> (CA-issued, when seen)
_ISSUER_TTL = 60.0


def _issued_by(der: bytes, ca_pem: bytes) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_der_x509_certificate(der)
        ca = x509.load_pem_x509_certificate(ca_pem)
        if cert.issuer != ca.subject:
            return False
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


async def _presented_cert(host: str, port: int) -> bytes | None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(10):
            _r, w = await asyncio.open_connection(host, port, ssl=ctx)
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    try:
        obj = w.get_extra_info("ssl_object")
        return obj.getpeercert(binary_form=True) if obj is not None else None
    finally:
        w.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await w.wait_closed()


async def kubelet_ssl_context(pki_dir: Path | None, base_url: str) -> ssl.SSLContext:
    """The TLS context to dial a kubelet with: verifying when the cluster CA issued its certificate."""
    ctx = client_ssl_context(pki_dir)
    ca = pki_dir / "ca.crt" if pki_dir is not None else None
    parsed = urlsplit(base_url)
    if ca is None or not ca.exists() or parsed.hostname is None:
        return ctx
    key = (parsed.hostname, parsed.port or 10250)
    loop = asyncio.get_running_loop()
    seen = _ISSUED_BY_CA.get(key)
    if seen is None or loop.time() - seen[1] > _ISSUER_TTL:
        der = await _presented_cert(*key)
        ca_pem = await asyncio.to_thread(ca.read_bytes)
        seen = (der is not None and _issued_by(der, ca_pem), loop.time())
        _ISSUED_BY_CA[key] = seen
    if seen[0]:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.check_hostname = True  # the dialled address must be one of the certificate's SANs
        ctx.load_verify_locations(cafile=str(ca))
    return ctx


def client_ssl_context(pki_dir: Path | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if pki_dir is not None:
        crt, key = pki_dir / "apiserver-kubelet-client.crt", pki_dir / "apiserver-kubelet-client.key"
        if crt.exists() and key.exists():
            ctx.load_cert_chain(str(crt), str(key))
    return ctx


def pick_container(pod: dict[str, Any], requested: str | None) -> tuple[str | None, str | None]:
    """(container, error) following upstream's defaulting and validation."""
    name = (pod.get("metadata") or {}).get("name", "")
    if requested:
        if find_container(pod, requested) is None:
            return None, f"container {requested} is not valid for pod {name}"
        return requested, None
    ann = ((pod.get("metadata") or {}).get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
    if ann and find_container(pod, ann) is not None:
        return ann, None
    main = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    if len(main) == 1:
        return main[0], None
    if not main:
        return None, f"pod {name} does not have any containers"
    return None, f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]"


def kubelet_path(pod: dict[str, Any], subresource: str, query: Any) -> tuple[str | None, str | None]:
    """(path+query on the kubelet, error) for a pod subresource request's query (a MultiDict)."""
    md = pod.get("metadata") or {}
    ns, name = quote(md.get("namespace", ""), safe=""), quote(md.get("name", ""), safe="")
    if subresource == "portforward":
        params = [("port", p) for v in query.getall("ports", []) for p in str(v).split(",") if p]
        return f"/portForward/{ns}/{name}" + (("?" + urlencode(params)) if params else ""), None
    container, err = pick_container(pod, query.get("container"))
    if err is not None or container is None:
        return None, err
    c = quote(container, safe="")
    if subresource == "log":
        params = [(k, query.get(k)) for k in LOG_PARAMS if query.get(k) not in (None, "")]
        return f"/containerLogs/{ns}/{name}/{c}" + (("?" + urlencode(params)) if params else ""), None
    if subresource in ("exec", "attach"):
        params = [("command", v) for v in query.getall("command", [])] if subresource == "exec" else []
        for api_name, kubelet_name in (("stdin", "input"), ("stdout", "output"), ("stderr", "error"),
                                       ("tty", "tty")):
            if str(query.get(api_name, "")).lower() in _TRUE:
                params.append((kubelet_name, "1"))
        if subresource == "exec" and not any(k == "command" for k, _ in params):
            return None, "you must specify at least 1 command"
        path = "/exec" if subresource == "exec" else "/attach"
        return f"{path}/{ns}/{name}/{c}?" + urlencode(params), None
    return None, f"unsupported subresource {subresource}"


async def _stream_get(request: web.Request, url: str, ctx: ssl.SSLContext) -> web.StreamResponse:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    try:
        session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
    except Exception as e:  # pragma: no cover - defensive
        return _status(500, "InternalError", str(e))
    try:
        try:
            upstream = await session.request(request.method, url, ssl=ctx,
                                             headers={"Accept": request.headers.get("Accept", "*/*")})
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return _status(500, "InternalError", f'Get "{url}": {e}')
        async with upstream:
            if upstream.status >= 400 and upstream.content_type == "application/json":
                body = await upstream.read()
                return web.Response(status=upstream.status, body=body, content_type="application/json")
            resp = web.StreamResponse(status=upstream.status)
            for h in ("Content-Type", "Content-Encoding", "Cache-Control"):
                if h in upstream.headers:
                    resp.headers[h] = upstream.headers[h]
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
            except (ConnectionError, aiohttp.ClientError, RuntimeError):
                pass
            return resp
    finally:
        await session.close()


async def _proxy_upgrade(request: web.Request, url: str, ctx: ssl.SSLContext) -> web.StreamResponse:
    return await upgradeproxy.proxy_upgrade(request, url, dial_error="error dialing backend", ssl_context=ctx)


async def pod_subresource(request: web.Request, *, pod: dict[str, Any], node: dict[str, Any],
                          subresource: str) -> web.StreamResponse:
    base = kubelet_base_url(node)
    if base is None:
        return _status(500, "InternalError", f"node {(node.get('metadata') or {}).get('name')} has no address")
    path, err = kubelet_path(pod, subresource, request.query)
    if err is not None or path is None:
        return _status(400, "BadRequest", err or "bad request")
    ctx = await kubelet_ssl_context(_pki_dir(request), base)
    url = base + path
    if subresource == "log":
        return await _stream_get(request, url, ctx)
    if not upgradeproxy.is_upgrade_request(request):
        return _status(400, "BadRequest", "Upgrade request required")
    return await _proxy_upgrade(request, url, ctx)


async def node_proxy(request: web.Request, *, node: dict[str, Any], path: str) -> web.StreamResponse:
    base = kubelet_base_url(node)
    if base is None:
        return _status(500, "InternalError", f"node {(node.get('metadata') or {}).get('name')} has no address")
    rel = "/" + path.lstrip("/")
    if any(seg == ".." for seg in rel.split("/")):
        return _status(400, "BadRequest", "invalid path")
    qs = request.query_string
    url = base + quote(rel, safe="/:@!$&'()*+,;=-._~") + (("?" + qs) if qs else "")
    ctx = await kubelet_ssl_context(_pki_dir(request), base)
    if upgradeproxy.is_upgrade_request(request):
        return await _proxy_upgrade(request, url, ctx)
    return await _stream_get(request, url, ctx)
