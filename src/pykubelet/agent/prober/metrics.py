"""Prober metrics with upstream names (pkg/kubelet/prober/prober_manager.go), in the agent registry.

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
