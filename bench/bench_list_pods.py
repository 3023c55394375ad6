"""Scale benchmark 5: list 10,000 pods from the API server, as JSON and as a Table (kubectl get).

``pykubelet server`` runs as its own process (so the client's work is not counted as the server's);
``--pods`` benchmark pods are created through the API (32 requests in flight), then each list is
timed ``--runs`` times (median, from the request until the last byte was read) by one aiohttp client:

* ``GET /api/v1/pods`` with ``Accept: application/json`` (a client or controller's full list);
* the same with ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` (what ``kubectl get pods
  -A`` asks for, here without ``limit``);
* kubectl's real pattern: Table pages of ``limit=500`` following ``continue`` (wall and server CPU,
  as a ratio to the unpaged Table list: a page should cost O(page), so the pages together about one list).

Baselines, same run, same machine: a bare aiohttp HTTPS server (its own process, the API server's
certificate) answering with the **already encoded** JSON list body that the API server returned —
the cost of moving those bytes over TLS to this client, the floor of any list — and, for
information, ``json.dumps`` of that list in this process (the cost of encoding it once in Python).
Also the server's mean CPU time per list (utime+stime) against the floor server's per request:
on a shared machine these move less than wall times.  The pods name a scheduler that does not
exist, so they stay Pending without the default scheduler retrying them during the timed lists.
Goal: ≤ 200 ms for 10,000 pods, JSON and Table.

Usage: ``.venv/bin/python bench/bench_list_pods.py [--pods 10000] [--runs 5] [--json out.json]``;
``--pods 1000`` is a smoke run.  ``--in-process`` measures only the server's list building (CPU ms
per list in this process, no HTTP/TLS): the figure to compare code with on a loaded machine. Internally ``--serve-floor FILE PORT CERT KEY`` runs the floor server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import ssl
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import _port_open, cpu_seconds, free_port, log, pod_manifest, save_json
from scale_common import (
    ControlPlane,
    print_profile,
    spawn,
    start_py_spy,
    stop_process,
    stop_py_spy,
    summarize_profile,
)

TARGET_MS = 200.0
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
CONCURRENCY = 32


async def timed_get(session: aiohttp.ClientSession, url: str, accept: str) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    async with session.get(url, headers={"Accept": accept}) as r:
        body = await r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {url}: {r.status} {body[:300]!r}")
    return time.perf_counter() - t0, body


async def paged_table(session: aiohttp.ClientSession, base: str) -> tuple[float, int]:
    """kubectl's pattern: Table pages of 500 following ``continue``; (seconds, rows)."""
    t0 = time.perf_counter()
    cont, rows = "", 0
    while True:
        url = f"{base}/api/v1/pods?limit=500" + (f"&continue={cont}" if cont else "")
        async with session.get(url, headers={"Accept": TABLE}) as r:
            page = await r.json()
        rows += len(page.get("rows", []))
        cont = (page.get("metadata") or {}).get("continue", "")
        if not cont:
            return time.perf_counter() - t0, rows


async def median_of(runs: int, fn: Any, pid: int | None = None) -> tuple[float, Any]:
    """Median wall seconds of ``runs`` calls; with ``pid``, also that process's CPU seconds per
    call (utime+stime over all the calls / ``runs``: less moved by other load on the machine than
    wall time, and finer than one call's 10 ms clock ticks)."""
    times, last = [], None
    c0 = cpu_seconds(pid) if pid else 0.0
    for _ in range(runs):
        t, last = await fn()
        times.append(t)
    if pid:
        CPU[pid] = (cpu_seconds(pid) - c0) / runs
    return statistics.median(times), last


CPU: dict[int, float] = {}  # pid -> mean CPU seconds per call of the last median_of(pid=...)


def in_process(pods: int, runs: int) -> dict[str, float]:
    """The server's own work per list, without HTTP and TLS: median CPU milliseconds (process
    time) of building the JSON and Table bodies of ``pods`` pods in this process.  Stable on a
    shared machine, where the HTTP figures move with the load; run it against another tree with
    ``PYTHONPATH=<tree>/src`` to compare code."""
    import datetime as dt

    from pykubelet.server.auth import UserInfo
    from pykubelet.server.main import run_server
    from pykubelet.server.registry import RequestContext
    from pykubelet.server.resources import BY_GVR

    async def go() -> dict[str, float]:
        with tempfile.TemporaryDirectory(prefix="pkl-", dir="/tmp") as d:
            async with run_server(d, port=0, controllers=False) as srv:
                reg, ri = srv.registry, BY_GVR[("", "v1", "pods")]
                ctx = RequestContext(UserInfo("admin", "", ["system:masters"]))
                for i in range(pods):
                    pod = pod_manifest(f"list-{i:05d}")
                    pod["spec"]["schedulerName"] = "pkbench-nobody"
                    await reg.create(ri, "default", pod, ctx)

                def as_json() -> bytes:
                    if hasattr(reg, "list_json"):
                        return bytes(reg.list_json(ri, None, None, None, None, None))
                    items, rev, _c, _r = reg.list_encoded(ri, None, None, None, None, None)  # older trees
                    head = json.dumps({"kind": ri.list_kind, "apiVersion": ri.api_version,
                                       "metadata": {"resourceVersion": str(rev)}}).encode()
                    return b"".join((head[:-1], b',"items":[', b",".join(items), b"]}"))

                def as_table(limit: int | None = None) -> int:
                    cont, n = None, 0
                    while True:
                        items, rev, cont, rem = reg.list_shared(ri, None, None, None, limit, cont)
                        n += len(reg.table_json(ri, items, rev, cont, rem))
                        if not cont:
                            return n

                out: dict[str, float] = {}
                for name, fn in (("json", as_json), ("table", as_table), ("paged_table", lambda: as_table(500))):
                    fn()  # warm (row cache, encodings)
                    ts = []
                    for _ in range(runs):
                        t0 = time.process_time()
                        fn()
                        ts.append(time.process_time() - t0)
                    out[f"{name}_cpu_ms"] = round(statistics.median(ts) * 1000, 1)
                out["at"] = dt.datetime.now(dt.UTC).timestamp()
                return out
    return asyncio.run(go())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pkl-", dir="/tmp"))
    result: dict[str, Any] = {"pods": args.pods, "runs": args.runs}
    cp = ControlPlane(tmp / "cp")
    floor = None
    try:
        api = await cp.start()
        sem = asyncio.Semaphore(CONCURRENCY)

        async def create(i: int) -> None:
            async with sem:
                pod = pod_manifest(f"list-{i:05d}")
                # pending for a scheduler that does not exist: the default scheduler would retry
                # 10,000 pods without nodes in the background of the timed lists
                pod["spec"]["schedulerName"] = "pkbench-nobody"
                await api.create("/api/v1/namespaces/default/pods", pod)

        t0 = time.monotonic()
        await asyncio.gather(*(create(i) for i in range(args.pods)))
        result["create_per_s"] = round(args.pods / (time.monotonic() - t0))
        log(f"{args.pods} pods created ({result['create_per_s']}/s)")

        token = (await asyncio.to_thread((cp.data_dir / "kubeconfig").read_text)).split("token:")[1].split()[0]
        ctx = ssl.create_default_context(cafile=str(cp.data_dir / "pki" / "ca.crt"))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx),
                                         headers={"Authorization": f"Bearer {token}"}) as s:
            url = f"{cp.url}/api/v1/pods"
            await timed_get(s, url, "application/json")  # warm-up (connection, caches)
            json_s, body = await median_of(args.runs, lambda: timed_get(s, url, "application/json"), cp.pid)
            result["json_cpu_ms"] = round(CPU[cp.pid] * 1000, 1)
            table_s, tbody = await median_of(args.runs, lambda: timed_get(s, url, TABLE), cp.pid)
            result["table_cpu_ms"] = round(CPU[cp.pid] * 1000, 1)
            paged_s, rows = await median_of(args.runs, lambda: paged_table(s, cp.url), cp.pid)
            result["paged_cpu_ms"] = round(CPU[cp.pid] * 1000, 1)
            lst = json.loads(body)
            assert len(lst["items"]) == args.pods and len(json.loads(tbody)["rows"]) == args.pods == rows
            t0 = time.perf_counter()
            json.dumps(lst)
            result["encode_floor_ms"] = round(1000 * (time.perf_counter() - t0), 1)

            # floor: the same bytes, pre-encoded, from a bare HTTPS server of its own
            body_file = tmp / "list.json"
            await asyncio.to_thread(body_file.write_bytes, body)
            port = free_port()
            pki = cp.data_dir / "pki"
            floor = spawn([sys.executable, __file__, "--serve-floor", str(body_file), str(port),
                           str(pki / "apiserver.crt"), str(pki / "apiserver.key")], tmp / "floor.log")
            for _ in range(100):
                if await _port_open(port):
                    break
                await asyncio.sleep(0.1)
            floor_url = f"https://127.0.0.1:{port}/api/v1/pods"
            await timed_get(s, floor_url, "application/json")
            floor_s, _ = await median_of(args.runs, lambda: timed_get(s, floor_url, "application/json"), floor.pid)
            result["floor_cpu_ms"] = round(CPU[floor.pid] * 1000, 1)

            if args.profile:  # where the server's time goes, per list kind (outside the timed runs)
                result["profile"] = {}
                for kind, accept in (("json", "application/json"), ("table", TABLE)):
                    out = tmp / f"server-{kind}.txt"
                    spy = await start_py_spy(cp.pid, out)
                    t0 = time.monotonic()
                    for _ in range(args.profile):
                        await timed_get(s, url, accept)
                    took = time.monotonic() - t0
                    if await stop_py_spy(spy, out) is not None:
                        result["profile"][kind] = summarize_profile(out, took, top=20, share=True)

        result.update({
            "json_ms": round(json_s * 1000, 1), "table_ms": round(table_s * 1000, 1),
            "paged_table_ms": round(paged_s * 1000, 1), "floor_ms": round(floor_s * 1000, 1),
            "json_bytes": len(body), "table_bytes": len(tbody),
        })
        result["json_ratio"] = round(json_s / floor_s, 2)
        result["table_ratio"] = round(table_s / floor_s, 2)
        result["targets"] = {"json": result["json_ms"] <= TARGET_MS, "table": result["table_ms"] <= TARGET_MS}
    except Exception:
        traceback.print_exc()
        result["error"] = traceback.format_exc()
    finally:
        await stop_process(floor, "floor server")
        await cp.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def report(r: dict[str, Any]) -> None:
    if "json_ms" not in r:
        return
    n, t = r["pods"], r["targets"]
    print(f"\n== list {n} pods (median of {r['runs']}) ==")
    print(f"baseline: the same JSON bytes ({r['json_bytes'] / 1e6:.1f} MB) from a bare HTTPS server: {r['floor_ms']:.1f} ms; "
          f"json.dumps of the list in Python: {r['encode_floor_ms']:.1f} ms")
    print(f"JSON list:  {r['json_ms']:.1f} ms = {r['json_ratio']:.2f}x the floor "
          f"(goal <= {TARGET_MS:.0f} ms: {'MET' if t['json'] else 'NOT MET'})")
    print(f"Table list: {r['table_ms']:.1f} ms ({r['table_bytes'] / 1e6:.1f} MB) = {r['table_ratio']:.2f}x the floor "
          f"(goal <= {TARGET_MS:.0f} ms: {'MET' if t['table'] else 'NOT MET'})")
    if "floor_cpu_ms" in r:
        print(f"server CPU per list (mean): JSON {r['json_cpu_ms']:.0f} ms, Table {r['table_cpu_ms']:.0f} ms; "
              f"floor server {r['floor_cpu_ms']:.0f} ms ({r['json_cpu_ms'] / max(r['floor_cpu_ms'], 0.1):.2f}x / "
              f"{r['table_cpu_ms'] / max(r['floor_cpu_ms'], 0.1):.2f}x)")
    print(f"kubectl-style Table pages of 500: {r['paged_table_ms']:.1f} ms in all "
          f"({r['paged_table_ms'] / max(r['table_ms'], 0.1):.2f}x the unpaged Table list); server CPU "
          f"{r.get('paged_cpu_ms', 0):.0f} ms ({r.get('paged_cpu_ms', 0) / max(r['table_cpu_ms'], 0.1):.2f}x); "
          f"creates {r['create_per_s']}/s")
    for kind, summary in r.get("profile", {}).items():
        print(f"server profile while serving {kind} lists:")
        print_profile(summary)


def serve_floor(body_file: str, port: int, cert: str, key: str) -> None:
    from aiohttp import web

    body = Path(body_file).read_bytes()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/pods", handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=ctx, access_log=None, print=None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=10000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="afterwards, py-spy the server over N more lists of each kind")
    p.add_argument("--quick", action="store_true", help="1,000 pods, 3 runs")
    p.add_argument("--in-process", action="store_true",
                   help="only the server's list building, in this process (CPU ms per list, no HTTP)")
    p.add_argument("--json", default=None)
    p.add_argument("--serve-floor", nargs=4, metavar=("FILE", "PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_floor:
        f, port, cert, key = args.serve_floor
        serve_floor(f, int(port), cert, key)
        return 0
    if args.quick:
        args.pods, args.runs = 1000, 3
    if args.in_process:
        ip = in_process(args.pods, args.runs)
        print(f"in-process, {args.pods} pods, median of {args.runs}: JSON {ip['json_cpu_ms']} ms, "
              f"Table {ip['table_cpu_ms']} ms, Table pages of 500 {ip['paged_table_cpu_ms']} ms CPU per list "
              f"(load {open('/proc/loadavg').read().split()[0]})")
        save_json(args.json, ip)
        return 0
    r = asyncio.run(run(args))
    report(r)
    save_json(args.json, r)
    return 0 if r.get("targets") and all(r["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
