"""ApiClient against a tiny aiohttp stub: kubeconfig reading, Status errors, watch lines and 410."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from pykubelet.common.apiclient import ApiClient, ApiError


async def handler(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Authorization") != "Bearer t0k":
        return web.json_response({"kind": "Status", "reason": "Unauthorized", "message": "no", "code": 401}, status=401)
    if request.query.get("watch") == "true":
        resp = web.StreamResponse()
        await resp.prepare(request)
        for ev in ({"type": "ADDED", "object": {"metadata": {"name": "a"}}},
                   {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}):
            await resp.write(json.dumps(ev).encode() + b"\n")
        return resp
    if request.path.endswith("/missing"):
        return web.json_response({"kind": "Status", "reason": "NotFound", "message": 'pods "missing" not found', "code": 404}, status=404)
    body = await request.text()
    return web.json_response({"method": request.method, "ct": request.content_type, "body": body, "q": dict(request.query)})


@pytest.fixture
async def stub():
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


def write_kubeconfig(tmp_path: Path, server: str, token: str) -> Path:
    tok = tmp_path / "token"
    tok.write_text(token + "\n")
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def test_verbs_and_errors(stub: str, tmp_path: Path) -> None:
    async with ApiClient.from_kubeconfig(write_kubeconfig(tmp_path, stub, "t0k")) as api:
        got = await api.patch("/api/v1/x", {"a": 1}, patch_type="strategic", params={"force": True})
        assert got["method"] == "PATCH"
        assert got["ct"] == "application/strategic-merge-patch+json"
        assert got["q"] == {"force": "true"}
        with pytest.raises(ApiError) as err:
            await api.get("/api/v1/namespaces/default/pods/missing")
        assert err.value.status == 404 and err.value.reason == "NotFound"


async def test_unauthorized_and_watch_expired(stub: str) -> None:
    async with ApiClient(stub, token="bad") as api:
        with pytest.raises(ApiError) as err:
            await api.get("/api")
        assert err.value.status == 401
    async with ApiClient(stub, token="t0k") as api:
        seen = []
        with pytest.raises(ApiError) as err:
            async for etype, obj in api.watch("/api/v1/pods", resource_version="5"):
                seen.append((etype, obj["metadata"]["name"]))
        assert seen == [("ADDED", "a")]
        assert err.value.status == 410


async def test_connection_error_is_api_error() -> None:
    async with ApiClient("http://127.0.0.1:9", token="x") as api:
        with pytest.raises(ApiError) as err:
            await api.get("/api")
        assert err.value.status == 0


def test_inline_cert_data(tmp_path: Path) -> None:
    # A kubeconfig with inline CA data must load (and not leave temp files behind).
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cfg = {
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1",
                                               "certificate-authority-data": base64.b64encode(pem).decode()}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(cfg))
    api = ApiClient.from_kubeconfig(path)
    assert api.server == "https://127.0.0.1:1"


async def test_open_watches_do_not_hold_up_requests_when_the_request_pool_is_full() -> None:
    release = asyncio.Event()

    async def slow_watch(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"ok": True})
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode() + b"\n")
        await release.wait()
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", slow_watch)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with ApiClient(f"http://127.0.0.1:{server.port}", max_connections=1) as api:
            watches = [api.watch("/api/v1/pods").__aiter__() for _ in range(2)]
            for w in watches:  # two watches streaming at once, more than the request pool's one connection
                assert (await asyncio.wait_for(w.__anext__(), 5))[0] == "ADDED"
            assert await asyncio.wait_for(api.get("/api/v1/nodes/n1"), 5) == {"ok": True}
            release.set()
            for w in watches:
                await w.aclose()  # type: ignore[attr-defined]
    finally:
        await server.close()
