"""A small async Kubernetes REST client shared by the agent, the controllers and the tests.

Why not the official client: the agent must stay under ~100 MB RSS with 110 pods, and importing the
generated ``kubernetes`` models costs ~20 MB on its own; the kubelet also only needs a handful of verbs
on a handful of paths, and works on plain dicts (what the API returns) rather than typed models.

What it follows from upstream client-go:
- kubeconfig: current-context → cluster (server, certificate-authority[-data], insecure-skip-tls-verify)
  and user (token, tokenFile, client-certificate[-data], client-key[-data]); relative file paths are
  resolved against the kubeconfig's folder.
- errors: a non-2xx answer carries a ``Status`` object; it becomes ``ApiError`` with code, reason and
  message, so callers branch on ``err.status == 404`` or ``err.reason == "AlreadyExists"``.
- transport: the unary verbs (request/get/list/create/replace/patch/delete) go through a lean
  HTTP/1.1 keep-alive pool (``common/http1.py``: one prebuilt write, the answer parsed by httptools in
  the protocol callback, net/http's retry rules), at about half aiohttp's client CPU per call
  (docs/benchmarks-scale.md, "API client"); watches stream through aiohttp. A ``tokenFile`` is read
  again at most once a minute, as client-go's cachingTokenSource.
- JSON: answers and watch events are decoded by ``common/jsoncodec.py`` (msgspec, exactly
  ``json.loads``'s values and errors, at about half the CPU); request bodies by ``json.dumps``.
- watch: chunked JSON lines of ``{"type", "object"}``; an ``ERROR`` event whose Status code is 410 is
  raised as ``ApiError(410)`` so the caller relists (the reflector pattern); BOOKMARK events are
  passed through so callers can advance their resourceVersion.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
import yaml

from pykubelet.common import jsoncodec
from pykubelet.common.http1 import Http1Pool

Obj = dict[str, Any]

# What stays unencoded in a request path: RFC 3986 pchar plus "/" and "?" (a caller's own query)
# and "%" (a caller's own escapes), as yarl kept them for aiohttp.
_PATH_SAFE = "/?:@!$&'()*+,;=-._~%"
# Methods whose request carries a body by definition: without one they say ``Content-Length: 0``
# (Go's net/http does the same for an empty POST, PUT or PATCH).
_BODY_EXPECTED = frozenset({"POST", "PUT", "PATCH"})

_PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


# How long a token read from a file is used before the file is read again: client-go's
# cachingTokenSource (transport/token_source.go) keeps a file's token for a minute, so a rotated
# projected token is picked up within a minute without a read per request.
TOKEN_FILE_REREAD_SECONDS = 60.0


class ApiError(Exception):
    """A failed API call, carrying the server's Status object."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @classmethod
    def from_body(cls, status: int, text: str) -> ApiError:
        try:
            body = jsoncodec.loads(text)
        except ValueError:
            return cls(status, "Unknown", text.strip()[:500] or f"HTTP {status}")
        if not isinstance(body, dict):
            return cls(status, "Unknown", text.strip()[:500])
        return cls(status, str(body.get("reason", "Unknown")), str(body.get("message", "")), body)


class ApiClient:
    """Async client for one API server; safe to share between tasks of one event loop."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        insecure_skip_verify: bool = False,
        user_agent: str = "pykubelet",
        token_file: str | None = None,
        max_connections: int = 64,
    ) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self._token_file = token_file
        self._file_token: str | None = None
        self._token_file_read: float | None = None
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        self._ssl: ssl.SSLContext | bool = False
        if self.server.startswith("https://"):
            ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
            if insecure_skip_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if cert_file and key_file:
                ctx.load_cert_chain(cert_file, key_file)
            self._ssl = ctx
        # Requests and watches use separate pools: a watch holds its connection for minutes, so in
        # one bounded pool enough watches would starve the requests, and an unbounded request pool
        # costs ~300 kB per connection (asyncio's 256 kB TLS read buffer + OpenSSL's state) for as
        # many connections as requests were ever in flight at once (upstream's client-go shares one
        # HTTP/2 connection). Idle request connections close after 15 s (common/http1.py).
        self._max_connections = max_connections
        # Unary calls (everything but watch) go through a lean HTTP/1.1 pool (common/http1.py: aiohttp
        # was ~20 % of the agent's CPU at a 1,000-pod start); watches stream through aiohttp.
        url = urlsplit(self.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"API server URL {server!r}: expected http(s)://host[:port]")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._base_path = url.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        if url.port is not None:
            host += f":{url.port}"
        self._head = f"Host: {host}\r\nUser-Agent: {user_agent}\r\nAccept: application/json\r\n"
        self._auth_for: str | None = None
        self._auth_cached = ""
        self._pool: Http1Pool | None = None
        self._pool_thread = 0  # threading.get_ident() of the thread whose loop made the pool
        self._watch_session: aiohttp.ClientSession | None = None
        self._tmpfiles: list[str] = []
        self._closing: set[asyncio.Task[None]] = set()

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str], context: str | None = None, **kw: Any) -> ApiClient:
        """Build a client from a kubeconfig file, the way kubectl and the kubelet read it."""
        path = Path(path)
        cfg = yaml.safe_load(path.read_text()) or {}
        base = path.parent

        def named(section: str, name: str) -> Obj:
            for item in cfg.get(section) or []:
                if item.get("name") == name:
                    return dict(item.get(section[:-1]) or {})
            raise ValueError(f"kubeconfig {path}: no {section[:-1]} named {name!r}")

        ctx_name = context or cfg.get("current-context")
        if not ctx_name:
            contexts = cfg.get("contexts") or []
            if not contexts:
                raise ValueError(f"kubeconfig {path}: no contexts")
            ctx_name = contexts[0]["name"]
        ctx = named("contexts", ctx_name)
        cluster = named("clusters", ctx["cluster"])
        user = named("users", ctx["user"]) if ctx.get("user") else {}

        tmpfiles: list[str] = []

        def file_or_data(file_key: str, data_key: str, holder: Obj) -> str | None:
            if holder.get(data_key):
                fd, name = tempfile.mkstemp(prefix="pykubelet-kc-")
                with os.fdopen(fd, "wb") as f:
                    f.write(base64.b64decode(holder[data_key]))
                tmpfiles.append(name)
                return name
            if holder.get(file_key):
                p = Path(holder[file_key])
                return str(p if p.is_absolute() else base / p)
            return None

        token_file = user.get("tokenFile")
        if token_file and not Path(token_file).is_absolute():
            token_file = str(base / token_file)
        client = cls(
            cluster["server"],
            token=user.get("token"),
            token_file=token_file,
            ca_file=file_or_data("certificate-authority", "certificate-authority-data", cluster),
            cert_file=file_or_data("client-certificate", "client-certificate-data", user),
            key_file=file_or_data("client-key", "client-key-data", user),
            insecure_skip_verify=bool(cluster.get("insecure-skip-tls-verify")),
            **kw,
        )
        # The SSL context has loaded the files; temporary copies of inline data can go now.
        for name in tmpfiles:
            os.unlink(name)
        return client

    # --- plumbing -----------------------------------------------------------------------------

    def _bearer(self) -> str | None:
        """The token to present: the inline one, or the token file's, read again at most once per
        ``TOKEN_FILE_REREAD_SECONDS`` (client-go's cachingTokenSource). A file that cannot be read
        keeps the last token it gave, as upstream; with none yet, the error is the caller's."""
        if not self._token_file:
            return self._token
        now = time.monotonic()
        if self._token_file_read is None or now - self._token_file_read >= TOKEN_FILE_REREAD_SECONDS:
            try:
                token = Path(self._token_file).read_text().strip()
            except OSError:
                if self._file_token is None:
                    raise
                token = self._file_token
            self._file_token = token
            self._token_file_read = now
        return self._file_token

    def _auth_headers(self) -> dict[str, str]:
        token = self._bearer()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _auth_line(self) -> str:
        token = self._bearer()
        if token != self._auth_for:
            if token and ("\r" in token or "\n" in token):  # it would end the header and start another
                raise ApiError(0, "InvalidToken", "the bearer token contains a line break")
            self._auth_for = token
            self._auth_cached = f"Authorization: Bearer {token}\r\n" if token else ""
        return self._auth_cached

    def _unary_pool(self) -> Http1Pool:
        """The pool of the running loop. Checked without ``asyncio.get_running_loop()``, which on
        Python 3.11 makes a getpid(2) system call every time: a loop that is running in this thread
        is the running loop (one loop runs per thread at a time)."""
        pool = self._pool
        if (pool is None or pool.closed or not pool.loop.is_running()
                or self._pool_thread != threading.get_ident()):
            pool = self._pool = Http1Pool(
                self._host, self._port, self._ssl if isinstance(self._ssl, ssl.SSLContext) else None,
                self._max_connections)
            self._pool_thread = threading.get_ident()
        return pool

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=limit),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    def _watch_sess(self) -> aiohttp.ClientSession:
        if self._watch_session is None or self._watch_session.closed:
            self._watch_session = self._new_session(0)  # one connection per watch, no limit
        return self._watch_session

    def reload_client_certificate(self, cert_file: str, key_file: str) -> None:
        """Present a renewed client certificate from now on (kubelet certificate rotation): it is
        loaded into the TLS context and pooled connections, authenticated with the old one, are
        dropped (upstream's ``closeAllConns``); callers retry or re-watch as after any reconnect."""
        if isinstance(self._ssl, ssl.SSLContext):
            self._ssl.load_cert_chain(cert_file, key_file)
        if self._pool is not None:
            self._pool.drop_connections()
        old = self._watch_session
        if old is not None and not old.closed:
            task = asyncio.get_running_loop().create_task(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._watch_session = None

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
            await asyncio.sleep(0)  # the transports' connection_lost callbacks run
        if self._watch_session is not None:
            await self._watch_session.close()
        self._watch_session = None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @staticmethod
    def _params(params: Mapping[str, Any] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for k, v in (params or {}).items():
            if v is None:
                continue
            out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = 60.0,  # noqa: ASYNC109 - a per-request HTTP timeout over the whole call
    ) -> Obj:
        """One API call; returns the decoded JSON body or raises ``ApiError``."""
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        message = self._message(method, path, params, data, content_type or "application/json")
        try:
            resp = await self._unary_pool().request(method, message, timeout)
        except TimeoutError as e:
            raise ApiError(0, "Timeout", f"{method} {path}: timed out") from e
        except OSError as e:
            raise ApiError(0, "ConnectionError", f"{method} {path}: {e}") from e
        if resp.status >= 400:
            raise ApiError.from_body(resp.status, resp.body.decode("utf-8", "replace"))
        if not resp.body:
            return {}
        result = jsoncodec.loads(resp.body)
        return result if isinstance(result, dict) else {"items": result}

    def _message(
        self, method: str, path: str, params: Mapping[str, Any] | None, data: bytes | None, content_type: str
    ) -> bytes:
        """The whole HTTP/1.1 request: request line, headers, body. The path is percent-encoded where
        it must be (as yarl did for aiohttp), so no caller's string can end the request line."""
        target = self._base_path + quote(path, safe=_PATH_SAFE)
        query = self._params(params)
        if query:
            target += ("&" if "?" in target else "?") + urlencode(query, quote_via=quote)
        head = f"{method} {target} HTTP/1.1\r\n{self._head}{self._auth_line()}"
        if data is None:
            if method in _BODY_EXPECTED:
                head += "Content-Length: 0\r\n"
            return (head + "\r\n").encode()
        return (head + f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Obj:
        return await self.request("GET", path, params=params)

    async def list(self, path: str, params: Mapping[str, Any] | None = None) -> Obj:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: Obj, params: Mapping[str, Any] | None = None) -> Obj:
        return await self.request("POST", path, body=body, params=params)

    async def replace(self, path: str, body: Obj, params: Mapping[str, Any] | None = None) -> Obj:
        return await self.request("PUT", path, body=body, params=params)

    async def patch(
        self, path: str, body: Any, patch_type: str = "merge", params: Mapping[str, Any] | None = None
    ) -> Obj:
        return await self.request("PATCH", path, body=body, params=params, content_type=_PATCH_TYPES[patch_type])

    async def delete(self, path: str, body: Obj | None = None, params: Mapping[str, Any] | None = None) -> Obj:
        return await self.request("DELETE", path, body=body, params=params)

    async def watch(
        self,
        path: str,
        *,
        resource_version: str | None = None,
        params: Mapping[str, Any] | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Yield (type, object) until the server ends the stream; 410 Expired raises ApiError."""
        query = dict(params or {})
        query["watch"] = "true"
        query["allowWatchBookmarks"] = "true"
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            query["timeoutSeconds"] = timeout_seconds
        headers = {**self._headers, **self._auth_headers()}
        try:
            async with self._watch_sess().get(
                self.server + path,
                params=self._params(query),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            ) as resp:
                if resp.status >= 400:
                    raise ApiError.from_body(resp.status, await resp.text())
                # One split per chunk: splitting one line off at a time copied the rest of the buffer
                # for every event, quadratic in the events a chunk holds (a burst of 1,000 pods).
                buf = b""
                async for chunk in resp.content.iter_any():
                    if b"\n" not in chunk:
                        buf += chunk
                        continue
                    lines = (buf + chunk if buf else chunk).split(b"\n")
                    buf = lines.pop()
                    for line in lines:
                        if not line.strip():
                            continue
                        event = jsoncodec.loads(line)
                        etype, obj = event.get("type", ""), event.get("object") or {}
                        if etype == "ERROR":
                            raise ApiError(
                                int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message", "")), obj
                            )
                        yield etype, obj
        except aiohttp.ClientError as e:
            raise ApiError(0, "ConnectionError", f"WATCH {path}: {e}") from e
