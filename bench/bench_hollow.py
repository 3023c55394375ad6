"""Scale benchmark 4: 100 hollow nodes x 30 pods through the scheduler → all Running.

The control plane's scale test, as upstream's kubemark does it: ``pykubelet server`` (API server,
scheduler, node lifecycle controller) as one process and ``pykubelet hollow --nodes N`` (N real agents
on in-memory fake runtimes, one process) as another, both with the command lines the project ships.

1. **baseline, same run — the API floor**: the three writes every pod needs from the control plane
   and its node, done by one client with 32 requests in flight, for the same number of pods in a
   namespace of their own: create the pod (with a scheduler name nobody serves), bind it
   (``pods/binding``), write its status as Running (``pods/status`` PATCH). Everything the real
   path adds on top (scheduler decisions, watches to 100 agents, sandbox/container calls, several
   status writes per pod, events) shows in the ratio. The floor pods are deleted before the nodes start.
2. ``--nodes`` hollow nodes started; time until all are Ready (information).
3. **the run**: ``--nodes x --pods-per-node`` benchmark pods created at once (no ``nodeName``); time
   from the first POST until every pod was seen Running (all containers running) through one watch.
   Goal: ≤ 60 s for 100 x 30. Server and hollow-process CPU (% of one core) and max RSS over the
   run; how evenly the scheduler spread the pods (min/max per node).
4. **steady state**: ``--hold`` seconds (default 30) with all pods running: server and hollow CPU/RSS.

``--hollow-processes P`` runs ``pykubelet hollow --processes P``: the hollow figures are then the
sums over its child processes (CPU; RSS as the sum of each child's maximum). ``--count-requests``
starts the server with ``--access-log`` and reports the API requests made during the run, per pod,
by verb and path (names replaced by ``*``): which requests each pod costs the control plane.

Usage: ``.venv/bin/python bench/bench_hollow.py [--nodes 100] [--pods-per-node 30] [--hold 30]
[--hollow-processes 2] [--count-requests] [--json out.json]``; ``--nodes 10 --pods-per-node 5
--hold 5`` is a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import re
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NAMESPACE, log, pod_manifest, pod_running, save_json
from scale_common import (
    ControlPlane,
    Sampler,
    list_rv,
    make_data_dir,
    print_profile,
    remove_data_dir,
    spawn,
    start_py_spy,
    stop_process,
    stop_py_spy,
    summarize_profile,
    watch_until,
)

from pykubelet.common.apiclient import ApiError

TARGET_RUNNING_S = 60.0
FLOOR_NS = "pkbench-floor"
CONCURRENCY = 32


async def gather_limited(n: int, fn: Any) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        async with sem:
            await fn(i)

    await asyncio.gather(*(one(i) for i in range(n)))


async def api_floor(cp: ControlPlane, n: int) -> float:
    """Create + bind + status-Running for ``n`` pods from one client; seconds."""
    api = cp.api
    assert api is not None
    await api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLOOR_NS}})
    path = f"/api/v1/namespaces/{FLOOR_NS}/pods"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    async def one(i: int) -> None:
        name = f"floor-{i:05d}"
        pod = pod_manifest(name, namespace=FLOOR_NS)
        pod["spec"]["schedulerName"] = "pkbench-nobody"
        await api.create(path, pod)
        await api.create(f"{path}/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "pkbench-floor-node"}})
        await api.patch(f"{path}/{name}/status", {"status": {
            "phase": "Running", "podIP": "198.18.255.1", "startTime": now,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{"name": "sleep", "ready": True, "restartCount": 0, "image": "busybox:1.36",
                                   "imageID": "", "state": {"running": {"startedAt": now}}}]}})

    t0 = time.monotonic()
    await gather_limited(n, one)
    took = time.monotonic() - t0

    async def delete(i: int) -> None:
        try:
            await api.delete(f"{path}/floor-{i:05d}", body={"gracePeriodSeconds": 0})
        except ApiError as e:  # the pod GC may have removed it already: bound to a node that does not exist
            if e.status != 404:
                raise

    await gather_limited(n, delete)
    return took


_ACCESS = re.compile(r'\[(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4})\] "(\w+) (\S+) HTTP')
# path segments kept as they are; any other (names, namespaces) becomes "*"
_WORDS = {"api", "apis", "v1", "namespaces", "pods", "status", "binding", "events", "nodes", "leases",
          "coordination.k8s.io", "events.k8s.io", "serviceaccounts", "token", "configmaps", "secrets",
          "services", "endpoints", "persistentvolumeclaims", "persistentvolumes", "eviction", "log"}


def request_kind(method: str, target: str) -> str:
    """``GET /api/v1/namespaces/*/pods/*`` (``WATCH`` for watches) from one request line."""
    path, _, query = target.partition("?")
    verb = "WATCH" if method == "GET" and re.search(r"(^|&)watch=(true|1)", query) else method
    return f"{verb} " + "/".join(seg if seg in _WORDS or not seg else "*" for seg in path.split("/"))


def request_counts(log_text: str, start: float, end: float, pods: int) -> dict[str, float]:
    """Requests per pod by kind, from the server's access log lines between ``start`` and
    ``end`` (epoch seconds; the log has whole seconds)."""
    counts: collections.Counter[str] = collections.Counter()
    for m in _ACCESS.finditer(log_text):
        t = datetime.datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S %z").timestamp()
        if int(start) <= t <= end:
            counts[request_kind(m.group(2), m.group(3))] += 1
    total = sum(counts.values())
    out = {k: round(v / pods, 2) for k, v in counts.most_common(20)}
    out["total"] = round(total / pods, 2)
    return out


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def sum_hollow(phase: dict[str, dict[str, float]]) -> None:
    """With ``--hollow-processes``: "hollow" becomes the sum over the parent and its children."""
    parts = [k for k in phase if k == "hollow" or k.startswith("hollow.")]
    if len(parts) < 2:
        return
    phase["hollow"] = {"cpu_pct": round(sum(phase[k]["cpu_pct"] for k in parts), 2),
                       "rss_max_mb": round(sum(phase[k]["rss_max_mb"] for k in parts), 1),
                       "seconds": phase["hollow"]["seconds"]}
    for k in parts:
        if k != "hollow":
            del phase[k]


async def ready_nodes(cp: ControlPlane) -> int:
    assert cp.api is not None
    nodes = (await cp.api.list("/api/v1/nodes", params={"labelSelector": "pykubelet.io/hollow=true"})).get("items", [])
    return sum(1 for nd in nodes for c in nd.get("status", {}).get("conditions", [])
               if c.get("type") == "Ready" and c.get("status") == "True")


async def wait_nodes_ready(cp: ControlPlane, n: int, within: float = 300) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if await ready_nodes(cp) >= n:
            return time.monotonic() - t0
        await asyncio.sleep(1)
    raise TimeoutError(f"hollow nodes not all Ready within {within} s")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp, on_tmpfs = make_data_dir("pkhb-", args.data_on_disk)
    total = args.nodes * args.pods_per_node
    result: dict[str, Any] = {"nodes": args.nodes, "pods_per_node": args.pods_per_node, "pods": total,
                              "prebound": args.prebound, "data_dir_on_tmpfs": on_tmpfs}
    cp = ControlPlane(tmp / "cp", extra=["--access-log"] if args.count_requests else [])
    hollow = None
    try:
        api = await cp.start()
        result["api_floor_s"] = round(await api_floor(cp, total), 2)
        log(f"API floor (create + bind + status) for {total} pods: {result['api_floor_s']} s")

        hollow = spawn([sys.executable, "-m", "pykubelet", "hollow", "--kubeconfig", str(cp.kubeconfig),
                        "--nodes", str(args.nodes), "--max-pods", str(max(110, args.pods_per_node + 10)),
                        "--data-dir", str(tmp / "hollow"), "--log-file", str(tmp / "hollow.log"), "-v", "1",
                        *(["--processes", str(args.hollow_processes)] if args.hollow_processes > 1 else [])],
                       tmp / "hollow.out")
        log(f"hollow started (pid {hollow.pid}, log {tmp / 'hollow.log'})")
        result["nodes_ready_s"] = round(await wait_nodes_ready(cp, args.nodes), 1)
        log(f"{args.nodes} hollow nodes Ready in {result['nodes_ready_s']} s")
        await asyncio.sleep(args.settle)

        pids = {"server": cp.pid, "hollow": hollow.pid}
        pids.update({f"hollow.{i}": c for i, c in enumerate(children(hollow.pid))})
        idle = Sampler(pids).start()
        await asyncio.sleep(args.settle)
        result["idle_nodes"] = await idle.stop()
        sum_hollow(result["idle_nodes"])

        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        names = [f"hollow-pod-{i:05d}" for i in range(total)]

        def make_pod(name: str, i: int) -> dict[str, Any]:
            pod = pod_manifest(name)
            if args.prebound:  # round-robin: the hollow nodes and the API without the scheduler
                pod["spec"]["nodeName"] = f"hollow-{i % args.nodes}"
            return pod

        rv = await list_rv(api, path)
        last = [time.monotonic()]

        def progress(k: int) -> None:
            if time.monotonic() - last[0] > 5:
                last[0] = time.monotonic()
                log(f"  {k}/{total} Running")

        waiter = asyncio.create_task(watch_until(api, path, set(names), rv, pod_running, progress=progress))
        await asyncio.sleep(0)
        sampler = Sampler(pids).start()
        spies = {}
        if args.profile:  # the first --profile seconds of the run, server and hollow process
            spies = {k: (await start_py_spy(pid, tmp / f"{k}.txt", rate=50), tmp / f"{k}.txt") for k, pid in pids.items()}
        t0 = time.monotonic()
        wall0 = time.time()

        async def create_all() -> None:
            await gather_limited(total, lambda i: api.create(path, make_pod(names[i], i)))
            result["all_created_s"] = round(time.monotonic() - t0, 2)

        creating = asyncio.create_task(create_all())
        if spies:  # py-spy pauses the process per sample: only --profile seconds, even if creating takes longer
            await asyncio.wait([waiter], timeout=args.profile)
            took = time.monotonic() - t0
            result["profile"] = {}
            for k, (spy, out) in spies.items():
                if await stop_py_spy(spy, out) is not None:
                    result["profile"][k] = summarize_profile(out, took, rate=50, top=25, share=True)
                    if args.profile_out:
                        shutil.copy(out, f"{args.profile_out}.{k}.txt")
        await creating
        seen = await waiter
        result["all_running_s"] = round(max(seen.values()) - t0, 2)
        result["median_running_s"] = round(sorted(seen.values())[len(seen) // 2] - t0, 2)
        result["during_run"] = await sampler.stop()
        sum_hollow(result["during_run"])
        if args.count_requests:
            text = await asyncio.to_thread((cp.data_dir / "server.log").read_text, errors="replace")
            result["requests_per_pod"] = request_counts(text, wall0, wall0 + result["all_running_s"], total)
        result["ratio_to_floor"] = round(result["all_running_s"] / result["api_floor_s"], 2)
        log(f"{total} pods Running in {result['all_running_s']} s ({result['ratio_to_floor']}x the API floor)")
        per_node = collections.Counter(p["spec"].get("nodeName", "")
                                       for p in (await api.list(path)).get("items", []) if p["metadata"]["name"] in seen)
        result["pods_per_node_min_max"] = [min(per_node.values()), max(per_node.values())]

        hold = Sampler(pids).start()
        await asyncio.sleep(args.hold)
        result["steady"] = await hold.stop()
        sum_hollow(result["steady"])
        result["target_met"] = result["all_running_s"] <= TARGET_RUNNING_S
        result["nodes_ready_after_hold"] = await ready_nodes(cp)
    except Exception:
        traceback.print_exc()
        result["error"] = traceback.format_exc()
        if (tmp / "hollow.log").exists():
            print((tmp / "hollow.log").read_text(errors="replace")[-3000:], file=sys.stderr)
    finally:
        await stop_process(hollow, "hollow", grace=60)
        await cp.stop()
        await remove_data_dir(tmp)  # no pod volume mounted: hollow volumes are plain folders
    return result


def report(r: dict[str, Any]) -> None:
    if "all_running_s" not in r:
        return
    how = "pre-bound (no scheduler)" if r.get("prebound") else "through the scheduler"
    print(f"\n== {r['nodes']} hollow nodes x {r['pods_per_node']} pods {how} ==")
    print(f"API floor, create + bind + status for {r['pods']} pods (baseline): {r['api_floor_s']:.2f} s")
    print(f"hollow nodes Ready after {r['nodes_ready_s']:.1f} s")
    print(f"pods: all created {r['all_created_s']:.2f} s, median Running {r['median_running_s']:.2f} s, "
          f"all Running {r['all_running_s']:.2f} s = {r['ratio_to_floor']:.2f}x the floor "
          f"(goal <= {TARGET_RUNNING_S:.0f} s: {'MET' if r.get('target_met') else 'NOT MET'}); "
          f"pods per node min/max {r['pods_per_node_min_max']}")
    print(f"nodes Ready after the hold: {r.get('nodes_ready_after_hold')}/{r['nodes']}")
    for phase, label in (("idle_nodes", "nodes, no pods"), ("during_run", "during the run"),
                         ("steady", "pods running")):
        for name, v in r.get(phase, {}).items():
            print(f"{label:>15} ({v['seconds']:.0f} s), {name}: CPU {v['cpu_pct']:.1f} % of one core, "
                  f"RSS max {v['rss_max_mb']:.0f} MB")
    if "requests_per_pod" in r:
        print("API requests during the run, per pod: " + ", ".join(f"{k} {v}" for k, v in r["requests_per_pod"].items()))
    for name, summary in r.get("profile", {}).items():
        print(f"profile of the {name} process during the run:")
        print_profile(summary)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--pods-per-node", type=int, default=30)
    p.add_argument("--hold", type=float, default=30.0)
    p.add_argument("--settle", type=float, default=10.0, help="seconds to wait, then to sample, idle nodes")
    p.add_argument("--profile", type=float, default=0.0, metavar="S",
                   help="py-spy the server and the hollow process over the first S seconds of the run")
    p.add_argument("--profile-out", default=None, metavar="PATH",
                   help="keep the raw py-spy output of --profile as PATH.<process>.txt")
    p.add_argument("--prebound", action="store_true",
                   help="create the pods with spec.nodeName set (round-robin): leaves the scheduler out")
    p.add_argument("--hollow-processes", type=int, default=1, metavar="P",
                   help="run the hollow nodes in P processes (pykubelet hollow --processes)")
    p.add_argument("--count-requests", action="store_true",
                   help="server with --access-log; report the API requests per pod made during the run")
    p.add_argument("--quick", action="store_true", help="10 nodes x 5 pods, hold 5 s")
    p.add_argument("--json", default=None)
    p.add_argument("--data-on-disk", action="store_true",
                   help="the run's folders under /tmp on disk, not on a tmpfs (see scale_common.make_data_dir)")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.pods_per_node, args.hold, args.settle = 10, 5, 5.0, 3.0
    r = asyncio.run(run(args))
    report(r)
    save_json(args.json, r)
    return 0 if r.get("target_met") else 1


if __name__ == "__main__":
    sys.exit(main())
