"""Benchmark of the pykubelet dev API server (not a test).

Measures, against an in-process server on loopback HTTPS with the admin token:
pod creates/s (sequential and 16 concurrent clients), list latency with N pods (JSON and Table),
and watch delivery latency (create -> event received) with 100 concurrent watchers.
Baseline in the same run: a bare aiohttp HTTPS endpoint with the same certificate that decodes the
JSON body and answers 201 with it -- the floor of one request in this stack -- so the printed ratio
is what the API machinery (auth, defaulting, validation, SQLite, watch fan-out) costs on top.
Usage: .venv/bin/python bench/bench_apiserver.py [--pods 1000,10000] [--watchers 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from pykubelet.server.main import run_server


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "bench"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def bench(pod_counts: list[int], watchers: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        async with run_server(Path(d), port=0, controllers=False) as srv:
            ctx = ssl.create_default_context(cafile=str(srv.ca_file))
            hdr = {"Authorization": f"Bearer {srv.admin_token}", "Content-Type": "application/json"}
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=200),
                                             headers=hdr) as s:
                url = srv.url + "/api/v1/namespaces/default/pods"
                made = 0

                async def create(n: int) -> None:
                    async with s.post(url, data=json.dumps(pod(f"p{n}"))) as r:
                        assert r.status == 201, await r.text()

                floor_url = await start_floor_server(srv.data_dir / "pki")

                async def floor(n: int) -> None:
                    async with s.post(floor_url, data=json.dumps(pod(f"p{n}"))) as r:
                        assert r.status == 201

                t = time.perf_counter()
                for i in range(500):
                    await floor(i)
                base = 500 / (time.perf_counter() - t)
                t = time.perf_counter()
                for _ in range(500):
                    await create(made)
                    made += 1
                seq = 500 / (time.perf_counter() - t)
                print(f"baseline: bare HTTPS JSON POST/s (sequential): {base:.0f}")
                print(f"pod creates/s (sequential): {seq:.0f}  ({seq / base:.2f}x the baseline)")
                for target in pod_counts:
                    t = time.perf_counter()
                    n0 = made
                    while made < target:
                        batch = [create(made + i) for i in range(min(16, target - made))]
                        made += len(batch)
                        await asyncio.gather(*batch)
                    if made > n0:
                        print(f"pod creates/s (16 concurrent, up to {target}): {(made - n0) / (time.perf_counter() - t):.0f}")
                    for label, accept in (("JSON", "application/json"),
                                          ("Table", "application/json;as=Table;v=v1;g=meta.k8s.io")):
                        lat = []
                        for _ in range(5):
                            t = time.perf_counter()
                            async with s.get(srv.url + "/api/v1/pods", headers={"Accept": accept}) as r:
                                await r.read()
                            lat.append(time.perf_counter() - t)
                        print(f"list {target} pods ({label}): median {statistics.median(lat) * 1000:.1f} ms")
                # watch delivery latency
                async with s.get(url, params={"limit": "1"}) as r:
                    rv = (await r.json())["metadata"]["resourceVersion"]
                received: dict[str, list[float]] = {}
                ready = asyncio.Event()
                started = 0

                async def watch() -> None:
                    nonlocal started
                    async with s.get(url, params={"watch": "true", "resourceVersion": rv,
                                                  "timeoutSeconds": "30"}) as r:
                        started += 1
                        if started == watchers:
                            ready.set()
                        async for line in r.content:
                            ev = json.loads(line)
                            name = ev["object"]["metadata"]["name"]
                            received.setdefault(name, []).append(time.perf_counter())
                            if name == "wlast":
                                return

                tasks = [asyncio.create_task(watch()) for _ in range(watchers)]
                await asyncio.wait_for(ready.wait(), 30)
                sent: dict[str, float] = {}
                for i in range(20):
                    name = f"w{i}" if i < 19 else "wlast"
                    sent[name] = time.perf_counter()
                    await s.post(url, data=json.dumps(pod(name)))
                    await asyncio.sleep(0.05)
                await asyncio.wait_for(asyncio.gather(*tasks), 60)
                lats = [r - sent[n] for n, rs in received.items() if n in sent for r in rs]
                lats.sort()
                print(f"watch delivery with {watchers} watchers: {len(lats)} events, "
                      f"p50 {lats[len(lats) // 2] * 1000:.1f} ms, p99 {lats[int(len(lats) * 0.99)] * 1000:.1f} ms")


async def start_floor_server(pki_dir: Path) -> str:
    """The baseline endpoint: TLS with the API server's own certificate, JSON in, JSON out."""

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(await request.json(), status=201)

    app = web.Application()
    app.router.add_post("/floor", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki_dir / "apiserver.crt", pki_dir / "apiserver.key")
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"https://127.0.0.1:{port}/floor"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pods", default="1000,10000")
    p.add_argument("--watchers", type=int, default=100)
    a = p.parse_args()
    asyncio.run(bench([int(x) for x in a.pods.split(",")], a.watchers))


if __name__ == "__main__":
    main()
