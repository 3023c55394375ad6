"""Micro-benchmark: what one CRI unary call costs the *client* process, by way of making the call.

Why: an exec probe is one ``ExecSync`` round trip, every CRI call of the agent goes through
``CRIClient._unary``, and at 200 probes/s the client side of gRPC is most of the agent's CPU
(docs/benchmarks-scale.md, "Probes"). This script measures the candidate ways of making a unary call
from asyncio against one ``pykubelet fakecri`` process (which answers at once), at a fixed rate in
25 ms slots like the prober's wake grid. Each variant runs in a process of its own (so environment
variables that grpcio reads at import can be tried), rounds interleaved so that load from other
processes on a shared machine spreads over all of them; the table gives per variant the median of the
client process's CPU (``getrusage``: all its threads), split into the event-loop thread and the other
threads still alive at the end (grpcio's poller/EventEngine threads; short-lived threads count only
in the total), in µs per call net of ``idle``, and the ratio to ``cri_client_grpcio`` (grpc.aio, the old path).

Every variant runs on the event loop the project's commands use (``pykubelet.common.aio.run``:
uvloop); those named ``*_stdlib_loop`` and every grpcio variant run on the stdlib loop instead
(``PYKUBELET_EVENT_LOOP=asyncio``) and are net of ``idle_stdlib_loop``: ``cri_client`` against
``cri_client_stdlib_loop`` is what uvloop changes for one CRI call.

Variants (``--call`` picks ExecSync, PodSandboxStatus or ListContainers):

* ``idle``: the pacing loop with no call at all (the harness's own cost, subtracted from the others);


* ``cri_client_grpcio``: the project's ``CRIClient`` with ``transport="grpcio"`` (every call on
  grpc.aio, as before ``pykubelet.cri.unary_h2``) — the baseline of the ratios;
* ``cri_client``: ``CRIClient`` as the agent uses it (``PYKUBELET_CRI_TRANSPORT`` picks);
* ``aio``: a bare ``grpc.aio`` stub call; ``aio_bytes``: the request serialized once and reused;
* ``aio_lean``: no retry filter, no channelz (``grpc.enable_retries``/``grpc.enable_channelz`` 0);
  ``aio_minimal``: the same plus ``grpc.minimal_stack``;
* ``aio_poll``: ``GRPC_POLL_STRATEGY=poll``; ``aio_no_event_engine``: ``GRPC_EXPERIMENTS`` turning
  the EventEngine client/listener/DNS/endpoints off (the C core's older I/O manager does the I/O
  on the polling thread instead of EventEngine threads);
* ``aio_direct`` (diagnostic, private API): grpcio's Cython ``_AioCall`` awaited directly, without
  grpc.aio's Python call object and the task it creates per call;
* ``sync_future``/``sync_future_bytes``: the *sync* channel's ``stub.Method.future()`` with
  ``add_done_callback`` handing the result to the loop by ``loop.call_soon_threadsafe``;
* ``executor``/``executor1``: the sync blocking call in a ``ThreadPoolExecutor`` of 4 / 1 threads
  via ``run_in_executor``;
* ``sync_inline`` (diagnostic, blocks the loop): the sync blocking call made on the loop thread,
  no hand-off at all: what grpcio's sync stack costs by itself;
* ``grpclib`` (only when ``grpclib`` is importable): the pure-Python gRPC client (h2-based);

``--prober PODS`` measures the other side of an exec probe, the prober's own cost: ``PODS`` pods with
an exec readiness and liveness probe every second in a real ``ProbeManager``, against
``InProcessCRIClient`` (the real ``CRIClient`` code, observer included, with the fake runtime called
directly instead of over gRPC), CPU per probe. With ``PYTHONPATH`` pointing at another checkout's
``src`` it compares two versions of the prober.

``--variant NAME --endpoint unix://... --container-id ID --seconds S`` runs one variant against an
existing runtime and prints one JSON line (``bench/bench_probes.py`` uses this for its same-run
baseline: the raw ExecSync calls at the agent's probe rate, through ``CRIClient``).

Usage: ``.venv/bin/python bench/bench_grpc_call.py [--call exec] [--rate 200] [--seconds 6] [--rounds 3]
[--variants ...]``; ``PYTHONPATH=<dir with grpclib/hpack>`` adds the last two variants.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import json
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

import grpc
import grpc.aio
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pb_grpc
from scale_common import start_fakecri, stop_process

from pykubelet.common import aio
from pykubelet.cri.client import CRIClient, from_rpc_error, parse_endpoint

SLOT = 0.025
BASELINE = "cri_client_grpcio"  # CRIClient on grpc.aio, the agent's path before unary_h2
TIMEOUT = 121.0
NO_EVENT_ENGINE = ("-event_engine_client,-event_engine_listener,-event_engine_dns,"
                   "-event_engine_for_all_other_endpoints,-event_engine_callback_cq")
# variant -> environment it runs with (read by grpcio at import)
STDLIB_LOOP = {"PYKUBELET_EVENT_LOOP": "asyncio"}
VARIANTS: dict[str, dict[str, str]] = {
    "idle": {}, "idle_stdlib_loop": STDLIB_LOOP, "cri_client": {}, "cri_client_stdlib_loop": STDLIB_LOOP,
    "cri_client_grpcio": STDLIB_LOOP, "aio": STDLIB_LOOP, "aio_bytes": STDLIB_LOOP, "aio_lean": STDLIB_LOOP,
    "aio_minimal": STDLIB_LOOP, "aio_poll": {**STDLIB_LOOP, "GRPC_POLL_STRATEGY": "poll"},
    "aio_no_event_engine": {**STDLIB_LOOP, "GRPC_EXPERIMENTS": NO_EVENT_ENGINE}, "aio_direct": STDLIB_LOOP,
    "sync_future": STDLIB_LOOP, "sync_future_bytes": STDLIB_LOOP, "executor": STDLIB_LOOP,
    "executor1": STDLIB_LOOP, "sync_inline": STDLIB_LOOP, "grpclib": STDLIB_LOOP,
}
# channel arguments that take per-call work out of gRPC's C core for a local unix socket: no retry
# filter (it buffers every call's send ops in case of a retry), no channelz call counters
LEAN_OPTIONS = [("grpc.enable_retries", 0), ("grpc.enable_channelz", 0)]
MINIMAL_OPTIONS = [*LEAN_OPTIONS, ("grpc.minimal_stack", 1)]
Call = Callable[[], Awaitable[Any]]


class Skip(Exception):
    """A variant whose optional library is not importable."""


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def cpu_now() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def loop_thread_cpu() -> float:
    """CPU seconds of the calling thread (the event loop's)."""
    return time.thread_time()


async def paced(call: Call, rate: float, seconds: float) -> dict[str, float]:
    """Issue ``rate`` calls/s for ``seconds``, the calls of each 25 ms slot concurrently."""
    loop = asyncio.get_running_loop()
    per_slot = rate * SLOT
    owed = 0.0
    calls = errors = 0
    for _ in range(int(0.5 / SLOT)):  # warm up: channel connected, first-call costs paid
        await asyncio.gather(call())
    c0, l0, t0 = cpu_now(), loop_thread_cpu(), loop.time()
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
    c1, l1, t1 = cpu_now(), loop_thread_cpu(), loop.time()
    return {"calls": calls, "errors": errors, "cpu_s": c1 - c0, "wall_s": t1 - t0,
            "cpu_pct": 100 * (c1 - c0) / (t1 - t0), "loop_pct": 100 * (l1 - l0) / (t1 - t0),
            "us_per_call": 1e6 * (c1 - c0) / max(1, calls)}


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
            fut.set_exception(from_rpc_error(e))
        except BaseException as e:
            fut.set_exception(e)

    call.add_done_callback(lambda c: loop.call_soon_threadsafe(deliver, c))
    fut.add_done_callback(lambda f: call.cancel() if f.cancelled() else None)
    return fut


class Variants:
    """The calls to compare, for one kind of request (``kind``: exec, sandbox_status, list_containers)."""

    def __init__(self, target: str, endpoint: str, cid: str, sandbox_id: str = "", kind: str = "exec") -> None:
        self.target, self.endpoint, self.cid, self.kind = target, endpoint, cid, kind
        req: Any
        if kind == "exec":
            self.rpc, req, self.resp_type = "ExecSync", pb.ExecSyncRequest(container_id=cid, cmd=["true"], timeout=1), \
                pb.ExecSyncResponse
        elif kind == "sandbox_status":
            self.rpc, req, self.resp_type = "PodSandboxStatus", pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id), \
                pb.PodSandboxStatusResponse
        elif kind == "list_containers":
            self.rpc, req, self.resp_type = "ListContainers", pb.ListContainersRequest(), pb.ListContainersResponse
        else:
            raise SystemExit(f"unknown --call {kind!r}")
        self.sandbox_id = sandbox_id
        self.req = req
        self.raw = req.SerializeToString()
        self.method = f"/runtime.v1.RuntimeService/{self.rpc}"

    def cri_call(self, cri: CRIClient) -> Call:
        if self.kind == "exec":
            return lambda: cri.exec_sync(self.cid, ["true"], 1)
        if self.kind == "sandbox_status":
            return lambda: cri.pod_sandbox_status(self.sandbox_id)
        return lambda: cri.list_containers()

    async def make(self, name: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
        """The call for a variant and its cleanup."""
        req, raw, timeout, rpc = self.req, self.raw, TIMEOUT, self.rpc

        async def nothing() -> None:
            return None

        name = name.removesuffix("_stdlib_loop")  # the same call on the stdlib event loop (VARIANTS)
        if name == "idle":
            return nothing, nothing
        if name in ("cri_client", "cri_client_grpcio"):
            cri = CRIClient(self.endpoint, transport="grpcio" if name == "cri_client_grpcio" else "")
            await cri.connect(wait=10)
            return self.cri_call(cri), cri.close
        if name == "aio_direct":
            return self._aio_direct()
        if name.startswith("aio"):
            opts = {"aio_lean": LEAN_OPTIONS, "aio_minimal": MINIMAL_OPTIONS}.get(name, [])
            ch = grpc.aio.insecure_channel(self.target, options=opts)
            if name == "aio_bytes":
                mc = ch.unary_unary(self.method, request_serializer=None, response_deserializer=self.resp_type.FromString)
                return (lambda: mc(raw, timeout=timeout)), ch.close
            astub = getattr(pb_grpc.RuntimeServiceStub(ch), rpc)
            return (lambda: astub(req, timeout=timeout)), ch.close
        if name == "grpclib":
            return await self._grpclib()
        sch = grpc.insecure_channel(self.target)
        sstub = getattr(pb_grpc.RuntimeServiceStub(sch), rpc)
        pool: concurrent.futures.ThreadPoolExecutor | None = None

        async def close() -> None:
            if pool is not None:
                pool.shutdown()
            sch.close()

        if name == "sync_future":
            return (lambda: sync_future_call(sstub, req, timeout)), close
        if name == "sync_future_bytes":
            smc = sch.unary_unary(self.method, request_serializer=None, response_deserializer=self.resp_type.FromString)
            return (lambda: sync_future_call(smc, raw, timeout)), close
        if name in ("executor", "executor1"):
            pool = concurrent.futures.ThreadPoolExecutor(1 if name == "executor1" else 4)
            loop = asyncio.get_running_loop()
            blocking = functools.partial(sstub, req, timeout=timeout)
            return (lambda: loop.run_in_executor(pool, blocking)), close
        if name == "sync_inline":
            async def inline() -> Any:
                return sstub(req, timeout=timeout)
            return inline, close
        sch.close()
        raise SystemExit(f"unknown variant {name!r}; one of {', '.join(VARIANTS)}")

    def _aio_direct(self) -> tuple[Call, Callable[[], Awaitable[None]]]:
        ch = grpc.aio.insecure_channel(self.target)
        cython_channel = ch._channel  # grpcio's cygrpc.AioChannel (private)
        method, raw, parse = self.method.encode(), self.raw, self.resp_type.FromString

        async def call() -> Any:
            c = cython_channel.call(method, time.time() + TIMEOUT, None, None, 0)
            try:
                resp = await c.unary_unary(raw, (), None)
            except asyncio.CancelledError:
                c.cancel("cancelled")
                raise
            if not c.is_ok():
                raise RuntimeError(f"{self.rpc} failed")
            return parse(resp)

        return call, ch.close

    async def _grpclib(self) -> tuple[Call, Callable[[], Awaitable[None]]]:
        path, req = self.target[len("unix://"):], self.req
        try:
            from grpclib.client import Channel, UnaryUnaryMethod
        except ImportError as e:
            raise Skip(str(e)) from None
        gch = Channel(path=path)
        m: Any = UnaryUnaryMethod(gch, self.method, type(req), self.resp_type)

        async def gclose() -> None:
            gch.close()

        return (lambda: m(req, timeout=TIMEOUT)), gclose


async def one(variant: str, endpoint: str, cid: str, rate: float, seconds: float, sandbox_id: str = "",
              kind: str = "exec") -> dict[str, Any]:
    v = Variants(parse_endpoint(endpoint), endpoint, cid, sandbox_id, kind)
    try:
        call, close = await v.make(variant)
    except Skip as e:
        return {"variant": variant, "skipped": str(e)}
    try:
        res = await paced(call, rate, seconds)
    finally:
        await close()
    return {"variant": variant, "call": kind, "rate": rate, **{k: round(x, 4) for k, x in res.items()}}


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


async def setup_container(endpoint: str) -> tuple[str, str]:
    """One running container on the fake runtime (ExecSync needs a running one): (sandbox, container)."""
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
        return sb, cid
    finally:
        await cri.close()


async def run_child(variant: str, endpoint: str, sb: str, cid: str, args: argparse.Namespace) -> dict[str, Any]:
    """One variant in a process of its own, with the environment it needs."""
    env = {**os.environ, **VARIANTS.get(variant, {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--variant", variant, "--endpoint", endpoint, "--container-id", cid,
        "--sandbox-id", sb, "--call", args.call, "--rate", str(args.rate), "--seconds", str(args.seconds),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await proc.communicate()
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    if not lines:
        return {"variant": variant, "skipped": f"failed: {err.decode(errors='replace')[-500:]}"}
    res: dict[str, Any] = json.loads(lines[-1])
    return res


async def suite(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="h1-grpc-", dir="/tmp"))
    sock = tmp / "fakecri.sock"
    proc = await start_fakecri(sock, tmp / "fakecri.log")
    endpoint = f"unix://{sock}"
    out: dict[str, Any] = {"call": args.call, "rate": args.rate, "seconds": args.seconds, "rounds": args.rounds,
                           "loadavg": [loadavg()]}
    try:
        sb, cid = await setup_container(endpoint)
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
        skipped: dict[str, str] = {}
        for r in range(args.rounds):
            for v in args.variants:
                if v in skipped:
                    continue
                res = await run_child(v, endpoint, sb, cid, args)
                if "skipped" in res:
                    skipped[v] = res["skipped"]
                    print(f"{v}: skipped ({res['skipped'].strip()[:200]})", flush=True)
                    continue
                runs[v].append(res)
                print(f"round {r + 1} {v:20s} {res['us_per_call']:8.1f} us/call  {res['cpu_pct']:5.1f} % "
                      f"(loop thread {res['loop_pct']:5.1f} %; {res['calls']} calls, {res['errors']} errors) "
                      f"load {loadavg()[0]}", flush=True)
            out["loadavg"].append(loadavg())
        idles = {name: statistics.median(x["cpu_pct"] for x in runs[name]) if runs.get(name) else 0.0
                 for name in ("idle", "idle_stdlib_loop")}
        idle = idles["idle"]
        table = {}
        for v, rs in runs.items():
            if not rs:
                continue
            own_idle = idles["idle_stdlib_loop" if VARIANTS.get(v) is STDLIB_LOOP or v.startswith("idle") else "idle"]
            pct = statistics.median(x["cpu_pct"] for x in rs)
            loop_pct = statistics.median(x["loop_pct"] for x in rs)
            table[v] = {"cpu_pct": round(pct, 2), "us_per_call_net": round(1e4 * (pct - own_idle) / args.rate, 1),
                        "loop_us": round(1e4 * (loop_pct - own_idle) / args.rate, 1),
                        "threads_us": round(1e4 * (pct - loop_pct) / args.rate, 1),
                        "errors": sum(x["errors"] for x in rs)}
        out["median"] = table
        out["skipped"] = skipped
        base = table.get(BASELINE, {}).get("us_per_call_net") or 0
        print(f"\n{args.call}, {args.rate:.0f} calls/s, median of {args.rounds} rounds, µs of client CPU per call "
              f"net of idle ({idle:.2f} %)")
        print(f"{'variant':20s} {'CPU %':>6s} {'µs/call':>8s} {'loop thr':>9s} {'other thr':>10s} {BASELINE + '/this':>24s}")
        for v, row in table.items():
            rel = f"{base / row['us_per_call_net']:.2f}x" if base and not v.startswith("idle") and row["us_per_call_net"] > 0 else ""
            print(f"{v:20s} {row['cpu_pct']:6.2f} {row['us_per_call_net']:8.1f} {row['loop_us']:9.1f} "
                  f"{row['threads_us']:10.1f} {rel:>24s}")
        print("load average (1/5/15 min) at start and after each round: "
              + "; ".join("/".join(x) for x in out["loadavg"]))
    finally:
        await stop_process(proc, "fakecri")
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--call", choices=("exec", "sandbox_status", "list_containers"), default="exec")
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--prober", type=int, metavar="PODS", help="the prober's own cost per probe, no gRPC")
    p.add_argument("--variant", help="run one variant against --endpoint and print a JSON line")
    p.add_argument("--endpoint")
    p.add_argument("--container-id")
    p.add_argument("--sandbox-id", default="")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.prober:
        print(json.dumps(aio.run(prober_cost(args.prober, args.seconds))), flush=True)
        return 0
    if args.variant:
        if not (args.endpoint and args.container_id):
            p.error("--variant needs --endpoint and --container-id")
        res = aio.run(one(args.variant, args.endpoint, args.container_id, args.rate, args.seconds,
                          args.sandbox_id, args.call))
        print(json.dumps(res), flush=True)
        return 0 if res.get("errors", 0) == 0 else 1
    res = asyncio.run(suite(args))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
