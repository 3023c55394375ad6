"""Where the agent's memory goes per pod: tracemalloc snapshots of one agent with 0 and N pods (fake CRI).

Why a separate script: ``bench_scale_pods.py`` measures RSS from outside; to find *which objects*
each pod costs (copies of the pod in the pod manager, the API source, the status cache, the volume
manager...) the agent itself has to record its allocations. This starts ``pykubelet fakecri``,
``pykubelet server`` and one ``pykubelet agent`` with the command line ``pykubelet up`` builds, except
that the agent runs under a small wrapper (``python bench/bench_agent_memory.py --wrap agent ...``)
that starts ``tracemalloc`` first and writes a snapshot whenever a trigger file appears. Snapshots
are taken with the agent idle (node Ready, no pods) and again once ``--pods`` pods are Ready and
settled; the report is the difference grouped by allocation site (``--frames`` deep), in bytes per
pod, plus the agent's RSS at both points (tracemalloc itself roughly doubles the RSS: compare RSS
only with ``bench_scale_pods.py``).

Usage: ``.venv/bin/python bench/bench_agent_memory.py [--pods 300] [--frames 8] [--top 40]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale_pods import bound_pod
from common import NAMESPACE, NODE_NAME, log, rss_bytes
from scale_common import (
    ControlPlane,
    list_rv,
    pod_ready,
    remove_data_dir,
    start_fakecri,
    stop_process,
    watch_until,
)

TRIGGER_ENV = "PYKUBELET_BENCH_SNAPSHOT"


def _wrap(argv: list[str]) -> int:
    """Run ``pykubelet <argv>`` with tracemalloc; dump a snapshot to ``<trigger>.snap`` per trigger."""
    import pykubelet.agent.main  # noqa: F401  (imports untraced: tracing them takes minutes)
    from pykubelet.cli import main

    tracemalloc.start(int(os.environ.get("PYKUBELET_BENCH_FRAMES", "8")))
    trigger = os.environ[TRIGGER_ENV]

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.path.exists(trigger):
                name = Path(trigger).read_text().strip()
                tracemalloc.take_snapshot().dump(name + ".tmp")
                os.rename(name + ".tmp", name)
                os.unlink(trigger)

    threading.Thread(target=watch, daemon=True, name="bench-snapshot").start()

    sys.argv = ["pykubelet", *argv]
    return int(main() or 0)




async def snapshot(trigger: Path, out: Path) -> tracemalloc.Snapshot:
    await asyncio.to_thread(trigger.write_text, str(out))
    while not await asyncio.to_thread(out.exists):  # noqa: ASYNC110 - another process writes it
        await asyncio.sleep(0.2)
    return await asyncio.to_thread(tracemalloc.Snapshot.load, str(out))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pkm-", dir="/tmp"))
    cp = ControlPlane(tmp / "data")
    fake = agent = None
    result: dict[str, Any] = {"pods": args.pods}
    try:
        fake = await start_fakecri(tmp / "fake.sock", tmp / "fakecri.log")
        api = await cp.start()
        os.environ[TRIGGER_ENV] = str(tmp / "trigger")
        os.environ["PYKUBELET_BENCH_FRAMES"] = str(args.frames)
        import pykubelet.up.main as up

        real_argv = up.agent_argv

        def wrapped(*a: Any, **kw: Any) -> list[str]:
            argv = real_argv(*a, **kw)
            assert argv[1:3] == ["-m", "pykubelet"], argv
            return [argv[0], str(Path(__file__).resolve()), "--wrap", *argv[3:]]

        up.agent_argv = wrapped  # type: ignore[assignment]
        agent = await cp.start_agent(f"unix://{tmp / 'fake.sock'}", NODE_NAME,
                                     [f"--max-pods={args.pods + 100}", "--cgroups-per-qos=false"], within=300)
        await asyncio.sleep(args.settle)
        s0 = await snapshot(tmp / "trigger", tmp / "idle.snap")
        result["rss_idle_mb"] = round(rss_bytes(agent.pid) / 2**20, 1)
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        names = [f"mem-{i:04d}" for i in range(args.pods)]
        rv = await list_rv(api, path)
        waiter = asyncio.create_task(watch_until(api, path, set(names), rv, pod_ready))
        sem = asyncio.Semaphore(32)

        async def create(n: str) -> None:
            async with sem:
                await api.create(path, bound_pod(n))

        await asyncio.gather(*(create(n) for n in names))
        await waiter
        log(f"{args.pods} pods Ready; settling {args.settle} s")
        await asyncio.sleep(args.settle)
        s1 = await snapshot(tmp / "trigger", tmp / "pods.snap")
        result["rss_pods_mb"] = round(rss_bytes(agent.pid) / 2**20, 1)
        report(s0, s1, args)
    except Exception:
        traceback.print_exc()
    finally:
        await stop_process(agent, "agent")
        await cp.stop()
        await stop_process(fake, "fakecri")
        await remove_data_dir(tmp, args.keep)
    return result


def report(s0: tracemalloc.Snapshot, s1: tracemalloc.Snapshot, args: argparse.Namespace) -> None:
    n = args.pods
    t0 = sum(s.size for s in s0.statistics("filename"))
    t1 = sum(s.size for s in s1.statistics("filename"))
    print(f"\ntraced: idle {t0 / 2**20:.1f} MB, with {n} pods {t1 / 2**20:.1f} MB: "
          f"{(t1 - t0) / n / 1024:.1f} kB per pod")
    print(f"\n-- by line (top {args.top}), bytes per pod --")
    for st in s1.compare_to(s0, "lineno")[: args.top]:
        fr = st.traceback[0]
        print(f"{st.size_diff / n:9.0f} B {st.count_diff / n:6.1f} obj  {fr.filename.split('site-packages/')[-1].split('src/')[-1]}:{fr.lineno}")
    print(f"\n-- by traceback ({args.frames} frames, top {args.top // 2}) --")
    for st in s1.compare_to(s0, "traceback")[: args.top // 2]:
        print(f"{st.size_diff / n:9.0f} B per pod, {st.count_diff / n:.1f} objects")
        for line in st.traceback.format(limit=args.frames, most_recent_first=True):
            if line.startswith("  File"):
                print("    " + line.strip().split("site-packages/")[-1].split("src/")[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=300)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--settle", type=float, default=10.0)
    p.add_argument("--keep", action="store_true", help="keep the temp folder (snapshots, logs)")
    args = p.parse_args(argv)
    r = asyncio.run(run(args))
    print(r)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--wrap":  # the agent side, started by run()
        sys.exit(_wrap(sys.argv[2:]))
    sys.exit(main())
