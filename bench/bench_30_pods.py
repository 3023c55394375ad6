"""Benchmark 2: 30 pods created at once until all are Running — pykubelet vs raw CRI vs podman.

Three ways to get the same 30 benchmark pods (busybox:1.36 ``sleep 3600``) running, each measured
``--runs`` times (default 3) in the same run, with full teardown between runs:

- **raw CRI**: the 30 pods' CRI call sequences (see ``common.RawCRI``) started concurrently with
  ``asyncio.gather`` on the bench containerd; time until the last StartContainer returned. The floor
  for this containerd on this machine.
- **podman**: ``podman kube play --network none`` of one multi-document YAML with the same 30 pods
  (private podman config, same images, pause as infra); time until the command returns, which is
  when podman has started every container. ``podman kube down`` afterwards (timed for information).
  podman is the tool a user would use instead of a one-machine cluster, so it is the peer.
- **pykubelet**: the 30 pods POSTed at once to ``pykubelet server`` → every pod seen Running through a
  watch; agent + control plane + containerd, what a ``kubectl apply`` user waits for.

Targets: pykubelet no slower than podman (ratio ≤ 1.0); the ratio to raw CRI shows the overhead.
The raw CRI and podman runs go before the agent is started (an agent would remove sandboxes it does
not know about).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Cluster,
    Podman,
    RawCRI,
    bench_containerd,
    create_pods,
    delete_pods,
    log,
    pod_manifest,
    pods_yaml,
    ratio,
    save_json,
    stats,
    wait_runtime_empty,
)


async def raw_run(raw: RawCRI, n: int, run: int) -> tuple[float, float]:
    t0 = time.monotonic()
    pods = await asyncio.gather(*(raw.start_pod(f"raw{run}-{i}") for i in range(n)))
    t1 = time.monotonic()
    await asyncio.gather(*(raw.stop_pod(p) for p in pods))
    return t1 - t0, time.monotonic() - t1


def podman_run(pm: Podman, yaml_path: Path, n: int) -> tuple[float, float]:
    t0 = time.monotonic()
    pm.play(yaml_path)
    t1 = time.monotonic()
    running = pm.running_containers()
    if running < 2 * n:  # app + infra per pod
        raise RuntimeError(f"podman: only {running} containers running after kube play")
    t2 = time.monotonic()
    pm.down(yaml_path)
    return t1 - t0, time.monotonic() - t2


async def agent_run(cluster: Cluster, raw: RawCRI, n: int, run: int) -> tuple[float, float]:
    assert cluster.api is not None
    names = [f"pod{run}-{i}" for i in range(n)]
    t0, seen = await create_pods(cluster.api, names)
    total = max(seen.values()) - t0
    t1 = time.monotonic()
    await delete_pods(cluster.api, names)
    await wait_runtime_empty(raw.cri)
    return total, time.monotonic() - t1


def _entry(samples: list[tuple[float, float]]) -> dict[str, Any]:
    return {"status": "ok", "all_running": stats(s[0] for s in samples).__dict__,
            "teardown": stats(s[1] for s in samples).__dict__, "samples": [s[0] for s in samples]}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    n, runs = args.pods, args.runs
    result: dict[str, Any] = {"bench": "30_pods", "pods": n, "runs": runs}
    async with bench_containerd() as cd:
        async with RawCRI(cd, cd.data_dir / "raw-logs") as raw:
            await raw.stop_pod(await raw.start_pod("warmup"))
            samples = []
            for r in range(runs):
                samples.append(await raw_run(raw, n, r))
                log(f"raw CRI run {r}: {samples[-1][0]:.2f}s (teardown {samples[-1][1]:.2f}s)")
            result["raw_cri"] = _entry(samples)

            why = Podman.available()
            if why or args.skip_podman:
                result["podman"] = {"status": why or "skipped"}
            else:
                pm = Podman()
                try:
                    await asyncio.to_thread(pm.setup)
                    yaml_path = pm.dir / "pods.yaml"
                    yaml_path.write_text(pods_yaml([pod_manifest(f"pm-{i}") for i in range(n)]))
                    samples = []
                    for r in range(runs):
                        samples.append(await asyncio.to_thread(podman_run, pm, yaml_path, n))
                        log(f"podman run {r}: {samples[-1][0]:.2f}s (kube down {samples[-1][1]:.2f}s)")
                    result["podman"] = _entry(samples)
                except Exception as e:
                    traceback.print_exc()
                    result["podman"] = {"status": f"error: {e}"[:2000]}
                finally:
                    await asyncio.to_thread(pm.close)

            if args.skip_agent:
                result["agent"] = {"status": "skipped"}
                return result
            cluster = Cluster(cd, cd.data_dir.parent / "cluster")
            try:
                log("starting pykubelet server + agent")
                await cluster.start()
                samples = []
                for r in range(runs):
                    samples.append(await agent_run(cluster, raw, n, r))
                    log(f"pykubelet run {r}: {samples[-1][0]:.2f}s (delete+teardown {samples[-1][1]:.2f}s)")
                result["agent"] = _entry(samples)
            except Exception as e:
                traceback.print_exc()
                result["agent"] = {"status": f"error: {type(e).__name__}: {e}"[:2000]}
            finally:
                await cluster.stop()
    return result


def report(result: dict[str, Any]) -> None:
    print(f"\nBenchmark 2 - {result['pods']} pods at once -> all Running ({result['runs']} runs; "
          "min/median/max seconds)")
    print(f"  {'':12} {'all running':>22} {'teardown':>22}")
    rows = [("raw CRI", "raw_cri"), ("podman", "podman"), ("pykubelet", "agent")]
    for label, key in rows:
        e = result.get(key, {})
        if e.get("status") != "ok":
            print(f"  {label:12} {e.get('status', 'n/a')}")
            continue
        a, t = e["all_running"], e["teardown"]
        print(f"  {label:12} {a['min']:6.2f}/{a['median']:6.2f}/{a['max']:6.2f}   "
              f"{t['min']:6.2f}/{t['median']:6.2f}/{t['max']:6.2f}")
    med = {k: result[k]["all_running"]["median"] for _, k in rows if result.get(k, {}).get("status") == "ok"}
    if "podman" in med:
        print(f"  podman / raw CRI     : {ratio(med['podman'], med['raw_cri'])}")
    if "agent" in med:
        print(f"  pykubelet / raw CRI  : {ratio(med['agent'], med['raw_cri'])}")
        if "podman" in med:
            verdict = "MET" if med["agent"] <= med["podman"] else "MISSED"
            print(f"  pykubelet / podman   : {ratio(med['agent'], med['podman'])} (target <= 1.00x: {verdict})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=30)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1 run")
    p.add_argument("--skip-agent", action="store_true")
    p.add_argument("--skip-podman", action="store_true")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.runs = 1
    result = asyncio.run(run(args))
    report(result)
    save_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
