"""Integration tests of the kubelet HTTP API with a stub kubelet, a stub CRI runtime and a stub API.

Covers containerLogs (files written in CRI format), auth (401/403/allowed via TokenReview + SAR),
healthz, pods, node logs traversal, stats/metrics shape, and the real TLS listener with a client cert.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from cri_api.v1 import api_pb2 as pb

from pykubelet.agent.server import KubeletServer
from tests.builders import pod
from tests.fakes import FakeApi


class StubKubelet:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self._pods = pods
        self.sync_ok = True
        self.pleg_ok = True

    def pods(self) -> list[dict[str, Any]]:
        return self._pods

    def get_pod_by_name(self, ns: str, name: str) -> dict[str, Any] | None:
        for p in self._pods:
            if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name:
                return p
        return None

    def sync_loop_healthy(self) -> bool:
        return self.sync_ok

    def pleg_healthy(self) -> bool:
        return self.pleg_ok


class StubRuntime:
    def __init__(self) -> None:
        self.containers: list[pb.Container] = []
        self.statuses: dict[str, pb.ContainerStatus] = {}

    def add(self, cid: str, pod: str, container: str, restart: int, state: int, log_path: str,
            ns: str = "default", uid: str = "uid-1") -> None:
        labels = {"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod,
                  "io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": container}
        ann = {"io.kubernetes.container.restartCount": str(restart)}
        self.containers.append(pb.Container(id=cid, labels=labels, annotations=ann, state=state,
                                            metadata=pb.ContainerMetadata(name=container, attempt=restart),
                                            created_at=restart))
        self.statuses[cid] = pb.ContainerStatus(id=cid, state=state, log_path=log_path)

    async def list_containers(self, flt: pb.ContainerFilter | None = None) -> list[pb.Container]:
        sel = dict(flt.label_selector) if flt is not None else {}
        return [c for c in self.containers if all(dict(c.labels).get(k) == v for k, v in sel.items())]

    async def container_status(self, cid: str) -> pb.ContainerStatusResponse:
        return pb.ContainerStatusResponse(status=self.statuses[cid])

    async def list_pod_sandbox(self, flt: Any = None) -> list[pb.PodSandbox]:
        return []

    async def list_pod_sandbox_stats(self) -> list[pb.PodSandboxStats]:
        md = pb.PodSandboxMetadata(name="web", namespace="default", uid="uid-1")
        cstats = pb.ContainerStats(
            attributes=pb.ContainerAttributes(id="c1", metadata=pb.ContainerMetadata(name="main")),
            cpu=pb.CpuUsage(timestamp=10**18, usage_core_nano_seconds=pb.UInt64Value(value=5 * 10**9)),
            memory=pb.MemoryUsage(timestamp=10**18, working_set_bytes=pb.UInt64Value(value=1234)))
        linux = pb.LinuxPodSandboxStats(
            cpu=pb.CpuUsage(timestamp=10**18, usage_core_nano_seconds=pb.UInt64Value(value=6 * 10**9)),
            memory=pb.MemoryUsage(timestamp=10**18, working_set_bytes=pb.UInt64Value(value=2000)),
            containers=[cstats])
        return [pb.PodSandboxStats(attributes=pb.PodSandboxAttributes(id="s1", metadata=md), linux=linux)]

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        return pb.ImageFsInfoResponse(image_filesystems=[pb.FilesystemUsage(
            fs_id=pb.FilesystemIdentifier(mountpoint="/"), used_bytes=pb.UInt64Value(value=42))])


def review_api(authz: SimpleNamespace) -> FakeApi:
    """The API as the kubelet's webhook auth sees it: token "good" is alice (group devs); every
    SubjectAccessReview answers ``authz.allowed``."""
    api = FakeApi()
    api.react("create", "tokenreviews", lambda _v, _p, body: {"status": {
        "authenticated": body["spec"]["token"] == "good", "user": {"username": "alice", "groups": ["devs"]}}})
    api.react("create", "subjectaccessreviews", lambda _v, _p, _b: {"status": {"allowed": authz.allowed}})
    return api


def _config(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(
        authentication=SimpleNamespace(anonymous=SimpleNamespace(enabled=kw.get("anonymous", False)),
                                       webhook=SimpleNamespace(enabled=True),
                                       x509=SimpleNamespace(client_ca_file=kw.get("client_ca_file", ""))),
        authorization=SimpleNamespace(mode=kw.get("mode", "Webhook")),
        address="127.0.0.1", port=0, healthz_port=0, healthz_bind_address="127.0.0.1", read_only_port=0,
        tls_cert_file="", tls_private_key_file="", pod_logs_dir=kw.get("pod_logs_dir", "/var/log/pods"),
        container_log_max_size="10Mi", container_log_max_files=5,
        to_dict=lambda: {"port": 10250, "authentication": {"anonymous": {"enabled": False}}},
    )


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def _line(ts: str, stream: str, tag: str, msg: str) -> str:
    return f"{ts} {stream} {tag} {msg}\n"


@pytest.fixture
def env(tmp_path: Path) -> SimpleNamespace:
    kubelet = StubKubelet([pod("web", containers=["main", "side"], uid="uid-1")])
    runtime = StubRuntime()
    logdir = tmp_path / "pods" / "default_web_uid-1" / "main"
    logdir.mkdir(parents=True)
    (logdir / "0.log").write_text(_line("2026-01-01T00:00:01Z", "stdout", "F", "old-instance"))
    (logdir / "1.log").write_text(
        _line("2026-01-01T00:00:01Z", "stdout", "F", "first")
        + _line("2026-01-01T00:00:02Z", "stderr", "P", "par")
        + _line("2026-01-01T00:00:02Z", "stderr", "F", "tial")
        + _line("2026-01-01T00:00:03Z", "stdout", "F", "last"))
    runtime.add("c0", "web", "main", 0, pb.CONTAINER_EXITED, str(logdir / "0.log"))
    runtime.add("c1", "web", "main", 1, pb.CONTAINER_EXITED, str(logdir / "1.log"))
    authz = SimpleNamespace(allowed=True)
    api = review_api(authz)
    nodelogs = tmp_path / "varlog"
    nodelogs.mkdir()
    (nodelogs / "syslog").write_text("node says hi\n")
    (tmp_path / "secret").write_text("nope")
    opts = SimpleNamespace(config=_config(), node_name="n1", root_dir=tmp_path / "kubelet", node_ip="127.0.0.1")
    server = KubeletServer(pods=kubelet, runtime=runtime, options=opts, api=api, node_log_dir=str(nodelogs))
    return SimpleNamespace(kubelet=kubelet, runtime=runtime, api=api, authz=authz, server=server, logdir=logdir, tmp=tmp_path)


async def _client(app: aiohttp.web.Application) -> TestClient:
    c = TestClient(TestServer(app))
    await c.start_server()
    return c


AUTH = {"Authorization": "Bearer good"}


async def test_logs_basic_tail_previous_timestamps(env: SimpleNamespace) -> None:
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/containerLogs/default/web/main", headers=AUTH)
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        assert await r.text() == "first\npartial\nlast\n"
        r = await c.get("/containerLogs/default/web/main?tailLines=1&timestamps=true", headers=AUTH)
        assert await r.text() == "2026-01-01T00:00:03Z last\n"
        r = await c.get("/containerLogs/default/web/main?previous=true", headers=AUTH)
        assert await r.text() == "old-instance\n"
        r = await c.get("/containerLogs/default/web/main?sinceTime=2026-01-01T00:00:02Z&limitBytes=4", headers=AUTH)
        assert await r.text() == "part"
        r = await c.get("/containerLogs/default/web/main?tailLines=abc", headers=AUTH)
        assert r.status == 400 and (await r.json())["kind"] == "Status"
        r = await c.get("/containerLogs/default/nope/main", headers=AUTH)
        assert r.status == 404 and (await r.json())["reason"] == "NotFound"
        r = await c.get("/containerLogs/default/web/ghost", headers=AUTH)
        assert r.status == 404
        r = await c.get("/containerLogs/default/web/side", headers=AUTH)
        assert r.status == 400  # never started
    finally:
        await c.close()


async def test_logs_follow_ends_when_container_exits(env: SimpleNamespace) -> None:
    path = env.logdir / "2.log"
    path.write_text(_line("2026-01-01T00:00:05Z", "stdout", "F", "hello"))
    env.runtime.add("c2", "web", "main", 2, pb.CONTAINER_RUNNING, str(path))
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/containerLogs/default/web/main?follow=true", headers=AUTH)
        assert r.status == 200
        assert await r.content.readline() == b"hello\n"
        _append(path, _line("2026-01-01T00:00:06Z", "stdout", "F", "more"))
        assert await r.content.readline() == b"more\n"
        env.runtime.statuses["c2"].state = pb.CONTAINER_EXITED
        _append(path, _line("2026-01-01T00:00:07Z", "stdout", "F", "bye"))
        rest = await asyncio.wait_for(r.content.read(), 20)
        assert rest == b"bye\n"
    finally:
        await c.close()


async def test_auth_401_403_and_allowed(env: SimpleNamespace) -> None:
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/pods")
        assert r.status == 401
        r = await c.get("/pods", headers={"Authorization": "Bearer bad"})
        assert r.status == 401
        r = await c.get("/pods", headers=AUTH)
        assert r.status == 200
        body = await r.json()
        assert body["kind"] == "PodList" and body["items"][0]["metadata"]["name"] == "web"
        sar = [b for _v, p, b in env.api.calls if p.endswith("subjectaccessreviews")][-1]
        assert sar["spec"]["user"] == "alice"
        assert sar["spec"]["resourceAttributes"]["subresource"] == "proxy"
        assert sar["spec"]["resourceAttributes"]["name"] == "n1"
        env.authz.allowed = False
        r = await c.get("/metrics", headers=AUTH)
        assert r.status == 403
        assert "subresource=metrics" in await r.text()
        # decisions are cached: same request again does not ask the API
        n = len(env.api.calls)
        r = await c.get("/metrics", headers=AUTH)
        assert r.status == 403 and len(env.api.calls) == n
    finally:
        await c.close()


async def test_anonymous_when_enabled(env: SimpleNamespace) -> None:
    env.server.auth.anonymous_enabled = True
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/healthz")
        assert r.status == 200 and await r.text() == "ok"
        sar = [b for _v, p, b in env.api.calls if p.endswith("subjectaccessreviews")][-1]
        assert sar["spec"]["user"] == "system:anonymous"
    finally:
        await c.close()


async def test_healthz_port_checks(env: SimpleNamespace) -> None:
    c = await _client(env.server.build_healthz_app())
    try:
        r = await c.get("/healthz")
        assert r.status == 200 and await r.text() == "ok"
        env.kubelet.pleg_ok = False
        r = await c.get("/healthz")
        assert r.status == 500
        text = await r.text()
        assert "[-]pleg failed" in text and "[+]syncloop ok" in text
        r = await c.get("/healthz/syncloop")
        assert r.status == 200
    finally:
        await c.close()


async def test_node_logs_and_traversal(env: SimpleNamespace) -> None:
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/logs/", headers=AUTH)
        assert r.status == 200 and "syslog" in await r.text()
        sar = [b for _v, p, b in env.api.calls if p.endswith("subjectaccessreviews")][-1]
        assert sar["spec"]["resourceAttributes"]["subresource"] == "log"
        r = await c.get("/logs/syslog", headers=AUTH)
        assert await r.text() == "node says hi\n"
        r = await c.get("/logs/..%2Fsecret", headers=AUTH)
        assert r.status in (403, 404)
        r = await c.get("/logs/%2e%2e/secret", headers=AUTH)
        assert r.status in (403, 404)
        r = await c.get("/logs/missing", headers=AUTH)
        assert r.status == 404
    finally:
        await c.close()


async def test_stats_metrics_configz(env: SimpleNamespace) -> None:
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/stats/summary", headers=AUTH)
        s = await r.json()
        assert s["node"]["nodeName"] == "n1"
        assert "usageCoreNanoSeconds" in s["node"]["cpu"] and "workingSetBytes" in s["node"]["memory"]
        assert s["node"]["runtime"]["imageFs"]["usedBytes"] == 42
        pod = s["pods"][0]
        assert pod["podRef"] == {"name": "web", "namespace": "default", "uid": "uid-1"}
        assert pod["containers"][0]["name"] == "main"
        assert pod["containers"][0]["memory"]["workingSetBytes"] == 1234
        assert "ephemeral-storage" in pod
        r = await c.get("/metrics/resource", headers=AUTH)
        text = await r.text()
        assert 'container_cpu_usage_seconds_total{container="main",namespace="default",pod="web"} 5' in text
        assert 'pod_memory_working_set_bytes{namespace="default",pod="web"} 2000' in text
        assert "node_cpu_usage_seconds_total " in text and "node_memory_working_set_bytes " in text
        r = await c.get("/metrics/cadvisor", headers=AUTH)
        text = await r.text()
        assert 'container_memory_working_set_bytes{container="main"' in text and "machine_cpu_cores" in text
        r = await c.get("/metrics", headers=AUTH)
        assert r.status == 200
        r = await c.get("/metrics/probes", headers=AUTH)
        assert r.status == 200
        r = await c.get("/configz", headers=AUTH)
        assert (await r.json())["kubeletconfig"]["port"] == 10250
    finally:
        await c.close()


async def test_streaming_bad_requests(env: SimpleNamespace) -> None:
    c = await _client(env.server.build_main_app())
    try:
        r = await c.get("/exec/default/web/main?command=ls&output=1", headers=AUTH)
        assert r.status == 400  # not an upgrade
        r = await c.get("/exec/default/web/main?output=1", headers={**AUTH, "Connection": "Upgrade",
                                                                   "Upgrade": "SPDY/3.1"})
        assert r.status == 400
        r = await c.get("/exec/default/nope/main?command=ls&output=1",
                        headers={**AUTH, "Connection": "Upgrade", "Upgrade": "SPDY/3.1"})
        assert r.status == 404
        r = await c.get("/portForward/default/web?port=99999",
                        headers={**AUTH, "Connection": "Upgrade", "Upgrade": "SPDY/3.1"})
        assert r.status == 400
    finally:
        await c.close()


def _make_ca(tmp: Path) -> tuple[Path, Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    subj = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client")])
    cert = (x509.CertificateBuilder().subject_name(subj).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(2).not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))
    paths = tmp / "ca.crt", tmp / "client.crt", tmp / "client.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


async def test_tls_listener_with_client_cert(env: SimpleNamespace) -> None:
    ca, crt, key = _make_ca(env.tmp)
    env.server.config.authentication.x509.client_ca_file = str(ca)
    await env.server.start()
    try:
        port = env.server.ports["main"]
        assert (env.tmp / "kubelet" / "pki" / "kubelet.crt").exists()
        ctx = ssl.create_default_context(cafile=str(env.tmp / "kubelet" / "pki" / "kubelet.crt"))
        ctx.load_cert_chain(str(crt), str(key))
        async with aiohttp.ClientSession() as s:
            async with s.get(f"https://127.0.0.1:{port}/pods", ssl=ctx) as r:
                assert r.status == 200
            sar = [b for _v, p, b in env.api.calls if p.endswith("subjectaccessreviews")][-1]
            assert sar["spec"]["user"] == "kube-apiserver-kubelet-client"
            assert sar["spec"]["groups"] == ["system:masters"]
            noclient = ssl.create_default_context(cafile=str(env.tmp / "kubelet" / "pki" / "kubelet.crt"))
            async with s.get(f"https://127.0.0.1:{port}/pods", ssl=noclient) as r:
                assert r.status == 401
            # garbage on the TLS port does not kill the server
            _rd, wr = await asyncio.open_connection("127.0.0.1", port)
            wr.write(b"\x16\x03\x01garbage\r\n\r\n")
            await wr.drain()
            wr.close()
            async with s.get(f"https://127.0.0.1:{port}/healthz", ssl=ctx) as r:
                assert r.status == 200
    finally:
        await env.server.stop()
