"""Benchmark 5: probe load — 100 pods, each with an exec readiness and an exec liveness probe every 1 s.

Why on the fake CRI runtime: the question is what the *agent* pays for 200 probe workers (one asyncio
task each, ExecSync round trips, result caching, status updates), not how fast runc can exec. So
``pykubelet fakecri`` (in-memory CRI over gRPC; ExecSync succeeds at once) stands in for containerd,
with ``pykubelet server`` + ``pykubelet agent --container-runtime-endpoint unix://<fake>``.

Measured once all 100 pods are Running and Ready:

* **agent CPU** over ``--hold`` seconds (default 60): utime+stime delta from ``/proc/<pid>/stat`` as
  a percentage of one core. Target <= 3 % (issue 17).
* **raw ExecSync baseline, same run**: during the same hold a separate process
  (``bench/bench_grpc_call.py --variant cri_client``) makes the bare ``ExecSync`` calls at the same
  rate (pods x 2 / period) against the same fakecri through the project's ``CRIClient``, in 25 ms
  slots (``bench_grpc_call.py``'s pacing; the prober's own wake grid is 100 ms); its CPU over its
  paced window is the floor an exec probe can cost through this client. Printed: the agent's CPU as a ratio to it.
* **loop thread / other threads**: the agent's CPU split into its main thread (the event loop,
  where every probe runs) and the rest (the default executor's threads: file, volume and pod cgroup
  work). The loop thread's share is the prober's figure. (Each benchmark process has a cgroup
  root of its own, ``bench/common.py``: with a shared one, another benchmark's live pod cgroups
  looked like orphans to this agent, whose cleanup retried them in those threads, up to ~10 % of a
  core.)
* **agent wake-ups per probe**: the agent's voluntary context switches (all threads, from
  ``/proc/<pid>/task/*/status``) over the hold per probe run: each is the event loop going to sleep
  and being woken again, which on a VM costs more than most of the Python around it
  (docs/benchmarks-scale.md, "Probes: fewer wake-ups"). Preemptions (involuntary switches) are
  printed too: they rise with the load from other processes.
* **probe lateness**: the agent's ``pykubelet_prober_probe_lateness_seconds`` histogram (every probe
  run after a worker's first: start time minus previous start minus the period), scraped from the
  kubelet's ``/metrics`` through the API server's node proxy before and after the hold; the delta is
  the hold window. Target: no probe late by more than one period (1 s), i.e. the ``le=1.0`` bucket
  holds every observation. Also reported: the probe count (expected ≈ 200/s).

``--no-probes`` runs the same pods without probes: what the idle agent costs with them (its
periodic work: PLEG relist, housekeeping, status and node status), which the probe figure includes.
No baseline process and no per-probe figures then.

``--profile`` samples the agent with py-spy (``--gil``) during the hold's last 30 s (or less).

Usage: ``.venv/bin/python bench/bench_probes.py [--pods 100] [--hold 60] [--profile] [--json out.json]``.
With more than 100 pods the agent is started with ``--max-pods`` ten above the count (the default is
110). The run's folder is removed with whatever pod volumes are still mounted in it, also after a
failed run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_grpc_call import loadavg
from common import (
    NAMESPACE,
    NODE_NAME,
    SRC,
    Cluster,
    cpu_seconds,
    delete_pods,
    log,
    pod_manifest,
    pods_path_rv,
    save_json,
)
from cri_api.v1 import api_pb2 as pb
from scale_common import print_profile, py_spy, remove_data_dir, summarize_profile

from pykubelet.cri.client import CRIClient

TARGET_CPU_PCT = 3.0
GRPC_CALL_SCRIPT = Path(__file__).resolve().parent / "bench_grpc_call.py"
PERIOD = 1


def probe_pod(name: str, probes: bool = True) -> dict[str, Any]:
    pod = pod_manifest(name)
    c = pod["spec"]["containers"][0]
    if probes:
        probe = {"exec": {"command": ["true"]}, "periodSeconds": PERIOD}
        c["readinessProbe"] = dict(probe)
        c["livenessProbe"] = dict(probe)
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    pod["spec"]["nodeName"] = NODE_NAME  # bound up front: measure the agent, not the scheduler
    return pod


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of all the process's threads: a voluntary one is
    the event loop going to sleep, so per probe it counts the loop's wake-ups."""
    vol = invol = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol += int(line.split()[1])
    return vol, invol


def loop_thread_cpu_seconds(pid: int) -> float:
    """utime+stime of the process's main thread alone: the event loop, where every probe runs
    (the other threads run file and cgroup work handed off with ``asyncio.to_thread``)."""
    return cpu_seconds_of(Path(f"/proc/{pid}/task/{pid}/stat"))


def cpu_seconds_of(stat_path: Path) -> float:
    try:
        stat = stat_path.read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ready(pod: dict[str, Any]) -> bool:
    conds = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True"


async def wait_ready(cluster: Cluster, names: set[str], within: float = 300) -> float:
    assert cluster.api is not None
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        lst = await cluster.api.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
        n = sum(1 for p in lst.get("items", []) if p["metadata"]["name"] in names and ready(p))
        if n == len(names):
            return time.monotonic() - t0
        await asyncio.sleep(1)
    raise TimeoutError("pods did not all become Ready")


def scrape(kubeconfig: Path) -> dict[str, float]:
    """Lateness histogram buckets (summed over probe types) and probe count from the agent /metrics."""
    for attempt in range(3):  # the node proxy can fail once on a loaded machine: try again
        proc = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/metrics"],
            capture_output=True, text=True, timeout=60, check=attempt == 2,
        )
        if proc.returncode == 0:
            break
        log(f"scraping the agent's /metrics failed ({proc.stderr.strip()[-300:]}); trying again")
        time.sleep(1)
    out = proc.stdout
    vals: dict[str, float] = {}
    for line in out.splitlines():
        m = re.match(r'pykubelet_prober_probe_lateness_seconds_(bucket|count|sum)\{(.*?)\} (\S+)', line)
        if m:
            le = re.search(r'le="([^"]+)"', m.group(2))
            key = f"le={le.group(1)}" if le else m.group(1)
            vals[key] = vals.get(key, 0.0) + float(m.group(3))
        m = re.match(r'prober_probe_total\{.*?\} (\S+)', line)
        if m:
            vals["probes"] = vals.get("probes", 0.0) + float(m.group(1))
    return vals


async def raw_exec_baseline(sock: Path, rate: float, seconds: float) -> dict[str, Any]:
    """The bare ExecSync calls at ``rate``/s on one running container of the same fakecri, from a
    separate process through ``CRIClient`` (bench_grpc_call.py); its CPU over the paced window."""
    cri = CRIClient(f"unix://{sock}")
    try:
        containers = await cri.list_containers()
    finally:
        await cri.close()
    cid = next(c.id for c in containers if c.state == pb.CONTAINER_RUNNING)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(GRPC_CALL_SCRIPT), "--variant", "cri_client",
        "--endpoint", f"unix://{sock}", "--container-id", cid, "--rate", str(rate), "--seconds", str(seconds),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={"PYTHONPATH": str(SRC)})
    out, err = await proc.communicate()
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"raw ExecSync baseline failed: {err.decode(errors='replace')[-2000:]}")
    res: dict[str, Any] = json.loads(lines[-1])
    return res


def start_fakecri(sock: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pykubelet", "fakecri", "--listen", f"unix://{sock}"],
                                stdout=out, stderr=subprocess.STDOUT,
                                env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, start_new_session=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pkp-", dir="/tmp"))
    sock = tmp / "fakecri.sock"
    fake = start_fakecri(sock, tmp / "fakecri.log")
    cluster = Cluster(SimpleNamespace(endpoint=f"unix://{sock}"), tmp / "data",  # type: ignore[arg-type]
                      agent_args=[f"--max-pods={args.pods + 10}"] if args.pods > 100 else [])
    result: dict[str, Any] = {"pods": args.pods, "hold_s": args.hold, "period_s": PERIOD, "probes": args.probes}
    names = [f"probe-{i:03d}" for i in range(args.pods)]
    try:
        for _ in range(100):
            if sock.exists():
                break
            await asyncio.sleep(0.1)
        await cluster.start()
        assert cluster.api is not None
        await pods_path_rv(cluster.api)
        await asyncio.gather(*(cluster.api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", probe_pod(n, args.probes))
                               for n in names))
        result["all_ready_s"] = round(await wait_ready(cluster, set(names)), 2)
        log(f"{args.pods} pods Ready in {result['all_ready_s']} s; holding {args.hold} s")
        await asyncio.sleep(5)  # let the start-up burst settle
        kubeconfig = cluster.data_dir / "kubeconfig"
        before = await asyncio.to_thread(scrape, kubeconfig)
        pid = cluster.pid("agent")
        rate = 2 * args.pods / PERIOD
        result["loadavg_before"] = loadavg()
        baseline = (asyncio.create_task(raw_exec_baseline(sock, rate, max(5.0, args.hold - 2.5)))
                    if args.probes else None)
        profile: asyncio.Task[Path | None] | None = None
        c0, t0, cs0 = cpu_seconds(pid), time.monotonic(), context_switches(pid)
        m0 = loop_thread_cpu_seconds(pid)
        if args.profile:
            prof_s = min(30.0, args.hold - 2)
            await asyncio.sleep(args.hold - prof_s - 1)
            profile = asyncio.create_task(py_spy(pid, prof_s, tmp / "agent.spy", rate=100))
            await asyncio.sleep(prof_s + 1)
        else:
            await asyncio.sleep(args.hold)
        c1, t1, cs1 = cpu_seconds(pid), time.monotonic(), context_switches(pid)
        m1 = loop_thread_cpu_seconds(pid)
        result["agent_loop_thread_cpu_pct"] = round(100 * (m1 - m0) / (t1 - t0), 2)
        result["agent_other_threads_cpu_pct"] = round(100 * ((c1 - c0) - (m1 - m0)) / (t1 - t0), 2)
        after = await asyncio.to_thread(scrape, kubeconfig)  # right at the end of the hold window
        result["loadavg_after"] = loadavg()
        if baseline is None:  # --no-probes: the idle agent with these pods
            result["agent_cpu_pct"] = round(100 * (c1 - c0) / (t1 - t0), 2)
            result["agent_wakeups_per_s"] = round((cs1[0] - cs0[0]) / (t1 - t0), 1)
            log(f"result: {result}")
            log(f"idle agent with {args.pods} pods, no probes: {result['agent_cpu_pct']} % of a core (loop "
                f"thread {result['agent_loop_thread_cpu_pct']} %, other threads {result['agent_other_threads_cpu_pct']} %), "
                f"{result['agent_wakeups_per_s']} wake-ups/s; load average {result['loadavg_before']} -> "
                f"{result['loadavg_after']}")
            if profile is not None and (spy := await profile) is not None:
                result["profile"] = summarize_profile(spy, min(30.0, args.hold - 2), rate=100)
                print_profile(result["profile"])
            await delete_pods(cluster.api, names)
            return result
        raw = await baseline
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        n = delta.get("count", 0.0)
        result["agent_cpu_pct"] = round(100 * (c1 - c0) / (t1 - t0), 2)
        result["raw_exec_sync_cpu_pct"] = raw["cpu_pct"]
        result["raw_exec_sync_us_per_call"] = raw["us_per_call"]
        result["raw_exec_sync_calls_per_s"] = round(raw["calls"] / raw["wall_s"], 1)
        result["agent_to_raw_ratio"] = round(result["agent_cpu_pct"] / raw["cpu_pct"], 2) if raw["cpu_pct"] else None
        result["agent_us_per_probe"] = (round(1e6 * (c1 - c0) / delta["probes"], 1)
                                        if delta.get("probes") else None)
        result["probes_per_s"] = round(delta.get("probes", 0.0) / (t1 - t0), 1)
        result["agent_loop_thread_us_per_probe"] = (round(1e6 * (m1 - m0) / delta["probes"], 1)
                                                    if delta.get("probes") else None)
        if delta.get("probes"):
            result["agent_wakeups_per_probe"] = round((cs1[0] - cs0[0]) / delta["probes"], 3)
            result["agent_preemptions_per_probe"] = round((cs1[1] - cs0[1]) / delta["probes"], 3)
        result["lateness_observations"] = int(n)
        result["lateness_mean_ms"] = round(1000 * delta.get("sum", 0.0) / n, 1) if n else None
        result["late_over_100ms"] = int(n - delta.get("le=0.1", 0.0))
        result["late_over_one_period"] = int(n - delta.get("le=1.0", 0.0))
        result["cpu_target_met"] = result["agent_cpu_pct"] < TARGET_CPU_PCT
        result["lateness_target_met"] = result["late_over_one_period"] == 0 and n > 0
        log(f"result: {result}")
        log(f"agent {result['agent_cpu_pct']} % of a core vs raw ExecSync at the same rate "
            f"{result['raw_exec_sync_cpu_pct']} % (ratio {result['agent_to_raw_ratio']}x); "
            f"{result['agent_us_per_probe']} µs and {result.get('agent_wakeups_per_probe')} wake-ups per probe; "
            f"loop thread {result['agent_loop_thread_cpu_pct']} % ({result['agent_loop_thread_us_per_probe']} µs "
            f"per probe), other threads {result['agent_other_threads_cpu_pct']} %; "
            f"load average {result['loadavg_before']} -> {result['loadavg_after']}")
        if profile is not None:
            spy = await profile
            if spy is not None:
                summary = summarize_profile(spy, min(30.0, args.hold - 2), rate=100)
                result["profile"] = summary
                print_profile(summary)
        await delete_pods(cluster.api, names)
    except Exception:
        traceback.print_exc()
        result["error"] = traceback.format_exc()
    finally:
        await cluster.stop()
        if fake.poll() is None:
            fake.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                fake.wait(10)
            if fake.poll() is None:
                fake.kill()
                fake.wait()
        await remove_data_dir(tmp)  # a run that failed before deleting its pods left their volumes mounted
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=100)
    p.add_argument("--hold", type=float, default=60.0)
    p.add_argument("--quick", action="store_true", help="hold 15 s")
    p.add_argument("--profile", action="store_true", help="py-spy the agent during the hold's last 30 s")
    p.add_argument("--no-probes", dest="probes", action="store_false",
                   help="the same pods without probes: the idle agent's own cost")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.hold = 15.0
    result = asyncio.run(run(args))
    save_json(args.json, result)
    if not args.probes:
        return 0 if "error" not in result else 1
    return 0 if result.get("cpu_target_met") and result.get("lateness_target_met") else 1


if __name__ == "__main__":
    sys.exit(main())
