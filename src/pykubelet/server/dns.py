"""Cluster DNS served by the control plane, answering as CoreDNS's ``kubernetes`` plugin does.

Upstream clusters run CoreDNS as a Deployment behind the ``kube-dns`` Service; this dev control plane
answers the same names itself, on an address pods can reach (the node's pod-network gateway in
``pykubelet up``), so a cluster has DNS without an image to pull.  The wire format is ``dnslib``'s
(a small, pure-Python, long-maintained DNS codec: no hand-written packet parsing here).

Names and answers (zone ``cluster.local`` by default, ``--cluster-domain``), as the ``kubernetes``
plugin with ``pods insecure`` (kubeadm's Corefile) gives them:

- ``<svc>.<ns>.svc.<zone>``: A = the ClusterIP; headless Services: one A per ready endpoint
  address of its EndpointSlices; ExternalName: a CNAME to ``spec.externalName``.
- ``_<port>._<proto>.<svc>.<ns>.svc.<zone>`` and ``<svc>.<ns>.svc.<zone>`` SRV: priority 0,
  weight ``100 / n``, the port; target the Service name, or for headless Services each endpoint's
  ``<hostname>`` (from ``pod.spec.hostname`` + ``subdomain``) or dashed address under the Service
  name, with the A records in the additional section.
- ``<endpoint>.<svc>.<ns>.svc.<zone>`` A: that endpoint of a headless Service (hostname/subdomain
  records of pods).
- ``<a-b-c-d>.<ns>.pod.<zone>`` A: ``a.b.c.d``, unchecked (``pods insecure``).
- Unknown names in the zone: NXDOMAIN; a known name asked for another type (AAAA on an IPv4-only
  cluster): NOERROR with no answer (NODATA).  Both carry CoreDNS's SOA in the authority section.
  TTL 5 s (the plugin's default).
- Any other name is forwarded to the host's resolvers (``/etc/resolv.conf``, as CoreDNS's
  ``forward . /etc/resolv.conf``); when none answers within 2 s the client gets SERVFAIL.

The data comes from the API server's own storage (read-only, through a narrow Protocol): the index
of Services and EndpointSlices is rebuilt when the store's revision moved since the last query, so
an answer is never staler than the last write, and a burst of queries costs one rebuild.

Sockets are bound with ``IP_FREEBIND``: the gateway address only appears on the CNI bridge when the
first pod starts, and the control plane starts before that (the API server's pod-facing listener
uses the same helper).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dnslib import CNAME, QTYPE, RCODE, RR, SOA, SRV, A, DNSHeader, DNSRecord

log = logging.getLogger(__name__)

Obj = dict[str, Any]
TTL = 5
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
FORWARD_TIMEOUT = 2.0


class Source(Protocol):
    """What the DNS server reads: the API server's storage."""

    @property
    def revision(self) -> int: ...
    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]: ...


def freebind_socket(host: str, port: int, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A non-blocking socket bound to ``host:port`` even if ``host`` is not (yet) a local address."""
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        s.bind((host, port))
        if kind == socket.SOCK_STREAM:
            s.listen(128)
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


def host_resolvers(path: str | Path = "/etc/resolv.conf", exclude: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """The ``nameserver`` lines of a resolv.conf (port 53), minus ``exclude``."""
    out = []
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and parts[1] not in exclude:
            with contextlib.suppress(ValueError):
                ipaddress.IPv4Address(parts[1])
                out.append((parts[1], 53))
    return out


@dataclass
class _Endpoint:
    ip: str
    hostname: str


@dataclass
class _Service:
    svc: Obj
    endpoints: list[_Endpoint] = field(default_factory=list)
    # (port name, protocol, port) of the endpoints (headless SRV)
    ep_ports: list[tuple[str, str, int]] = field(default_factory=list)


class Index:
    """Services with their ready endpoints, keyed ``(ns, name)``; namespaces."""

    def __init__(self, source: Source) -> None:
        self.services: dict[tuple[str, str], _Service] = {}
        self.namespaces: set[str] = {k[1] for k, _ in source.iter_raw("namespaces")}
        for (ns, name), svc in source.iter_raw("services"):
            self.services[(ns, name)] = _Service(svc)
        for (ns, _), sl in source.iter_raw("endpointslices.discovery.k8s.io"):
            owner = ((sl.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name")
            entry = self.services.get((ns, owner or ""))
            if entry is None or sl.get("addressType", "IPv4") != "IPv4":
                continue
            for ep in sl.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                for ip in ep.get("addresses") or []:
                    entry.endpoints.append(_Endpoint(str(ip), str(ep.get("hostname") or "")))
            for p in sl.get("ports") or []:
                t = (str(p.get("name") or ""), str(p.get("protocol") or "TCP"), int(p.get("port") or 0))
                if t not in entry.ep_ports:
                    entry.ep_ports.append(t)


class _OneReply(asyncio.DatagramProtocol):
    """Client side of one forwarded query: the first datagram (or error) settles the future."""

    def __init__(self, fut: asyncio.Future[bytes]) -> None:
        self.fut = fut

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if not self.fut.done():
            self.fut.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.fut.done():
            self.fut.set_exception(exc)


class ClusterDNS:
    def __init__(self, source: Source, domain: str = "cluster.local",
                 upstreams: list[tuple[str, int]] | None = None) -> None:
        self.source = source
        self.domain = domain.strip(".").lower()
        self.upstreams = upstreams if upstreams is not None else host_resolvers()
        self._index: Index | None = None
        self._rev = -1
        self._servers: list[Any] = []
        self._transports: list[asyncio.BaseTransport] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ answering
    def index(self) -> Index:
        rev = self.source.revision
        if self._index is None or rev != self._rev:
            self._index = Index(self.source)
            self._rev = rev
        return self._index

    def _soa(self) -> RR:
        z = self.domain + "."
        return RR(z, QTYPE.SOA, ttl=TTL, rdata=SOA(f"ns.dns.{z}", f"hostmaster.{z}", (1, 7200, 1800, 86400, TTL)))

    def answer_local(self, req: DNSRecord) -> DNSRecord | None:
        """The reply for a name in the cluster zone, or None when the name is outside it."""
        qname = str(req.q.qname).rstrip(".").lower()
        qtype = req.q.qtype
        z = self.domain
        if qname != z and not qname.endswith("." + z):
            return None
        reply = req.reply()
        labels = qname[: -len(z)].rstrip(".").split(".") if qname != z else []
        found = self._resolve(reply, labels, qtype, str(req.q.qname))
        if not found:
            reply.header.rcode = RCODE.NXDOMAIN
        if not reply.rr:
            reply.add_auth(self._soa())
        return reply

    def _resolve(self, reply: DNSRecord, labels: list[str], qtype: int, qname: str) -> bool:
        """Fill ``reply``; False when the name does not exist (NXDOMAIN)."""
        if not labels:
            if qtype in (QTYPE.SOA, QTYPE.ANY):
                reply.add_answer(self._soa())
            return True
        idx = self.index()
        kind, rest = labels[-1], labels[:-1]
        if kind == "pod" and len(rest) == 2:
            try:
                ip = str(ipaddress.IPv4Address(rest[0].replace("-", ".")))
            except ValueError:
                return False
            if qtype in (QTYPE.A, QTYPE.ANY):
                reply.add_answer(RR(qname, QTYPE.A, ttl=TTL, rdata=A(ip)))
            return True
        if kind != "svc":
            return False
        if len(rest) == 1:
            return rest[0] in idx.namespaces
        if len(rest) < 2:
            return False
        ns, name = rest[-1], rest[-2]
        entry = idx.services.get((ns, name))
        if entry is None:
            return False
        spec = entry.svc.get("spec") or {}
        svc_fqdn = f"{name}.{ns}.svc.{self.domain}."
        headless = spec.get("clusterIP") == "None"
        if len(rest) == 2:
            if spec.get("type") == "ExternalName":
                if qtype != QTYPE.SRV:
                    reply.add_answer(RR(qname, QTYPE.CNAME, ttl=TTL, rdata=CNAME(str(spec.get("externalName")))))
                return True
            if qtype in (QTYPE.A, QTYPE.ANY):
                for ip in self._ips(entry, headless):
                    reply.add_answer(RR(qname, QTYPE.A, ttl=TTL, rdata=A(ip)))
            if qtype in (QTYPE.SRV, QTYPE.ANY):
                self._srv(reply, qname, entry, headless, svc_fqdn, None)
            return True
        if len(rest) == 3 and headless:  # <endpoint>.<svc>.<ns>.svc
            ep_label = rest[0]
            ips = [e.ip for e in entry.endpoints if ep_label in (e.hostname, e.ip.replace(".", "-"))]
            if not ips:
                return False
            if qtype in (QTYPE.A, QTYPE.ANY):
                for ip in ips:
                    reply.add_answer(RR(qname, QTYPE.A, ttl=TTL, rdata=A(ip)))
            return True
        if len(rest) == 4 and rest[0].startswith("_") and rest[1].startswith("_"):
            port_name, proto = rest[0][1:], rest[1][1:].upper()
            ports = self._ports(entry, headless)
            if not any(n == port_name and p == proto for n, p, _ in ports):
                return False
            if qtype in (QTYPE.SRV, QTYPE.ANY):
                self._srv(reply, qname, entry, headless, svc_fqdn, (port_name, proto))
            return True
        return False

    @staticmethod
    def _ips(entry: _Service, headless: bool) -> list[str]:
        if headless:
            return list(dict.fromkeys(e.ip for e in entry.endpoints))
        ip = (entry.svc.get("spec") or {}).get("clusterIP")
        return [ip] if ip else []

    @staticmethod
    def _ports(entry: _Service, headless: bool) -> list[tuple[str, str, int]]:
        if headless:
            return entry.ep_ports
        return [(str(p.get("name") or ""), str(p.get("protocol") or "TCP"), int(p.get("port") or 0))
                for p in (entry.svc.get("spec") or {}).get("ports") or []]

    def _srv(self, reply: DNSRecord, qname: str, entry: _Service, headless: bool, svc_fqdn: str,
             only: tuple[str, str] | None) -> None:
        ports = [p for p in self._ports(entry, headless) if only is None or (p[0], p[1]) == only]
        if headless:
            targets = [(f"{e.hostname or e.ip.replace('.', '-')}.{svc_fqdn}", e.ip) for e in entry.endpoints]
        else:
            targets = [(svc_fqdn, ip) for ip in self._ips(entry, False)]
        n = max(len(targets) * len(ports), 1)
        weight = max(100 // n, 1)
        added: set[str] = set()
        for _, _, port in ports:
            for target, ip in targets:
                reply.add_answer(RR(qname, QTYPE.SRV, ttl=TTL, rdata=SRV(0, weight, port, target)))
                if target not in added:
                    added.add(target)
                    reply.add_ar(RR(target, QTYPE.A, ttl=TTL, rdata=A(ip)))

    async def _forward(self, data: bytes, req: DNSRecord) -> bytes:
        loop = asyncio.get_running_loop()
        for host, port in self.upstreams:
            fut: asyncio.Future[bytes] = loop.create_future()
            transport = None
            try:
                transport, _ = await loop.create_datagram_endpoint(lambda f=fut: _OneReply(f),  # type: ignore[misc]
                                                                   remote_addr=(host, port))
                transport.sendto(data)
                return await asyncio.wait_for(fut, FORWARD_TIMEOUT)
            except (OSError, TimeoutError) as e:
                log.debug("forwarding %s to %s:%d failed: %s", req.q.qname, host, port, e)
            finally:
                if transport is not None:
                    transport.close()
        reply = req.reply()
        reply.header.rcode = RCODE.SERVFAIL
        return bytes(reply.pack())

    async def handle(self, data: bytes, udp: bool = True) -> bytes | None:
        """The reply bytes for one query message (None for garbage that is not worth an answer)."""
        out = self.handle_local(data, udp)
        if isinstance(out, DNSRecord):
            return await self._forward(data, out)
        return out

    def handle_local(self, data: bytes, udp: bool = True) -> bytes | DNSRecord | None:
        """Like :meth:`handle` without awaiting: the parsed request when it must be forwarded."""
        try:
            req = DNSRecord.parse(data)
        except Exception:  # dnslib raises DNSError and assorted struct errors on junk
            if len(data) >= 12:
                hdr = DNSHeader(id=struct.unpack("!H", data[:2])[0], qr=1, rcode=RCODE.FORMERR)
                return bytes(DNSRecord(hdr).pack())
            return None
        if not req.questions or req.header.qr:
            return None
        try:
            reply = self.answer_local(req)
        except Exception:  # bad stored data must not kill the server: SERVFAIL this query
            log.exception("DNS answer for %s failed", req.q.qname)
            reply = req.reply()
            reply.header.rcode = RCODE.SERVFAIL
        if reply is None:
            return req
        out = bytes(reply.pack())
        if udp and len(out) > 512:
            reply = req.reply()
            reply.header.tc = 1
            out = bytes(reply.pack())
        return out

    # ------------------------------------------------------------------ serving
    async def start(self, host: str, port: int) -> int:
        """Serve UDP and TCP on ``host:port`` (0 = a free port, the same for both); returns the port."""
        loop = asyncio.get_running_loop()
        tcp = freebind_socket(host, port, socket.SOCK_STREAM)
        port = tcp.getsockname()[1]
        try:
            udp = freebind_socket(host, port, socket.SOCK_DGRAM)
        except OSError:
            tcp.close()
            raise
        dns = self

        class _Udp(asyncio.DatagramProtocol):
            transport: asyncio.DatagramTransport

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport  # type: ignore[assignment]

            def datagram_received(self, data: bytes, addr: Any) -> None:
                out = dns.handle_local(data, udp=True)  # cluster names: answered right here
                if isinstance(out, DNSRecord):  # other names: forwarded in a task
                    t = asyncio.ensure_future(self._forward(data, out, addr))
                    dns._tasks.add(t)
                    t.add_done_callback(dns._tasks.discard)
                elif out is not None:
                    self.transport.sendto(out, addr)

            async def _forward(self, data: bytes, req: DNSRecord, addr: Any) -> None:
                out = await dns._forward(data, req)
                if not self.transport.is_closing():
                    self.transport.sendto(out, addr)

        transport, _ = await loop.create_datagram_endpoint(_Udp, sock=udp)
        self._transports.append(transport)
        self._servers.append(await asyncio.start_server(self._tcp_client, sock=tcp))
        log.info("cluster DNS for %s on %s:%d (udp+tcp), forwarding to %s", self.domain, host, port,
                 ", ".join(f"{h}:{p}" for h, p in self.upstreams) or "nothing")
        return int(port)

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(2), 30)
                data = await reader.readexactly(struct.unpack("!H", head)[0])
                out = await self.handle(data, udp=False)
                if out is None:
                    break
                writer.write(struct.pack("!H", len(out)) + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self) -> None:
        for t in self._transports:
            t.close()
        for s in self._servers:
            s.close()
            with contextlib.suppress(Exception):
                await s.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        self._transports.clear()
        self._servers.clear()
