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
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pykubelet.agent.interfaces import PodAdmitAttributes, PodAdmitResult
from pykubelet.common import podutil
from pykubelet.common.nodepredicates import host_ports, matches_node_affinity, ports_conflict
from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.common.tolerations import first_untolerated_taint

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
    key = (uid, str(meta.get("resourceVersion") or ""))
    got = _REQUESTS.get(key)
    if got is None:
        if len(_REQUESTS) >= _REQUESTS_MAX:
            _REQUESTS.clear()
        got = _REQUESTS[key] = pod_requests_with_overhead(pod)
    return got


def check_resources(pod: Obj, node: Obj, others: list[Obj]) -> PodAdmitResult:
    alloc = _quantities((node.get("status") or {}).get("allocatable"))
    want = pod_requests_with_overhead(pod)
    used: dict[str, Decimal] = {}
    for o in others:
        for k, v in _cached_requests(o).items():
            used[k] = used.get(k, Decimal(0)) + v
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


def admit_on_node(pod: Obj, node: Obj, others: list[Obj]) -> PodAdmitResult:
    """The pure check: the first predicate the pod fails on ``node`` with ``others`` admitted."""
    result = check_resources(pod, node, others)
    if not result.admit:
        return result
    if not matches_node_affinity(pod, node):
        return _predicate("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
    want = (pod.get("spec") or {}).get("nodeName")
    if want and want != (node.get("metadata") or {}).get("name"):
        return _predicate("NodeName", "node(s) didn't match the requested node name")
    if host_ports(pod) and ports_conflict(pod, others):
        return _predicate("NodePorts", "node(s) didn't have free ports for the requested pod ports")
    if not podutil.is_static_pod(pod):
        taints = (node.get("spec") or {}).get("taints") or []
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if first_untolerated_taint(taints, tolerations, ("NoExecute",)) is not None:
            return _predicate("TaintToleration", "node(s) had taints that the pod didn't tolerate")
    return ADMIT


class PredicateAdmitHandler:
    """``PodAdmitHandler`` running ``admit_on_node`` against the node ``get_node`` returns."""

    def __init__(self, get_node: NodeGetter) -> None:
        self.get_node = get_node

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        node = self.get_node()
        if node is None:
            return PodAdmitResult(False, "InvalidNodeInfo", "Kubelet cannot get node info.")
        return admit_on_node(attrs.pod, node, attrs.other_pods)
