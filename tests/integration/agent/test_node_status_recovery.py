"""The node's status and Lease recover after the API server lost them (controller set Unknown,
API unreachable), against the dev API server and the fake CRI runtime."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.config import load_options
from pykubelet.agent.nodestatus import NodeStatusManager
from pykubelet.agent.nodestatus.lease import LeaseController
from pykubelet.agent.nodestatus.manager import heartbeat_timeout
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.cri import CRIClient

server_main = pytest.importorskip("pykubelet.server.main")
fakecri_server = pytest.importorskip("pykubelet.fakecri.server")


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
            yield {"admin": admin, "node_api": node_api, "runtime": runtime, "tmp": tmp_path}
        finally:
            await runtime.close()
            await node_api.close()
            await admin.close()
    await grpc_server.stop(0)


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


async def test_a_node_marked_unknown_meanwhile_gets_its_full_status_back(env: dict[str, Any]) -> None:
    opts = load_options(["--hostname-override", "node-1", "--node-ip", "198.18.0.10", "--root-dir", str(env["tmp"])])
    mgr = NodeStatusManager(options=opts, api=env["node_api"], runtime=env["runtime"])
    await mgr.register()
    assert await mgr.sync_once()
    admin: ApiClient = env["admin"]
    assert _ready(await admin.get("/api/v1/nodes/node-1"))["status"] == "True"
    # Nothing changed: no status is sent (the Lease is the heartbeat).
    assert not await mgr.sync_once()

    # While the agent could not reach the API server, the node lifecycle controller gave up on it.
    node = await admin.get("/api/v1/nodes/node-1")
    conds = [
        {**c, "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}
        for c in node["status"]["conditions"]
    ]
    await admin.patch("/api/v1/nodes/node-1/status", {"status": {"conditions": conds}})

    # The agent's own view never changed, yet the next update sends the whole status again.
    assert await mgr.sync_once()
    ready = _ready(await admin.get("/api/v1/nodes/node-1"))
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert not await mgr.sync_once()


class _FlakyApi:
    """Answers Lease calls after ``failures`` connection errors."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lease: dict[str, Any] | None = None
        self.timeouts: set[float | None] = set()

    async def request(self, method: str, path: str, *, body: Any = None,
                      timeout: float | None = None, **_: Any) -> dict[str, Any]:  # noqa: ASYNC109 - ApiClient's signature
        self.timeouts.add(timeout)
        if self.failures:
            self.failures -= 1
            raise ApiError(0, "Timeout", f"{method} {path}: timed out")
        if method == "GET":
            if self.lease is None:
                raise ApiError(404, "NotFound", "not found")
            return self.lease
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return self.lease


async def test_a_lease_that_renews_again_after_failures_asks_for_a_status_update() -> None:
    api = _FlakyApi(failures=3)
    recovered: list[int] = []
    lease = LeaseController(api, "node-1", renew_interval=0.05, request_timeout=7.0,  # type: ignore[arg-type]
                            on_recovered=lambda: recovered.append(lease.renewals))
    lease.start()
    try:
        for _ in range(1000):
            if lease.renewals >= 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await lease.stop()
    assert recovered == [1]  # once, at the first renewal after the failures
    assert api.timeouts == {7.0}


async def test_lease_renewals_come_on_whole_seconds_never_later_than_the_interval() -> None:
    api = _FlakyApi(failures=0)
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    three = asyncio.Event()
    answer = api.request

    async def timed(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method != "GET":
            starts.append(loop.time())
            if len(starts) == 3:
                three.set()
        return await answer(method, path, **kw)

    api.request = timed  # type: ignore[method-assign]
    lease = LeaseController(api, "node-1", renew_interval=1.0)  # type: ignore[arg-type]
    lease.start()
    try:
        await asyncio.wait_for(three.wait(), 5.0)
    finally:
        await lease.stop()
    # the first at once; then on the grid the PLEG relist wakes the loop on, at most 1 s apart
    assert all(b - a <= 1.0 + 0.05 for a, b in itertools.pairwise(starts))
    assert all(abs(t - round(t)) < 0.05 for t in starts[1:])


def test_heartbeat_calls_time_out_like_upstreams_heartbeat_client() -> None:
    assert heartbeat_timeout(10.0, 40) == 10.0
    assert heartbeat_timeout(60.0, 40) == 40.0
    assert heartbeat_timeout(1.0, 40) == 5.0  # floored: a busy machine is not an outage


def test_a_node_that_is_not_ready_is_rechecked_every_second() -> None:
    opts = load_options(["--hostname-override", "node-1", "--node-status-update-frequency", "10s"])
    mgr = NodeStatusManager(options=opts, api=None, runtime=None)  # type: ignore[arg-type]
    mgr.node = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert mgr.next_update_in() == 10.0
    mgr.node = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}}
    assert mgr.next_update_in() == 1.0
