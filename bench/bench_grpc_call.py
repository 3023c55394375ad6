"""Micro-benchmark: what one CRI unary call (ExecSync) costs the *client* process, by call path.

Why: an exec probe is one ``ExecSync`` round trip, and at 200 probes/s the client side of gRPC was
about half of the agent's CPU (docs/benchmarks-scale.md, "Probes"). This script measures the
candidate ways of making that call from asyncio, against one ``pykubelet fakecri`` process (its
ExecSync answers at once), at a fixed rate in 25 ms slots like the prober's wake grid, and reports
the client process's CPU (utime+stime of all its threads, ``getrusage``) per call:

* ``idle``: the pacing loop with no call at all (the harness's own cost, subtracted from the others);
* ``cri_client``: the project's ``CRIClient.exec_sync`` (whatever path it uses now);
* ``aio``: a bare ``grpc.aio`` stub call (``stub.ExecSync(req, timeout=...)``), no channel options;
* ``aio_bytes``: ``grpc.aio`` with the request serialized once and reused (no serializer per call);
* ``sync_future``: the *sync* grpc channel's ``stub.ExecSync.future(req, timeout=...)`` with
  ``add_done_callback`` handing the result to the loop by ``loop.call_soon_threadsafe`` (no thread
  per call: completions arrive on gRPC's own polling thread);
* ``sync_future_bytes``: the same with a reused serialized request.

Variants run interleaved (``--rounds`` times each, in turn) so that load from other processes on
a shared machine spreads over all of them; the table gives the median per variant.

``--prober PODS`` measures the other side of an exec probe, the prober's own cost: ``PODS`` pods with
an exec readiness and liveness probe every second in a real ``ProbeManager``, against
``InProcessCRIClient`` (the real ``CRIClient`` code, observer included, with the fake runtime called
directly instead of over gRPC), CPU per probe. With ``PYTHONPATH`` pointing at another checkout's
``src`` it compares two versions of the prober.

``--variant NAME --endpoint unix://... --container-id ID --seconds S`` runs one variant against an
existing runtime and prints one JSON line (``bench/bench_probes.py`` uses this for its same-run
baseline: the raw ExecSync calls at the agent's probe rate, through ``CRIClient``).

Usage: ``.venv/bin/python bench/bench_grpc_call.py [--rate 200] [--seconds 10] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

import grpc
import grpc.aio
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pb_grpc
from scale_common import start_fakecri, stop_process

from pykubelet.cri.client import CRIClient, from_rpc_error

SLOT = 0.025
METHOD = "/runtime.v1.RuntimeService/ExecSync"
VARIANTS = ("idle", "cri_client", "aio", "aio_bytes", "aio_noretry", "aio_nochannelz", "aio_lean", "aio_lean_bytes",
            "aio_minimal", "sync_future", "sync_future_bytes")
# channel arguments that take per-call work out of gRPC's C core for a local unix socket: no retry
# filter (it buffers every call's send ops in case of a retry), no channelz call counters
LEAN_OPTIONS = [("grpc.enable_retries", 0), ("grpc.enable_channelz", 0)]
MINIMAL_OPTIONS = [*LEAN_OPTIONS, ("grpc.minimal_stack", 1)]
Call = Callable[[], Awaitable[Any]]


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def cpu_now() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def paced(call: Call, rate: float, seconds: float) -> dict[str, float]:
    """Issue ``rate`` calls/s for ``seconds``, the calls of each 25 ms slot concurrently."""
    loop = asyncio.get_running_loop()
    per_slot = rate * SLOT
    owed = 0.0
    calls = errors = 0
    for _ in range(int(0.5 / SLOT)):  # warm up: channel connected, first-call costs paid
        await asyncio.gather(call())
    c0, t0 = cpu_now(), loop.time()
    next_slot = t0
    while loop.time() - t0 < seconds:
        owed += per_slot
        n = int(owed)
        owed -= n
        if n:
            res = await asyncio.gather(*(call() for _ in range(n)), return_exceptions=True)
            calls += n
            errors += sum(1 for r in res if isinstance(r, BaseException))
        next_slot += SLOT
        await asyncio.sleep(max(0.0, next_slot - loop.time()))
    c1, t1 = cpu_now(), loop.time()
    return {"calls": calls, "errors": errors, "cpu_s": c1 - c0, "wall_s": t1 - t0,
            "cpu_pct": 100 * (c1 - c0) / (t1 - t0), "us_per_call": 1e6 * (c1 - c0) / max(1, calls)}


def sync_future_call(callable_: Any, request: Any, timeout: float) -> Awaitable[Any]:
    """A sync-channel unary call as an awaitable: the loop is woken once, from gRPC's thread."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    call = callable_.future(request, timeout=timeout)

    def deliver(c: Any) -> None:
        if fut.done():
            return
        try:
            fut.set_result(c.result())
        except grpc.RpcError as e:
            fut.set_exception(from_rpc_error(e, "exec_sync"))
        except BaseException as e:
            fut.set_exception(e)

    call.add_done_callback(lambda c: loop.call_soon_threadsafe(deliver, c))
    fut.add_done_callback(lambda f: call.cancel() if f.cancelled() else None)
    return fut


class Variants:
    def __init__(self, target: str, endpoint: str, cid: str) -> None:
        self.target, self.endpoint, self.cid = target, endpoint, cid
        self.req = pb.ExecSyncRequest(container_id=cid, cmd=["true"], timeout=1)
        self.raw = self.req.SerializeToString()

    async def make(self, name: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
        """The call for a variant and its cleanup."""
        req, raw, timeout = self.req, self.raw, 121.0

        async def nothing() -> None:
            return None

        if name == "idle":
            return nothing, nothing
        if name == "cri_client":
            cri = CRIClient(self.endpoint)
            await cri.connect(wait=10)
            return (lambda: cri.exec_sync(self.cid, ["true"], 1)), cri.close
        if name.startswith("aio"):
            opts = {"aio_lean": LEAN_OPTIONS, "aio_lean_bytes": LEAN_OPTIONS, "aio_minimal": MINIMAL_OPTIONS,
                    "aio_noretry": LEAN_OPTIONS[:1], "aio_nochannelz": LEAN_OPTIONS[1:]}.get(name, [])
            ch = grpc.aio.insecure_channel(self.target, options=opts)
            if not name.endswith("_bytes"):
                stub = pb_grpc.RuntimeServiceStub(ch)
                return (lambda: stub.ExecSync(req, timeout=timeout)), ch.close
            mc = ch.unary_unary(METHOD, request_serializer=None,
                                response_deserializer=pb.ExecSyncResponse.FromString)
            return (lambda: mc(raw, timeout=timeout)), ch.close
        if name in ("sync_future", "sync_future_bytes"):
            sch = grpc.insecure_channel(self.target)

            async def close() -> None:
                sch.close()

            if name == "sync_future":
                sstub = pb_grpc.RuntimeServiceStub(sch)
                return (lambda: sync_future_call(sstub.ExecSync, req, timeout)), close
            smc = sch.unary_unary(METHOD, request_serializer=None,
                                  response_deserializer=pb.ExecSyncResponse.FromString)
            return (lambda: sync_future_call(smc, raw, timeout)), close
        raise SystemExit(f"unknown variant {name!r}; one of {', '.join(VARIANTS)}")


async def one(variant: str, endpoint: str, cid: str, rate: float, seconds: float) -> dict[str, Any]:
    from pykubelet.cri.client import parse_endpoint
    v = Variants(parse_endpoint(endpoint), endpoint, cid)
    call, close = await v.make(variant)
    try:
        res = await paced(call, rate, seconds)
    finally:
        await close()
    return {"variant": variant, "rate": rate, **{k: round(x, 4) for k, x in res.items()}}


async def prober_cost(pods: int, seconds: float) -> dict[str, Any]:
    """The prober's own CPU per exec probe, without gRPC (see the module docstring)."""
    from pykubelet.agent.metrics import cri_observer
    from pykubelet.agent.prober import ProbeManager
    from pykubelet.fakecri.inprocess import InProcessCRIClient
    from pykubelet.fakecri.runtime import FakeRuntime

    cri = InProcessCRIClient(FakeRuntime(), observer=cri_observer)
    await cri.pull_image("busybox:1.36")
    m = ProbeManager(cri, None)
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    for i in range(pods):
        sb_cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name=f"p{i}", namespace="default", uid=f"u{i}"))
        sb = await cri.run_pod_sandbox(sb_cfg)
        cid = await cri.create_container(sb, pb.ContainerConfig(metadata=pb.ContainerMetadata(name="c"),
                                                                image=pb.ImageSpec(image="busybox:1.36")), sb_cfg)
        await cri.start_container(cid)
        pod = {"metadata": {"uid": f"u{i}", "name": f"p{i}", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "readinessProbe": dict(probe), "livenessProbe": dict(probe)}]},
               "status": {"phase": "Running"}}
        m.add_pod(pod)
        m.update_pod_status(pod, {"c": (cid, True, time.time() - 100)}, "198.18.0.5")
    try:
        await asyncio.sleep(3)  # past the first-run jitter
        n0, c0, t0 = sum(w.probes_run for w in m.workers()), cpu_now(), time.monotonic()
        await asyncio.sleep(seconds)
        n1, c1, t1 = sum(w.probes_run for w in m.workers()), cpu_now(), time.monotonic()
    finally:
        await m.stop()
    n = max(1, n1 - n0)
    return {"pods": pods, "probes_per_s": round(n / (t1 - t0), 1), "cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2),
            "us_per_probe": round(1e6 * (c1 - c0) / n, 1), "loadavg": loadavg()}


async def setup_container(endpoint: str) -> str:
    """One running container on the fake runtime (ExecSync needs a running one)."""
    cri = CRIClient(endpoint)
    try:
        await cri.connect(wait=10)
        await cri.pull_image("busybox:1.36")
        sb_cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="bench", namespace="default",
                                                                    uid="bench-uid", attempt=0))
        sb = await cri.run_pod_sandbox(sb_cfg)
        c_cfg = pb.ContainerConfig(metadata=pb.ContainerMetadata(name="c", attempt=0),
                                   image=pb.ImageSpec(image="busybox:1.36"))
        cid = await cri.create_container(sb, c_cfg, sb_cfg)
        await cri.start_container(cid)
        return cid
    finally:
        await cri.close()


async def suite(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="h1-grpc-", dir="/tmp"))
    sock = tmp / "fakecri.sock"
    proc = await start_fakecri(sock, tmp / "fakecri.log")
    endpoint = f"unix://{sock}"
    out: dict[str, Any] = {"rate": args.rate, "seconds": args.seconds, "rounds": args.rounds,
                           "loadavg_before": loadavg()}
    try:
        cid = await setup_container(endpoint)
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
        for r in range(args.rounds):
            for v in args.variants:
                res = await one(v, endpoint, cid, args.rate, args.seconds)
                runs[v].append(res)
                print(f"round {r + 1} {v:18s} {res['us_per_call']:8.1f} us/call  {res['cpu_pct']:5.1f} % "
                      f"({res['calls']} calls, {res['errors']} errors)", flush=True)
        idle = statistics.median(x["cpu_pct"] for x in runs["idle"]) if "idle" in runs else 0.0
        table = {}
        for v, rs in runs.items():
            pct = statistics.median(x["cpu_pct"] for x in rs)
            table[v] = {"cpu_pct": round(pct, 2), "us_per_call_net": round(1e4 * (pct - idle) / args.rate, 1),
                        "errors": sum(x["errors"] for x in rs)}
        out["median"] = table
        out["loadavg_after"] = loadavg()
        base = table.get("cri_client", {}).get("us_per_call_net") or 0
        print(f"\n{'variant':18s} {'CPU %':>7s} {'us/call (net of idle)':>22s} {'vs cri_client':>14s}")
        for v, row in table.items():
            rel = f"{row['us_per_call_net'] / base:.2f}x" if base and v != "idle" else ""
            print(f"{v:18s} {row['cpu_pct']:7.2f} {row['us_per_call_net']:22.1f} {rel:>14s}")
        print(f"load average before/after: {out['loadavg_before']} / {out['loadavg_after']}")
    finally:
        await stop_process(proc, "fakecri")
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--prober", type=int, metavar="PODS", help="the prober's own cost per probe, no gRPC")
    p.add_argument("--variant", help="run one variant against --endpoint and print a JSON line")
    p.add_argument("--endpoint")
    p.add_argument("--container-id")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.prober:
        print(json.dumps(asyncio.run(prober_cost(args.prober, args.seconds))), flush=True)
        return 0
    if args.variant:
        if not (args.endpoint and args.container_id):
            p.error("--variant needs --endpoint and --container-id")
        res = asyncio.run(one(args.variant, args.endpoint, args.container_id, args.rate, args.seconds))
        print(json.dumps(res), flush=True)
        return 0 if res["errors"] == 0 else 1
    res = asyncio.run(suite(args))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
