"""Prober metrics with upstream names (pkg/kubelet/prober/prober_manager.go), in the agent registry.

``pykubelet_prober_probe_lateness_seconds`` (not upstream; for bench/bench_probes.py) observes, for
every probe run after the first of a worker, how much later than one period after the previous run
it started: it shows whether probes of many pods delay each other or wait on the sync loop.

``prober_probe_total`` counts every probe that produced a result (labels like upstream: probe_type,
result in successful|failed|unknown, container, pod, namespace, pod_uid) and
``prober_probe_duration_seconds`` times the successful/unknown ones, as upstream does. They are
registered in ``pykubelet.agent.metrics.REGISTRY`` so the kubelet's /metrics exposes them.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from pykubelet.agent.metrics import REGISTRY

PROBE_TOTAL = Counter(
    "prober_probe_total",
    "Cumulative number of a liveness, readiness or startup probe for a container by result.",
    ["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
    registry=REGISTRY,
)
PROBE_DURATION = Histogram(
    "prober_probe_duration_seconds",
    "Duration in seconds for a probe response.",
    ["probe_type", "container", "pod", "namespace"],
    registry=REGISTRY,
)
PROBE_LATENESS = Histogram(
    "pykubelet_prober_probe_lateness_seconds",
    "How late a probe run started compared with one period after the previous run of the same worker.",
    ["probe_type"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
    registry=REGISTRY,
)
