"""A small default-scheduler: filters, least-allocated scoring, binding, FailedScheduling.

Design: the decision part is pure (``filter_node``, ``score_node``, ``schedule``,
``fit_error_message``) and operates on JSON dicts; ``Scheduler`` only does I/O: it keeps a cache of
nodes and pods fed by list+watch (in the server, the shared informers' events: ``kit.follow``), queues pods with empty ``spec.nodeName`` whose schedulerName
is ``default-scheduler``, binds them via ``POST .../pods/{name}/binding`` and records events.
Decisions are made one pod at a time over per-node sums kept from the watches (``NodeInfo``:
requested resources, non-zero requests for scoring, host ports, pod count; upstream's scheduler
cache), so a decision costs O(nodes) whatever the number of pods; bindings run concurrently (up to ``MAX_CONCURRENT_BINDS``),
as upstream's binding cycle runs apart from its scheduling cycle.
Pods it has just bound are "assumed" in the cache (nodeName set locally) so that back-to-back
decisions account for each other before the watch catches up, like upstream's scheduler cache.
Pending pods wait in a ``SchedulingQueue`` (``schedqueue``, upstream's activeQ / backoffQ /
unschedulablePods): a pod that does not fit is parked and tried again only when a node changes in
a way that matters (labels, taints, allocatable, readiness, cordon), a bound pod is deleted or
finishes, or a volume object changes, or after ``retry_interval`` (upstream's
podMaxInUnschedulablePodsDuration, 5 min), each retry after the pod's backoff (1 s doubling to
10 s); so 10,000 unschedulable pods cost nothing while the cluster does not change.

Upstream behaviour followed (pkg/scheduler/framework/plugins, pkg/scheduler/schedule_one.go):
- filter plugins in default-profile order, a node failing at the first plugin that rejects it:
  NodeUnschedulable ("node(s) were unschedulable", bypassed by tolerating
  node.kubernetes.io/unschedulable:NoSchedule), NodeName, TaintToleration (NoSchedule/NoExecute
  taints, matched by ``common.tolerations``; "node(s) had untolerated taint {key: value}"),
  NodeAffinity (nodeSelector + required nodeSelectorTerms with In/NotIn/Exists/DoesNotExist/Gt/Lt and matchFields metadata.name;
  "node(s) didn't match Pod's node affinity/selector"), NodePorts ("node(s) didn't have free ports
  for the requested pod ports"), NodeResourcesFit ("Too many pods", "Insufficient cpu", ...);
- readiness is expressed as upstream's TaintNodesByCondition taints: a node that is not Ready
  is treated as carrying node.kubernetes.io/not-ready:NoSchedule (Ready=False) or
  node.kubernetes.io/unreachable:NoSchedule (Unknown / no condition), as the node lifecycle
  controller would add;
- requests from ``podutil.pod_requests`` (init containers, sidecars, overhead); pods already
  bound and not terminal count against allocatable;
- VolumeBinding (``pkg/scheduler/framework/plugins/volumebinding``): PreFilter refuses pods whose
  claim is missing (``persistentvolumeclaim "x" not found``), being deleted, or unbound in a class
  that binds Immediately; Filter keeps a pod with bound claims to nodes its volumes' node affinity
  admits ("node(s) had volume node affinity conflict"); PreBind writes the chosen node into
  unbound WaitForFirstConsumer claims (``volume.kubernetes.io/selected-node``, which the
  provisioner reads) and binds the pod only once all its claims are Bound;
- LeastAllocated scoring over cpu and memory with the non-zero defaults 100m / 200Mi;
- FitError text "0/N nodes are available: <count> <reason>, ... ." with reasons sorted,
  "no nodes available to schedule pods" when there are none; PodScheduled=False reason
  Unschedulable; events Warning FailedScheduling / Normal Scheduled
  ("Successfully assigned ns/pod to node") from default-scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from pykubelet.common.nodepredicates import (
    host_ports as host_ports,  # re-exported: tests and PV code use them
)
from pykubelet.common.nodepredicates import match_node_selector_terms as match_node_selector_terms
from pykubelet.common.nodepredicates import matches_node_affinity
from pykubelet.common.podutil import container_requests, pod_requests
from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.common.tolerations import first_untolerated_taint, tolerations_tolerate_taint
from pykubelet.server.controllers import kit
from pykubelet.server.schedqueue import MAX_IN_UNSCHEDULABLE, SchedulingQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]

SCHEDULER_NAME = "default-scheduler"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_VOLUME_AFFINITY = "node(s) had volume node affinity conflict"
REASON_PV_NOT_FOUND = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
NO_NODES = "no nodes available to schedule pods"

DEFAULT_MILLI_CPU = 100  # non-zero request defaults for scoring, in milli-cpu and bytes (upstream's)
DEFAULT_MEMORY = 200 * 1024 * 1024
RETRY_INTERVAL = MAX_IN_UNSCHEDULABLE  # an unschedulable pod is retried at least this often
MAX_CONCURRENT_BINDS = 16


# What the VolumeBinding plugin watches (path -> namespaced)
_VOLUME_PATHS = {"/api/v1/persistentvolumeclaims": True, "/api/v1/persistentvolumes": False,
                 "/apis/storage.k8s.io/v1/storageclasses": False}


class SchedulerApi(Protocol):
    """The subset of ``pykubelet.common.apiclient.ApiClient`` the scheduler uses."""

    async def list(self, path: str, params: Any = None) -> Obj: ...
    async def create(self, path: str, body: Obj, params: Any = None) -> Obj: ...
    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Obj: ...
    def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
              timeout_seconds: int | None = None) -> Any: ...


# --- pure helpers ---------------------------------------------------------------------------


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _spec(o: Obj) -> Obj:
    return o.get("spec") or {}


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def needs_scheduling(pod: Obj) -> bool:
    spec = _spec(pod)
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME
        and not _meta(pod).get("deletionTimestamp")
        and not is_terminal(pod)
        and not spec.get("schedulingGates")
    )


def effective_taints(node: Obj) -> list[Obj]:
    """Node taints plus the NoSchedule readiness taint upstream's controller would add."""
    taints = [t for t in _spec(node).get("taints") or [] if isinstance(t, dict)]
    ready = None
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            ready = c.get("status")
    extra = None
    if ready == "False":
        extra = NOT_READY_TAINT
    elif ready != "True":
        extra = UNREACHABLE_TAINT
    if extra and not any(t.get("key") == extra and t.get("effect") == "NoSchedule" for t in taints):
        taints.append({"key": extra, "effect": "NoSchedule"})
    return taints


def _allocatable(node: Obj) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for k, v in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            out[k] = parse_quantity(v).value
        except QuantityError:
            continue
    return out


def _milli(v: Decimal | None) -> int:
    """A quantity in milli-units, rounded up (upstream's ``MilliValue``)."""
    return math.ceil(v * 1000) if v else 0


def _units(v: Decimal | None) -> int:
    """A quantity in whole units, rounded up (upstream's ``Value``)."""
    return math.ceil(v) if v else 0


def _nonzero_requests(pods: Iterable[Obj]) -> tuple[int, int]:
    """Scoring's requests, milli-cpu and memory bytes, as integers: a score is integer
    arithmetic as upstream's (``Decimal`` there cost 4 % of the server in the hollow run)."""
    cpu = 0
    mem = 0
    for p in pods:
        for c in _spec(p).get("containers") or []:
            r = container_requests(c)
            cpu += _milli(r.get("cpu")) or DEFAULT_MILLI_CPU
            mem += _units(r.get("memory")) or DEFAULT_MEMORY
    return cpu, mem


@dataclass(frozen=True)
class PodInfo:
    """What one pod takes from its node, parsed once per pod object: requests, the non-zero
    requests scoring uses, host ports."""

    requests: dict[str, Decimal]
    nonzero: tuple[int, int]  # milli-cpu, memory bytes
    ports: list[tuple[str, str, int]]

    @classmethod
    def of(cls, pod: Obj) -> PodInfo:
        return cls(pod_requests(pod), _nonzero_requests([pod]), host_ports(pod))


def _ports_clash(want: list[tuple[str, str, int]], used: Iterable[tuple[str, str, int]]) -> bool:
    for ip, proto, port in want:
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


class NodeInfo:
    """One node and the sums over the pods bound to it (upstream's ``framework.NodeInfo``): the
    scheduler keeps one per node, updated from its pod and node informers, so that a decision
    costs O(nodes), not O(nodes + pods) with every pod's requests re-parsed."""

    def __init__(self, name: str, node: Obj | None = None) -> None:
        self.name = name
        self.node: Obj | None = None
        self.allocatable: dict[str, Decimal] = {}
        self.taints: list[Obj] = []
        self.pods: dict[str, PodInfo] = {}
        self.requested: dict[str, Decimal] = {}
        self.nonzero_cpu = 0  # milli-cpu
        self.nonzero_mem = 0  # bytes
        self.cap_cpu = 0  # allocatable milli-cpu and memory bytes, for scoring
        self.cap_mem = 0
        self.port_pods: dict[str, list[tuple[str, str, int]]] = {}  # only pods with host ports
        if node is not None:
            self.set_node(node)

    def set_node(self, node: Obj) -> None:
        self.node = node
        self.allocatable = _allocatable(node)
        self.cap_cpu = _milli(self.allocatable.get("cpu"))
        self.cap_mem = _units(self.allocatable.get("memory"))
        self.taints = effective_taints(node)

    def add_pod(self, key: str, info: PodInfo) -> None:
        if key in self.pods:
            self.remove_pod(key)
        self.pods[key] = info
        for k, v in info.requests.items():
            self.requested[k] = self.requested.get(k, Decimal(0)) + v
        self.nonzero_cpu += info.nonzero[0]
        self.nonzero_mem += info.nonzero[1]
        if info.ports:
            self.port_pods[key] = info.ports

    def remove_pod(self, key: str) -> None:
        info = self.pods.pop(key, None)
        if info is None:
            return
        for k, v in info.requests.items():
            self.requested[k] = self.requested.get(k, Decimal(0)) - v
        self.nonzero_cpu -= info.nonzero[0]
        self.nonzero_mem -= info.nonzero[1]
        self.port_pods.pop(key, None)

    @classmethod
    def build(cls, node: Obj, node_pods: Iterable[Obj]) -> NodeInfo:
        info = cls(str(_meta(node).get("name", "")), node)
        for i, p in enumerate(node_pods):
            info.add_pod(str(i), PodInfo.of(p))
        return info


def _resource_failures(pod: PodInfo, ni: NodeInfo) -> list[str]:
    alloc = ni.allocatable
    reasons: list[str] = []
    max_pods = alloc.get("pods")
    if max_pods is not None and len(ni.pods) + 1 > max_pods:
        reasons.append(REASON_TOO_MANY_PODS)
    req = pod.requests
    used = ni.requested
    for name in sorted(req):
        want = req[name]
        if want <= 0 or name == "pods":
            continue
        if want > alloc.get(name, Decimal(0)) - used.get(name, Decimal(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def resource_failures(pod: Obj, node: Obj, node_pods: list[Obj]) -> list[str]:
    return _resource_failures(PodInfo.of(pod), NodeInfo.build(node, node_pods))


def _needs_affinity(pod: Obj) -> bool:
    """Whether :func:`matches_node_affinity` can say no for this pod: without a nodeSelector and a
    required node affinity it says yes to every node."""
    spec = _spec(pod)
    if spec.get("nodeSelector"):
        return True
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {} if isinstance(affinity, dict) else None
    if not isinstance(node_affinity, dict):
        return True  # not the shape the API stores: the per-node check decides, as before
    return (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or None) is not None


def _filter(pod: Obj, pinfo: PodInfo, tolerations: list[Obj], ni: NodeInfo, vols: VolumeState | None,
            *, affinity: bool = True, claims: bool = True) -> list[str]:
    """The Filter plugins in upstream's order, first failing one only.  ``affinity`` / ``claims``:
    False when the pod has no node selector or required affinity / no claims (the node-affinity
    and volume filters then pass every node; :func:`schedule_on` works that out once per pod
    instead of once per node)."""
    node = ni.node or {}
    if _spec(node).get("unschedulable"):
        unsched = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        if not tolerations_tolerate_taint(tolerations, unsched):
            return [REASON_UNSCHEDULABLE]
    want = _spec(pod).get("nodeName")
    if want and want != ni.name:
        return [REASON_NODE_NAME]
    if ni.taints:
        taint = first_untolerated_taint(ni.taints, tolerations, ("NoSchedule", "NoExecute"))
        if taint is not None:
            return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"]
    if affinity and not matches_node_affinity(pod, node):
        return [REASON_AFFINITY]
    if pinfo.ports and _ports_clash(pinfo.ports, (hp for ports in ni.port_pods.values() for hp in ports)):
        return [REASON_PORTS]
    fails = _resource_failures(pinfo, ni)
    if fails or vols is None or not claims:
        return fails
    return volume_filter(pod, node, vols)


def _tolerations(pod: Obj) -> list[Obj]:
    return [t for t in _spec(pod).get("tolerations") or [] if isinstance(t, dict)]


def filter_node(pod: Obj, node: Obj, node_pods: list[Obj], vols: VolumeState | None = None) -> list[str]:
    """Reasons the node is infeasible (empty list: it fits), first failing plugin only."""
    return _filter(pod, PodInfo.of(pod), _tolerations(pod), NodeInfo.build(node, node_pods), vols)


def _score(pinfo: PodInfo, ni: NodeInfo) -> int:
    total = 0
    for used, cap in ((ni.nonzero_cpu + pinfo.nonzero[0], ni.cap_cpu), (ni.nonzero_mem + pinfo.nonzero[1], ni.cap_mem)):
        if 0 < cap and used <= cap:
            total += (cap - used) * 100 // cap
    return total // 2


def score_node(pod: Obj, node: Obj, node_pods: list[Obj]) -> int:
    """LeastAllocated (0-100) averaged over cpu and memory."""
    return _score(PodInfo.of(pod), NodeInfo.build(node, node_pods))


@dataclass
class VolumeState:
    """The claims, volumes and classes the VolumeBinding plugin reads (keys: "ns/name", name, name)."""

    pvcs: dict[str, Obj] = field(default_factory=dict)
    pvs: dict[str, Obj] = field(default_factory=dict)
    classes: dict[str, Obj] = field(default_factory=dict)


def pod_claims(pod: Obj) -> list[str]:
    return [str(v["persistentVolumeClaim"].get("claimName") or "") for v in _spec(pod).get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)]


def volume_prefilter(pod: Obj, vols: VolumeState) -> str | None:
    """VolumeBinding PreFilter: a missing or deleting claim, or an unbound claim of an Immediate
    class, makes the pod unschedulable everywhere (upstream's messages)."""
    ns = _meta(pod).get("namespace", "")
    for claim in pod_claims(pod):
        pvc = vols.pvcs.get(f"{ns}/{claim}")
        if pvc is None:
            return f'persistentvolumeclaim "{claim}" not found'
        if _meta(pvc).get("deletionTimestamp"):
            return f'persistentvolumeclaim "{claim}" is being deleted'
        if not _spec(pvc).get("volumeName"):
            sc = vols.classes.get(str(_spec(pvc).get("storageClassName") or ""))
            if sc is None or sc.get("volumeBindingMode") != "WaitForFirstConsumer":
                return "pod has unbound immediate PersistentVolumeClaims"
    return None


def volume_filter(pod: Obj, node: Obj, vols: VolumeState) -> list[str]:
    """VolumeBinding Filter: bound claims' volumes must admit the node (node affinity); an unbound
    claim already promised to another node (selected-node) excludes this one."""
    ns = _meta(pod).get("namespace", "")
    name = _meta(node).get("name", "")
    for claim in pod_claims(pod):
        pvc = vols.pvcs.get(f"{ns}/{claim}") or {}
        vol = _spec(pvc).get("volumeName")
        if vol:
            pv = vols.pvs.get(str(vol))
            if pv is None:
                return [REASON_PV_NOT_FOUND]
            terms = ((_spec(pv).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
            if terms and not match_node_selector_terms(terms, node):
                return [REASON_VOLUME_AFFINITY]
        else:
            selected = (_meta(pvc).get("annotations") or {}).get(SELECTED_NODE)
            if selected and selected != name:
                return [REASON_VOLUME_AFFINITY]
    return []


def claims_to_select(pod: Obj, node_name: str, vols: VolumeState) -> tuple[list[str], bool]:
    """VolumeBinding PreBind: (unbound claims to annotate with the chosen node, whether any claim
    is still unbound, i.e. the pod must wait for its volumes before it is bound)."""
    ns = _meta(pod).get("namespace", "")
    annotate: list[str] = []
    waiting = False
    for claim in pod_claims(pod):
        pvc = vols.pvcs.get(f"{ns}/{claim}") or {}
        if _spec(pvc).get("volumeName") and (pvc.get("status") or {}).get("phase") == "Bound":
            continue
        waiting = True
        if (_meta(pvc).get("annotations") or {}).get(SELECTED_NODE) != node_name and not _spec(pvc).get("volumeName"):
            annotate.append(claim)
    return annotate, waiting


def fit_error_message(num_nodes: int, reasons: dict[str, int], prefilter: str | None = None) -> str:
    if prefilter is not None:
        return f"0/{num_nodes} nodes are available: {prefilter}."
    if num_nodes == 0:
        return NO_NODES
    parts = sorted(f"{n} {r}" for r, n in reasons.items())
    return f"0/{num_nodes} nodes are available: {', '.join(parts)}."


@dataclass
class Decision:
    node: str | None
    message: str = ""
    reasons: dict[str, int] = field(default_factory=dict)


def pods_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for p in pods:
        n = _spec(p).get("nodeName")
        if n and not is_terminal(p):
            out.setdefault(n, []).append(p)
    return out


def schedule(pod: Obj, nodes: list[Obj], pods: Iterable[Obj], vols: VolumeState | None = None) -> Decision:
    """Pick the best feasible node (ties broken by name) or explain why none fits."""
    by_node = pods_by_node(pods)
    infos = [NodeInfo.build(n, by_node.get(str(_meta(n).get("name", "")), [])) for n in nodes]
    return schedule_on(pod, sorted(infos, key=lambda i: i.name), vols)


def schedule_on(pod: Obj, infos: list[NodeInfo], vols: VolumeState | None = None) -> Decision:
    """:func:`schedule` over nodes with their pods already summed (``infos`` sorted by name)."""
    if vols is not None and infos:
        pre = volume_prefilter(pod, vols)
        if pre is not None:
            return Decision(None, fit_error_message(len(infos), {}, pre))
    pinfo = PodInfo.of(pod)
    tolerations = _tolerations(pod)
    affinity = _needs_affinity(pod)
    claims = vols is not None and bool(pod_claims(pod))
    reasons: dict[str, int] = {}
    best: tuple[int, str] | None = None
    for ni in infos:
        fails = _filter(pod, pinfo, tolerations, ni, vols, affinity=affinity, claims=claims)
        if fails:
            for r in fails:
                reasons[r] = reasons.get(r, 0) + 1
            continue
        s = _score(pinfo, ni)
        if best is None or s > best[0]:
            best = (s, ni.name)
    if best is None:
        return Decision(None, fit_error_message(len(infos), reasons), reasons)
    return Decision(best[1])


def node_signature(node: Obj) -> str:
    """The parts of a node that can change a scheduling decision."""
    ready = [c.get("status") for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    return json.dumps(
        [
            _meta(node).get("labels"),
            _spec(node).get("taints"),
            _spec(node).get("unschedulable"),
            (node.get("status") or {}).get("allocatable"),
            ready,
        ],
        sort_keys=True,
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- I/O ------------------------------------------------------------------------------------


class Scheduler:
    """Watches nodes and pods and binds pending pods; ``run()`` runs until cancelled."""

    def __init__(self, api: SchedulerApi, *, retry_interval: float = RETRY_INTERVAL,
                 clock: Any = time.monotonic, informers: kit.SharedInformers | None = None) -> None:
        self.api = api
        self.informers = informers  # the server's shared watches (one decoded pod for all controllers)
        self.retry_interval = retry_interval
        self._clock = clock
        self.queue = SchedulingQueue(max_in_unschedulable=retry_interval)
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}  # key ns/name; changed only through _set_pod
        self._infos: dict[str, NodeInfo] = {}  # node name -> node and the sums of its bound pods
        self._placed: dict[str, str] = {}  # pod key -> the node whose sums count it
        self._order: list[NodeInfo] | None = None  # existing nodes by name, rebuilt when one comes or goes
        self._node_sigs: dict[str, str] = {}
        self._unschedulable: dict[str, str] = {}  # pod key -> last FitError message (PodScheduled condition)
        self._events: dict[str, tuple[str, str, int]] = {}  # pod key -> (event name, message, count)
        self._wake = asyncio.Event()
        self._synced_paths: set[str] = set()
        self.synced = asyncio.Event()
        self.volumes = VolumeState()
        self._waiting_volumes: set[str] = set()  # pods placed, waiting for their claims to bind
        self._binding: set[asyncio.Task[None]] = set()  # binding cycles in flight
        self._bind_slots = asyncio.Semaphore(MAX_CONCURRENT_BINDS)

    # cache maintenance -----------------------------------------------------------------------

    @staticmethod
    def _key(pod: Obj) -> str:
        m = _meta(pod)
        return f"{m.get('namespace', '')}/{m.get('name', '')}"

    def _set_pod(self, key: str, pod: Obj | None) -> None:
        """Store (or forget) a pod and keep its node's sums in step: a bound, non-terminal pod
        counts on its node, as ``pods_by_node`` would count it."""
        placed = self._placed.pop(key, None)
        if placed is not None and (ni := self._infos.get(placed)) is not None:
            ni.remove_pod(key)
            if ni.node is None and not ni.pods:
                del self._infos[placed]
        if pod is None:
            self.pods.pop(key, None)
            return
        self.pods[key] = pod
        node = _spec(pod).get("nodeName")
        if node and not is_terminal(pod):
            ni = self._infos.get(node)
            if ni is None:
                ni = self._infos[node] = NodeInfo(node)
            ni.add_pod(key, PodInfo.of(pod))
            self._placed[key] = node

    def _node_order(self) -> list[NodeInfo]:
        if self._order is None:
            self._order = sorted((ni for ni in self._infos.values() if ni.node is not None), key=lambda i: i.name)
        return self._order

    def _forget_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self._node_sigs.pop(name, None)
        ni = self._infos.get(name)
        if ni is not None:
            ni.node = None
            if not ni.pods:
                del self._infos[name]
        self._order = None

    def _enqueue(self, key: str) -> None:
        self.queue.add(key)
        self._wake.set()

    def _requeue_unschedulable(self) -> None:
        """A cluster event that may make parked pods fit (upstream's MoveAllToActiveOrBackoffQueue)."""
        self.queue.move_all(self._clock())
        self._wake.set()

    def on_pod_event(self, etype: str, pod: Obj) -> None:
        key = self._key(pod)
        if etype == "DELETED":
            old = self.pods.get(key)
            self._set_pod(key, None)
            self.queue.delete(key)
            self._unschedulable.pop(key, None)
            self._events.pop(key, None)
            if old is not None and _spec(old).get("nodeName"):
                self._requeue_unschedulable()
            return
        old = self.pods.get(key)
        # Keep our assumed binding until the watch shows the pod bound.
        if old is not None and _spec(old).get("nodeName") and not _spec(pod).get("nodeName"):
            if _meta(old).get("uid") == _meta(pod).get("uid"):
                pod = {**pod, "spec": {**_spec(pod), "nodeName": _spec(old)["nodeName"]}}
        self._set_pod(key, pod)
        if needs_scheduling(pod):
            if key not in self.queue:
                self._enqueue(key)
        else:
            self.queue.delete(key)
            self._unschedulable.pop(key, None)
            if old is not None and not is_terminal(old) and is_terminal(pod):
                self._requeue_unschedulable()

    def _volume_handler(self, cache: dict[str, Obj], namespaced: bool) -> Any:
        def handle(etype: str, obj: Obj) -> None:
            m = _meta(obj)
            key = f"{m.get('namespace', '')}/{m.get('name', '')}" if namespaced else str(m.get("name", ""))
            if etype == "DELETED":
                cache.pop(key, None)
            else:
                cache[key] = obj
            self._requeue_unschedulable()  # a claim, volume or class appearing may unblock pods
        return handle

    def on_node_event(self, etype: str, node: Obj) -> None:
        name = str(_meta(node).get("name", ""))
        if etype == "DELETED":
            self._forget_node(name)
            return
        sig = node_signature(node)
        changed = self._node_sigs.get(name) != sig
        self.nodes[name] = node
        self._node_sigs[name] = sig
        ni = self._infos.get(name)
        if ni is None:
            ni = self._infos[name] = NodeInfo(name)
        if ni.node is None:
            self._order = None
        if changed or ni.node is None:
            ni.set_node(node)  # allocatable, taints and readiness are all in the signature
        else:
            ni.node = node
        if changed:
            self._requeue_unschedulable()

    # scheduling --------------------------------------------------------------------------------

    async def schedule_pending(self) -> None:
        """Try every pod of activeQ once (backoffs that elapsed and leftovers included)."""
        for key in self.queue.pop_all(self._clock()):
            pod = self.pods.get(key)
            if pod is None or not needs_scheduling(pod):
                self.queue.delete(key)
                continue
            try:
                await self.schedule_one(pod)
            except Exception:  # a failed API call must not stop the scheduler
                log.exception("scheduling %s failed", key)
                self.queue.backoff(key, self._clock())

    async def schedule_one(self, pod: Obj) -> Decision:
        key = self._key(pod)
        decision = schedule_on(pod, self._node_order(), self.volumes)
        meta = _meta(pod)
        ns, name = meta.get("namespace", "default"), meta.get("name", "")
        if decision.node is not None and pod_claims(pod):
            annotate, waiting = claims_to_select(pod, decision.node, self.volumes)
            for claim in annotate:  # WaitForFirstConsumer: tell the provisioner where the pod goes
                await self.api.patch(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}",
                                     {"metadata": {"annotations": {SELECTED_NODE: decision.node}}})
            if waiting:  # PreBind waits for the claims to be bound before the pod is
                self._unschedulable[key] = ""
                self.queue.unschedulable(key, self._clock())  # a claim's update moves it back
                self._waiting_volumes.add(key)
                return Decision(None, "", {})
        self._waiting_volumes.discard(key)
        if decision.node is None:
            first = self._unschedulable.get(key) != decision.message
            self._unschedulable[key] = decision.message
            self.queue.unschedulable(key, self._clock())
            if first:
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": decision.message,
                    "lastProbeTime": None,
                    "lastTransitionTime": _now(),
                }
                await self.api.patch(
                    f"/api/v1/namespaces/{ns}/pods/{name}/status",
                    {"status": {"conditions": [cond]}},
                    "strategic",
                )
            await self._record_event(pod, "Warning", "FailedScheduling", decision.message)
            return decision
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, **({"uid": meta["uid"]} if meta.get("uid") else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": decision.node},
        }
        # Assume, then bind asynchronously (upstream's binding cycle runs apart from the scheduling
        # cycle): the next decision already counts this pod on its node, and a thousand pending
        # pods are not bound one round trip after another.
        self._unschedulable.pop(key, None)
        self.queue.delete(key)
        self._set_pod(key, {**pod, "spec": {**_spec(pod), "nodeName": decision.node}})
        task = asyncio.get_running_loop().create_task(self._bind(pod, binding, decision.node))
        self._binding.add(task)
        task.add_done_callback(self._binding.discard)
        return decision

    async def _bind(self, pod: Obj, binding: Obj, node: str) -> None:
        key = self._key(pod)
        meta = _meta(pod)
        ns, name = meta.get("namespace", "default"), meta.get("name", "")
        async with self._bind_slots:
            try:
                await self.api.create(f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # forget the assumption and try again, as upstream's unreserve
                log.warning("binding %s to %s failed: %s", key, node, e)
                current = self.pods.get(key)
                if current is not None and _spec(current).get("nodeName") == node and not _spec(pod).get("nodeName"):
                    self._set_pod(key, pod)
                self.queue.backoff(key, self._clock())
                self._wake.set()
                return
            await self._record_event(pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}")

    async def _record_event(self, pod: Obj, etype: str, reason: str, message: str) -> None:
        meta = _meta(pod)
        ns = meta.get("namespace", "default")
        key = self._key(pod)
        now = _now()
        prev = self._events.get(key)
        try:
            if prev is not None and prev[1] == message:
                count = prev[2] + 1
                await self.api.patch(
                    f"/api/v1/namespaces/{ns}/events/{prev[0]}", {"count": count, "lastTimestamp": now}
                )
                self._events[key] = (prev[0], message, count)
                return
            ev_name = f"{meta.get('name', '')}.{secrets.token_hex(8)}"
            await self.api.create(
                f"/api/v1/namespaces/{ns}/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": ev_name, "namespace": ns},
                    "involvedObject": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "namespace": ns,
                        "name": meta.get("name", ""),
                        "uid": meta.get("uid", ""),
                        "resourceVersion": meta.get("resourceVersion", ""),
                    },
                    "reason": reason,
                    "message": message,
                    "type": etype,
                    "source": {"component": SCHEDULER_NAME},
                    "reportingComponent": SCHEDULER_NAME,
                    "reportingInstance": SCHEDULER_NAME,
                    "action": "Scheduling" if reason == "FailedScheduling" else "Binding",
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )
            self._events[key] = (ev_name, message, 1)
        except Exception:  # events are best effort, as upstream's recorder
            log.warning("recording event %s for %s failed", reason, key, exc_info=True)

    # loops -------------------------------------------------------------------------------------

    def _path_synced(self, path: str) -> None:
        self._synced_paths.add(path)
        if len(self._synced_paths) == 2 + len(_VOLUME_PATHS):
            self.synced.set()
        self._wake.set()

    async def _reflect(self, path: str, handler: Any) -> None:
        """List then watch ``path`` forever, feeding ``handler(type, obj)``; relist on errors.
        With shared informers, their one watch of ``path`` feeds it instead."""
        if self.informers is not None:
            def handle(etype: str, obj: Obj) -> None:
                handler(etype, obj)
                self._wake.set()
            await kit.follow(self.informers, path, handle, lambda: self._path_synced(path))
            return
        while True:
            try:
                lst = await self.api.list(path)
                seen = set()
                for item in lst.get("items") or []:
                    handler("ADDED", item)
                    seen.add(self._key(item))
                self._forget_missing(path, seen)
                self._path_synced(path)
                rv = (lst.get("metadata") or {}).get("resourceVersion")
                async for etype, obj in self.api.watch(path, resource_version=rv):
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        handler(etype, obj)
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("watch %s ended: %s; relisting", path, e)
                await asyncio.sleep(1.0)

    def _volume_cache(self, path: str) -> dict[str, Obj]:
        if path.endswith("persistentvolumeclaims"):
            return self.volumes.pvcs
        if path.endswith("persistentvolumes"):
            return self.volumes.pvs
        return self.volumes.classes

    def _forget_missing(self, path: str, seen: set[str]) -> None:
        if path in _VOLUME_PATHS:
            cache = self._volume_cache(path)
            for key in list(cache):
                if key not in seen and f"/{key}" not in seen:
                    cache.pop(key, None)
            return
        if path.endswith("/nodes"):
            for name in list(self.nodes):
                if f"/{name}" not in seen:
                    self._forget_node(name)
        else:
            for key in list(self.pods):
                if key not in seen:
                    self._set_pod(key, None)

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._reflect("/api/v1/nodes", self.on_node_event)),
            asyncio.create_task(self._reflect("/api/v1/pods", self.on_pod_event)),
        ]
        for path, namespaced in _VOLUME_PATHS.items():
            tasks.append(asyncio.create_task(self._reflect(path, self._volume_handler(self._volume_cache(path),
                                                                                        namespaced))))
        try:
            while True:
                # Sleep until a watch event, or until a backoff elapses or parked pods are due
                # (nothing to wait for before the caches are synced).
                due = self.queue.next_due(self._clock()) if self.synced.is_set() else None
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(due):
                        await self._wake.wait()
                self._wake.clear()
                if self.synced.is_set():
                    await self.schedule_pending()
        finally:
            for t in [*tasks, *self._binding]:
                t.cancel()
            await asyncio.gather(*tasks, *self._binding, return_exceptions=True)
