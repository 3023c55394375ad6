"""Node lifecycle controller: node health from Leases, condition-based taints, NoExecute eviction.

Design: decisions are pure functions of (node, lease observations, pods, ``now``) so they are
tested with a fake clock; ``NodeLifecycleController`` keeps caches fed by list+watch of nodes,
Leases in ``kube-node-lease`` and pods, and every ``monitor_period`` applies the decisions with
PATCHes/DELETEs.  Health is judged from the controller's *own* observation time of the last change
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
  probe timestamps the same way when it leaves full-disruption mode).  A pass that is long because
  it works (marking or evicting the thousand pods of a lost node) is not a stall: counted from the
  pass's start, it would hand every other silent node a fresh grace period.  The per-pod writes of
  a node (MarkPodsNotReady, evictions) go :data:`POD_WRITERS` at a time, like upstream's 8
  node-update and taint-eviction workers, so a node with a thousand pods holds the pass up for
  less;
- taints follow conditions (TaintNodesByCondition + taint-based eviction): Ready=False ->
  node.kubernetes.io/not-ready NoSchedule+NoExecute, Ready=Unknown/absent ->
  node.kubernetes.io/unreachable NoSchedule+NoExecute (NoExecute carries timeAdded), pressure
  conditions -> memory-/disk-/pid-pressure NoSchedule, spec.unschedulable ->
  node.kubernetes.io/unschedulable NoSchedule; when the kubelet reports Ready again they go;
- NoExecute eviction: a pod on the node that does not tolerate every NoExecute taint is deleted
  at once; otherwise at taint time + the smallest tolerationSeconds of the tolerations used (never
  if none of them sets it); before deletion the pod gets DisruptionTarget=True
  (reason DeletionByTaintManager). Matching is ``common.tolerations`` (one rule for scheduler,
  controller and agent). The deletion is graceful: the kubelet stops the containers and deletes the
  pod for good -- if its runtime is down that waits until the runtime is back, never longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pykubelet.common.apiclient import ApiError
from pykubelet.common.timestamps import parse_time
from pykubelet.common.tolerations import matching_tolerations

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
POD_WRITERS = 8  # per-pod API writes of one node in flight at once (upstream: 8 workers)


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _spec(o: Obj) -> Obj:
    return o.get("spec") or {}


def _conditions(node: Obj) -> list[Obj]:
    return [c for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]


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


def _toleration_seconds(tol: Mapping[str, Any]) -> int | None:
    """A toleration's tolerationSeconds (None: forever; a malformed value counts as forever)."""
    value = tol.get("tolerationSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def eviction_time(pod: Obj, taints: list[Obj], now: datetime) -> datetime | None:
    """When the pod must be deleted because of NoExecute taints (None: never)."""
    noexec = [t for t in taints if t.get("effect") == "NoExecute"]
    if not noexec:
        return None
    tolerations = _spec(pod).get("tolerations") or []
    used: list[Mapping[str, Any]] = []
    for taint in noexec:
        match = matching_tolerations(tolerations, taint)
        if not match:
            return now
        used.extend(match)
    seconds = [s for s in (_toleration_seconds(t) for t in used) if s is not None]
    if not seconds:
        return None
    minimum = min(seconds)
    added = [parse_time(t.get("timeAdded")) for t in noexec]
    start = min((a for a in added if a is not None), default=now)
    if minimum <= 0:
        return start
    return start + timedelta(seconds=minimum)


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


def node_ready_left_true(previous: str | None, current: str | None, retry: bool) -> bool:
    """Should the pods of a node be marked not Ready in this pass (MarkPodsNotReady trigger)?"""
    if current == "True" or current is None:
        return False
    return previous == "True" or retry


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


async def _bounded(writes: Iterable[Awaitable[bool]], limit: int = POD_WRITERS) -> list[bool]:
    """Await ``writes`` with at most ``limit`` in flight; their results, in order."""
    sem = asyncio.Semaphore(limit)

    async def one(w: Awaitable[bool]) -> bool:
        async with sem:
            return await w

    return list(await asyncio.gather(*(one(w) for w in writes)))


class NodeLifecycleController:
    def __init__(
        self,
        api: LifecycleApi,
        *,
        grace_period: float = 40.0,
        eviction_timeout: float = 300.0,
        monitor_period: float = 5.0,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.api = api
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
        self._on_node: dict[str, set[str]] = {}  # node name -> keys of its pods (a pass is O(its pods))
        self._evicting: set[str] = set()
        self._synced: set[str] = set()
        self._last_pass: datetime | None = None
        self._ready_seen: dict[str, str | None] = {}  # node -> Ready status at the previous pass
        self._mark_retry: set[str] = set()  # nodes whose pods could not all be marked not Ready
        self._assigned: set[str] = set()  # pods newly seen on a node (upstream podUpdated queue)

    # cache handlers ----------------------------------------------------------------------------

    def _observe(self, name: str) -> None:
        self.health.observe(name, health_signature(self.nodes.get(name), self.leases.get(name)), self.clock())

    def on_node_event(self, etype: str, node: Obj) -> None:
        name = str(_meta(node).get("name", ""))
        if etype == "DELETED":
            self.nodes.pop(name, None)
            self.health.forget(name)
            self._ready_seen.pop(name, None)
            self._mark_retry.discard(name)
            return
        self.nodes[name] = node
        self._observe(name)

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
            self._evicting.discard(key)
            self._assigned.discard(key)
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

    def _pods_on(self, node: str) -> list[tuple[str, Obj]]:
        return [(k, self.pods[k]) for k in sorted(self._on_node.get(node, ())) if k in self.pods]

    # one monitoring pass -----------------------------------------------------------------------

    async def reconcile(self) -> None:
        """One pass over all nodes (upstream monitorNodeHealth + taint eviction)."""
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
            for name, node in list(self.nodes.items()):
                try:
                    node = await self._reconcile_node(name, node, now)
                    await self._mark_pods_not_ready(name, node, now)
                    await self._evict(name, node, now)
                except Exception:
                    log.exception("node lifecycle for %s failed", name)
            await self._process_assigned(now)
        finally:
            self._last_pass = self.clock()  # the gap to the next pass is idle time, not this pass's work

    async def _reconcile_node(self, name: str, node: Obj, now: datetime) -> Obj:
        if self.health.is_stale(name, now):
            conds = unknown_conditions(node, now)
            if conds is not None:
                log.info("node %s: kubelet stopped posting status; marking Unknown", name)
                node = await self.api.patch(
                    f"/api/v1/nodes/{name}/status", {"status": {"conditions": conds}}, "merge"
                )
                self.nodes[name] = node
        taints = desired_taints(node, now)
        if taints != (_spec(node).get("taints") or []):
            node = await self.api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}}, "merge")
            self.nodes[name] = node
        return node

    async def _mark_pod_not_ready(self, key: str, pod: Obj, now: datetime) -> bool:
        """MarkPodsNotReady for one pod; False if the update failed (to be retried)."""
        patch = pod_ready_false_patch(pod, now)
        if patch is None:
            return True
        ns, pname = key.split("/", 1)
        try:
            updated = await self.api.patch(f"/api/v1/namespaces/{ns}/pods/{pname}/status", patch, "strategic")
        except ApiError as e:
            if e.status == 404:  # already gone: nothing left to do
                return True
            log.info("marking pod %s not ready failed: %s", key, e)
            return False
        if key in self.pods:
            self.pods[key] = updated
        await self._pod_event(updated, "Warning", "NodeNotReady", "Node is not ready")
        return True

    async def _mark_pods_not_ready(self, name: str, node: Obj, now: datetime) -> None:
        ready = condition_status(node, "Ready")
        previous = self._ready_seen.get(name)
        self._ready_seen[name] = ready
        if not node_ready_left_true(previous, ready, name in self._mark_retry):
            if ready == "True":
                self._mark_retry.discard(name)
            return
        log.info("node %s is not ready (Ready=%s); marking its pods not ready", name, ready)
        ok = all(await _bounded(self._mark_pod_not_ready(key, pod, now) for key, pod in self._pods_on(name)))
        if ok:
            self._mark_retry.discard(name)
        else:
            self._mark_retry.add(name)

    async def _process_assigned(self, now: datetime) -> None:
        """Pods newly seen on a node that is not Ready are marked not Ready (upstream processPod)."""
        for key in list(self._assigned):
            pod = self.pods.get(key)
            if pod is None:
                self._assigned.discard(key)
                continue
            node = self.nodes.get(str(_spec(pod).get("nodeName")))
            if node is None:  # node not known (yet): nothing to decide
                self._assigned.discard(key)
                continue
            if condition_status(node, "Ready") in ("False", "Unknown"):
                if not await self._mark_pod_not_ready(key, pod, now):
                    continue  # retried next pass
            self._assigned.discard(key)

    async def _pod_event(self, pod: Obj, etype: str, reason: str, message: str) -> None:
        """Best-effort event on a pod (upstream's recorder never fails the caller)."""
        meta = _meta(pod)
        ns = str(meta.get("namespace") or "default")
        ts = fmt_time(self.clock())
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name', '')}.{secrets.token_hex(8)}", "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": ns,
                "name": meta.get("name", ""),
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": CONTROLLER_NAME},
            "reportingComponent": CONTROLLER_NAME,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            await self.api.create(f"/api/v1/namespaces/{ns}/events", body)
        except Exception as e:
            log.debug("event %s for %s/%s not recorded: %s", reason, ns, meta.get("name"), e)

    async def _evict(self, name: str, node: Obj, now: datetime) -> None:
        taints = [t for t in _spec(node).get("taints") or [] if isinstance(t, dict)]
        if not any(t.get("effect") == "NoExecute" for t in taints):
            return  # only NoExecute taints evict
        due = []
        for key, pod in self._pods_on(name):
            if key in self._evicting:
                continue
            if _meta(pod).get("deletionTimestamp"):
                continue
            when = eviction_time(pod, taints, now)
            if when is None or when > now:
                continue
            self._evicting.add(key)
            due.append(key)
        await _bounded(self._evict_pod(key, name, now) for key in due)

    async def _evict_pod(self, key: str, name: str, now: datetime) -> bool:
        ns, pname = key.split("/", 1)
        log.info("evicting pod %s from node %s (NoExecute taint)", key, name)
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": fmt_time(now),
        }
        with contextlib.suppress(Exception):
            await self.api.patch(
                f"/api/v1/namespaces/{ns}/pods/{pname}/status", {"status": {"conditions": [cond]}}, "strategic"
            )
        try:
            await self.api.delete(f"/api/v1/namespaces/{ns}/pods/{pname}")
        except Exception:
            self._evicting.discard(key)
            log.warning("deleting %s failed", key, exc_info=True)
            return False
        return True

    # loops -------------------------------------------------------------------------------------

    async def _reflect(self, path: str, handler: Callable[[str, Obj], None]) -> None:
        while True:
            try:
                lst = await self.api.list(path)
                items = lst.get("items") or []
                for item in items:
                    handler("ADDED", item)
                self._synced.add(path)
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
            while True:
                if len(self._synced) == len(specs):
                    await self.reconcile()
                await asyncio.sleep(self.monitor_period)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
