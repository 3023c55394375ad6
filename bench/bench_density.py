"""Benchmark 3: the agent's own footprint with 110 running pods (upstream's default maxPods).

What is measured, on one private containerd with ``pykubelet server`` + ``pykubelet agent``:

1. **idle baseline** (same run): the agent with no pods for ``--idle`` seconds (default 15) —
   RSS sampled every second from ``/proc/<pid>/status`` (VmRSS) and CPU from ``/proc/<pid>/stat``
   (utime+stime delta over the window, as a percentage of one core).
2. 110 benchmark pods created at once and waited for (watch) until all are Running; the time this
   takes is recorded for information.
3. **steady state**: ``--hold`` seconds (default 60) with the 110 pods running and nothing else
   happening, sampled the same way. This is the cost of keeping pods: PLEG relists of every
   container each second, the periodic pod syncs, node status and Lease updates, status manager.

Targets for the agent in the steady state: RSS ≤ 100 MB (max sample) and CPU ≤ 5 % of one core.
Server and containerd CPU are recorded for information only (the control plane is a dev tool).
The agent's CPU over the hold is also split by thread (``/proc/<pid>/task/*``: the event loop,
grpc's polling threads, ``asyncio.to_thread`` workers), and ``--profile OUT`` records the hold with
py-spy (a developer tool, not a dependency: ``.venv/bin/pip install py-spy``) as collapsed stacks.
The load average is recorded before and after each window: on a shared machine it says how far
the CPU figures can be trusted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Cluster,
    RawCRI,
    bench_containerd,
    cpu_seconds,
    create_pods,
    delete_pods,
    log,
    rss_bytes,
    save_json,
    stats,
    wait_runtime_empty,
)

TARGET_RSS_MB = 100.0
TARGET_CPU_PCT = 5.0
MB = 1024 * 1024


def thread_cpu(pid: int) -> dict[str, float]:
    """utime+stime per thread name of a process, in seconds (threads of one name summed; the main
    thread, which runs the event loop, on its own)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if tid == str(pid):
            name = "event loop"  # the other Python threads keep the process's name: to_thread workers, grpc's poller
        fields = stat[stat.rindex(")") + 2 :].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def sample(pids: dict[str, int], seconds: float) -> dict[str, Any]:
    """RSS every second and CPU over the window for each named pid (the agent's also per thread)."""
    load0 = loadavg()
    threads0 = thread_cpu(pids["agent"])
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    rss: dict[str, list[float]] = {k: [] for k in pids}
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for k, p in pids.items():
            rss[k].append(rss_bytes(p) / MB)
        await asyncio.sleep(1.0)
    wall = time.monotonic() - t0
    out: dict[str, Any] = {"seconds": wall, "loadavg": [load0, loadavg()]}
    for k, p in pids.items():
        out[k] = {"rss_mb": stats(rss[k]).__dict__,
                  "cpu_pct": 100.0 * (cpu_seconds(p) - cpu0[k]) / wall}
    # the agent's RSS each second: whether the window's maximum is a start-up leftover that falls, a
    # steady level, or a growth during the window (which the statistics alone do not tell apart)
    out["agent"]["rss_mb_series"] = [round(v, 2) for v in rss["agent"]]
    threads1 = thread_cpu(pids["agent"])
    out["agent"]["threads_cpu_pct"] = {
        name: round(100.0 * (t - threads0.get(name, 0.0)) / wall, 3) for name, t in sorted(threads1.items())}
    return out


def start_profile(pid: int, seconds: float, out: str) -> subprocess.Popen[bytes] | None:
    """py-spy over the hold (collapsed stacks of the busy samples, every thread), or None without it."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        log("--profile: py-spy not found (pip install py-spy); not profiling")
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "100",
                             "--format", "raw", "--nonblocking", "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"bench": "density", "pods": args.pods, "hold_s": args.hold,
                              "targets": {"agent_rss_mb": TARGET_RSS_MB, "agent_cpu_pct": TARGET_CPU_PCT}}
    async with bench_containerd() as cd, RawCRI(cd, cd.data_dir / "raw-logs") as raw:
        cluster = Cluster(cd, cd.data_dir.parent / "cluster")
        # the agent's pod volumes (tmpfs) live under the cluster's folder: a run that stops before the
        # pods are deleted leaves them mounted unless the containerd cleanup unmounts them too
        cd.also_unmount.append(cluster.data_dir.absolute())
        spy: subprocess.Popen[bytes] | None = None
        try:
            log("starting pykubelet server + agent")
            await cluster.start()
            assert cluster.api is not None and cd.pid is not None
            pids = {"agent": cluster.pid("agent"), "server": cluster.pid("server"), "containerd": cd.pid}
            await asyncio.sleep(3)  # let start-up work (registration, first syncs) settle
            log(f"idle: sampling {args.idle}s")
            result["idle"] = await sample(pids, args.idle)
            names = [f"d-{i}" for i in range(args.pods)]
            log(f"creating {args.pods} pods")
            t0, seen = await create_pods(cluster.api, names)
            result["all_running_s"] = max(seen.values()) - t0
            log(f"all {args.pods} running after {result['all_running_s']:.1f}s; settling 5s")
            await asyncio.sleep(5)
            log(f"steady state: sampling {args.hold}s")
            spy = start_profile(pids["agent"], args.hold, args.profile) if args.profile else None
            result["loaded"] = await sample(pids, args.hold)
            if spy is not None:
                await asyncio.to_thread(spy.wait, 30)
            running = sum(1 for c in await raw.cri.list_containers() if c.state == 1)  # CONTAINER_RUNNING
            result["containers_running_after_hold"] = running
            t1 = time.monotonic()
            await delete_pods(cluster.api, names)
            await wait_runtime_empty(raw.cri, within=600)
            result["delete_all_s"] = time.monotonic() - t1
            result["status"] = "ok"
        except Exception as e:
            traceback.print_exc()
            result["status"] = f"error: {type(e).__name__}: {e}"[:2000]
        finally:
            if spy is not None and spy.poll() is None:
                spy.kill()
                await asyncio.to_thread(spy.wait)
            await cluster.stop()
    return result


async def run_until_signalled(args: argparse.Namespace) -> dict[str, Any]:
    """``run`` that SIGTERM/SIGHUP (``timeout``, a closed terminal) cancel like Ctrl-C does, so its
    cleanup still runs: agent and server stopped, containerd, its shims and containers, mounts,
    cgroups, bridge and temp folder removed."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()

    def stop(sig: signal.Signals) -> None:
        if task.cancelling():
            log(f"{sig.name}: already cleaning up, wait for it")
        else:
            log(f"{sig.name}: stopping, cleaning up")
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await run(args)
    except asyncio.CancelledError:
        return {"bench": "density", "pods": args.pods, "hold_s": args.hold, "status": "stopped by a signal"}


def report(result: dict[str, Any]) -> None:
    print(f"\nBenchmark 3 - density: {result['pods']} running pods held {result['hold_s']}s")
    if "loaded" not in result:
        print(f"  {result.get('status')}")
        return
    print(f"  all Running after {result['all_running_s']:.1f}s; "
          f"{result.get('containers_running_after_hold')} containers running at the end")
    print(f"  {'':11} {'RSS idle (MB)':>14} {'RSS loaded max':>15} {'CPU idle':>9} {'CPU loaded':>11}")
    for k in ("agent", "server", "containerd"):
        i, ld = result["idle"][k], result["loaded"][k]
        print(f"  {k:11} {i['rss_mb']['max']:14.1f} {ld['rss_mb']['max']:15.1f} "
              f"{i['cpu_pct']:8.1f}% {ld['cpu_pct']:10.1f}%")
    for phase in ("idle", "loaded"):
        threads = result[phase]["agent"].get("threads_cpu_pct", {})
        busy = ", ".join(f"{n} {v:.2f}%" for n, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v > 0)
        print(f"  agent CPU by thread, {phase} (load {' -> '.join(result[phase].get('loadavg', []))}): {busy}")
    a = result["loaded"]["agent"]
    rss_ok = a["rss_mb"]["max"] <= TARGET_RSS_MB
    cpu_ok = a["cpu_pct"] <= TARGET_CPU_PCT
    idle_rss = result["idle"]["agent"]["rss_mb"]["max"]
    per_pod = (a["rss_mb"]["max"] - idle_rss) * 1024 / max(1, result["pods"])
    print(f"  agent RSS loaded/idle: {a['rss_mb']['max'] / idle_rss:.2f}x ({per_pod:.0f} kB per pod)")
    print(f"  agent RSS {a['rss_mb']['max']:.1f} MB (target <= {TARGET_RSS_MB:.0f}: {'MET' if rss_ok else 'MISSED'}); "
          f"agent CPU {a['cpu_pct']:.1f}% of one core (target <= {TARGET_CPU_PCT:.0f}%: {'MET' if cpu_ok else 'MISSED'})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=110)
    p.add_argument("--hold", type=float, default=60.0, help="steady-state window, seconds (default 60)")
    p.add_argument("--idle", type=float, default=15.0, help="idle baseline window, seconds (default 15)")
    p.add_argument("--quick", action="store_true", help="30 pods, 15 s hold, 5 s idle")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    p.add_argument("--profile", metavar="OUT", help="py-spy the agent over the hold (collapsed stacks to OUT)")
    args = p.parse_args(argv)
    if args.quick:
        args.pods, args.hold, args.idle = 30, 15.0, 5.0
    result = asyncio.run(run_until_signalled(args))
    report(result)
    save_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
