"""exec / attach / port-forward bridging of the kubelet API against a REAL containerd 1.6.

A pod (busybox) is created directly through CRI with the agent's labels, then the KubeletServer (stub
kubelet, real CRIClient) is driven the way kubectl does through the API server proxy:
websocket v5 exec (stdout/stderr/exit code/stdin close), SPDY exec (transparent proxy to the runtime's
streaming server) and websocket-tunnelled SPDY port-forward.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from cri_api.v1 import api_pb2 as pb

from pykubelet.agent.server import KubeletServer
from pykubelet.common import spdy, wsstream
from pykubelet.cri import CRIClient
from pykubelet.up.containerd import PrivateContainerd
from pykubelet.up.images import BUSYBOX_PINNED_IMAGE

NS, POD = "default", "web"


class _Kubelet:
    def __init__(self, pod: dict[str, Any]) -> None:
        self.pod = pod

    def pods(self) -> list[dict[str, Any]]:
        return [self.pod]

    def get_pod_by_name(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.pod if (ns, name) == (NS, POD) else None

    def sync_loop_healthy(self) -> bool:
        return True

    def pleg_healthy(self) -> bool:
        return True


def _config() -> SimpleNamespace:
    return SimpleNamespace(
        authentication=SimpleNamespace(anonymous=SimpleNamespace(enabled=True), webhook=SimpleNamespace(enabled=False),
                                       x509=SimpleNamespace(client_ca_file="")),
        authorization=SimpleNamespace(mode="AlwaysAllow"), address="127.0.0.1", port=0, healthz_port=0,
        healthz_bind_address="127.0.0.1", read_only_port=0, tls_cert_file="", tls_private_key_file="",
        pod_logs_dir="/var/log/pods")


@pytest.fixture
async def stack(containerd: PrivateContainerd, tmp_path: Path) -> AsyncIterator[SimpleNamespace]:
    uid = uuid.uuid4().hex
    cri = CRIClient(containerd.endpoint)
    labels = {"io.kubernetes.pod.namespace": NS, "io.kubernetes.pod.name": POD, "io.kubernetes.pod.uid": uid}
    cfg = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=POD, namespace=NS, uid=uid), hostname=POD, labels=labels,
        log_directory=str(tmp_path / f"{NS}_{POD}_{uid}"),
        linux=pb.LinuxPodSandboxConfig(cgroup_parent=f"{containerd.cgroup_parent}/pod{uid}"))
    sid = await cri.run_pod_sandbox(cfg)
    try:
        cid = await cri.create_container(sid, pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="main"), image=pb.ImageSpec(image=BUSYBOX_PINNED_IMAGE),
            command=["sh", "-c", "mkdir -p /www && echo pf-ok > /www/index.html && exec httpd -f -p 8080 -h /www"],
            labels={**labels, "io.kubernetes.container.name": "main"},
            annotations={"io.kubernetes.container.restartCount": "0"}, log_path="main/0.log"), cfg)
        await cri.start_container(cid)
        pod = {"metadata": {"name": POD, "namespace": NS, "uid": uid},
               "spec": {"containers": [{"name": "main", "image": BUSYBOX_PINNED_IMAGE}]}}
        opts = SimpleNamespace(config=_config(), node_name="n1", node_ip="127.0.0.1", root_dir=tmp_path / "kubelet")
        server = KubeletServer(pods=_Kubelet(pod), runtime=cri, options=opts, api=None)
        await server.start()
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            yield SimpleNamespace(base=f"https://127.0.0.1:{server.ports['main']}", ssl=ctx, cri=cri)
        finally:
            await server.stop()
    finally:
        await cri.stop_pod_sandbox(sid)
        await cri.remove_pod_sandbox(sid)
        await cri.close()


async def _ws_exec(st: SimpleNamespace, query: str, stdin: bytes | None = None) -> tuple[bytes, bytes, dict[str, Any]]:
    out, err, status = b"", b"", {}
    async with aiohttp.ClientSession() as s, s.ws_connect(
            f"{st.base}/exec/{NS}/{POD}/main?{query}", ssl=st.ssl, protocols=(wsstream.V5,)) as ws:
        assert ws.protocol == wsstream.V5
        if stdin is not None:
            await ws.send_bytes(b"\x00" + stdin)
            await ws.send_bytes(b"\xff\x00")
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            ch, data = wsstream.decode(msg.data)
            if ch == 1:
                out += data
            elif ch == 2:
                err += data
            elif ch == 3:
                status = json.loads(data)
    return out, err, status


async def test_ws_v5_exec_output_and_exit_code(stack: SimpleNamespace) -> None:
    out, err, status = await _ws_exec(stack, "command=sh&command=-c&command=echo+hi%3B+echo+oops+>%262%3B+exit+3"
                                             "&output=1&error=1")
    assert out == b"hi\n" and err == b"oops\n"
    assert status["reason"] == "NonZeroExitCode" and wsstream.exit_code_of(status) == 3
    out, _, status = await _ws_exec(stack, "command=true&output=1")
    assert status["status"] == "Success"


async def test_ws_v5_exec_stdin_close(stack: SimpleNamespace) -> None:
    out, _, status = await _ws_exec(stack, "command=cat&input=1&output=1&error=1", stdin=b"piped data\n")
    assert out == b"piped data\n" and status["status"] == "Success"


async def _spdy_upgrade(st: SimpleNamespace, path: str, protocol: str) -> tuple[wsstream.UpgradeResponse, spdy.SpdySession]:
    up = await wsstream.open_upgrade(f"{st.base}{path}", method="POST", ssl_context=st.ssl, headers=[
        ("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"), (wsstream.STREAM_PROTOCOL_HEADER, protocol)])
    assert up.status == 101, up.status
    assert up.header(wsstream.STREAM_PROTOCOL_HEADER) == protocol
    return up, spdy.SpdySession(up.conn.read, up.conn.write, client=True)


async def test_spdy_exec_via_transparent_proxy(stack: SimpleNamespace) -> None:
    up, session = await _spdy_upgrade(stack, f"/exec/{NS}/{POD}/main?command=sh&command=-c&command=echo+spdy%3B+exit+2"
                                             "&output=1", wsstream.V4)
    runner = asyncio.create_task(session.run())
    try:
        err_s = await session.open_stream({"streamtype": ["error"]})
        out_s = await session.open_stream({"streamtype": ["stdout"]})
        out = b""
        while chunk := await asyncio.wait_for(out_s.read(), 30):
            out += chunk
        err = b""
        while chunk := await asyncio.wait_for(err_s.read(), 30):
            err += chunk
        assert out == b"spdy\n"
        assert wsstream.exit_code_of(json.loads(err)) == 2
    finally:
        await session.close()
        await up.conn.close()
        runner.cancel()


async def _http_get_via_portforward(session: spdy.SpdySession, request_id: int) -> bytes:
    hdr = {"port": ["8080"], "requestid": [str(request_id)]}
    err_s = await session.open_stream({"streamtype": ["error"], **hdr})
    await err_s.close()
    data_s = await session.open_stream({"streamtype": ["data"], **hdr})
    await data_s.write(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    body = b""
    while chunk := await asyncio.wait_for(data_s.read(), 30):
        body += chunk
    return body


async def test_port_forward_websocket_tunnel(stack: SimpleNamespace) -> None:
    async with aiohttp.ClientSession() as s, s.ws_connect(
            f"{stack.base}/portForward/{NS}/{POD}", ssl=stack.ssl,
            protocols=(wsstream.SPDY_PORT_FORWARD_TUNNEL,)) as ws:
        assert ws.protocol == wsstream.SPDY_PORT_FORWARD_TUNNEL

        async def read() -> bytes:
            msg = await ws.receive()
            return bytes(msg.data) if msg.type == aiohttp.WSMsgType.BINARY else b""

        async def write(data: bytes) -> None:
            await ws.send_bytes(data)

        session = spdy.SpdySession(read, write, client=True)
        runner = asyncio.create_task(session.run())
        try:
            for attempt in range(50):
                body = await _http_get_via_portforward(session, attempt)
                if b"pf-ok" in body:
                    break
                await asyncio.sleep(0.2)  # httpd may not listen yet
            assert b"200 OK" in body and b"pf-ok" in body
        finally:
            await session.close()
            runner.cancel()


async def test_port_forward_plain_spdy(stack: SimpleNamespace) -> None:
    up, session = await _spdy_upgrade(stack, f"/portForward/{NS}/{POD}", wsstream.PORT_FORWARD)
    runner = asyncio.create_task(session.run())
    try:
        for attempt in range(50):
            body = await _http_get_via_portforward(session, attempt)
            if b"pf-ok" in body:
                break
            await asyncio.sleep(0.2)
        assert b"pf-ok" in body
    finally:
        await session.close()
        await up.conn.close()
        runner.cancel()

