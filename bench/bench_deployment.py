"""Workload benchmark: a Deployment of 100 replicas on a hollow node, and the latency of a scale change.

``pykubelet server`` (API server + every controller) and ``pykubelet hollow --nodes 1`` (a real agent
on the in-memory fake runtime) run as the project ships them, as in ``bench_hollow.py``.

1. **baseline, same run — bare pods**: ``--replicas`` pods created directly by one client (32 in
   flight), no controllers involved, to all Running through the same scheduler and node; then deleted.
2. **the run**: one Deployment of ``--replicas`` replicas created; time from the POST until every pod
   is Running (watch); server CPU (% of one core) and max RSS over the run.  The difference to the
   baseline is what the Deployment and ReplicaSet controllers add (ReplicaSet creation, slow-start
   batches 1, 2, 4, ..., status writes).
3. **reconcile latency of a scale change** (``--scales`` times, median and max): PATCH of
   ``deployments/<name>/scale`` by +1 replica → the new pod's ADDED event on a pod watch (goal:
   ≤ 100 ms); then -1 → the deletion (the pod's deletionTimestamp) seen on the watch.

Usage: ``.venv/bin/python bench/bench_deployment.py [--replicas 100] [--scales 10] [--json out.json]``;
``--quick`` is ``--replicas 20 --scales 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NAMESPACE, ApiClient, log, pod_manifest, pod_running, save_json
from scale_common import ControlPlane, Sampler, list_rv, spawn, stop_process, unmount_under, watch_until

TARGET_SCALE_MS = 100.0
CONCURRENCY = 32
DEPLOY = "pkbench-web"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"


def deployment(replicas: int) -> dict[str, Any]:
    tmpl = pod_manifest("x")
    labels = {"app": DEPLOY}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": DEPLOY, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": tmpl["spec"]}}}


async def wait_node_ready(api: ApiClient, within: float = 120) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        for nd in (await api.list("/api/v1/nodes")).get("items", []):
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in nd.get("status", {}).get("conditions", [])):
                return time.monotonic() - t0
        await asyncio.sleep(0.5)
    raise TimeoutError("the hollow node did not become Ready")


async def running_names(api: ApiClient, selector: str, n: int, rv: str, created: dict[str, float],
                        within: float = 600) -> dict[str, float]:
    """Watch pods of ``selector`` until ``n`` distinct ones were Running; name -> monotonic time
    (``created``: name -> when its ADDED event arrived)."""
    seen: dict[str, float] = {}
    async with asyncio.timeout(within):
        async for typ, pod in api.watch(PODS, resource_version=rv, params={"labelSelector": selector}):
            created.setdefault(pod["metadata"]["name"], time.monotonic())
            if typ in ("ADDED", "MODIFIED") and pod_running(pod) and not pod["metadata"].get("deletionTimestamp"):
                seen.setdefault(pod["metadata"]["name"], time.monotonic())
                if len(seen) >= n:
                    return seen
    return seen


async def bare_pods(api: ApiClient, n: int) -> tuple[float, float]:
    names = {f"pkbench-bare-{i:04d}" for i in range(n)}
    rv = await list_rv(api, PODS)
    waiter = asyncio.create_task(watch_until(api, PODS, names, rv, pod_running))
    sem = asyncio.Semaphore(CONCURRENCY)

    async def create(name: str) -> None:
        async with sem:
            await api.create(PODS, pod_manifest(name))

    t0 = time.monotonic()
    await asyncio.gather(*(create(nm) for nm in sorted(names)))
    created = time.monotonic() - t0
    seen = await waiter
    took = max(seen.values()) - t0

    async def delete(name: str) -> None:
        async with sem:
            await api.delete(f"{PODS}/{name}", body={"gracePeriodSeconds": 0})

    await asyncio.gather(*(delete(nm) for nm in sorted(names)))
    for _ in range(240):  # the baseline pods gone before the run
        if not (await api.list(PODS, {"labelSelector": "app=pkbench"})).get("items"):
            break
        await asyncio.sleep(0.5)
    return created, took


async def scale_latency(api: ApiClient, replicas: int, rounds: int) -> dict[str, list[float]]:
    """ms from the scale PATCH to the new pod's ADDED event, and to the deletion on scale-down."""
    up: list[float] = []
    down: list[float] = []
    for _ in range(rounds):
        for target, into in ((replicas + 1, up), (replicas, down)):
            rv = await list_rv(api, PODS)
            event = asyncio.Event()

            async def watch(want_up: bool = target > replicas, ev: asyncio.Event = event, rv: str = rv) -> float:
                async for typ, pod in api.watch(PODS, resource_version=rv, params={"labelSelector": f"app={DEPLOY}"}):
                    if want_up and typ == "ADDED":
                        return time.monotonic()
                    if not want_up and (typ == "DELETED" or pod["metadata"].get("deletionTimestamp")):
                        return time.monotonic()
                return time.monotonic()

            task = asyncio.create_task(watch())
            await asyncio.sleep(0.05)  # the watch is established
            t0 = time.monotonic()
            await api.patch(f"{DEPLOYMENTS}/{DEPLOY}/scale", {"spec": {"replicas": target}})
            seen_at = await asyncio.wait_for(task, 60)
            into.append(round((seen_at - t0) * 1000, 1))
            # let the deployment settle before the next change
            for _ in range(600):
                st = (await api.get(f"{DEPLOYMENTS}/{DEPLOY}")).get("status", {})
                if st.get("availableReplicas") == target and st.get("replicas") == target:
                    break
                await asyncio.sleep(0.1)
    return {"scale_up_ms": up, "scale_down_ms": down}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pkbd-", dir="/tmp"))
    result: dict[str, Any] = {"replicas": args.replicas}
    cp = ControlPlane(tmp / "cp")
    hollow = None
    try:
        api = await cp.start()
        hollow = spawn([sys.executable, "-m", "pykubelet", "hollow", "--kubeconfig", str(cp.kubeconfig),
                        "--nodes", "1", "--max-pods", str(args.replicas + 20),
                        "--data-dir", str(tmp / "hollow"), "--log-file", str(tmp / "hollow.log")],
                       tmp / "hollow.out")
        result["node_ready_s"] = round(await wait_node_ready(api), 1)
        log(f"hollow node Ready in {result['node_ready_s']} s")
        created_s, running_s = await bare_pods(api, args.replicas)
        result["bare_pods_created_s"], result["bare_pods_running_s"] = round(created_s, 2), round(running_s, 2)
        log(f"baseline: {args.replicas} bare pods Running in {result['bare_pods_running_s']} s")

        pids = {"server": cp.pid, "hollow": hollow.pid}
        rv = await list_rv(api, PODS)
        created: dict[str, float] = {}
        waiter = asyncio.create_task(running_names(api, f"app={DEPLOY}", args.replicas, rv, created))
        await asyncio.sleep(0.05)
        sampler = Sampler(pids).start()
        t0 = time.monotonic()
        await api.create(DEPLOYMENTS, deployment(args.replicas))
        seen = await waiter
        result["deployment_running_s"] = round(max(seen.values()) - t0, 2)
        result["deployment_pods_created_s"] = round(max(created.values()) - t0, 2)
        result["deployment_median_running_s"] = round(statistics.median(seen.values()) - t0, 2)
        result["during_run"] = await sampler.stop()
        result["ratio_to_bare"] = round(result["deployment_running_s"] / result["bare_pods_running_s"], 2)
        log(f"Deployment of {args.replicas}: all Running in {result['deployment_running_s']} s "
            f"({result['ratio_to_bare']}x bare pods)")
        for _ in range(600):
            st = (await api.get(f"{DEPLOYMENTS}/{DEPLOY}")).get("status", {})
            if st.get("availableReplicas") == args.replicas:
                break
            await asyncio.sleep(0.1)
        lat = await scale_latency(api, args.replicas, args.scales)
        result.update(lat)
        result["scale_up_median_ms"] = statistics.median(lat["scale_up_ms"])
        result["scale_down_median_ms"] = statistics.median(lat["scale_down_ms"])
        result["target_met"] = result["scale_up_median_ms"] <= TARGET_SCALE_MS
        hold = Sampler(pids).start()
        await asyncio.sleep(args.hold)
        result["steady"] = await hold.stop()
    except Exception:
        traceback.print_exc()
        result["error"] = traceback.format_exc()
    finally:
        await stop_process(hollow, "hollow", grace=60)
        await cp.stop()
        await asyncio.to_thread(unmount_under, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def report(r: dict[str, Any]) -> None:
    if "deployment_running_s" not in r:
        return
    print(f"\n== Deployment of {r['replicas']} replicas on one hollow node ==")
    print(f"baseline, {r['replicas']} bare pods: all created {r['bare_pods_created_s']:.2f} s, "
          f"all Running {r['bare_pods_running_s']:.2f} s")
    print(f"Deployment: all pods created {r['deployment_pods_created_s']:.2f} s, median Running "
          f"{r['deployment_median_running_s']:.2f} s, all Running {r['deployment_running_s']:.2f} s "
          f"= {r['ratio_to_bare']:.2f}x bare pods")
    if "scale_up_ms" in r:
        print(f"scale +1 -> pod created: median {r['scale_up_median_ms']:.1f} ms, max {max(r['scale_up_ms']):.1f} ms "
              f"(goal <= {TARGET_SCALE_MS:.0f} ms: {'MET' if r.get('target_met') else 'NOT MET'})")
        print(f"scale -1 -> pod deleted: median {r['scale_down_median_ms']:.1f} ms, "
              f"max {max(r['scale_down_ms']):.1f} ms")
    for phase, label in (("during_run", "during the run"), ("steady", "pods running")):
        for name, v in r.get(phase, {}).items():
            print(f"{label:>15} ({v['seconds']:.0f} s), {name}: CPU {v['cpu_pct']:.1f} % of one core, "
                  f"RSS max {v['rss_max_mb']:.0f} MB")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=100)
    p.add_argument("--scales", type=int, default=10)
    p.add_argument("--hold", type=float, default=15.0)
    p.add_argument("--quick", action="store_true", help="20 replicas, 3 scale changes, hold 3 s")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.replicas, args.scales, args.hold = 20, 3, 3.0
    r = asyncio.run(run(args))
    report(r)
    save_json(args.json, r)
    return 0 if r.get("target_met") else 1


if __name__ == "__main__":
    sys.exit(main())
