"""Kubelet Prometheus metrics with upstream names, in a dedicated registry.

The kubelet HTTP server exposes ``REGISTRY`` at /metrics. Names and labels follow
``pkg/kubelet/metrics/metrics.go`` (subsystem ``kubelet``). ``cri_observer`` matches the
``pykubelet.cri.Observer`` hook so every CRI call feeds the runtime operation metrics, like upstream's
instrumented runtime service.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

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



class Count:
    """One counter series: a plain int, updated from the event loop only."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


class Hist:
    """One histogram series: per-bucket (non-cumulative) counts, the last for +Inf, and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # first bound >= value: le semantics
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip((*self.bounds, float("inf")), list(self.counts), strict=True):
            acc += n
            out.append((floatToGoString(bound), acc))
        return out


class RuntimeOperations:
    """``kubelet_runtime_operations_total``, ``…_errors_total`` and ``…_duration_seconds`` by
    ``operation_type``, exported by ``collect`` at scrape time.

    Why not ``prometheus_client``'s Counter and Histogram: every CRI call (200/s under exec-probe
    load) updates two series, and their updates take a lock each (a histogram observe two or three),
    about 7 % of an exec probe's cost in the agent for numbers read once per scrape. Each operation
    holds plain cells (``Count``, ``Hist``) updated from the event loop only; a scrape from another
    thread copies the tables first (``list(dict.items())``, atomic under the GIL) and is at worst
    one call behind.
    """

    def __init__(self) -> None:
        self._ops: dict[str, tuple[Count, Hist]] = {}
        self._errors: dict[str, Count] = {}

    def observe(self, op: str, seconds: float, err: Exception | None) -> None:
        cells = self._ops.get(op)
        if cells is None:
            cells = self._ops[op] = (Count(), Hist(_OP_BUCKETS))
        cells[0].value += 1
        cells[1].observe(seconds)
        if err is not None:
            errors = self._errors.get(op)
            if errors is None:
                errors = self._errors[op] = Count()
            errors.value += 1

    def collect(self) -> Iterator[Metric]:
        ops = list(self._ops.items())
        total = CounterMetricFamily("kubelet_runtime_operations",
                                    "Cumulative number of runtime operations by operation type.",
                                    labels=("operation_type",))
        for op, (count, _) in ops:
            total.add_metric((op,), count.value)
        yield total
        errors = CounterMetricFamily("kubelet_runtime_operations_errors",
                                     "Cumulative number of runtime operation errors by operation type.",
                                     labels=("operation_type",))
        for op, count in list(self._errors.items()):
            errors.add_metric((op,), count.value)
        yield errors
        duration = HistogramMetricFamily("kubelet_runtime_operations_duration_seconds",
                                         "Duration in seconds of runtime operations.", labels=("operation_type",))
        for op, (_, h) in ops:
            duration.add_metric((op,), h.buckets(), h.sum)
        yield duration


RUNTIME_OPERATIONS = RuntimeOperations()
REGISTRY.register(RUNTIME_OPERATIONS)
cri_observer = RUNTIME_OPERATIONS.observe
"""The ``pykubelet.cri.Observer`` hook: count, time and error-count every CRI call."""
