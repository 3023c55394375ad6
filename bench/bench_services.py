"""Benchmark: service proxy rule sync and cluster DNS throughput.

1. **Rule sync** with ``--services`` Services x ``--endpoints`` endpoints (default 1,000 x 10):
   pure generation (:mod:`pykubelet.agent.proxy.rules`: Services + EndpointSlices -> restore text)
   and, as root with iptables, the full sync as the proxy does it (generation + ``iptables-restore
   --noflush`` of our chains + the jump checks), first sync and a re-sync after one endpoint
   changed (the proxy always rebuilds in full).  The rules use a private chain prefix and ClusterIPs
   in 198.18.192.0/18, no traffic is sent, and every chain is removed afterwards.
2. **DNS queries/s** answered by :class:`pykubelet.server.dns.ClusterDNS` (1,000 Services in its
   index) vs a bare ``dnslib.server.DNSServer`` answering a fixed A record, both on 127.0.0.1,
   driven by the same client in a separate process (``--queries`` UDP queries, ``--window``
   outstanding) in the same run.

Goals (issue): full sync <= 1 s, one endpoint change <= 50 ms, DNS >= 5,000 queries/s.
Run: ``sudo .venv/bin/python bench/bench_services.py``; results in docs/services.md.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import multiprocessing
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]
NET = ipaddress.IPv4Network("198.18.192.0/18")


def objects(n_svc: int, n_ep: int) -> tuple[list[Obj], list[Obj]]:
    hosts = NET.hosts()
    services, slices = [], []
    for i in range(n_svc):
        name = f"svc-{i}"
        services.append({"metadata": {"name": name, "namespace": "bench"},
                         "spec": {"type": "ClusterIP", "clusterIP": str(next(hosts)),
                                  "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
        slices.append({"metadata": {"name": f"{name}-x", "namespace": "bench",
                                    "labels": {"kubernetes.io/service-name": name}},
                       "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                       "endpoints": [{"addresses": [str(next(hosts))], "conditions": {"ready": True}}
                                     for _ in range(n_ep)]})
    return services, slices


def bench_rules(n_svc: int, n_ep: int, runs: int) -> None:
    from pykubelet.agent.proxy import rules

    services, slices = objects(n_svc, n_ep)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        rs = rules.build_rules(rules.service_ports(services, slices), prefix="PYKB")
        times.append(time.perf_counter() - t0)
    lines = rs.nat.count("\n") + rs.filter.count("\n")
    print(f"rule generation, {n_svc} services x {n_ep} endpoints ({lines} lines): "
          f"median {statistics.median(times) * 1000:.0f} ms over {runs} runs")
    if os.geteuid() != 0 or shutil.which("iptables-restore") is None:
        print("iptables sync: skipped (needs root and iptables)")
        return
    from pykubelet.agent.proxy.proxier import ServiceProxy

    class NoApi:
        async def list(self, path: str, params: Any = None) -> Obj:
            return {"items": []}

        def watch(self, path: str, **kw: Any) -> Any:
            raise NotImplementedError

    proxy = ServiceProxy(NoApi(), prefix="PYKB")
    proxy.services.items = {("bench", s["metadata"]["name"]): s for s in services}
    proxy.slices.items = {("bench", s["metadata"]["name"]): s for s in slices}
    try:
        proxy.sync()
        first = proxy.last_sync_seconds
        changes = []
        for k in range(runs):
            slices[k]["endpoints"][0]["conditions"]["ready"] = False  # one endpoint leaves
            proxy.slices.items[("bench", slices[k]["metadata"]["name"])] = slices[k]
            proxy.sync()
            changes.append(proxy.last_sync_seconds)
        print(f"iptables full sync (generation + iptables-restore + jumps): first {first * 1000:.0f} ms, "
              f"after one endpoint change median {statistics.median(changes) * 1000:.0f} ms over {runs}")
    finally:
        proxy._remove_all()


class _Store:
    """A fake API store for the DNS index: 1,000 Services, one headless."""

    def __init__(self, n: int) -> None:
        self.revision = 1
        services, slices = objects(n, 3)
        self.data = {"services": services, "endpointslices.discovery.k8s.io": slices,
                     "namespaces": [{"metadata": {"name": "bench"}}]}

    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]:
        for o in self.data.get(resource, []):
            m = o["metadata"]
            yield (m.get("namespace", ""), m["name"]), o


def _client(port: int, queries: int, window: int, out: Any) -> None:
    """Send ``queries`` A queries with ``window`` outstanding; put queries/s on ``out``."""
    from dnslib import DNSRecord

    async def run() -> float:
        loop = asyncio.get_running_loop()
        done = 0
        sent = 0
        finished = loop.create_future()
        names = [DNSRecord.question(f"svc-{i % 1000}.bench.svc.cluster.local").pack() for i in range(1000)]

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                nonlocal done, sent
                done += 1
                if sent < queries:
                    sent += 1
                    transport.sendto(names[sent % 1000])
                elif done >= queries and not finished.done():
                    finished.set_result(None)

        transport, _ = await loop.create_datagram_endpoint(P, remote_addr=("127.0.0.1", port))
        t0 = time.perf_counter()
        for _ in range(window):
            sent += 1
            transport.sendto(names[sent % 1000])
        try:
            await asyncio.wait_for(finished, 120)
        except TimeoutError:
            pass  # a lost datagram: count what came back
        dt = time.perf_counter() - t0
        transport.close()
        return done / dt

    out.put(asyncio.run(run()))


def _drive(port: int, queries: int, window: int) -> float:
    q: Any = multiprocessing.Queue()
    p = multiprocessing.Process(target=_client, args=(port, queries, window, q))
    p.start()
    qps = float(q.get())
    p.join()
    return qps


def bench_dns(queries: int, window: int) -> None:
    import threading

    from dnslib import QTYPE, RR, A
    from dnslib.server import BaseResolver, DNSServer

    from pykubelet.server.dns import ClusterDNS

    async def ours() -> float:
        dns = ClusterDNS(_Store(1000), upstreams=[])
        port = await dns.start("127.0.0.1", 0)
        try:
            return await asyncio.to_thread(_drive, port, queries, window)
        finally:
            await dns.stop()

    ours_qps = asyncio.run(ours())

    class Fixed(BaseResolver):  # type: ignore[misc]
        def resolve(self, request: Any, handler: Any) -> Any:
            reply = request.reply()
            reply.add_answer(RR(request.q.qname, QTYPE.A, ttl=5, rdata=A("198.18.128.5")))
            return reply

    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        bare_port = s.getsockname()[1]
    server = DNSServer(Fixed(), port=bare_port, address="127.0.0.1", logger=type("L", (), {
        "log_recv": lambda *a: None, "log_send": lambda *a: None, "log_request": lambda *a: None,
        "log_reply": lambda *a: None, "log_truncated": lambda *a: None, "log_error": lambda *a: None,
        "log_data": lambda *a: None})())
    server.start_thread()
    try:
        bare_qps = _drive(bare_port, queries, window)
    finally:
        server.stop()
        threading.Event().wait(0.1)
    print(f"DNS, {queries} A queries ({window} outstanding): ClusterDNS {ours_qps:,.0f} q/s, "
          f"bare dnslib server {bare_qps:,.0f} q/s (ratio {ours_qps / bare_qps:.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--endpoints", type=int, default=10)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--queries", type=int, default=20000)
    p.add_argument("--window", type=int, default=20)
    a = p.parse_args()
    bench_rules(a.services, a.endpoints, a.runs)
    bench_dns(a.queries, a.window)


if __name__ == "__main__":
    main()
