"""Benchmark 1: how long one pod takes from API create to Running, against the raw CRI floor.

What is measured, N times each (one warm-up run of each is discarded), on one private containerd:

- **raw CRI**: the wall time of exactly the CRI calls a kubelet must make for the benchmark pod
  (pod cgroup, RunPodSandbox, PodSandboxStatus, ImageStatus, CreateContainer, StartContainer), with
  the configs built by the agent's own builders (see ``common.RawCRI``). The pod is torn down between
  repetitions (not timed).
- **pykubelet**: ``POST /api/v1/namespaces/default/pods`` → the pod seen ``Running`` (every container
  running) through a watch opened before the create. This is what a user sees and includes the
  server's scheduler binding the pod, the agent's watch noticing it, its pod worker doing the same
  CRI calls, and the status PATCH travelling back through the API server and the watch. The pod is
  deleted (grace 0) and the runtime allowed to become empty between repetitions.

The raw CRI runs go first and the agent is started afterwards: an agent running beside them would,
like upstream's kubelet, kill sandboxes carrying pod labels it does not know.

Result: median(pykubelet) - median(raw CRI) is the agent + control plane overhead; target ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    NAMESPACE,
    Cluster,
    RawCRI,
    bench_containerd,
    create_pods,
    delete_pods,
    log,
    pods_path_rv,
    ratio,
    save_json,
    stats,
    wait_runtime_empty,
)

TARGET_OVERHEAD = 0.100


async def measure_raw(raw: RawCRI, n: int) -> tuple[list[float], list[float]]:
    starts: list[float] = []
    stops: list[float] = []
    for i in range(n + 1):
        t0 = time.monotonic()
        rp = await raw.start_pod(f"raw-{i}")
        t1 = time.monotonic()
        await raw.stop_pod(rp)
        t2 = time.monotonic()
        if i > 0:  # run 0 is the warm-up
            starts.append(t1 - t0)
            stops.append(t2 - t1)
    return starts, stops


async def _phases(cluster: Cluster, raw: RawCRI, name: str, t0: float, stop: asyncio.Event) -> dict[str, float]:
    """Where the time goes: pod bound (watch), container running in CRI (20 ms polling)."""
    api = cluster.api
    assert api is not None
    out: dict[str, float] = {}

    async def bound() -> None:
        rv = await pods_path_rv(api)
        async for _typ, obj in api.watch(f"/api/v1/namespaces/{NAMESPACE}/pods", resource_version=rv,
                                         timeout_seconds=60):
            if obj.get("metadata", {}).get("name") == name and obj.get("spec", {}).get("nodeName"):
                out["bound"] = time.monotonic() - t0
                return

    async def cri_running() -> None:
        while not stop.is_set():
            for c in await raw.cri.list_containers():
                if c.labels.get("io.kubernetes.pod.name") == name and c.state == 1:  # CONTAINER_RUNNING
                    out["cri_running"] = time.monotonic() - t0
                    return
            await asyncio.sleep(0.02)

    tasks = [asyncio.create_task(bound()), asyncio.create_task(cri_running())]
    await stop.wait()
    await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return out


async def measure_agent(cluster: Cluster, raw: RawCRI, n: int) -> tuple[list[float], list[dict[str, float]]]:
    assert cluster.api is not None
    out: list[float] = []
    phases: list[dict[str, float]] = []
    for i in range(n + 1):
        name = f"pod-{i}"
        stop = asyncio.Event()
        t_ref = time.monotonic()
        diag = asyncio.create_task(_phases(cluster, raw, name, t_ref, stop))
        await asyncio.sleep(0.05)  # let the diagnostic watch connect
        t0, seen = await create_pods(cluster.api, [name])
        stop.set()
        ph = {k: v - (t0 - t_ref) for k, v in (await diag).items()}
        ph["api_running"] = seen[name] - t0
        if i > 0:
            out.append(seen[name] - t0)
            phases.append(ph)
        t1 = time.monotonic()
        await delete_pods(cluster.api, [name])
        t2 = time.monotonic()
        await wait_runtime_empty(raw.cri)
        log(f"  {name}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in ph.items())
            + f"; deleted from API in {t2 - t1:.2f}s, runtime empty {time.monotonic() - t2:.2f}s later")
    return out, phases


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"bench": "pod_start", "n": args.n, "target_overhead_s": TARGET_OVERHEAD}
    async with bench_containerd() as cd:
        async with RawCRI(cd, cd.data_dir / "raw-logs") as raw:
            log(f"raw CRI: {args.n} pods one after another")
            starts, stops = await measure_raw(raw, args.n)
            result["raw_cri"] = {"start": stats(starts).__dict__, "teardown": stats(stops).__dict__,
                                 "samples": starts}
            if args.skip_agent:
                result["agent"] = {"status": "skipped"}
                return result
            cluster = Cluster(cd, cd.data_dir.parent / "cluster")
            try:
                log("starting pykubelet server + agent")
                await cluster.start()
                log(f"pykubelet: {args.n} pods one after another (API create -> Running via watch)")
                samples, phases = await measure_agent(cluster, raw, args.n)
                result["agent"] = {"status": "ok", "start": stats(samples).__dict__, "samples": samples,
                                   "phases": phases,
                                   "phase_medians": {k: statistics.median(p[k] for p in phases if k in p)
                                                     for k in ("bound", "cri_running", "api_running")
                                                     if any(k in p for p in phases)}}
            except Exception as e:  # report what we could measure
                traceback.print_exc()
                result["agent"] = {"status": f"error: {type(e).__name__}: {e}"[:2000]}
            finally:
                await cluster.stop()
    return result


def report(result: dict[str, Any]) -> None:
    raw = result["raw_cri"]["start"]
    print(f"\nBenchmark 1 - one pod, create -> Running (N={result['n']}; min/median/p90/max)")
    print(f"  raw CRI calls      : {_fmt(raw)}")
    print(f"  raw CRI teardown   : {_fmt(result['raw_cri']['teardown'])}")
    agent = result["agent"]
    if agent.get("status") != "ok":
        print(f"  pykubelet          : {agent.get('status')}")
        return
    a = agent["start"]
    overhead = a["median"] - raw["median"]
    result["overhead_median_s"] = overhead
    verdict = "MET" if overhead <= TARGET_OVERHEAD else "MISSED"
    print(f"  pykubelet (API)    : {_fmt(a)}")
    pm = agent.get("phase_medians", {})
    if pm:
        print("  where (medians)    : " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in pm.items())
              + "  (after the POST: pod bound by the scheduler, container running in CRI, Running in the API)")
    print(f"  ratio median       : {ratio(a['median'], raw['median'])} of raw CRI")
    print(f"  overhead median    : {overhead * 1000:.0f} ms (target <= {TARGET_OVERHEAD * 1000:.0f} ms: {verdict})")


def _fmt(s: dict[str, float]) -> str:
    return "/".join(f"{s[k] * 1000:.0f}" for k in ("min", "median", "p90", "max")) + " ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=10, help="repetitions (default 10)")
    p.add_argument("--quick", action="store_true", help="3 repetitions")
    p.add_argument("--skip-agent", action="store_true", help="only the raw CRI baseline")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.n = 3
    result = asyncio.run(run(args))
    report(result)
    save_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
