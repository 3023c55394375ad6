"""Pure rule generation for the service proxy: Services + EndpointSlices -> ``iptables-restore`` text.

The chain layout is upstream kube-proxy's iptables mode (``pkg/proxy/iptables/proxier.go``) with our
own prefix (default ``PYK``) instead of ``KUBE``, so the proxy only ever creates, flushes or deletes
chains whose name starts with ``<prefix>-`` and never touches anybody else's:

nat table
  ``<P>-SERVICES``   one rule per ClusterIP:port (``-d <ip>/32 -p <proto> --dport <port>``) jumping
                     to that port's ``<P>-SVC-<hash>``; last, ``-m addrtype --dst-type LOCAL`` to
                     ``<P>-NODEPORTS`` (jumped to from PREROUTING and OUTPUT)
                     (``spec.externalIPs`` likewise jump to the service's chain)
  ``<P>-NODEPORTS``  ``--dport <nodePort>`` -> ``<P>-EXT-<hash>`` (marks for masquerade, then SVC,
                     or with ``externalTrafficPolicy: Local`` ``<P>-SVL-<hash>``: this node's
                     endpoints only; ``internalTrafficPolicy: Local`` narrows SVC the same way)
  ``<P>-SVC-<hash>`` mark for masquerade; session affinity (``-m recent --rcheck --seconds T
                     --reap``) first; then one DNAT rule per endpoint with ``-m statistic --mode
                     random --probability 1/(n-i)`` (the last without), so each endpoint gets 1/n
                     (``-m recent --set`` under session affinity).  Upstream's per-endpoint
                     ``KUBE-SEP-*`` chains are folded in: with every service packet marked for
                     masquerade their hairpin rule is moot, and iptables-nft restores slow down
                     sharply with thousands of chains (1,000 x 10 endpoints: 13 s+ vs 1 s).
  ``<P>-MARK-MASQ``, ``<P>-POSTROUTING``  the masquerade mark (``1 << iptablesMasqueradeBit``) and
                     MASQUERADE of marked packets (jumped to from POSTROUTING)
filter table
  ``<P>-SERVICES``   REJECT for service ports without any usable endpoint (jumped to from INPUT,
                     FORWARD and OUTPUT for new connections), as upstream's ``KUBE-SERVICES``

Which endpoints: the ``ready`` ones; if none, the ``serving`` + ``terminating`` ones (upstream's
terminating-endpoint fallback, so a rolling update does not black-hole connections); if none, the
port rejects.  Service traffic is always masqueraded (kube-proxy's ``--masquerade-all``): the reply
then comes back through this node's conntrack whatever the bridge netfilter settings, at the cost
of the backend seeing the node's address.  Session affinity is decided on the original source
(PREROUTING), before SNAT, so ``ClientIP`` still pins clients.

The text is applied with ``iptables-restore --noflush``: declaring ``:<chain> - [0:0]`` flushes (or
creates) a chain of ours and leaves every other chain of the table alone; chains of ours that are no
longer needed are declared then deleted (``-X``), all in one atomic commit per table.
:func:`changed_text` gives upstream's partial sync: only the chains whose rules changed since the
last sync (one endpoint change rewrites one service chain).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
MAX_CHAIN = 28


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int


@dataclass
class ServicePort:
    """One port of one Service as the proxy programs it."""

    namespace: str
    name: str
    port_name: str
    protocol: str
    cluster_ip: str
    port: int
    node_port: int = 0
    affinity_seconds: int = 0  # > 0: sessionAffinity ClientIP
    endpoints: list[Endpoint] = field(default_factory=list)  # for the ClusterIP (internalTrafficPolicy)
    # for the NodePort (externalTrafficPolicy); None: the same as ``endpoints``
    external_endpoints: list[Endpoint] | None = None
    external_ips: list[str] = field(default_factory=list)  # spec.externalIPs, served like the ClusterIP

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}:{self.port_name}"


def chain_hash(*parts: str) -> str:
    """16 characters of base32 of a SHA-256, as upstream's ``servicePortChainName``."""
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return base64.b32encode(digest[:10]).decode()  # 10 bytes = 16 base32 characters


def _usable(ep: Obj) -> tuple[bool, bool]:
    """(ready, serving-and-terminating) of an EndpointSlice endpoint (nil conditions = true)."""
    c = ep.get("conditions") or {}
    ready = c.get("ready") is not False
    serving = c.get("serving") if c.get("serving") is not None else ready
    return ready, bool(serving) and c.get("terminating") is True


def _pick(eps: list[tuple[Endpoint, bool, bool, str]], node: str | None) -> list[Endpoint]:
    """Ready endpoints (of ``node`` only, unless None), else the serving-terminating ones."""
    mine = [e for e in eps if node is None or e[3] == node]
    chosen = [e[0] for e in mine if e[1]] or [e[0] for e in mine if e[2]]
    return sorted(set(chosen), key=lambda e: (e.ip, e.port))


def service_ports(services: Iterable[Obj], slices: Iterable[Obj], node_name: str = "") -> list[ServicePort]:
    """What to program: every port of every ClusterIP/NodePort/LoadBalancer Service with an IP.
    ``internalTrafficPolicy``/``externalTrafficPolicy: Local`` keep the endpoints whose
    ``nodeName`` is ``node_name`` (for the ClusterIP / the NodePort respectively), as upstream."""
    by_svc: dict[tuple[str, str], list[Obj]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        owner = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        if owner and sl.get("addressType", "IPv4") == "IPv4":
            by_svc.setdefault((meta.get("namespace", ""), owner), []).append(sl)
    out = []
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        ip = spec.get("clusterIP")
        if spec.get("type") == "ExternalName" or not ip or ip == "None":
            continue
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        affinity = 0
        if spec.get("sessionAffinity") == "ClientIP":
            affinity = int(((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}).get("timeoutSeconds")
                           or 10800)
        for p in spec.get("ports") or []:
            proto = p.get("protocol") or "TCP"
            pname = p.get("name") or ""
            sp = ServicePort(ns, name, pname, proto, ip, int(p.get("port") or 0),
                             int(p.get("nodePort") or 0) if spec.get("type") in ("NodePort", "LoadBalancer") else 0,
                             affinity)
            eps: list[tuple[Endpoint, bool, bool, str]] = []
            for sl in by_svc.get((ns, name), []):
                port = next((int(x.get("port") or 0) for x in sl.get("ports") or []
                             if (x.get("name") or "") == pname and (x.get("protocol") or "TCP") == proto), 0)
                if not port:
                    continue
                for ep in sl.get("endpoints") or []:
                    is_ready, is_fallback = _usable(ep)
                    for addr in (ep.get("addresses") or [])[:1]:
                        eps.append((Endpoint(str(addr), port), is_ready, is_fallback, str(ep.get("nodeName") or "")))
            sp.endpoints = _pick(eps, node_name if spec.get("internalTrafficPolicy") == "Local" else None)
            sp.external_ips = [str(x) for x in spec.get("externalIPs") or [] if isinstance(x, str)]
            if sp.node_port and spec.get("externalTrafficPolicy") == "Local":
                sp.external_endpoints = _pick(eps, node_name)
            out.append(sp)
    return sorted(out, key=lambda s: s.id)


@dataclass
class RuleSet:
    nat: str
    filter: str
    chains: dict[str, set[str]]  # table -> our chains in this rule set
    # table -> chain -> its rules in order (what :func:`changed_text` diffs against the last sync)
    content: dict[str, dict[str, list[str]]] = field(default_factory=dict)


def _comment(text: str) -> str:
    return f'-m comment --comment "{text}"'


def build_rules(ports: list[ServicePort], *, prefix: str = "PYK", masquerade_bit: int = 14,
                existing: dict[str, set[str]] | None = None) -> RuleSet:
    """The ``iptables-restore --noflush`` input for both tables; ``existing`` = our chains now in
    the kernel (those not generated again are deleted)."""
    mark = f"{1 << masquerade_bit:#x}"
    P = prefix
    services, nodeports, postrouting, markmasq = f"{P}-SERVICES", f"{P}-NODEPORTS", f"{P}-POSTROUTING", \
        f"{P}-MARK-MASQ"
    nat_chains = [services, nodeports, postrouting, markmasq]
    nat_rules: list[str] = [
        f"-A {markmasq} -j MARK --or-mark {mark}",
        f"-A {postrouting} -m mark ! --mark {mark}/{mark} -j RETURN",
        f"-A {postrouting} -j MARK --xor-mark {mark}",
        f"-A {postrouting} {_comment('pykubelet service traffic requiring SNAT')} -j MASQUERADE",
    ]
    filter_chains = [services]
    filter_rules: list[str] = []
    node_rules: list[str] = []
    for sp in ports:
        proto = sp.protocol.lower()
        h = chain_hash(sp.id, sp.protocol)
        svc_chain, ext_chain, svl_chain = f"{P}-SVC-{h}", f"{P}-EXT-{h}", f"{P}-SVL-{h}"
        external = sp.endpoints if sp.external_endpoints is None else sp.external_endpoints
        reject = "-j REJECT --reject-with icmp-port-unreachable"
        if sp.endpoints:
            nat_chains.append(svc_chain)
            nat_rules.append(f"-A {services} -d {sp.cluster_ip}/32 -p {proto} {_comment(sp.id + ' cluster IP')} "
                             f"-m {proto} --dport {sp.port} -j {svc_chain}")
            nat_rules.append(f"-A {svc_chain} {_comment(sp.id + ' cluster IP')} -j {markmasq}")
            nat_rules += _balance(svc_chain, sp.endpoints, sp, P, proto)
            nat_rules += [f"-A {services} -d {ip}/32 -p {proto} {_comment(sp.id + ' external IP')} "
                          f"-m {proto} --dport {sp.port} -j {svc_chain}" for ip in sp.external_ips]
        else:
            filter_rules += [f"-A {services} -d {ip}/32 -p {proto} {_comment(sp.id + ' has no endpoints')}"
                             f" -m {proto} --dport {sp.port} {reject}" for ip in [sp.cluster_ip, *sp.external_ips]]
        if not sp.node_port:
            continue
        if not external:
            filter_rules.append(f"-A {services} -m addrtype --dst-type LOCAL -p {proto} "
                                f"{_comment(sp.id + ' has no endpoints')} -m {proto} --dport {sp.node_port} {reject}")
            continue
        nat_chains.append(ext_chain)
        node_rules.append(f"-A {nodeports} -p {proto} {_comment(sp.id)} -m {proto} --dport {sp.node_port} "
                          f"-j {ext_chain}")
        nat_rules.append(f"-A {ext_chain} {_comment('masquerade traffic for ' + sp.id + ' external destinations')} "
                         f"-j {markmasq}")
        if sp.external_endpoints is None:
            nat_rules.append(f"-A {ext_chain} -j {svc_chain}")
        else:  # externalTrafficPolicy: Local: this node's endpoints only (upstream's KUBE-SVL-*)
            nat_chains.append(svl_chain)
            nat_rules.append(f"-A {ext_chain} -j {svl_chain}")
            nat_rules += _balance(svl_chain, external, sp, P, proto)
    nat_rules += node_rules
    nat_rules.append(f"-A {services} {_comment('pykubelet service nodeports')} ! -d 127.0.0.0/8 "
                     f"-m addrtype --dst-type LOCAL -j {nodeports}")
    existing = existing or {}
    nat_stale = sorted(existing.get("nat", set()) - set(nat_chains))
    filter_stale = sorted(existing.get("filter", set()) - set(filter_chains))
    nat = _table("nat", nat_chains, nat_rules, nat_stale)
    filt = _table("filter", filter_chains, filter_rules, filter_stale)
    content = {"nat": _by_chain(nat_chains, nat_rules), "filter": _by_chain(filter_chains, filter_rules)}
    return RuleSet(nat, filt, {"nat": set(nat_chains), "filter": set(filter_chains)}, content)


def _balance(chain: str, endpoints: list[Endpoint], sp: ServicePort, P: str, proto: str) -> list[str]:
    """DNAT rules spreading ``chain``'s connections evenly over ``endpoints`` (affinity first).

    No per-endpoint chains (upstream's ``KUBE-SEP-*``): every service packet is marked for
    masquerade, so the hairpin rule a SEP chain holds is not needed, and one DNAT rule per endpoint
    keeps the chain count at one per service port (iptables-nft restores slow down sharply with
    thousands of chains).  The affinity ``recent`` list keeps the SEP name."""
    out = []
    seps = [(ep, f"{P}-SEP-{chain_hash(sp.id, sp.protocol, ep.ip, str(ep.port))}" if sp.affinity_seconds else "")
            for ep in endpoints]
    dnat = f"-p {proto} -m {proto} -j DNAT --to-destination"
    if sp.affinity_seconds:
        for ep, sep in seps:
            out.append(f"-A {chain} {_comment(f'{sp.id} -> {ep.ip}:{ep.port}')} -m recent --name {sep} "
                       f"--mask 255.255.255.255 --rsource --rcheck --seconds {sp.affinity_seconds} --reap "
                       f"{dnat} {ep.ip}:{ep.port}")
    n = len(seps)
    for i, (ep, sep) in enumerate(seps):
        stat = "" if i == n - 1 else f"-m statistic --mode random --probability {1.0 / (n - i):0.10f} "
        recent = f"-m recent --name {sep} --mask 255.255.255.255 --rsource --set " if sp.affinity_seconds else ""
        out.append(f"-A {chain} {_comment(f'{sp.id} -> {ep.ip}:{ep.port}')} {stat}{recent}{dnat} {ep.ip}:{ep.port}")
    return out


def _by_chain(chains: list[str], rules: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {c: [] for c in chains}
    for r in rules:
        out.setdefault(r.split(" ", 2)[1], []).append(r)
    return out


def changed_text(new: RuleSet, applied: dict[str, dict[str, list[str]]]) -> str:
    """Restore text for only the chains whose rules differ from ``applied`` (the content of the
    last successful sync), plus deletion of chains no longer wanted: upstream kube-proxy's partial
    sync, so one endpoint change rewrites one service chain, not all of them."""
    out = []
    for table in ("filter", "nat"):
        want, have = new.content.get(table, {}), applied.get(table, {})
        changed = [c for c, rs in want.items() if have.get(c) != rs]
        stale = sorted(set(have) - set(want))
        if not changed and not stale:
            continue
        out.append(_table(table, changed, [r for c in changed for r in want[c]], stale))
    return "".join(out)


def _table(name: str, chains: list[str], rules: list[str], stale: list[str]) -> str:
    lines = [f"*{name}"]
    lines += [f":{c} - [0:0]" for c in dict.fromkeys([*chains, *stale])]
    lines += rules
    lines += [f"-X {c}" for c in stale]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def jump_rules(prefix: str = "PYK") -> list[tuple[str, str, list[str]]]:
    """(table, builtin chain, rule spec) jumps into our chains, kept at the top of the builtins."""
    portals = ["-m", "comment", "--comment", "pykubelet service portals", "-j", f"{prefix}-SERVICES"]
    new = ["-m", "conntrack", "--ctstate", "NEW"]
    return [
        ("nat", "PREROUTING", portals),
        ("nat", "OUTPUT", portals),
        ("nat", "POSTROUTING", ["-m", "comment", "--comment", "pykubelet postrouting rules",
                                "-j", f"{prefix}-POSTROUTING"]),
        ("filter", "INPUT", [*new, *portals]),
        ("filter", "FORWARD", [*new, *portals]),
        ("filter", "OUTPUT", [*new, *portals]),
    ]


def our_chains(save_output: str, prefix: str) -> set[str]:
    """Chains named ``<prefix>-...`` in one table's ``iptables-save`` output."""
    return {line[1:].split()[0] for line in save_output.splitlines()
            if line.startswith(":") and line[1:].startswith(prefix + "-")}


def our_jumps(save_output: str, prefix: str) -> list[list[str]]:
    """``-D`` argument lists for rules in builtin chains that jump into our chains."""
    import shlex

    out = []
    for line in save_output.splitlines():
        if not line.startswith("-A "):
            continue
        parts = shlex.split(line)
        chain = parts[1]
        if chain.startswith(prefix + "-"):
            continue
        if "-j" in parts and parts[parts.index("-j") + 1].startswith(prefix + "-"):
            out.append(["-D", *parts[1:]])
    return out


def cleanup_text(table: str, chains: set[str]) -> str:
    """Flush and delete all our chains of a table (after the jumps into them were removed)."""
    return _table(table, [], [], sorted(chains)) if chains else ""
