"""Benchmark of the pykubelet dev API server (not a test).

Measures, against an in-process server on loopback HTTPS with the admin token:
pod creates/s (sequential and 16 concurrent clients), list latency with N pods (JSON and Table),
and watch delivery latency (create -> event received) with 100 concurrent watchers.
Baseline in the same run: a bare aiohttp HTTPS endpoint with the same certificate that decodes the
JSON body and answers 201 with it -- the floor of one request in this stack -- so the printed ratio
is what the API machinery (auth, defaulting, validation, SQLite, watch fan-out) costs on top.
Usage: .venv/bin/python bench/bench_apiserver.py [--pods 1000,10000] [--watchers 100]

``--per-request N``: the server's CPU per request, in process (issue 17). ``ApiHttp._dispatch`` is
called with mocked aiohttp requests (authentication, authorization, body parsing, registry, storage
and the response object; no sockets, no TLS), for each of N pods the writes a pod costs the control
plane in ``bench_hollow.py`` (admin token): create, ``pods/binding``, the scheduler's Event, the
kubelet's first status merge PATCH (Pending), three Events (Pulled, Created, Started) and the
Running status PATCH; a node with a ``spec.nodeName`` pod watch is open, as each kubelet's is.
Prints the median thread CPU of each request (after ``--warm`` pods) and the mean per pod.
Usage: ``.venv/bin/python bench/bench_apiserver.py --per-request 600 [--warm 100]``.
``--concurrency C``: C pods' request sequences at a time (their requests interleave, as a
kubelet's and the bench's do), printing the CPU per pod of the waves without the mocks' own CPU.
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


NODE = "bench-node"


def _status(phase: str, n: int, started: str) -> dict[str, Any]:
    """The kubelet's status merge PATCH body (``status/manager.py`` sends the whole status)."""
    running = phase == "Running"
    cond = "True" if running else "False"
    conds = [{"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": started}
             for t, s in (("PodReadyToStartContainers", cond), ("Initialized", "True"), ("Ready", cond),
                          ("ContainersReady", cond), ("PodScheduled", "True"))]
    state: dict[str, Any] = ({"running": {"startedAt": started}} if running
                             else {"waiting": {"reason": "ContainerCreating"}})
    cs = {"name": "c", "state": state, "lastState": {}, "ready": running, "restartCount": 0,
          "image": "docker.io/library/busybox:latest", "imageID": "", "started": running,
          "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True, "recursiveReadOnly": "Disabled"}]}
    if running:
        cs["imageID"] = "docker.io/library/busybox@sha256:" + "ab" * 32
        cs["containerID"] = f"containerd://{n:064x}"
    st: dict[str, Any] = {"phase": phase, "conditions": conds, "hostIP": "10.0.0.1",
                          "hostIPs": [{"ip": "10.0.0.1"}], "startTime": started,
                          "containerStatuses": [cs], "qosClass": "BestEffort"}
    if running:
        ip = f"10.244.{n // 250 % 250}.{n % 250 + 2}"
        st["podIP"] = ip
        st["podIPs"] = [{"ip": ip}]
    return st


def _event(pod_name: str, uid: str, n: int, reason: str, source: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod_name}.{n:x}{reason.lower()}", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod_name, "uid": uid,
                               "apiVersion": "v1", "fieldPath": "spec.containers{c}"},
            "reason": reason, "message": f"{reason} container c", "type": "Normal",
            "source": {"component": source, "host": NODE}, "firstTimestamp": "2026-12-01T00:00:00Z",
            "lastTimestamp": "2026-12-01T00:00:00Z", "count": 1, "reportingComponent": source,
            "reportingInstance": NODE}


async def per_request(pods: int, warm: int, concurrency: int = 1) -> None:
    """See the module docstring (``--per-request``, ``--concurrency``)."""
    from aiohttp.test_utils import make_mocked_request

    with tempfile.TemporaryDirectory() as d:
        async with run_server(Path(d), port=0, controllers=False) as srv:
            http = srv.http
            auth = {"Authorization": f"Bearer {srv.admin_token}", "User-Agent": "bench/v1"}
            mock_cpu = [0.0]  # thread CPU spent making the mocked requests (not the server's)

            async def call(method: str, path: str, body: dict[str, Any], ct: str = "application/json") -> float:
                raw = json.dumps(body).encode()
                m = time.thread_time()
                req = make_mocked_request(method, path, headers={**auth, "Content-Type": ct})
                req._read_bytes = raw  # what request.read() returns
                t = time.thread_time()
                mock_cpu[0] += t - m
                resp = await http._errors(req, http._dispatch)
                took = time.thread_time() - t
                assert resp.status < 300, (method, path, resp.status, getattr(resp, "body", b"")[:300])
                return took

            await call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
            watch = srv.store.watch("pods", None, srv.store.revision, index=("spec.nodeName", NODE))
            times: dict[str, list[float]] = {}
            base = "/api/v1/namespaces/default/pods"

            async def one_pod(n: int) -> list[tuple[str, float]]:
                name = f"p{n}"
                got: list[tuple[str, float]] = []
                spec = {"containers": [{"name": "c", "image": "busybox", "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"}}}], "schedulerName": "default-scheduler"}
                got.append(("create", await call("POST", base, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": name, "labels": {"app": "bench"}}, "spec": spec})))
                uid = srv.store.peek("pods", "default", name)["metadata"]["uid"]  # type: ignore[index]
                got.append(("binding", await call("POST", f"{base}/{name}/binding", {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})))
                got.append(("event", await call("POST", "/api/v1/namespaces/default/events",
                                                _event(name, uid, n, "Scheduled", "default-scheduler"))))
                started = "2026-12-01T00:00:01Z"
                got.append(("status PATCH", await call("PATCH", f"{base}/{name}/status", {
                    "metadata": {"uid": uid}, "status": _status("Pending", n, started)},
                    "application/merge-patch+json")))
                for reason in ("Pulled", "Created", "Started"):
                    got.append(("event", await call("POST", "/api/v1/namespaces/default/events",
                                                    _event(name, uid, n, reason, "kubelet"))))
                got.append(("status PATCH", await call("PATCH", f"{base}/{name}/status", {
                    "metadata": {"uid": uid}, "status": _status("Running", n, started)},
                    "application/merge-patch+json")))
                return got

            wave_cpu: list[float] = []
            for first in range(0, warm + pods, concurrency):
                wave = range(first, min(first + concurrency, warm + pods))
                mock_cpu[0] = 0.0
                t0 = time.thread_time()
                results = await asyncio.gather(*(one_pod(n) for n in wave))
                while not watch.queue.empty():
                    ev = watch.queue.get_nowait()
                    if ev is not None:
                        ev.encoded()  # what the node's watch sends
                if first >= warm:
                    wave_cpu.append(time.thread_time() - t0 - mock_cpu[0])
                    for got in results:
                        for k, v in got:
                            times.setdefault(k, []).append(v)
                        times.setdefault("pod", []).append(sum(v for _, v in got))
            if concurrency == 1:
                for k, v in times.items():
                    if k == "pod":
                        continue
                    print(f"{k:>14}: median {statistics.median(v) * 1e6:7.1f} us ({len(v)} requests)")
                print(f"mean CPU per pod ({len(times['pod'])} pods, 8 requests): "
                      f"{statistics.fmean(times['pod']) * 1e3:.3f} ms")
            else:  # requests interleave: the waves' CPU without the mocks, per pod
                print(f"CPU per pod, {concurrency} pods at a time ({len(times['pod'])} pods, 8 requests each, "
                      f"mocked requests' own CPU excluded): {sum(wave_cpu) / len(times['pod']) * 1e3:.3f} ms")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pods", default="1000,10000")
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument("--per-request", type=int, default=0, metavar="N")
    p.add_argument("--warm", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=1, metavar="C")
    a = p.parse_args()
    if a.per_request:
        asyncio.run(per_request(a.per_request, a.warm, a.concurrency))
        return
    asyncio.run(bench([int(x) for x in a.pods.split(",")], a.watchers))


if __name__ == "__main__":
    main()
