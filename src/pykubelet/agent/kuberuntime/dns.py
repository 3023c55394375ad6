"""The DNS settings of a pod sandbox (upstream ``pkg/kubelet/network/dns``: ``GetPodDNS``), pure.

- ``ClusterFirst`` (and ``ClusterFirstWithHostNet``; ``ClusterFirst`` on the host network is
  ``Default``): nameservers = the kubelet's ``clusterDNS``, search = ``<ns>.svc.<domain>
  svc.<domain> <domain>`` followed by the host's search domains, ``options ndots:5``.  Without
  ``clusterDNS`` the pod falls back to ``Default`` and a ``MissingClusterDNS`` warning says so.
- ``Default``: the host's resolv.conf (the kubelet's ``resolvConf``) as it is.
- ``None``: nothing but ``dnsConfig``.
- ``dnsConfig`` is merged last: nameservers and searches appended without duplicates, options
  replacing same-named ones.  Limits as upstream: 3 nameservers, 32 search domains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_NAMESERVERS = 3
MAX_SEARCHES = 32
MISSING_CLUSTER_DNS = ('kubelet does not have ClusterDNS IP configured and cannot create Pod using "{policy}" '
                       'policy. Falling back to "Default" policy.')


@dataclass
class PodDNS:
    servers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    warning: str = ""  # MissingClusterDNS message, if the policy fell back


def parse_resolv_conf(text: str) -> tuple[list[str], list[str], list[str]]:
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        if parts[0] == "nameserver" and len(parts) > 1:
            servers.append(parts[1])
        elif parts[0] in ("search", "domain"):
            searches = parts[1:]
        elif parts[0] == "options":
            options.extend(parts[1:])
    return servers, searches, options


def _policy(spec: dict[str, Any]) -> str:
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        policy = "Default"
    return str(policy)


def missing_cluster_dns(pod: dict[str, Any], *, cluster_dns: list[str]) -> str:
    """``pod_dns(...).warning`` alone (it depends on the policy and ``cluster_dns`` only)."""
    policy = _policy(pod.get("spec") or {})
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not cluster_dns:
        return MISSING_CLUSTER_DNS.format(policy=policy)
    return ""


def pod_dns(pod: dict[str, Any], *, cluster_dns: list[str], cluster_domain: str, host_resolv: str) -> PodDNS:
    """``host_resolv``: the text of the host's resolv.conf ("" if unreadable)."""
    spec = pod.get("spec") or {}
    policy = _policy(spec)
    out = PodDNS()
    host_servers, host_searches, host_options = parse_resolv_conf(host_resolv)
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not cluster_dns:
        out.warning = MISSING_CLUSTER_DNS.format(policy=policy)
        policy = "Default"
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        domain = cluster_domain or "cluster.local"
        out.servers = list(cluster_dns)
        out.searches = [f"{ns}.svc.{domain}", f"svc.{domain}", domain]
        out.searches += [s for s in host_searches if s not in out.searches]
        out.options = ["ndots:5"]
    elif policy != "None":
        out.servers, out.searches, out.options = host_servers, host_searches, host_options
    extra = spec.get("dnsConfig") or {}
    out.servers += [s for s in extra.get("nameservers") or [] if s not in out.servers]
    out.searches += [s for s in extra.get("searches") or [] if s not in out.searches]
    for o in extra.get("options") or []:
        name = o.get("name", "")
        out.options = [x for x in out.options if x.split(":")[0] != name]
        out.options.append(f"{name}:{o['value']}" if o.get("value") is not None else name)
    out.servers = out.servers[:MAX_NAMESERVERS]
    out.searches = out.searches[:MAX_SEARCHES]
    return out
