"""The whole agent (main.run_agent) against the dev API server and the fake CRI runtime."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pykubelet.agent.config import load_options
from pykubelet.agent.main import run_agent
from pykubelet.common.apiclient import ApiClient, ApiError
from tests.fakes import free_port

server_main = pytest.importorskip("pykubelet.server.main")
fakecri_server = pytest.importorskip("pykubelet.fakecri.server")


async def test_agent_registers_and_runs_static_pod(tmp_path: Path) -> None:
    sock = str(tmp_path / "cri.sock")
    grpc_server, _rt = await fakecri_server.serve(sock)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "web.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: busybox:1}]}\n"
    )
    try:
        async with server_main.run_server(tmp_path / "data", controllers=False) as srv:
            opts = load_options([
                "--kubeconfig", str(srv.node_kubeconfig("node-1")),
                "--hostname-override", "node-1", "--node-ip", "127.0.0.1",
                "--container-runtime-endpoint", f"unix://{sock}",
                "--root-dir", str(tmp_path / "root"), "--pod-logs-dir", str(tmp_path / "logs"),
                "--pod-manifest-path", str(manifests), "--cgroups-per-qos=false",
                "--port", str(free_port()), "--healthz-port", str(free_port()), "--address", "127.0.0.1",
            ])
            stop = asyncio.Event()
            agent = asyncio.create_task(run_agent(opts, stop))
            admin = ApiClient(srv.url, token=srv.admin_token, ca_file=str(srv.ca_file))
            try:
                async with asyncio.timeout(30):  # bounds a hang only
                    while True:
                        assert not agent.done(), agent.result()
                        try:
                            await admin.get("/api/v1/nodes/node-1")
                            await admin.get("/api/v1/namespaces/default/pods/web-node-1")
                            break
                        except ApiError:
                            await asyncio.sleep(0.1)
                mirror = await admin.get("/api/v1/namespaces/default/pods/web-node-1")
                assert "kubernetes.io/config.mirror" in mirror["metadata"]["annotations"]
            finally:
                stop.set()
                code = await asyncio.wait_for(agent, 30)
                await admin.close()
            assert code == 0
    finally:
        await grpc_server.stop(0)
