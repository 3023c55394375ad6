"""``metrics.k8s.io/v1beta1``: NodeMetrics and PodMetrics from the kubelets' ``/metrics/resource``.

Upstream serves this group from metrics-server through API aggregation: it scrapes every kubelet's
``/metrics/resource`` (Prometheus text: ``node_cpu_usage_seconds_total``,
``node_memory_working_set_bytes``, ``container_cpu_usage_seconds_total{namespace,pod,container}``,
``container_memory_working_set_bytes{...}``) and reports CPU as the *rate* of the cumulative counter
between two scrapes (``usage.cpu`` in nanocores, ``window`` the time between them) and memory as
the last working set.  This dev control plane has no aggregation layer, so the API server answers
the group itself (:func:`serve`, reached from ``server/app.py``) and scrapes on demand: each node's
last scrape is kept, and a node seen for the first time is scraped twice a second apart so the
first ``kubectl top`` already prints numbers.  A pod is reported once all its containers have a
rate, as metrics-server does; a node whose kubelet cannot be reached is left out (logged), as
metrics-server leaves out a failed scrape.

The kubelet is reached as for ``pods/log`` (:mod:`pykubelet.server.kubeletproxy`): its address
from ``Node.status``, the API server's kubelet client certificate.  Only ``get`` and ``list`` are
served (metrics-server's verbs); label selectors filter as usual, ``metadata.name`` field
selectors too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from pykubelet.common.quantity import canonical
from pykubelet.server import kubeletproxy
from pykubelet.server.errors import StatusError, not_found
from pykubelet.server.selectors import parse_field_selector, parse_label_selector

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GROUP, VERSION = "metrics.k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
FIRST_SCRAPE_GAP = 1.0  # seconds between the two scrapes of a node seen for the first time
SCRAPE_TIMEOUT = 5.0

CpuPoint = tuple[float, float]  # (timestamp s, cumulative core-seconds)


@dataclass
class Scrape:
    """One ``/metrics/resource`` answer, parsed."""

    node_cpu: CpuPoint | None = None
    node_memory: float | None = None
    # (namespace, pod) -> container -> cpu point / memory
    cpu: dict[tuple[str, str], dict[str, CpuPoint]] = field(default_factory=dict)
    memory: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)


def parse_resource_metrics(text: str, now: float) -> Scrape:
    """Parse the kubelet's Prometheus text; samples without a timestamp take ``now``."""
    s = Scrape()
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            ts = smp.timestamp if smp.timestamp is not None else now
            lab = smp.labels
            if smp.name == "node_cpu_usage_seconds_total":
                s.node_cpu = (float(ts), float(smp.value))
            elif smp.name == "node_memory_working_set_bytes":
                s.node_memory = float(smp.value)
            elif smp.name == "container_cpu_usage_seconds_total":
                s.cpu.setdefault((lab.get("namespace", ""), lab.get("pod", "")), {})[lab.get("container", "")] = \
                    (float(ts), float(smp.value))
            elif smp.name == "container_memory_working_set_bytes":
                s.memory.setdefault((lab.get("namespace", ""), lab.get("pod", "")), {})[lab.get("container", "")] = \
                    float(smp.value)
    return s


def cpu_rate(prev: CpuPoint | None, cur: CpuPoint | None) -> tuple[int, float] | None:
    """(nanocores, window seconds) between two cumulative samples, or None without a usable pair
    (no earlier sample, same timestamp, or a counter reset)."""
    if prev is None or cur is None or cur[0] <= prev[0] or cur[1] < prev[1]:
        return None
    window = cur[0] - prev[0]
    return int((cur[1] - prev[1]) / window * 1e9), window


def _memory(b: float) -> str:
    """Bytes as a binary-SI quantity (metrics-server's ``resource.NewQuantity(v, BinarySI)``)."""
    n = int(b)
    return canonical(f"{n // 1024}Ki") if n % 1024 == 0 and n else str(n)


def _window(seconds: float) -> str:
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def _ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_metrics(node: Obj, prev: Scrape, cur: Scrape) -> Obj | None:
    rate = cpu_rate(prev.node_cpu, cur.node_cpu)
    if rate is None or cur.node_memory is None or cur.node_cpu is None:
        return None
    meta = node.get("metadata") or {}
    return {"kind": "NodeMetrics", "apiVersion": API_VERSION,
            "metadata": {"name": meta.get("name", ""), "creationTimestamp": _ts(cur.node_cpu[0]),
                         "labels": dict(meta.get("labels") or {})},
            "timestamp": _ts(cur.node_cpu[0]), "window": _window(rate[1]),
            "usage": {"cpu": canonical(f"{rate[0]}n"), "memory": _memory(cur.node_memory)}}


def pod_metrics(pod: Obj, prev: Scrape, cur: Scrape) -> Obj | None:
    meta = pod.get("metadata") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    cpu_now, cpu_before, mem = cur.cpu.get(key), prev.cpu.get(key) or {}, cur.memory.get(key) or {}
    if not cpu_now:
        return None
    containers = []
    window = 0.0
    stamp = 0.0
    for name, point in sorted(cpu_now.items()):
        rate = cpu_rate(cpu_before.get(name), point)
        if rate is None:
            return None  # as metrics-server: a pod is reported once every container has a rate
        window, stamp = max(window, rate[1]), max(stamp, point[0])
        containers.append({"name": name, "usage": {"cpu": canonical(f"{rate[0]}n"),
                                                   "memory": _memory(mem.get(name, 0))}})
    return {"kind": "PodMetrics", "apiVersion": API_VERSION,
            "metadata": {"name": key[1], "namespace": key[0], "creationTimestamp": _ts(stamp),
                         "labels": dict(meta.get("labels") or {})},
            "timestamp": _ts(stamp), "window": _window(window), "containers": containers}


class MetricsApi:
    """Scrapes kubelets on demand and keeps each node's previous scrape for CPU rates."""

    def __init__(self) -> None:
        self._last: dict[str, Scrape] = {}
        self._prev: dict[str, Scrape] = {}
        self._lock = asyncio.Lock()

    async def _fetch(self, node: Obj, ssl_ctx: Any) -> Scrape | None:
        base = kubeletproxy.kubelet_base_url(node)
        if base is None:
            return None
        url = base + "/metrics/resource"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT)) as session, \
                    session.get(url, ssl=ssl_ctx) as resp:
                if resp.status != 200:
                    log.warning("metrics: %s answered %d", url, resp.status)
                    return None
                text = await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            log.warning("metrics: cannot scrape %s: %s", url, e)
            return None
        try:
            return parse_resource_metrics(text, loop_time())
        except ValueError as e:
            log.warning("metrics: bad /metrics/resource from %s: %s", url, e)
            return None

    async def scrape(self, nodes: list[Obj], ssl_ctx: Any) -> dict[str, tuple[Scrape, Scrape]]:
        """node name -> (previous, current) scrapes, for the nodes that answered."""
        async with self._lock:
            names = [str((n.get("metadata") or {}).get("name", "")) for n in nodes]
            results = await asyncio.gather(*(self._fetch(n, ssl_ctx) for n in nodes))
            fresh = [(name, r) for name, r in zip(names, results, strict=True) if r is not None]
            first = [(name, r) for name, r in fresh if name not in self._last]
            for name, r in fresh:
                if name in self._last:
                    self._prev[name], self._last[name] = self._last[name], r
            if first:
                await asyncio.sleep(FIRST_SCRAPE_GAP)
                by_name = {str((n.get("metadata") or {}).get("name", "")): n for n in nodes}
                again = await asyncio.gather(*(self._fetch(by_name[name], ssl_ctx) for name, _ in first))
                for (name, r1), r2 in zip(first, again, strict=True):
                    self._prev[name], self._last[name] = r1, (r2 or r1)
            return {name: (self._prev.get(name, Scrape()), self._last[name]) for name, _ in fresh}


def loop_time() -> float:
    return dt.datetime.now(dt.UTC).timestamp()


def _list_kind(resource: str) -> str:
    return "NodeMetricsList" if resource == "nodes" else "PodMetricsList"


async def serve(request: web.Request, *, api: MetricsApi, store: Any, verb: str, namespace: str, resource: str,
                name: str, version: str) -> Obj:
    """GET/LIST of ``nodes`` or ``pods`` in metrics.k8s.io; the answer object (list or item)."""
    if version != VERSION or resource not in ("nodes", "pods"):
        raise StatusError(404, "NotFound", "the server could not find the requested resource")
    if verb not in ("get", "list"):
        raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    q = request.query
    lmatch = parse_label_selector(q.get("labelSelector"))
    fmatch, _eq = parse_field_selector(q.get("fieldSelector"), "metrics")
    ssl_ctx = kubeletproxy.client_ssl_context(request.app.get(kubeletproxy.PKI_DIR))
    nodes = {k[1]: o for k, o in store.iter_raw("nodes")}
    items: list[Obj] = []
    if resource == "nodes":
        targets = [o for n, o in nodes.items() if (not name or n == name) and lmatch(o) and fmatch(o)]
        scrapes = await api.scrape(targets, ssl_ctx) if targets else {}
        for o in targets:
            pair = scrapes.get(o["metadata"]["name"])
            m = node_metrics(o, *pair) if pair else None
            if m is not None:
                items.append(m)
    else:
        pods = [o for (ns, n), o in store.iter_raw("pods", namespace or None)
                if (not name or n == name) and lmatch(o) and fmatch(o)
                and (o.get("spec") or {}).get("nodeName") in nodes
                and (o.get("status") or {}).get("phase") == "Running"]
        used = sorted({str(p["spec"]["nodeName"]) for p in pods})
        scrapes = await api.scrape([nodes[n] for n in used], ssl_ctx) if used else {}
        for p in pods:
            pair = scrapes.get(str(p["spec"]["nodeName"]))
            m = pod_metrics(p, *pair) if pair else None
            if m is not None:
                items.append(m)
    if verb == "get":
        if not items:
            kind = "nodes" if resource == "nodes" else "pods"
            raise not_found(f"{kind}", name, GROUP)  # metrics-server: NotFound for a missing/unscraped object
        return items[0]
    return {"kind": _list_kind(resource), "apiVersion": API_VERSION, "metadata": {}, "items": items}
