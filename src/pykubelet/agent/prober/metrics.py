"""Prober metrics with upstream names (pkg/kubelet/prober/prober_manager.go), in the agent registry.

``prober_probe_total`` counts every probe that produced a result (labels like upstream: probe_type,
result in successful|failed|unknown, container, pod, namespace, pod_uid) and
``prober_probe_duration_seconds`` times the successful/unknown ones, as upstream does.
``pykubelet_prober_probe_lateness_seconds`` (not upstream; for bench/bench_probes.py) observes, for
every probe run after the first of a worker, how much later than one period after the previous run
it started: it shows whether probes of many pods delay each other or wait on the sync loop.

Why not ``prometheus_client``'s Counter and Histogram objects: every probe updates three series, and
each of their updates takes a lock (a histogram observe takes two or three: sum, bucket, count), which
at 200 probes/s was ~5 % of the agent's CPU for numbers read once per scrape. Here each worker holds
its own plain cells (``Count``, ``Hist`` of ``pykubelet.agent.metrics``) updated from the event loop only,
and one custom collector (``ProbeMetrics``, registered in ``pykubelet.agent.metrics.REGISTRY``)
turns them into the same metric families when /metrics is scraped. Scrapes may run in another
thread: the collector copies each table (``list(dict.items())``, atomic under the GIL) before reading,
and a reading taken mid-update is at worst one probe behind.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from pykubelet.agent.metrics import REGISTRY, Count, Hist

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
TOTAL_LABELS = ("probe_type", "result", "container", "pod", "namespace", "pod_uid")
DURATION_LABELS = ("probe_type", "container", "pod", "namespace")


class ProbeMetrics:
    """The prober's series, exported by ``collect`` at scrape time."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, ...], Count] = {}
        self._durations: dict[tuple[str, ...], Hist] = {}
        self._lateness: dict[str, Hist] = {}

    def total(self, probe_type: str, result: str, container: str, pod: str, namespace: str, pod_uid: str) -> Count:
        key = (probe_type, result, container, pod, namespace, pod_uid)
        cell = self._totals.get(key)
        if cell is None:
            cell = self._totals[key] = Count()
        return cell

    def duration(self, probe_type: str, container: str, pod: str, namespace: str) -> Hist:
        key = (probe_type, container, pod, namespace)
        cell = self._durations.get(key)
        if cell is None:
            cell = self._durations[key] = Hist(DURATION_BUCKETS)
        return cell

    def lateness(self, probe_type: str) -> Hist:
        cell = self._lateness.get(probe_type)
        if cell is None:
            cell = self._lateness[probe_type] = Hist(LATENESS_BUCKETS)
        return cell

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily(
            "prober_probe_total",
            "Cumulative number of a liveness, readiness or startup probe for a container by result.",
            labels=TOTAL_LABELS)
        for key, count in list(self._totals.items()):
            total.add_metric(key, count.value)
        yield total
        duration = HistogramMetricFamily(
            "prober_probe_duration_seconds", "Duration in seconds for a probe response.", labels=DURATION_LABELS)
        for key, h in list(self._durations.items()):
            duration.add_metric(key, h.buckets(), h.sum)
        yield duration
        lateness = HistogramMetricFamily(
            "pykubelet_prober_probe_lateness_seconds",
            "How late a probe run started compared with one period after the previous run of the same worker.",
            labels=("probe_type",))
        for probe_type, h in list(self._lateness.items()):
            lateness.add_metric((probe_type,), h.buckets(), h.sum)
        yield lateness


PROBE_METRICS = ProbeMetrics()
REGISTRY.register(PROBE_METRICS)
