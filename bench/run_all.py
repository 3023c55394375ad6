"""Run the agent benchmarks in sequence (each with its own private containerd or fake runtime).

``--quick`` shortens each (3 single-pod repetitions, 1 run of 30 pods, 30 pods held 15 s, probes held
15 s) for a smoke run; without it the numbers are the ones recorded in docs/benchmarks-agent.md.
``--json-dir DIR`` writes ``pod_start.json``, ``30_pods.json``, ``density.json`` and ``probes.json``
there. Needs root, containerd, runc, the CNI plugins and (for the peer column) podman. The API server
benchmark (bench_apiserver.py, docs/benchmarks-apiserver.md) runs on its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_30_pods
import bench_density
import bench_pod_start
import bench_probes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json-dir", metavar="DIR", help="write each benchmark's JSON results here")
    args = p.parse_args(argv)
    out = Path(args.json_dir) if args.json_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    rc = 0
    for mod, stem in ((bench_pod_start, "pod_start"), (bench_30_pods, "30_pods"), (bench_density, "density"),
                      (bench_probes, "probes")):
        extra = ["--quick"] if args.quick else []
        if out:
            extra += ["--json", str(out / f"{stem}.json")]
        try:
            rc |= mod.main(extra)
        except Exception as e:  # keep going: later benchmarks are independent
            print(f"{stem}: failed: {type(e).__name__}: {e}", file=sys.stderr)
            rc = 1
        sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
