"""ApiClient's unary calls over its own HTTP/1.1 pool (common/http1.py): what a caller can see.

Keep-alive reuse, reconnecting after the server closed an idle connection (retrying only what
net/http would), the three ways a body ends, gzip, the timeout, the connection limit, query and path
encoding, the token file's cache, and TLS (CA, client certificate, its reload, skip-verify). The
servers are an aiohttp test server or a raw asyncio one where the test needs to misbehave on the wire.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import gzip
import itertools
import json
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from pykubelet.common import apiclient, http1
from pykubelet.common.apiclient import ApiClient, ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> TestServer:
    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", handler)
    server = TestServer(app, host="127.0.0.1", scheme="https" if ssl_context else "http")
    await server.start_server(ssl=ssl_context)
    return server


async def gated_server(held: str) -> tuple[TestServer, asyncio.Event, list[str]]:
    """A server that answers ``{"ok": true}``, requests for ``held`` only once the gate is set;
    the list gets every path asked, as it arrives."""
    gate = asyncio.Event()
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        if request.path == held:
            await gate.wait()
        return web.json_response({"ok": True})

    return await serve(handler), gate, seen


def peer_port(request: web.Request) -> int:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return int(peer[1]) if peer else -1


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, list[int]]]:
    """Echoes method, path, query, content type, body and auth; records each request's client port."""
    ports: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        ports.append(peer_port(request))
        return web.json_response({"method": request.method, "path": request.path, "q": dict(request.query),
                                  "ct": request.headers.get("Content-Type", ""),
                                  "auth": request.headers.get("Authorization", ""),
                                  "body": await request.text()})

    server = await serve(handler)
    yield f"http://127.0.0.1:{server.port}", ports
    await server.close()


async def test_sequential_calls_reuse_one_connection(echo: tuple[str, list[int]]) -> None:
    url, ports = echo
    async with ApiClient(url, token="t") as api:
        for i in range(20):
            got = await api.patch("/api/v1/namespaces/d/pods/p/status", {"i": i})
            assert got["method"] == "PATCH" and json.loads(got["body"]) == {"i": i}
            assert got["ct"] == "application/merge-patch+json" and got["auth"] == "Bearer t"
    assert len(set(ports)) == 1


async def test_a_token_with_a_line_break_is_refused_before_anything_is_sent(echo: tuple[str, list[int]]) -> None:
    url, ports = echo
    async with ApiClient(url, token="t\r\nX-Injected: 1") as api:
        with pytest.raises(ApiError) as err:
            await api.get("/api")
        assert (err.value.status, err.value.reason) == (0, "InvalidToken")
    assert ports == []


async def test_query_parameters_and_paths_arrive_as_given(echo: tuple[str, list[int]]) -> None:
    url, _ = echo
    async with ApiClient(url) as api:
        got = await api.list("/api/v1/pods", params={"labelSelector": "app in (a,b),tier!=x y",
                                                     "fieldSelector": "spec.nodeName=n1", "watch": False,
                                                     "limit": 500, "continue": None})
        assert got["q"] == {"labelSelector": "app in (a,b),tier!=x y", "fieldSelector": "spec.nodeName=n1",
                            "watch": "false", "limit": "500"}
        assert got["auth"] == ""
        got = await api.get("/api/v1/namespaces/d/configmaps/a b\r\nX-Injected: 1")
        assert got["path"] == "/api/v1/namespaces/d/configmaps/a b\r\nX-Injected: 1"
        got = await api.get("/api/v1/namespaces/d/pods?limit=1", params={"continue": "c"})
        assert got["q"] == {"limit": "1", "continue": "c"}


async def test_an_empty_post_says_content_length_zero(echo: tuple[str, list[int]]) -> None:
    url, _ = echo
    async with ApiClient(url) as api:
        got = await api.request("POST", "/api/v1/x")
        assert got["method"] == "POST" and got["body"] == ""
        got = await api.delete("/api/v1/namespaces/d/pods/p", body={"gracePeriodSeconds": 0})
        assert json.loads(got["body"]) == {"gracePeriodSeconds": 0}


async def test_a_rotated_token_file_is_read_again_after_a_minute(echo: tuple[str, list[int]], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = echo
    now = [1000.0]
    monkeypatch.setattr(apiclient.time, "monotonic", lambda: now[0])
    token = tmp_path / "token"
    token.write_text("one\n")
    async with ApiClient(url, token_file=str(token)) as api:
        assert (await api.get("/api"))["auth"] == "Bearer one"
        token.write_text("two\n")
        now[0] += 59
        assert (await api.get("/api"))["auth"] == "Bearer one"  # cached, as client-go's cachingTokenSource
        now[0] += 1
        assert (await api.get("/api"))["auth"] == "Bearer two"
        token.unlink()  # unreadable later: the last token stays in use
        now[0] += 61
        assert (await api.get("/api"))["auth"] == "Bearer two"


async def test_the_connection_limit_holds_and_every_call_completes() -> None:
    active = peak = 0
    ports: set[int] = set()

    async def slow(request: web.Request) -> web.StreamResponse:
        nonlocal active, peak
        ports.add(peer_port(request))
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return web.json_response({"ok": True})

    server = await serve(slow)
    try:
        async with ApiClient(f"http://127.0.0.1:{server.port}", max_connections=2) as api:
            got = await asyncio.gather(*(api.get(f"/api/v1/x/{i}") for i in range(12)))
        assert got == [{"ok": True}] * 12
        assert peak == 2 and len(ports) == 2
    finally:
        await server.close()


async def test_a_slow_server_times_out_and_the_next_call_still_works() -> None:
    calls = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(5)
        return web.json_response({"ok": True})

    server = await serve(handler)
    try:
        async with ApiClient(f"http://127.0.0.1:{server.port}", max_connections=1) as api:
            with pytest.raises(ApiError) as err:
                await api.request("GET", "/api", timeout=0.2)
            assert (err.value.status, err.value.reason) == (0, "Timeout")
            assert await api.get("/api") == {"ok": True}
    finally:
        await server.close()


async def test_a_call_that_waits_for_a_connection_past_its_timeout_fails_and_the_pool_keeps_working() -> None:
    server, gate, seen = await gated_server("/busy")
    try:
        async with ApiClient(f"http://127.0.0.1:{server.port}", max_connections=1) as api:
            busy = asyncio.create_task(api.get("/busy"))
            async with asyncio.timeout(5):
                while not seen:  # noqa: ASYNC110 - waiting for the server to hold the only connection
                    await asyncio.sleep(0.01)
            with pytest.raises(ApiError) as err:
                await api.request("GET", "/late", timeout=0.2)
            assert (err.value.status, err.value.reason) == (0, "Timeout")
            gate.set()
            assert await busy == {"ok": True}
            assert await asyncio.gather(*(api.get(f"/after/{i}") for i in range(3))) == [{"ok": True}] * 3
        assert "/late" not in seen
    finally:
        await server.close()


async def test_a_call_cancelled_while_it_waits_for_a_connection_ends_cancelled_when_the_pool_closes_meanwhile() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        await asyncio.sleep(5)
        return web.json_response({"ok": True})

    server = await serve(handler)
    try:
        pool = http1.Http1Pool("127.0.0.1", server.port, None, 1)
        message = b"GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        busy = asyncio.create_task(pool.request("GET", message % b"busy", None))
        async with asyncio.timeout(5):
            while not seen:  # noqa: ASYNC110 - waiting for the server to hold the only connection
                await asyncio.sleep(0.01)
        waiting = asyncio.create_task(pool.request("GET", message % b"waiting", None))
        await asyncio.sleep(0.05)
        waiting.cancel()
        pool.close()  # drops the waiters, the cancelled one included, before its task runs again
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(OSError):
            await busy
    finally:
        await server.close()


async def test_a_cancelled_call_gives_its_connection_slot_back() -> None:
    server, gate, _ = await gated_server("/slow")
    try:
        async with ApiClient(f"http://127.0.0.1:{server.port}", max_connections=1) as api:
            slow = asyncio.create_task(api.get("/slow"))
            waiting = asyncio.create_task(api.get("/queued"))  # waits for the one connection
            await asyncio.sleep(0.05)
            waiting.cancel()
            slow.cancel()
            await asyncio.gather(slow, waiting, return_exceptions=True)
            assert await asyncio.wait_for(api.get("/next"), 5) == {"ok": True}
            gate.set()
    finally:
        await server.close()


# --- a raw server, for what aiohttp's server would not do on the wire --------------------------


async def raw_server(answer: Callable[[int, bytes], bytes | None], *, close_after: Callable[[int], bool] = lambda n: False,
                     closed: list[int] | None = None) -> tuple[asyncio.Server, int, list[bytes]]:
    """Reads one request head (and a Content-Length body) at a time; ``answer(n, request)`` gives the
    bytes to send for the n-th request overall (from 0), or None to close the connection unanswered;
    ``close_after(n)``: close the connection right after that answer (keep-alive as far as the client
    knows). ``closed`` gets a 1 for each connection the client closed."""
    seen: list[bytes] = []

    async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                seen.append(request)
                out = answer(len(seen) - 1, request)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if b"Connection: close" in out or close_after(len(seen) - 1):
                    break
        except asyncio.IncompleteReadError as e:
            if closed is not None and not e.partial:
                closed.append(1)
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def ok(body: bytes = b'{"ok": true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body), extra, body)


async def test_bodies_by_length_chunked_until_close_gzip_and_after_an_interim_answer() -> None:
    doc = json.dumps({"kind": "Pod", "items": list(range(50))}).encode()
    zipped = gzip.compress(doc)
    answers = [
        ok(doc),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
            b"%x\r\n%s\r\n" % (len(doc[i:i + 7]), doc[i:i + 7]) for i in range(0, len(doc), 7)) + b"0\r\n\r\n",
        ok(zipped, b"Content-Encoding: gzip\r\n"),
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok(doc),
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + doc,
    ]
    server, port, seen = await raw_server(lambda n, _: answers[n])
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            for _ in answers:
                assert await api.get("/api") == json.loads(doc)
        assert b"accept-encoding" not in seen[0].lower()  # gzip is decoded, never asked for
    finally:
        server.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    server, port, seen = await raw_server(lambda n, _: ok(), close_after=lambda n: True)
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            assert await api.get("/a") == {"ok": True}
            await asyncio.sleep(0.05)  # the server's close arrives while the connection is idle
            assert await api.create("/b", {"x": 1}) == {"ok": True}  # provably not sent on the old one
            await asyncio.sleep(0.05)
            assert await api.get("/c") == {"ok": True}
        assert len(seen) == 3
    finally:
        server.close()


async def test_idle_connections_close_the_burst_surplus_first_and_the_last_two_after_the_idle_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "SURPLUS_IDLE_TIMEOUT", 0.1)
    monkeypatch.setattr(http1, "IDLE_TIMEOUT", 1.0)
    closed: list[int] = []
    server, port, _ = await raw_server(lambda n, _: ok(), closed=closed)
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            await asyncio.gather(*(api.get("/a") for _ in range(5)))
            await asyncio.sleep(0.5)
            assert len(closed) == 3  # the three beyond the two kept
            await asyncio.sleep(1.0)
            assert len(closed) == 5  # the client hung up on all of them, not the server
            assert await api.get("/b") == {"ok": True}
    finally:
        server.close()


async def test_a_closed_connection_and_its_buffers_are_freed_without_the_garbage_collector(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each TLS connection holds ~250 kB of buffers; the agent's collector runs full collections
    # rarely, so a connection left in a reference cycle would hold them for minutes.
    monkeypatch.setattr(http1, "IDLE_TIMEOUT", 0.1)
    server, port, _ = await raw_server(lambda n, _: ok())
    gc.disable()
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            await asyncio.gather(*(api.get("/a") for _ in range(3)))
            pool = api._pool
            assert pool is not None
            conns = [weakref.ref(c) for c in pool._all]
            await asyncio.sleep(0.5)
            assert len(conns) == 3 and [c() for c in conns] == [None, None, None]
    finally:
        gc.enable()
        server.close()


async def test_a_reused_connection_closed_unanswered_retries_a_get_but_not_a_post() -> None:
    # Requests 1 and 3 find their (reused) connection closed by the server without an answer,
    # net/http's "server closed idle connection" race: the GET goes again on a new connection, the
    # POST (which the server may have acted on) is the caller's error.
    server, port, seen = await raw_server(lambda n, _: None if n in (1, 4) else ok())
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            assert await api.get("/first") == {"ok": True}
            assert await api.get("/again") == {"ok": True}
            assert [r.split(b" ")[1] for r in seen] == [b"/first", b"/again", b"/again"]
            assert await api.get("/third") == {"ok": True}
            with pytest.raises(ApiError) as err:
                await api.create("/post", {"x": 1})
            assert (err.value.status, err.value.reason) == (0, "ConnectionError")
            assert [r.split(b" ")[1] for r in seen][3:] == [b"/third", b"/post"]
            assert await api.get("/after") == {"ok": True}
    finally:
        server.close()


async def test_a_malformed_answer_is_a_connection_error() -> None:
    server, port, _ = await raw_server(lambda n, _: b"SPDY/9 banana\r\n\r\n")
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            with pytest.raises(ApiError) as err:
                await api.get("/api")
            assert (err.value.status, err.value.reason) == (0, "ConnectionError")
    finally:
        server.close()


async def test_an_error_status_without_a_status_body_keeps_its_text() -> None:
    server, port, _ = await raw_server(
        lambda n, _: b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\nbusy now")
    try:
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            with pytest.raises(ApiError) as err:
                await api.get("/api")
            assert (err.value.status, err.value.message) == (503, "busy now")
    finally:
        server.close()


# --- TLS ----------------------------------------------------------------------------------------


def _pki(tmp: Path) -> dict[str, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = {"ca": tmp / "ca.crt"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    def leaf(name: str, serial: int, server: bool) -> None:
        import ipaddress

        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
             .issuer_name(ca_name).public_key(key.public_key()).serial_number(serial)
             .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1)))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        out[name] = tmp / f"{name}.crt"
        out[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        out[name + ".key"] = tmp / f"{name}.key"
        out[name + ".key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))

    leaf("server", 2, True)
    leaf("old-client", 3, False)
    leaf("new-client", 4, False)
    return out


async def test_tls_with_a_client_certificate_and_its_reload(tmp_path: Path) -> None:
    pki = _pki(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki["ca"]))
    ctx.load_cert_chain(pki["server"], pki["server.key"])
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def who(request: web.Request) -> web.StreamResponse:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        cn = dict(x[0] for x in cert["subject"])["commonName"] if cert else ""
        return web.json_response({"cn": cn, "port": peer_port(request)})

    server = await serve(who, ctx)
    url = f"https://127.0.0.1:{server.port}"
    try:
        async with ApiClient(url, ca_file=str(pki["ca"]), cert_file=str(pki["old-client"]),
                             key_file=str(pki["old-client.key"])) as api:
            first = await api.get("/api")
            assert first["cn"] == "old-client"
            assert (await api.get("/api"))["port"] == first["port"]  # kept alive
            api.reload_client_certificate(str(pki["new-client"]), str(pki["new-client.key"]))
            after = await api.get("/api")
            assert after["cn"] == "new-client" and after["port"] != first["port"]
        async with ApiClient(url, ca_file=str(pki["ca"])) as api:  # no client certificate: refused
            with pytest.raises(ApiError) as err:
                await api.get("/api")
            assert err.value.status == 0
        async with ApiClient(url, cert_file=str(pki["old-client"]), key_file=str(pki["old-client.key"])) as api:
            with pytest.raises(ApiError) as err:  # the server's CA is not trusted by default
                await api.get("/api")
            assert err.value.reason == "ConnectionError"
        async with ApiClient(url, insecure_skip_verify=True, cert_file=str(pki["old-client"]),
                             key_file=str(pki["old-client.key"])) as api:
            assert (await api.get("/api"))["cn"] == "old-client"
    finally:
        await server.close()


async def test_watch_events_arrive_whole_however_the_stream_is_cut() -> None:
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}, "data": "x" * (i * 37)}} for i in range(40)]
    stream = b"".join(json.dumps(e).encode() + b"\n" + (b"\n" if i % 7 == 0 else b"") for i, e in enumerate(events))

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        cuts = [0, 5, 6, 300, 301, 2000, len(stream) - 3, len(stream)]  # one byte, mid-line, many lines at once
        for a, b in itertools.pairwise(cuts):
            await resp.write(stream[a:b])
            await asyncio.sleep(0.01)
        return resp

    server = await serve(handler)
    try:
        async with ApiClient(f"http://127.0.0.1:{server.port}") as api:
            got = [(t, o) async for t, o in api.watch("/api/v1/pods")]
        assert got == [(e["type"], e["object"]) for e in events]
    finally:
        await server.close()


async def test_one_client_answers_on_the_loops_of_two_threads_each_over_connections_of_its_own_loop(
        echo: tuple[str, list[int]]) -> None:
    url, _ = echo
    async with ApiClient(url, token="t") as api:
        assert (await api.get("/a"))["path"] == "/a"
        mine = api._pool
        assert mine is not None and mine.loop is asyncio.get_running_loop()

        def other_thread() -> tuple[str, bool]:
            async def call() -> tuple[str, bool]:
                got = await api.get("/b")
                pool = api._pool
                return got["path"], pool is not None and pool.loop is asyncio.get_running_loop()
            return asyncio.run(call())

        assert await asyncio.to_thread(other_thread) == ("/b", True)
        assert (await api.get("/c"))["path"] == "/c"  # this loop again: a pool of its own, not the other's
        pool = api._pool
        assert pool is not None and pool.loop is asyncio.get_running_loop()
