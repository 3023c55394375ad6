"""Kubelet Prometheus metrics with upstream names, in a dedicated registry.

The kubelet HTTP server exposes ``REGISTRY`` at /metrics. Names and labels follow
``pkg/kubelet/metrics/metrics.go`` (subsystem ``kubelet``). ``cri_observer`` matches the
``pykubelet.cri.Observer`` hook so every CRI call feeds the runtime operation metrics, like upstream's
instrumented runtime service.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

_OP_BUCKETS = (0.005, 0.0125, 0.03125, 0.078125, 0.1953125, 0.48828125, 1.220703125, 3.0517578125,
               7.62939453125, 19.073486328125, 47.6837158203125, 119.20928955078125, 298.0232238769531,
               745.0580596923828)

RUNNING_PODS = Gauge("kubelet_running_pods", "Number of pods that have a running pod sandbox", registry=REGISTRY)
RUNNING_CONTAINERS = Gauge(
    "kubelet_running_containers", "Number of containers currently running", ["container_state"],
    registry=REGISTRY,
)
POD_START_DURATION = Histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    buckets=(0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200),
    registry=REGISTRY,
)
POD_WORKER_DURATION = Histogram(
    "kubelet_pod_worker_duration_seconds",
    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
    ["operation_type"],
    registry=REGISTRY,
)
PLEG_RELIST_DURATION = Histogram(
    "kubelet_pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.",
    registry=REGISTRY,
)
PLEG_RELIST_INTERVAL = Histogram(
    "kubelet_pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG.",
    registry=REGISTRY,
)
RUNTIME_OPERATIONS = Counter(
    "kubelet_runtime_operations", "Cumulative number of runtime operations by operation type.",
    ["operation_type"], registry=REGISTRY,
)
RUNTIME_OPERATIONS_ERRORS = Counter(
    "kubelet_runtime_operations_errors",
    "Cumulative number of runtime operation errors by operation type.",
    ["operation_type"], registry=REGISTRY,
)
RUNTIME_OPERATIONS_DURATION = Histogram(
    "kubelet_runtime_operations_duration_seconds", "Duration in seconds of runtime operations.",
    ["operation_type"], buckets=_OP_BUCKETS, registry=REGISTRY,
)
NODE_NAME = Gauge("kubelet_node_name", "The node's name. The count is always 1.", ["node"], registry=REGISTRY)
STARTED_PODS = Counter("kubelet_started_pods", "Cumulative number of pods started", registry=REGISTRY)
STARTED_PODS_ERRORS = Counter(
    "kubelet_started_pods_errors", "Cumulative number of errors when starting pods", registry=REGISTRY
)
STARTED_CONTAINERS = Counter(
    "kubelet_started_containers", "Cumulative number of containers started", ["container_type"],
    registry=REGISTRY,
)
STARTED_CONTAINERS_ERRORS = Counter(
    "kubelet_started_containers_errors", "Cumulative number of errors when starting containers",
    ["container_type", "code"], registry=REGISTRY,
)
IMAGE_PULL_DURATION = Histogram(
    "kubelet_image_pull_duration_seconds", "Duration in seconds to pull an image.", registry=REGISTRY
)


_OP_CHILDREN: dict[str, tuple[Any, Any]] = {}


def cri_observer(op: str, seconds: float, err: Exception | None) -> None:
    """``pykubelet.cri.Observer`` hook: count, time and error-count every CRI call.

    It runs after every CRI call (200/s under exec probe load), so the labelled children of the two
    always-updated metrics are cached per operation instead of looked up with ``labels()`` each time.
    """
    children = _OP_CHILDREN.get(op)
    if children is None:
        children = _OP_CHILDREN[op] = (RUNTIME_OPERATIONS.labels(op), RUNTIME_OPERATIONS_DURATION.labels(op))
    children[0].inc()
    children[1].observe(seconds)
    if err is not None:
        RUNTIME_OPERATIONS_ERRORS.labels(op).inc()
