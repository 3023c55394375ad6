"""Node lifecycle controller: node health from Leases, condition-based taints, pods marked not Ready.

Design: decisions are pure functions of (node, lease observations, pods, ``now``) so they are
tested with a fake clock; ``NodeLifecycleController`` keeps caches fed by list+watch of nodes,
Leases in ``kube-node-lease`` and pods, every ``monitor_period`` PATCHes the nodes, and hands the
per-pod writes to bounded workers (and to the taint-eviction controller it feeds).  Health is judged from the controller's *own* observation time of the last change
of the Lease's ``renewTime`` (or of the Ready heartbeat), like upstream's ``probeTimestamp``, so
clock skew between kubelet and control plane does not matter; every node gets a fresh grace
period when the controller starts.

Upstream behaviour followed (pkg/controller/nodelifecycle, pkg/controller/tainteviction):
- a node not heard from within the grace period (40 s) gets Ready, MemoryPressure, DiskPressure
  and PIDPressure set to Unknown with reason NodeStatusUnknown, "Kubelet stopped posting node
  status." (NodeStatusNeverUpdated / "Kubelet never posted node status." for conditions the
  kubelet never reported);
- MarkPodsNotReady: when a node's Ready leaves True, each of its pods gets its Ready condition set
  to False (other fields of the condition kept, lastTransitionTime now) and a Warning event
  NodeNotReady "Node is not ready"; a failed update is retried on the next pass, and a pod that
  shows up on (is assigned to, or is listed on) a node that is not Ready is marked too, like
  upstream's processPod.  Upstream's monitorNodeHealth only sees its *own* True -> Unknown
  transition; here a Ready=False posted by the kubelet counts as well -- a kubelet whose container
  runtime is down reports NotReady but cannot vouch for its pods, and users read Ready=True on the
  pods of a NotReady node as a lie.  Once the node is Ready again the kubelet's status manager
  writes the pods' real readiness back (it reconciles statuses that differ from its own);
- a controller that did not run for a while (its process was paused -- SIGSTOP, a VM freeze -- or
  starved) cannot tell a silent kubelet from its own absence: the heartbeats queued meanwhile are
  still in flight.  When a pass starts more than ``stall_threshold`` after the previous one
  *ended*, every node gets a fresh grace period, as when the controller starts (upstream resets
  probe timestamps the same way when it leaves full-disruption mode);
- the monitoring pass writes only nodes (conditions, taints): it is O(nodes) whatever the number
  of pods, so a node lost with a thousand pods never delays the other nodes' health checks.  The
  per-pod work is handed over: MarkPodsNotReady to a deduplicating queue of pod keys worked by
  :data:`POD_WRITERS` workers (upstream marks pods from its 8 node-update workers and processPod's
  queue), each pod decided again from the caches when its turn comes (a node Ready again by then
  is left alone, a pod already not Ready is not written); a failed update is queued again by the
  next pass, like upstream's nodesToRetry.  Events go through a background recorder;
- taints follow conditions (TaintNodesByCondition + taint-based eviction): Ready=False ->
  node.kubernetes.io/not-ready NoSchedule+NoExecute, Ready=Unknown/absent ->
  node.kubernetes.io/unreachable NoSchedule+NoExecute (NoExecute carries timeAdded), pressure
  conditions -> memory-/disk-/pid-pressure NoSchedule, spec.unschedulable ->
  node.kubernetes.io/unschedulable NoSchedule; when the kubelet reports Ready again they go;
- NoExecute eviction is :mod:`pykubelet.server.tainteviction` (upstream's taint-eviction
  controller), fed by this controller's node and pod caches (one watch each) and run by its own
  timers and workers.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit
from pykubelet.server.tainteviction import (
    EventRecorder,
    KeyQueue,
    TaintEvictionController,
    drain,
    eviction_time,
    fmt_time,
    run_workers,
)

__all__ = ["NodeLifecycleController", "eviction_time", "fmt_time"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"
DISK_PRESSURE_TAINT = "node.kubernetes.io/disk-pressure"
PID_PRESSURE_TAINT = "node.kubernetes.io/pid-pressure"
NETWORK_UNAVAILABLE_TAINT = "node.kubernetes.io/network-unavailable"
MANAGED_TAINT_KEYS = {
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    MEMORY_PRESSURE_TAINT,
    DISK_PRESSURE_TAINT,
    PID_PRESSURE_TAINT,
    NETWORK_UNAVAILABLE_TAINT,
}
WATCHED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
LEASE_NAMESPACE = "kube-node-lease"
CONTROLLER_NAME = "node-controller"
POD_WRITERS = 8  # MarkPodsNotReady workers (upstream: 8 node-update workers)


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _spec(o: Obj) -> Obj:
    return o.get("spec") or {}


def _conditions(node: Obj) -> list[Obj]:
    return [c for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]


def _revision(o: Obj) -> int:
    """The object's resourceVersion as this API server writes it (its store revision); -1 if
    not a number, which never counts as newer."""
    try:
        return int(str(_meta(o).get("resourceVersion", "")))
    except ValueError:
        return -1


def condition_status(node: Obj, ctype: str) -> str | None:
    for c in _conditions(node):
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


# --- health tracking ------------------------------------------------------------------------


def health_signature(node: Obj | None, lease: Obj | None) -> str:
    """What changes when the kubelet is alive: lease renewTime and the Ready heartbeat."""
    renew = (_spec(lease).get("renewTime") if lease else None) or ""
    hb = ""
    if node is not None:
        for c in _conditions(node):
            if c.get("type") == "Ready":
                hb = str(c.get("lastHeartbeatTime") or "")
    return json.dumps([renew, hb])


@dataclass
class HealthTracker:
    """Per-node probe timestamps (upstream nodeHealthData.probeTimestamp)."""

    grace_period: float = 40.0
    _seen: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def observe(self, name: str, signature: str, now: datetime) -> None:
        prev = self._seen.get(name)
        if prev is None or prev[0] != signature:
            self._seen[name] = (signature, now)

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)

    def refresh_all(self, now: datetime) -> None:
        """A fresh grace period for every node (the observer itself was away)."""
        for name, (signature, _) in list(self._seen.items()):
            self._seen[name] = (signature, now)

    def is_stale(self, name: str, now: datetime) -> bool:
        prev = self._seen.get(name)
        if prev is None:
            return False
        return (now - prev[1]).total_seconds() > self.grace_period


def unknown_conditions(node: Obj, now: datetime) -> list[Obj] | None:
    """Conditions with the watched ones forced to Unknown; None if nothing changes."""
    conds = copy.deepcopy(_conditions(node))
    changed = False
    ts = fmt_time(now)
    by_type = {c.get("type"): c for c in conds}
    for ctype in WATCHED_CONDITIONS:
        c = by_type.get(ctype)
        if c is None:
            conds.append(
                {
                    "type": ctype,
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status.",
                    "lastHeartbeatTime": (_meta(node).get("creationTimestamp") or ts),
                    "lastTransitionTime": ts,
                }
            )
            changed = True
        elif c.get("status") != "Unknown":
            c["status"] = "Unknown"
            c["reason"] = "NodeStatusUnknown"
            c["message"] = "Kubelet stopped posting node status."
            c["lastTransitionTime"] = ts
            changed = True
    return conds if changed else None


def desired_taints(node: Obj, now: datetime) -> list[Obj]:
    """The node's taints with the controller-managed ones recomputed from its conditions."""
    current = [t for t in _spec(node).get("taints") or [] if isinstance(t, dict)]
    want: list[tuple[str, str]] = []
    ready = condition_status(node, "Ready")
    if ready == "False":
        want += [(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")]
    elif ready != "True":
        want += [(UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")]
    for ctype, key in (
        ("MemoryPressure", MEMORY_PRESSURE_TAINT),
        ("DiskPressure", DISK_PRESSURE_TAINT),
        ("PIDPressure", PID_PRESSURE_TAINT),
        ("NetworkUnavailable", NETWORK_UNAVAILABLE_TAINT),
    ):
        if condition_status(node, ctype) == "True":
            want.append((key, "NoSchedule"))
    if _spec(node).get("unschedulable"):
        want.append((UNSCHEDULABLE_TAINT, "NoSchedule"))
    out = [t for t in current if t.get("key") not in MANAGED_TAINT_KEYS or (t.get("key"), t.get("effect")) in want]
    have = {(t.get("key"), t.get("effect")) for t in out}
    for key, effect in want:
        if (key, effect) not in have:
            t: Obj = {"key": key, "effect": effect}
            if effect == "NoExecute":
                t["timeAdded"] = fmt_time(now)
            out.append(t)
    return out


def pod_ready_false_patch(pod: Obj, now: datetime) -> Obj | None:
    """Strategic-merge patch marking the pod not Ready (MarkPodsNotReady), or None.

    Like upstream only a pod that has a Ready condition which is not False yet is touched; the
    condition's reason and message stay (the merge key is ``type``)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            if c.get("status") == "False":
                return None
            return {"status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": fmt_time(now)}]}}
    return None


def node_ready_left_true(previous: str | None, current: str | None) -> bool:
    """Should the pods of a node be marked not Ready in this pass (MarkPodsNotReady trigger)?"""
    if current == "True" or current is None:
        return False
    return previous == "True"


def stall_threshold(monitor_period: float, grace_period: float) -> float:
    """A gap between passes longer than this means the controller itself was not running."""
    return monitor_period + grace_period / 2


# --- I/O ------------------------------------------------------------------------------------


class LifecycleApi(Protocol):
    async def list(self, path: str, params: Any = None) -> Obj: ...
    async def create(self, path: str, body: Obj, params: Any = None) -> Obj: ...
    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Obj: ...
    async def delete(self, path: str, body: Obj | None = None, params: Any = None) -> Obj: ...
    def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
              timeout_seconds: int | None = None) -> Any: ...




def _utcnow() -> datetime:
    return datetime.now(UTC)


class NodeLifecycleController:
    def __init__(
        self,
        api: LifecycleApi,
        *,
        grace_period: float = 40.0,
        eviction_timeout: float = 300.0,
        monitor_period: float = 5.0,
        clock: Callable[[], datetime] = _utcnow,
        informers: kit.SharedInformers | None = None,
    ) -> None:
        self.api = api
        self.informers = informers  # the server's shared watches (one decoded pod for all controllers)
        self.grace_period = grace_period
        # Default toleration length applied by admission (DefaultTolerationSeconds); eviction itself
        # follows each pod's tolerations, as upstream's taint-based eviction does.
        self.eviction_timeout = eviction_timeout
        self.monitor_period = monitor_period
        self.clock = clock
        self.health = HealthTracker(grace_period)
        self.stall_threshold = stall_threshold(monitor_period, grace_period)
        self.nodes: dict[str, Obj] = {}
        self.leases: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self._on_node: dict[str, set[str]] = {}  # node name -> keys of its pods
        self._synced: set[str] = set()
        self._all_synced = asyncio.Event()
        self._last_pass: datetime | None = None
        self._ready_seen: dict[str, str | None] = {}  # node -> Ready status at the previous pass
        self._assigned: set[str] = set()  # pods newly seen on a node (upstream podUpdated queue)
        self._mark_failed: set[str] = set()  # pods whose marking failed: queued again by the next pass
        self.marking = KeyQueue()  # pods to mark not Ready
        self.events = EventRecorder(api, clock, CONTROLLER_NAME)
        self.eviction = TaintEvictionController(
            api, get_pod=self.pods.get, get_node=self.nodes.get, pods_on=self._pods_on,
            recorder=self.events, clock=clock)

    # cache handlers ----------------------------------------------------------------------------

    def _observe(self, name: str) -> None:
        self.health.observe(name, health_signature(self.nodes.get(name), self.leases.get(name)), self.clock())

    def on_node_event(self, etype: str, node: Obj) -> None:
        name = str(_meta(node).get("name", ""))
        if etype == "DELETED":
            self.nodes.pop(name, None)
            self.health.forget(name)
            self._ready_seen.pop(name, None)
            self.eviction.node_updated(name, None)
            return
        self.nodes[name] = node
        self._observe(name)
        self.eviction.node_updated(name, node)

    def on_lease_event(self, etype: str, lease: Obj) -> None:
        name = str(_meta(lease).get("name", ""))
        if etype == "DELETED":
            self.leases.pop(name, None)
            return
        self.leases[name] = lease
        if name in self.nodes:
            self._observe(name)

    def on_pod_event(self, etype: str, pod: Obj) -> None:
        m = _meta(pod)
        key = f"{m.get('namespace', '')}/{m.get('name', '')}"
        old = self.pods.get(key)
        old_node = _spec(old).get("nodeName") if old is not None else None
        if etype == "DELETED":
            self.pods.pop(key, None)
            self._assigned.discard(key)
            self._mark_failed.discard(key)
            node_name = None
        else:
            node_name = _spec(pod).get("nodeName")
            if node_name and (old is None or old_node != node_name):
                self._assigned.add(key)
            self.pods[key] = pod
        if old_node != node_name:
            if old_node:
                keys = self._on_node.get(old_node)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._on_node[old_node]
            if node_name:
                self._on_node.setdefault(node_name, set()).add(key)
        self.eviction.pod_updated(key, None if etype == "DELETED" else pod)

    def _pods_on(self, node: str) -> list[tuple[str, Obj]]:
        return [(k, self.pods[k]) for k in sorted(self._on_node.get(node, ())) if k in self.pods]

    # one monitoring pass -----------------------------------------------------------------------

    async def reconcile(self) -> None:
        """One pass over all nodes (upstream monitorNodeHealth): node writes only, pod work queued."""
        now = self.clock()
        if self._last_pass is not None:
            gap = (now - self._last_pass).total_seconds()
            if gap > self.stall_threshold:
                log.warning(
                    "node lifecycle controller did not run for %.0fs (paused or starved); "
                    "giving every node a fresh grace period", gap,
                )
                self.health.refresh_all(now)
        try:
            for key in list(self._mark_failed):  # upstream nodesToRetry
                self._mark_failed.discard(key)
                self.marking.add(key)
            for name, node in list(self.nodes.items()):
                try:
                    node = await self._reconcile_node(name, node, now)
                    self._queue_pods_not_ready(name, node)
                except Exception:
                    log.exception("node lifecycle for %s failed", name)
            self._process_assigned()
        finally:
            self._last_pass = self.clock()  # the gap to the next pass is idle time, not this pass's work

    async def _reconcile_node(self, name: str, node: Obj, now: datetime) -> Obj:
        if self.health.is_stale(name, now):
            conds = unknown_conditions(node, now)
            if conds is not None:
                log.info("node %s: kubelet stopped posting status; marking Unknown", name)
                node = self._written(name, await self.api.patch(
                    f"/api/v1/nodes/{name}/status", {"status": {"conditions": conds}}, "merge"
                ))
        taints = desired_taints(node, now)
        if taints != (_spec(node).get("taints") or []):
            node = self._written(
                name, await self.api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}}, "merge"))
        return node

    def _written(self, name: str, answer: Obj) -> Obj:
        """The node after one of our PATCHes: its answer goes into the caches unless the watch
        already delivered a later revision while the PATCH was in flight (e.g. the kubelet's first
        Ready=True right after we tainted the node unreachable). Storing the older answer over it
        would keep the taint until the kubelet's next status write, minutes away with a Lease."""
        cached = self.nodes.get(name)
        if cached is not None and _revision(cached) > _revision(answer):
            return cached
        self.nodes[name] = answer
        self.eviction.node_updated(name, answer)
        return answer

    def _queue_pods_not_ready(self, name: str, node: Obj) -> None:
        ready = condition_status(node, "Ready")
        previous = self._ready_seen.get(name)
        self._ready_seen[name] = ready
        if not node_ready_left_true(previous, ready):
            return
        log.info("node %s is not ready (Ready=%s); marking its pods not ready", name, ready)
        for key in self._on_node.get(name, ()):
            self.marking.add(key)

    def _process_assigned(self) -> None:
        """Pods newly seen on a node that is not Ready are marked not Ready (upstream processPod)."""
        for key in list(self._assigned):
            self._assigned.discard(key)
            pod = self.pods.get(key)
            if pod is None:
                continue
            node = self.nodes.get(str(_spec(pod).get("nodeName")))
            if node is not None and condition_status(node, "Ready") in ("False", "Unknown"):
                self.marking.add(key)

    # per-pod work (workers) --------------------------------------------------------------------

    async def _mark_pod_not_ready(self, key: str) -> None:
        """MarkPodsNotReady for one pod, decided from the caches now; a failure is retried next pass."""
        pod = self.pods.get(key)
        if pod is None:
            return
        node = self.nodes.get(str(_spec(pod).get("nodeName")))
        if node is None or condition_status(node, "Ready") in ("True", None):
            return  # the node is back (or gone): its kubelet, or pod GC, has the last word
        now = self.clock()
        patch = pod_ready_false_patch(pod, now)
        if patch is None:
            return
        ns, pname = key.split("/", 1)
        try:
            updated = await self.api.patch(f"/api/v1/namespaces/{ns}/pods/{pname}/status", patch, "strategic")
        except ApiError as e:
            if e.status == 404:  # already gone: nothing left to do
                return
            log.info("marking pod %s not ready failed: %s", key, e)
            self._mark_failed.add(key)
            return
        if key in self.pods:
            self.pods[key] = updated
        self.events.record(updated, "Warning", "NodeNotReady", "Node is not ready")

    async def settle(self) -> None:
        """Do the queued pod work now, in the caller's task (tests; ``run`` has workers for it)."""
        while True:
            await drain(self.marking, self._mark_pod_not_ready, POD_WRITERS)
            await self.eviction.settle()
            await self.events.flush()
            if not (len(self.marking) or len(self.eviction.queue)):
                return

    async def pod_workers(self) -> None:
        """The per-pod work, for ever: MarkPodsNotReady workers, taint eviction, the event writers."""
        await asyncio.gather(run_workers(self.marking, self._mark_pod_not_ready, POD_WRITERS),
                             self.eviction.run(), self.events.run())

    # loops -------------------------------------------------------------------------------------

    def _path_synced(self, path: str) -> None:
        self._synced.add(path)
        if len(self._synced) == 3:
            self._all_synced.set()

    async def _reflect(self, path: str, handler: Callable[[str, Obj], None]) -> None:
        if self.informers is not None:  # the shared watch of path feeds this controller
            await kit.follow(self.informers, path, handler, lambda: self._path_synced(path))
            return
        while True:
            try:
                lst = await self.api.list(path)
                items = lst.get("items") or []
                for item in items:
                    handler("ADDED", item)
                self._path_synced(path)
                rv = (lst.get("metadata") or {}).get("resourceVersion")
                async for etype, obj in self.api.watch(path, resource_version=rv):
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        handler(etype, obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("watch %s ended: %s; relisting", path, e)
                await asyncio.sleep(1.0)

    async def run(self) -> None:
        specs: list[tuple[str, Callable[[str, Obj], None]]] = [
            ("/api/v1/nodes", self.on_node_event),
            (f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", self.on_lease_event),
            ("/api/v1/pods", self.on_pod_event),
        ]
        tasks = [asyncio.create_task(self._reflect(p, h)) for p, h in specs]
        try:
            await self._all_synced.wait()  # judge nothing from a partial view
            tasks.append(asyncio.create_task(self.pod_workers()))
            while True:
                await self.reconcile()
                await asyncio.sleep(self.monitor_period)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
