"""Node registration, status, lease renewal and mirror pods against the dev API server + fake CRI."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.config import load_options
from pykubelet.agent.nodestatus import NodeStatusManager
from pykubelet.agent.sources.file import manifest_pods
from pykubelet.agent.sources.mirror import MirrorClient
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.cri import CRIClient
from tests.fakes import FakeEventRecorder

server_main = pytest.importorskip("pykubelet.server.main")
fakecri_server = pytest.importorskip("pykubelet.fakecri.server")


async def eventually(check: Callable[[], Awaitable[bool]], limit: float = 15.0) -> None:
    """Poll ``check`` until true; ``limit`` only bounds a hang, it is not a timing assertion."""
    async with asyncio.timeout(limit):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    sock = str(tmp_path / "cri.sock")
    grpc_server, _rt = await fakecri_server.serve(sock)
    async with server_main.run_server(tmp_path / "data", controllers=False) as srv:
        admin = ApiClient(srv.url, token=srv.admin_token, ca_file=str(srv.ca_file))
        node_api = ApiClient.from_kubeconfig(srv.node_kubeconfig("node-1"))
        runtime = CRIClient(f"unix://{sock}")
        await runtime.connect(wait=5)
        try:
            yield {"srv": srv, "admin": admin, "node_api": node_api, "runtime": runtime, "tmp": tmp_path}
        finally:
            await runtime.close()
            await node_api.close()
            await admin.close()
    await grpc_server.stop(0)


async def test_register_status_lease_and_reregister(env: dict[str, Any]) -> None:
    opts = load_options([
        "--hostname-override", "node-1", "--node-ip", "198.18.0.10", "--root-dir", str(env["tmp"]),
        "--node-labels", "role=edge", "--register-with-taints", "dedicated=infra:NoSchedule",
    ])
    rec = FakeEventRecorder()
    mgr = NodeStatusManager(options=opts, api=env["node_api"], runtime=env["runtime"], recorder=rec)
    mgr.lease.renew_interval = 0.2
    await mgr.start()
    try:
        admin: ApiClient = env["admin"]

        async def ready() -> bool:
            try:
                node = await admin.get("/api/v1/nodes/node-1")
            except ApiError:
                return False
            conds = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
            return conds.get("Ready", {}).get("status") == "True"

        await eventually(ready)
        node = await admin.get("/api/v1/nodes/node-1")
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == "node-1" and labels["role"] == "edge"
        assert node["spec"]["taints"] == [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
        st = node["status"]
        assert st["capacity"]["pods"] == "110" and "cpu" in st["allocatable"]
        assert {"type": "InternalIP", "address": "198.18.0.10"} in st["addresses"]
        assert "://" in st["nodeInfo"]["containerRuntimeVersion"]
        assert st["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
        assert "Starting" in rec.reasons and "NodeReady" in rec.reasons

        lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1"
        await eventually(lambda: _lease_renewed(admin, lease_path, 3))
        lease = await admin.get(lease_path)
        assert lease["spec"]["holderIdentity"] == "node-1"
        assert lease["spec"]["leaseDurationSeconds"] == 40
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    finally:
        await mgr.stop()

    # An agent restart finds the node registered already (409) and reconciles default labels.
    await admin.patch("/api/v1/nodes/node-1", {"metadata": {"labels": {"kubernetes.io/os": "plan9"}}})
    mgr2 = NodeStatusManager(options=opts, api=env["node_api"], runtime=env["runtime"])
    assert await mgr2.try_register()
    node = await admin.get("/api/v1/nodes/node-1")
    assert node["metadata"]["labels"]["kubernetes.io/os"] == "linux"


async def _lease_renewed(api: ApiClient, path: str, times: int) -> bool:
    try:
        lease = await api.get(path)
    except ApiError:
        return False
    seen = _lease_renewed.__dict__.setdefault(path, set())
    seen.add(lease["spec"].get("renewTime"))
    return len(seen) >= times


async def test_mirror_pod_lifecycle(env: dict[str, Any]) -> None:
    opts = load_options(["--hostname-override", "node-1", "--node-ip", "198.18.0.10", "--root-dir", str(env["tmp"])])
    mgr = NodeStatusManager(options=opts, api=env["node_api"], runtime=env["runtime"])
    await mgr.register()
    admin: ApiClient = env["admin"]
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: busybox:1}]}\n"
    [static] = manifest_pods(text, "/m/web.yaml", "node-1")
    mirror = MirrorClient(env["node_api"])
    created = await mirror.ensure_mirror(static)
    assert created is not None
    got = await admin.get("/api/v1/namespaces/default/pods/web-node-1")
    ann = got["metadata"]["annotations"]
    assert ann["kubernetes.io/config.mirror"] == static["metadata"]["uid"]
    assert got["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert got["spec"]["nodeName"] == "node-1"
    # same hash: kept as is
    again = await mirror.ensure_mirror(static)
    assert again is not None and again["metadata"]["uid"] == got["metadata"]["uid"]
    # edited manifest: replaced
    [edited] = manifest_pods(text.replace("busybox:1", "busybox:2"), "/m/web.yaml", "node-1")
    replaced = await mirror.ensure_mirror(edited)
    assert replaced is not None and replaced["metadata"]["uid"] != got["metadata"]["uid"]
    assert replaced["metadata"]["annotations"]["kubernetes.io/config.mirror"] == edited["metadata"]["uid"]
    assert await mirror.delete_mirror("default", "web-node-1")

    async def gone() -> bool:
        try:
            await admin.get("/api/v1/namespaces/default/pods/web-node-1")
            return False
        except ApiError as e:
            return e.status == 404

    await eventually(gone)
