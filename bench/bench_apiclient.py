"""Client CPU per unary API request (``ApiClient.request``), against a real ``pykubelet server``.

Why: at a 1,000-pod start the agent's API requests (a TokenRequest and a status PATCH per pod, ~3
event POSTs) were ~20 % of its CPU samples, nearly all in the client (docs/benchmarks-scale.md,
"Agent CPU per started pod"). The server runs as its own process, so this process's CPU time
(``time.process_time``) over a batch of requests is the client's cost: request building, TLS, HTTP,
JSON, the event loop's share. Wall times are printed for information only.

Scenarios (each ``--rounds`` times, the median reported; the loop is uvloop as in the agent, the
stdlib loop with ``PYKUBELET_EVENT_LOOP=asyncio``):

- ``get``: one pod GET at a time (keep-alive reuse of one connection);
- ``patch``: one status merge PATCH at a time (the agent's status manager);
- ``event``: one event POST at a time (the event recorder);
- ``burst``: ``--burst`` GETs and PATCHes at once through ``asyncio.gather`` (the pool's limit of
  connections, as at a start).

Usage: ``.venv/bin/python bench/bench_apiclient.py [--requests 2000] [--rounds 3] [--json out.json]``.
Old against new: run this file from each tree (it imports the ``src`` beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import log, save_json
from scale_common import ControlPlane

from pykubelet.common.aio import run
from pykubelet.common.apiclient import ApiClient

NS = "default"
POD = "bench-apiclient"


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS, "labels": {"app": "bench"}},
        "spec": {"nodeName": "bench-node", "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


def event(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{POD}.{i:08x}", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": POD, "namespace": NS, "apiVersion": "v1"},
        "reason": "Pulled",
        "message": 'Container image "busybox:1.36" already present on machine',
        "type": "Normal",
        "source": {"component": "kubelet", "host": "bench-node"},
        "count": 1,
    }


async def measure(n: int, batch: Callable[[int], Awaitable[None]]) -> tuple[float, float, float]:
    """µs of this process's CPU, of its system (kernel) part and of wall time per request over ``n``
    requests. The kernel part (socket calls, loopback TCP) is one no client can avoid."""
    t0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await batch(n)
    t1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime)
    return cpu / n * 1e6, (t1.ru_stime - t0.ru_stime) / n * 1e6, (w1 - w0) / n * 1e6


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-apiclient-"))
    cp = ControlPlane(tmp / "cp")
    results: dict[str, Any] = {"requests": args.requests, "burst": args.burst,
                               "loop": os.environ.get("PYKUBELET_EVENT_LOOP", "uvloop"),
                               "load_before": os.getloadavg()[0]}
    try:
        await cp.start()
        api = ApiClient.from_kubeconfig(cp.kubeconfig)
        await api.create(f"/api/v1/namespaces/{NS}/pods", pod())
        path = f"/api/v1/namespaces/{NS}/pods/{POD}"
        counter = iter(range(10**9))

        async def gets(n: int) -> None:
            for _ in range(n):
                await api.get(path)

        async def patches(n: int) -> None:
            for i in range(n):
                await api.patch(path + "/status", {"status": {"message": f"m{i}"}})

        async def events(n: int) -> None:
            for _ in range(n):
                await api.create(f"/api/v1/namespaces/{NS}/events", event(next(counter)))

        async def burst(n: int) -> None:
            for start in range(0, n, args.burst):
                size = min(args.burst, n - start)
                await asyncio.gather(*(
                    api.get(path) if i % 2 else api.patch(path + "/status", {"status": {"message": f"b{i}"}})
                    for i in range(size)))

        scenarios = {"get": gets, "patch": patches, "event": events, "burst": burst}
        await gets(50)  # warm up: connections, caches
        await burst(args.burst)
        per: dict[str, list[tuple[float, float, float]]] = {k: [] for k in scenarios}
        for _ in range(args.rounds):
            for name, fn in scenarios.items():
                per[name].append(await measure(args.requests, fn))
        for name, vals in per.items():
            cpu = statistics.median(v[0] for v in vals)
            system = statistics.median(v[1] for v in vals)
            wall = statistics.median(v[2] for v in vals)
            results[name] = {"cpu_us": round(cpu, 1), "sys_us": round(system, 1), "wall_us": round(wall, 1),
                             "cpu_us_rounds": [round(v[0], 1) for v in vals]}
            log(f"{name:6s}: {cpu:7.1f} µs client CPU per request ({system:5.1f} of it system; rounds "
                f"{[round(v[0], 1) for v in vals]}), {wall:7.1f} µs wall")
        await api.close()
    finally:
        await cp.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_after"] = os.getloadavg()[0]
    log(f"load average (1 min): {results['load_before']:.2f} -> {results['load_after']:.2f}")
    return results


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--json")
    a = p.parse_args()
    save_json(a.json, run(main(a)))
