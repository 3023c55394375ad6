"""Run the scale benchmarks in sequence and print one summary table (docs/benchmarks-scale.md).

1. ``bench_scale_pods.py``: one agent, 1,000 pre-bound pods → all Ready vs the raw fake-CRI calls, then
   holding them idle 60 s (``--profile S`` adds a py-spy profile of the idle agent);
2. ``bench_probes.py``: 100 pods with exec readiness + liveness probes every 1 s, 60 s (goal here:
   agent CPU ≤ 3 % and no probe late by a period);
3. ``bench_hollow.py``: 100 hollow nodes x 30 pods through the scheduler → all Running;
4. ``bench_list_pods.py``: list 10,000 pods, JSON and Table.

None needs containerd or root (the fake CRI runtime stands in). ``--quick`` is a smoke run (100 pods,
10 hollow nodes x 5 pods, 1,000 pods listed, short holds; about 2 minutes); the defaults take about
8-10 minutes on 2 cores. ``--json-dir DIR`` keeps each benchmark's JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_hollow
import bench_list_pods
import bench_probes
import bench_scale_pods

PROBE_TARGET_CPU_PCT = 3.0


def _load(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def summary(out: Path) -> list[tuple[str, str, str, bool | None]]:
    rows: list[tuple[str, str, str, bool | None]] = []
    s = _load(out / "scale_pods.json")
    if "all_ready_s" in s:
        n = s["pods"]
        rows.append((f"{n} pre-bound pods → all Ready (one agent, fake CRI)",
                     f"{s['all_ready_s']:.1f} s = {s['ratio_to_raw']:.1f}x raw CRI ({s['raw_cri_s']:.1f} s)",
                     "≤ 10 s, ≤ 2x raw", s["targets"]["start_s"] and s["targets"]["start_ratio"]))
    if "idle" in s:
        a = s["idle"]["agent"]
        rows.append((f"agent holding {s['pods']} pods idle, {a['seconds']:.0f} s",
                     f"{a['cpu_pct']:.1f} % CPU, {a['rss_max_mb']:.0f} MB RSS", "≤ 5 %, ≤ 150 MB",
                     s["targets"]["idle_cpu"] and s["targets"]["idle_rss"]))
    p = _load(out / "probes.json")
    if "agent_cpu_pct" in p:
        rows.append((f"{p['pods']} pods, exec readiness + liveness every 1 s",
                     f"{p['agent_cpu_pct']:.1f} % CPU, {p['late_over_one_period']} late by a period, "
                     f"{p['probes_per_s']:.0f} probes/s", "≤ 3 %, 0 late",
                     p["agent_cpu_pct"] <= PROBE_TARGET_CPU_PCT and p["late_over_one_period"] == 0))
    h = _load(out / "hollow.json")
    if "all_running_s" in h:
        run = h["during_run"]
        rows.append((f"{h['nodes']} hollow nodes x {h['pods_per_node']} pods via the scheduler → all Running",
                     f"{h['all_running_s']:.1f} s = {h['ratio_to_floor']:.1f}x API floor ({h['api_floor_s']:.1f} s); "
                     f"server {run['server']['cpu_pct']:.0f} % / {run['server']['rss_max_mb']:.0f} MB, "
                     f"hollow {run['hollow']['cpu_pct']:.0f} % / {run['hollow']['rss_max_mb']:.0f} MB",
                     "≤ 60 s", h.get("target_met")))
    lp = _load(out / "list_pods.json")
    if "json_ms" in lp:
        rows.append((f"list {lp['pods']} pods (JSON / Table)",
                     f"{lp['json_ms']:.0f} / {lp['table_ms']:.0f} ms = {lp['json_ratio']:.1f}x / "
                     f"{lp['table_ratio']:.1f}x floor ({lp['floor_ms']:.0f} ms)", "≤ 200 ms",
                     lp["targets"]["json"] and lp["targets"]["table"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--profile", type=float, default=0.0, help="py-spy the idle 1,000-pod agent for S seconds")
    p.add_argument("--json-dir", metavar="DIR", default=None)
    args = p.parse_args(argv)
    import tempfile

    out = Path(args.json_dir or tempfile.mkdtemp(prefix="pkscale-"))
    out.mkdir(parents=True, exist_ok=True)
    quick = ["--quick"] if args.quick else []
    runs: list[tuple[Any, str, list[str]]] = [
        (bench_scale_pods, "scale_pods", [*quick, "--profile", str(args.profile),
                                          "--profile-out", str(out / "agent-idle-profile.txt")]),
        (bench_probes, "probes", quick),
        (bench_hollow, "hollow", quick),
        (bench_list_pods, "list_pods", quick),
    ]
    for mod, stem, extra in runs:
        try:
            mod.main([*extra, "--json", str(out / f"{stem}.json")])
        except Exception as e:  # keep going: the benchmarks are independent
            print(f"{stem}: failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.stdout.flush()
    rows = summary(out)
    print("\n| benchmark | result | goal | met |\n|---|---|---|---|")
    for name, result, goal, met in rows:
        print(f"| {name} | {result} | {goal} | {'yes' if met else 'no'} |")
    print(f"\nJSON results in {out}")
    return 0 if rows and all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
