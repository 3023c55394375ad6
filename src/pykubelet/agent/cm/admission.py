"""Node-side admission predicates (upstream ``pkg/kubelet/lifecycle/predicate.go``).

A pod may reach this node without the scheduler (``spec.nodeName`` set by its author, a static pod)
or after the node changed, so before it gets a worker the agent re-runs the scheduler's admission
check against the node as the agent knows it (upstream ``getNodeAnyWay``: the API's Node when there
is one, else the node the agent would register, with the capacity/allocatable it computes).

Upstream behaviour followed (``generalFilter`` / ``scheduler.AdmissionCheck``), first failure wins:
- resources: the pod's requests (init containers' max, plus overhead) against allocatable minus the
  requests of the pods already admitted — ``OutOfcpu``, ``OutOfmemory``, ``OutOfephemeral-storage``,
  ``OutOf<name>`` for hugepages and extended resources, message "Node didn't have enough resource:
  cpu, requested: 2000, used: 0, capacity: 1000" (cpu in millicores, the rest in units); extended
  resources the node does not advertise at all are ignored (``removeMissingExtendedResources``);
  the ``pods`` count is ``MaxPodsAdmitHandler``'s job;
- ``NodeAffinity`` (nodeSelector and required node affinity), ``NodeName``, ``NodePorts`` (host
  ports used by admitted pods): reason = predicate name, message "Predicate <name> failed: <reason>";
- taints: only ``NoExecute`` taints matter to the kubelet, and static pods are exempt; reason
  ``TaintToleration``, message "Predicate TaintToleration failed: node(s) had taints that the pod
  didn't tolerate".

Cost: the pods already admitted are summed once, not once per new pod. ``NodeUsage`` keeps the
summed requests, the count and the host ports of the admitted, non-terminated pods up to date as
pods are admitted, change, terminate or go (the kubelet tells it); admission reads the sums, so a
1,000-pod start is O(n), not O(n²). The node's allocatable is parsed once per distinct set of strings,
not once per admission. Decimal sums are exact, so adding and removing in any order gives
the same totals as summing afresh; ``reconcile`` (run by housekeeping) recounts from the pods as a
consistency check. ``NodeAdmitAttributes`` hands the handler the aggregate together with the pods it
was built from; called with plain ``PodAdmitAttributes`` the handler sums ``other_pods`` as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from pykubelet.agent.interfaces import PodAdmitAttributes, PodAdmitResult
from pykubelet.common import podutil
from pykubelet.common.nodepredicates import host_ports, matches_node_affinity, ports_conflict
from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.common.tolerations import first_untolerated_taint

K = TypeVar("K")
V = TypeVar("V")

Obj = dict[str, Any]
NodeGetter = Callable[[], Obj | None]

ADMIT = PodAdmitResult(True)
NATIVE = ("cpu", "memory", "ephemeral-storage")


def _predicate(name: str, reason: str) -> PodAdmitResult:
    return PodAdmitResult(False, name, f"Predicate {name} failed: {reason}")


def is_extended_resource(name: str) -> bool:
    """Upstream ``IsExtendedResourceName``: a domain-prefixed name outside kubernetes.io."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _quantities(raw: Any) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for k, v in (raw or {}).items():
        try:
            out[str(k)] = parse_quantity(v).value
        except (QuantityError, ValueError, TypeError):
            continue
    return out


def pod_requests_with_overhead(pod: Obj) -> dict[str, Decimal]:
    req = dict(podutil.pod_requests(pod))
    for k, v in _quantities((pod.get("spec") or {}).get("overhead")).items():
        req[k] = req.get(k, Decimal(0)) + v
    return req


def _units(resource: str, v: Decimal) -> int:
    return podutil.to_millis(v) if resource == "cpu" else int(v)


# Requests of admitted pods by (uid, resourceVersion): a pod's requests are read once, not once per
# later admission (1,000 pods made admission O(n²) parses: a quarter of the agent's start).
_REQUESTS: dict[tuple[str, str], dict[str, Decimal]] = {}
_REQUESTS_MAX = 20000


def _cached_requests(pod: Obj) -> dict[str, Decimal]:
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        return pod_requests_with_overhead(pod)
    return _memo(_REQUESTS, _REQUESTS_MAX, (uid, str(meta.get("resourceVersion") or "")),
                 lambda: pod_requests_with_overhead(pod))


def _memo(cache: dict[K, V], limit: int, key: K, make: Callable[[], V]) -> V:
    """``cache[key]``, made by ``make()`` when missing; a full cache starts over (the node's pods
    and its allocatable change rarely, so a plain reset is enough to bound it)."""
    got = cache.get(key)
    if got is None:
        if len(cache) >= limit:
            cache.clear()
        got = cache[key] = make()
    return got


def check_resources(pod: Obj, node: Obj, others: list[Obj]) -> PodAdmitResult:
    used: dict[str, Decimal] = {}
    for o in others:
        for k, v in _cached_requests(o).items():
            used[k] = used.get(k, Decimal(0)) + v
    return check_requests(pod, node, used)


# The node's allocatable as parsed, by its exact strings: every admission reads the same node, and
# parsing its six quantities was most of the cost of admitting a pod (~80 µs of ~100 µs).
_ALLOCATABLE: dict[tuple[tuple[str, str], ...], dict[str, Decimal]] = {}
_ALLOCATABLE_MAX = 64


def _allocatable(node: Obj) -> Mapping[str, Decimal]:
    """``_quantities`` of the node's allocatable, kept when every key and value is a string (what
    the API sends; a number is parsed each time, so ``1`` and ``True`` can never share an answer)."""
    raw = (node.get("status") or {}).get("allocatable")
    if not isinstance(raw, dict):
        return _quantities(raw)
    key = tuple(raw.items())
    for k, v in key:
        if type(k) is not str or type(v) is not str:
            return _quantities(raw)
    return _memo(_ALLOCATABLE, _ALLOCATABLE_MAX, key, lambda: _quantities(raw))


def check_requests(pod: Obj, node: Obj, used: Mapping[str, Decimal]) -> PodAdmitResult:
    """The resources predicate against the summed requests ``used`` of the pods already admitted."""
    alloc = _allocatable(node)
    want = pod_requests_with_overhead(pod)
    names = [n for n in NATIVE if n in want] + sorted(n for n in want if n not in NATIVE and n != "pods")
    for name in names:
        req = want[name]
        if req <= 0:
            continue
        if name not in alloc and (is_extended_resource(name) or name == "ephemeral-storage"):
            continue  # not advertised by this node: a cluster-level resource (upstream ignores it)
        cap = alloc.get(name, Decimal(0))
        u = used.get(name, Decimal(0))
        if req > cap - u:
            return PodAdmitResult(
                False, f"OutOf{name}",
                f"Node didn't have enough resource: {name}, requested: {_units(name, req)}, "
                f"used: {_units(name, u)}, capacity: {_units(name, cap)}",
            )
    return ADMIT


HostPort = tuple[str, str, int]  # (hostIP, protocol, port), as ``nodepredicates.host_ports``


@dataclass
class _Usage:
    pod: Obj
    resource_version: str
    requests: dict[str, Decimal]
    ports: list[HostPort]


@dataclass
class NodeUsage:
    """What the admitted, non-terminated pods take from the node, kept up to date incrementally.

    ``add`` a pod when it is admitted or changes while it counts, ``discard`` it when it is rejected,
    terminal, terminating or gone; reads are O(1) (``requested``, ``len``) or O(host ports of the new
    pod) (``ports_conflict``). Pure bookkeeping: deciding *whether* a pod counts is the kubelet's.
    """

    _pods: dict[str, _Usage] = field(default_factory=dict)
    _objs: dict[str, Obj] = field(default_factory=dict)  # uid -> pod, for ``pods()``
    _requested: dict[str, Decimal] = field(default_factory=dict)
    # (protocol, port) -> host IPs in use, with how many pods use each
    _ports: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def pods(self) -> list[Obj]:
        """The counted pods (what ``PodAdmitAttributes.other_pods`` means)."""
        return list(self._objs.values())

    def uids(self) -> set[str]:
        return set(self._pods)

    @property
    def requested(self) -> Mapping[str, Decimal]:
        """Summed requests (with overhead) of the counted pods."""
        return self._requested

    def add(self, uid: str, pod: Obj) -> None:
        """Count ``pod`` (again): its requests are re-read unless its resourceVersion is unchanged."""
        rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        old = self._pods.get(uid)
        if old is not None:
            if old.pod is pod or (rv and rv == old.resource_version):
                old.pod = self._objs[uid] = pod
                return
            self._remove(old)
        entry = _Usage(pod, rv, pod_requests_with_overhead(pod), host_ports(pod))
        self._pods[uid] = entry
        self._objs[uid] = pod
        for k, v in entry.requests.items():
            self._requested[k] = self._requested.get(k, Decimal(0)) + v
        for ip, proto, port in entry.ports:
            self._ports.setdefault((proto, port), Counter())[ip] += 1

    def discard(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            del self._objs[uid]
            self._remove(old)

    def _remove(self, entry: _Usage) -> None:
        for k, v in entry.requests.items():
            left = self._requested.get(k, Decimal(0)) - v
            if left:
                self._requested[k] = left
            else:
                self._requested.pop(k, None)  # absent and zero read the same
        for ip, proto, port in entry.ports:
            ips = self._ports.get((proto, port))
            if ips is None:
                continue
            ips[ip] -= 1
            if ips[ip] <= 0:
                del ips[ip]
            if not ips:
                del self._ports[(proto, port)]

    def ports_conflict(self, ports: Iterable[HostPort]) -> bool:
        """``nodepredicates.ports_conflict`` against the counted pods: same port and protocol, and the
        same host IP or either 0.0.0.0."""
        for ip, proto, port in ports:
            used = self._ports.get((proto, port))
            if used and (ip == "0.0.0.0" or ip in used or "0.0.0.0" in used):
                return True
        return False

    def reconcile(self, counted: Mapping[str, Obj]) -> list[str]:
        """Consistency check: returns the uids whose bookkeeping was out of step with ``counted``
        (uid -> pod; empty when it was right), and then recounts the sums from those pods."""
        drift = sorted(u for u in self._pods.keys() ^ counted.keys())
        drift += sorted(u for u, p in counted.items() if u in self._objs and self._objs[u] is not p)
        if not drift:
            return drift  # Decimal sums are exact: the same pods give the same totals
        fresh = NodeUsage()
        for uid, pod in counted.items():
            old = self._pods.get(uid)
            if old is not None and old.pod is pod:
                fresh._pods[uid], fresh._objs[uid] = old, pod
                for k, v in old.requests.items():
                    fresh._requested[k] = fresh._requested.get(k, Decimal(0)) + v
                for ip, proto, port in old.ports:
                    fresh._ports.setdefault((proto, port), Counter())[ip] += 1
            else:
                fresh.add(uid, pod)
        self._pods, self._objs = fresh._pods, fresh._objs
        self._requested, self._ports = fresh._requested, fresh._ports
        return drift


@dataclass(frozen=True)
class NodeAdmitAttributes(PodAdmitAttributes):
    """``PodAdmitAttributes`` with the aggregate of ``other_pods`` (built from the same ``NodeUsage``)."""

    usage: NodeUsage = field(default_factory=NodeUsage)


def admit_on_node(pod: Obj, node: Obj, others: list[Obj]) -> PodAdmitResult:
    """The pure check: the first predicate the pod fails on ``node`` with ``others`` admitted."""
    return _admit_on_node(pod, node, lambda: check_resources(pod, node, others),
                          lambda: ports_conflict(pod, others))


def admit_on_node_usage(pod: Obj, node: Obj, usage: NodeUsage) -> PodAdmitResult:
    """``admit_on_node`` with the admitted pods given as their aggregate (same decisions, O(1) in them)."""
    return _admit_on_node(pod, node, lambda: check_requests(pod, node, usage.requested),
                          lambda: usage.ports_conflict(host_ports(pod)))


def _admit_on_node(pod: Obj, node: Obj, resources: Callable[[], PodAdmitResult],
                   conflict: Callable[[], bool]) -> PodAdmitResult:
    result = resources()
    if not result.admit:
        return result
    if not matches_node_affinity(pod, node):
        return _predicate("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
    want = (pod.get("spec") or {}).get("nodeName")
    if want and want != (node.get("metadata") or {}).get("name"):
        return _predicate("NodeName", "node(s) didn't match the requested node name")
    if host_ports(pod) and conflict():
        return _predicate("NodePorts", "node(s) didn't have free ports for the requested pod ports")
    if not podutil.is_static_pod(pod):
        taints = (node.get("spec") or {}).get("taints") or []
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if first_untolerated_taint(taints, tolerations, ("NoExecute",)) is not None:
            return _predicate("TaintToleration", "node(s) had taints that the pod didn't tolerate")
    return ADMIT


class PredicateAdmitHandler:
    """``PodAdmitHandler`` running ``admit_on_node`` against the node ``get_node`` returns (with the
    aggregate when the kubelet passes ``NodeAdmitAttributes``)."""

    def __init__(self, get_node: NodeGetter) -> None:
        self.get_node = get_node

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        node = self.get_node()
        if node is None:
            return PodAdmitResult(False, "InvalidNodeInfo", "Kubelet cannot get node info.")
        if isinstance(attrs, NodeAdmitAttributes):
            return admit_on_node_usage(attrs.pod, node, attrs.usage)
        return admit_on_node(attrs.pod, node, attrs.other_pods)
