"""Static pods from staticPodURL: fetched, defaulted as static pods, replaced, kept on errors."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from pykubelet.agent.sources.http import HttpSource, url_pods
from pykubelet.agent.sources.podconfig import PodConfig
from pykubelet.agent.types import PodUpdate

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: busybox}]}\n"
POD_LIST = ('{"apiVersion": "v1", "kind": "PodList", "items": ['
            '{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},'
            '{"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}]}')


def test_a_pod_list_or_yaml_becomes_static_pods_of_the_http_source() -> None:
    pods = url_pods(POD_LIST, "http://x/pods", "node-1")
    assert [p["metadata"]["name"] for p in pods] == ["a-node-1", "b-node-1"]
    [p] = url_pods(POD, "http://x/pods", "node-1")
    assert p["metadata"]["annotations"]["kubernetes.io/config.source"] == "http"
    assert p["spec"]["nodeName"] == "node-1" and url_pods("", "http://x", "n") == []


async def test_the_url_is_polled_with_its_headers_and_errors_keep_the_pods() -> None:
    state: dict[str, Any] = {"status": 200, "body": POD, "headers": []}

    async def handler(request: web.Request) -> web.Response:
        state["headers"].append(request.headers.get("X-Token"))
        return web.Response(status=state["status"], text=state["body"])

    app = web.Application()
    app.router.add_get("/pods", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    config = PodConfig(updates)
    src = HttpSource(f"http://127.0.0.1:{port}/pods", "node-1", config, interval=0.05,
                     headers={"X-Token": ["t1"]})
    try:
        await src.sync_once()
        assert [p["metadata"]["name"] for p in config.pods("http")] == ["web-node-1"]
        assert state["headers"] == ["t1"]
        state["status"], state["body"] = 500, "boom"
        await src.sync_once()
        assert [p["metadata"]["name"] for p in config.pods("http")] == ["web-node-1"]
        state["status"], state["body"] = 200, POD_LIST
        src.start()
        for _ in range(100):
            if len(config.pods("http")) == 2:
                break
            await asyncio.sleep(0.02)
        assert sorted(p["metadata"]["name"] for p in config.pods("http")) == ["a-node-1", "b-node-1"]
    finally:
        await src.stop()
        await runner.cleanup()
