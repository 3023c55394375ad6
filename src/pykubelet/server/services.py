"""Service strategy of the dev API server: defaulting, validation and ClusterIP / NodePort allocation.

Upstream splits this over ``pkg/apis/core/v1/defaults.go`` (SetDefaults_Service),
``pkg/apis/core/validation`` (ValidateService) and ``pkg/registry/core/service`` (the REST storage
whose allocators hand out ClusterIPs from ``--service-cluster-ip-range`` and node ports from
``--service-node-port-range``).  What is followed here:

- defaults: ``type: ClusterIP``, ``sessionAffinity: None`` (``ClientIP`` gets
  ``sessionAffinityConfig.clientIP.timeoutSeconds: 10800``), port ``protocol: TCP``, ``targetPort``
  = ``port``, ``internalTrafficPolicy: Cluster`` and, for NodePort/LoadBalancer,
  ``externalTrafficPolicy: Cluster``; ``clusterIPs``/``ipFamilies``/``ipFamilyPolicy`` as a
  single-stack IPv4 cluster sets them (headless without selector: ``RequireDualStack`` is refused
  on single stack, so ``PreferDualStack`` is what it gets), none of them for ``ExternalName``.
- allocation: a free ClusterIP is picked at random from the range (the first address is the
  ``kubernetes`` Service's, as upstream); a requested one must be in the range and free; node
  ports likewise from 30000-32767.  The messages are upstream's: ``failed to allocate IP X:
  provided IP is already allocated``, ``the provided IP (X) is not in the valid range. The range
  of valid IPs is CIDR``, ``provided port is already allocated``, ``provided port is not in the
  valid range. The range of valid ports is 30000-32767``, and ``failed to allocate a serviceIP:
  range is full`` (500) on exhaustion.
- ``clusterIP`` is immutable except to/from ``ExternalName``; node ports the client leaves out on
  update keep their old values (upstream's ``patchAllocatedValues``).

Allocation keeps no state of its own: what is taken is read from the stored Services at each
write (the store is in memory and writes are serialised on the loop), so it is rebuilt after a
restart by construction and a deleted Service frees its IP and ports at once.
"""

from __future__ import annotations

import copy
import ipaddress
import random
from collections.abc import Iterable
from typing import Any

from pykubelet.server.errors import StatusError

Obj = dict[str, Any]
Causes = list[tuple[str, str]]

DEFAULT_SERVICE_CIDR = "198.18.128.0/20"
DEFAULT_NODE_PORT_RANGE = (30000, 32767)
TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
PROTOCOLS = ("SCTP", "TCP", "UDP")
DEFAULT_AFFINITY_TIMEOUT = 10800


def parse_port_range(value: str) -> tuple[int, int]:
    """``30000-32767`` (upstream's flag format; ``30000+767`` too) -> (first, last)."""
    if "+" in value:
        a, n = value.split("+", 1)
        first, last = int(a), int(a) + int(n)
    else:
        a, _, b = value.partition("-")
        first, last = int(a), int(b or a)
    if not (0 < first <= last <= 65535):
        raise ValueError(f"invalid port range {value!r}")
    return first, last


class ServiceAllocator:
    """Defaults, validates and allocates addresses for Service writes (see the module docstring)."""

    def __init__(self, cidr: str = DEFAULT_SERVICE_CIDR,
                 node_ports: tuple[int, int] = DEFAULT_NODE_PORT_RANGE) -> None:
        net = ipaddress.ip_network(cidr, strict=False)
        if not isinstance(net, ipaddress.IPv4Network) or net.num_addresses < 8:
            raise ValueError(f"service CIDR {cidr} must be an IPv4 range of at least 8 addresses")
        self.net = net
        self.node_ports = node_ports
        self.rng = random.Random()

    @property
    def kubernetes_ip(self) -> str:
        """The first address of the range: the ``default/kubernetes`` Service's."""
        return str(self.net.network_address + 1)

    # ------------------------------------------------------------------ defaulting
    @staticmethod
    def default(svc: Obj) -> None:
        spec = svc.setdefault("spec", {})
        typ = spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("sessionAffinity") == "ClientIP":
            cfg = spec.setdefault("sessionAffinityConfig", {}).setdefault("clientIP", {})
            cfg.setdefault("timeoutSeconds", DEFAULT_AFFINITY_TIMEOUT)
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if p.get("targetPort") in (None, 0, ""):
                    p["targetPort"] = p.get("port")
        if typ == "ExternalName":
            return
        spec.setdefault("internalTrafficPolicy", "Cluster")
        if typ in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if spec.get("clusterIP") and not spec.get("clusterIPs"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        elif spec.get("clusterIPs") and not spec.get("clusterIP"):
            spec["clusterIP"] = spec["clusterIPs"][0]
        headless = spec.get("clusterIP") == "None"
        if headless and not spec.get("selector"):
            spec.setdefault("ipFamilyPolicy", "PreferDualStack")
        else:
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])

    # ------------------------------------------------------------------ validation
    def validate(self, svc: Obj) -> Causes:
        spec = svc.get("spec") or {}
        errs: Causes = []
        typ = spec.get("type")
        if typ not in TYPES:
            errs.append(("spec.type", f'Unsupported value: "{typ}": supported values: '
                         + ", ".join(f'"{t}"' for t in TYPES)))
            return errs
        aff = spec.get("sessionAffinity")
        if aff not in ("None", "ClientIP"):
            errs.append(("spec.sessionAffinity", f'Unsupported value: "{aff}": supported values: "ClientIP", "None"'))
        elif aff == "ClientIP":
            t = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}).get("timeoutSeconds")
            if not isinstance(t, int) or not 0 < t <= 86400:
                errs.append(("spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                             f"Invalid value: {t}: must be greater than 0 and less than 86400"))
        for fld, allowed in (("internalTrafficPolicy", ("Cluster", "Local")),
                             ("externalTrafficPolicy", ("Cluster", "Local"))):
            v = spec.get(fld)
            if v is not None and v not in allowed:
                errs.append((f"spec.{fld}", f'Unsupported value: "{v}": supported values: "Cluster", "Local"'))
        ports = spec.get("ports") or []
        headless = spec.get("clusterIP") == "None"
        if typ == "ExternalName":
            name = spec.get("externalName")
            if not name:
                errs.append(("spec.externalName", "Required value"))
            if spec.get("clusterIP"):
                errs.append(("spec.clusterIP", "Forbidden: may not be set for ExternalName services"))
        elif not ports and not headless:
            errs.append(("spec.ports", "Required value"))
        if headless and typ in ("NodePort", "LoadBalancer"):
            errs.append(("spec.clusterIPs[0]", f"Invalid value: \"None\": may not be set to 'None' for {typ} "
                         "services"))
        for i, ip in enumerate(spec.get("externalIPs") or []):
            try:
                ipaddress.IPv4Address(str(ip))
            except ValueError:
                errs.append((f"spec.externalIPs[{i}]", f'Invalid value: "{ip}": must be a valid IP address'))
        for fam in spec.get("ipFamilies") or []:
            if fam != "IPv4":
                errs.append(("spec.ipFamilies", f'Invalid value: "{fam}": not configured on this cluster'))
        pol = spec.get("ipFamilyPolicy")
        if pol == "RequireDualStack":
            errs.append(("spec.ipFamilyPolicy", 'Invalid value: "RequireDualStack": this cluster is not '
                         "configured for dual-stack services"))
        seen_names: set[str] = set()
        seen_ports: set[tuple[int, str]] = set()
        for i, p in enumerate(ports):
            f = f"spec.ports[{i}]"
            if not isinstance(p, dict):
                errs.append((f, "Invalid value: must be an object"))
                continue
            name = p.get("name") or ""
            if len(ports) > 1 and not name:
                errs.append((f"{f}.name", "Required value"))
            elif name in seen_names:
                errs.append((f"{f}.name", f'Duplicate value: "{name}"'))
            seen_names.add(name)
            port = p.get("port")
            if not isinstance(port, int) or not 1 <= port <= 65535:
                errs.append((f"{f}.port", f"Invalid value: {port}: must be between 1 and 65535, inclusive"))
            proto = p.get("protocol")
            if proto not in PROTOCOLS:
                errs.append((f"{f}.protocol", f'Unsupported value: "{proto}": supported values: "SCTP", "TCP", "UDP"'))
            key = (port if isinstance(port, int) else 0, str(proto))
            if key in seen_ports:
                errs.append((f, f'Duplicate value: core.ServicePort{{Name:"{name}", Protocol:"{proto}", '
                             f"Port:{port}}}"))
            seen_ports.add(key)
            tp = p.get("targetPort")
            if isinstance(tp, int) and not 1 <= tp <= 65535:
                errs.append((f"{f}.targetPort", f"Invalid value: {tp}: must be between 1 and 65535, inclusive"))
            if p.get("nodePort") and typ not in ("NodePort", "LoadBalancer"):
                errs.append((f"{f}.nodePort", f"Forbidden: may not be used when `type` is '{typ}'"))
        return errs

    # ------------------------------------------------------------------ allocation
    def _taken(self, others: Iterable[Obj]) -> tuple[set[str], set[tuple[int, str]]]:
        ips: set[str] = set()
        ports: set[tuple[int, str]] = set()
        for o in others:
            spec = o.get("spec") or {}
            for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []):
                ips.add(str(ip))
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and p.get("nodePort"):
                    ports.add((int(p["nodePort"]), str(p.get("protocol") or "TCP")))
        return ips, ports

    def _alloc_ip(self, spec: Obj, taken: set[str]) -> Causes:
        want = spec.get("clusterIP")
        if want in (None, ""):
            hosts = self.net.num_addresses - 2
            base = int(self.net.network_address) + 1
            start = self.rng.randrange(hosts)
            for k in range(hosts):
                ip = str(ipaddress.IPv4Address(base + (start + k) % hosts))
                if ip not in taken and ip != self.kubernetes_ip:
                    spec["clusterIP"] = ip
                    spec["clusterIPs"] = [ip]
                    return []
            raise StatusError(500, "InternalError", "Internal error occurred: failed to allocate a serviceIP: "
                              "range is full")
        if want == "None":
            spec["clusterIPs"] = ["None"]
            return []
        shown = "[]string{" + ", ".join(f'"{x}"' for x in spec.get("clusterIPs") or [want]) + "}"
        try:
            addr = ipaddress.ip_address(str(want))
        except ValueError:
            return [("spec.clusterIPs[0]", f'Invalid value: "{want}": must be a valid IP address, (e.g. '
                     "10.9.8.7 or 2001:db8::ffff)")]
        if addr not in self.net or addr in (self.net.network_address, self.net.broadcast_address):
            return [("spec.clusterIPs", f"Invalid value: {shown}: failed to allocate IP {want}: the provided IP "
                     f"({want}) is not in the valid range. The range of valid IPs is {self.net}")]
        if str(want) in taken:
            return [("spec.clusterIPs", f"Invalid value: {shown}: failed to allocate IP {want}: provided IP is "
                     "already allocated")]
        spec["clusterIPs"] = [str(want)]
        return []

    def _alloc_node_ports(self, spec: Obj, taken: set[tuple[int, str]]) -> Causes:
        errs: Causes = []
        first, last = self.node_ports
        mine: set[tuple[int, str]] = set()
        for i, p in enumerate(spec.get("ports") or []):
            proto = str(p.get("protocol") or "TCP")
            want = p.get("nodePort")
            if want:
                if not isinstance(want, int) or not first <= want <= last:
                    errs.append((f"spec.ports[{i}].nodePort", f"Invalid value: {want}: provided port is not in the "
                                 f"valid range. The range of valid ports is {first}-{last}"))
                elif (want, proto) in taken or (want, proto) in mine:
                    errs.append((f"spec.ports[{i}].nodePort", f"Invalid value: {want}: provided port is already "
                                 "allocated"))
                mine.add((int(want), proto))
                continue
            n = last - first + 1
            start = self.rng.randrange(n)
            for k in range(n):
                cand = first + (start + k) % n
                if (cand, proto) not in taken and (cand, proto) not in mine:
                    p["nodePort"] = cand
                    mine.add((cand, proto))
                    break
            else:
                raise StatusError(500, "InternalError", "Internal error occurred: failed to allocate a nodePort: "
                                  "range is full")
        return errs

    def prepare_create(self, svc: Obj, others: Iterable[Obj]) -> Causes:
        """Default, validate and allocate in place; returns the field errors (422) if any."""
        self.default(svc)
        errs = self.validate(svc)
        if errs:
            return errs
        spec = svc["spec"]
        ips, ports = self._taken(others)
        if spec["type"] == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
            return []
        errs = self._alloc_ip(spec, ips)
        if spec["type"] in ("NodePort", "LoadBalancer"):
            errs += self._alloc_node_ports(spec, ports)
        svc.setdefault("status", {}).setdefault("loadBalancer", {})
        return errs

    def prepare_update(self, old: Obj, new: Obj, others: Iterable[Obj]) -> Causes:
        ospec = old.get("spec") or {}
        spec = new.setdefault("spec", {})
        was_ext = ospec.get("type") == "ExternalName"
        is_ext = spec.get("type", ospec.get("type")) == "ExternalName"
        if not is_ext and not was_ext:
            # clusterIP(s) left out by the client keep their value (kubectl apply/replace do so)
            if not spec.get("clusterIP") and not spec.get("clusterIPs"):
                spec["clusterIP"] = ospec.get("clusterIP")
                spec["clusterIPs"] = copy.deepcopy(ospec.get("clusterIPs"))
            for fld in ("ipFamilies", "ipFamilyPolicy"):
                if fld not in spec and fld in ospec:
                    spec[fld] = copy.deepcopy(ospec[fld])
        self.default(new)
        errs = self.validate(new)
        if errs:
            return errs
        if not is_ext and not was_ext and spec.get("clusterIP") != ospec.get("clusterIP"):
            return [("spec.clusterIPs[0]", f'Invalid value: "{spec.get("clusterIP")}": may not change once set')]
        if is_ext:
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
            return []
        ips, ports = self._taken(others)
        if was_ext:
            errs = self._alloc_ip(spec, ips)
        if spec["type"] in ("NodePort", "LoadBalancer"):
            old_np = {(p.get("port"), p.get("protocol") or "TCP"): p.get("nodePort")
                      for p in ospec.get("ports") or [] if isinstance(p, dict) and p.get("nodePort")}
            for p in spec.get("ports") or []:
                if not p.get("nodePort") and (p.get("port"), p.get("protocol")) in old_np:
                    p["nodePort"] = old_np[(p.get("port"), p.get("protocol"))]
            errs += self._alloc_node_ports(spec, ports)
        else:
            for p in spec.get("ports") or []:
                p.pop("nodePort", None)
            spec.pop("externalTrafficPolicy", None)
        return errs

    # ------------------------------------------------------------------ the kubernetes Service
    def kubernetes_service(self, port: int = 443, target_port: int = 6443) -> Obj:
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"type": "ClusterIP", "clusterIP": self.kubernetes_ip, "clusterIPs": [self.kubernetes_ip],
                         "ports": [{"name": "https", "port": port, "protocol": "TCP", "targetPort": target_port}],
                         "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                         "internalTrafficPolicy": "Cluster"},
                "status": {"loadBalancer": {}}}


def kubernetes_endpoints(address: str, port: int) -> tuple[Obj, Obj]:
    """The Endpoints and EndpointSlice of ``default/kubernetes`` (upstream's endpoint reconciler
    writes both; the slice is named ``kubernetes`` and managed by ``endpointslice.kubernetes.io``'s
    ``kube-apiserver`` manager-label)."""
    ep: Obj = {"apiVersion": "v1", "kind": "Endpoints",
               "metadata": {"name": "kubernetes", "namespace": "default",
                            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
               "subsets": [{"addresses": [{"ip": address}],
                            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}
    slice_: Obj = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"kubernetes.io/service-name": "kubernetes",
                                           "endpointslice.kubernetes.io/managed-by": "kube-apiserver"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": [address],
                                  "conditions": {"ready": True, "serving": True, "terminating": False}}],
                   "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
    return ep, slice_


def validate_endpoint_slice(sl: Obj) -> Causes:
    """Upstream ``ValidateEndpointSlice`` (the part that keeps readers safe): addressType, endpoint
    addresses (1-100, valid for the type), boolean conditions, at most 100 ports with valid numbers
    and protocols.  The body is not type-decoded by a schema, so wrong shapes are refused here."""
    errs: Causes = []
    at = sl.get("addressType")
    if at not in ("IPv4", "IPv6", "FQDN"):
        errs.append(("addressType", f'Unsupported value: "{at}": supported values: "FQDN", "IPv4", "IPv6"'
                     if at else "Required value"))
    eps = sl.get("endpoints")
    if eps is not None and not isinstance(eps, list):
        return [*errs, ("endpoints", "Invalid value: must be a list")]
    for i, ep in enumerate(eps or []):
        f = f"endpoints[{i}]"
        if not isinstance(ep, dict):
            errs.append((f, "Invalid value: must be an object"))
            continue
        addrs = ep.get("addresses")
        if not isinstance(addrs, list) or not addrs:
            errs.append((f"{f}.addresses", "Required value: must contain at least 1 address"))
        elif len(addrs) > 100:
            errs.append((f"{f}.addresses", f"Too many: {len(addrs)}: must have at most 100 items"))
        else:
            for j, a in enumerate(addrs):
                try:
                    ok = (at == "FQDN" and isinstance(a, str) and bool(a)) or \
                        ipaddress.ip_address(str(a)).version == (4 if at == "IPv4" else 6)
                except ValueError:
                    ok = False
                if not ok:
                    errs.append((f"{f}.addresses[{j}]", f'Invalid value: "{a}": must be a valid {at} address'))
        conds = ep.get("conditions")
        if conds is not None and not isinstance(conds, dict):
            errs.append((f"{f}.conditions", "Invalid value: must be an object"))
        for k, v in (conds or {}).items() if isinstance(conds, dict) else []:
            if v is not None and not isinstance(v, bool):
                errs.append((f"{f}.conditions.{k}", f"Invalid value: {v!r}: must be a boolean"))
        for k in ("hostname", "nodeName"):
            if ep.get(k) is not None and not isinstance(ep.get(k), str):
                errs.append((f"{f}.{k}", "Invalid value: must be a string"))
    ports = sl.get("ports")
    if ports is not None and not isinstance(ports, list):
        return [*errs, ("ports", "Invalid value: must be a list")]
    if ports and len(ports) > 100:
        errs.append(("ports", f"Too many: {len(ports)}: must have at most 100 items"))
    for i, p in enumerate(ports or []):
        if not isinstance(p, dict):
            errs.append((f"ports[{i}]", "Invalid value: must be an object"))
            continue
        port = p.get("port")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535):
            errs.append((f"ports[{i}].port", f"Invalid value: {port!r}: must be between 0 and 65535, inclusive"))
        proto = p.get("protocol", "TCP")
        if proto not in PROTOCOLS:
            errs.append((f"ports[{i}].protocol",
                         f'Unsupported value: "{proto}": supported values: "SCTP", "TCP", "UDP"'))
        if p.get("name") is not None and not isinstance(p.get("name"), str):
            errs.append((f"ports[{i}].name", "Invalid value: must be a string"))
    return errs
