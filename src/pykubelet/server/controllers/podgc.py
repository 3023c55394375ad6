"""Pod garbage collection (``pkg/controller/podgc``), plus a deleted Node's Lease.

Every ``period`` seconds (upstream's gcCheckPeriod is 20 s), and whenever a Node goes away:

- **terminated pods** (Succeeded/Failed) beyond ``--terminated-pod-gc-threshold`` (default 12500,
  0 or less disables it) are deleted, oldest first by creation time;
- **orphaned pods**, bound to a node that no longer exists, are marked Failed with the
  DisruptionTarget condition (reason DeletionByPodGC) and force-deleted, once the node has been
  missing for ``quarantine`` seconds (40 s upstream) and a live GET confirms it is gone; mirror
  pods of a deleted Node go this way too (and through their ownerReference to the Node);
- **unscheduled terminating pods** (a deletionTimestamp but no node, so no kubelet to finish
  them) are force-deleted;
- a deleted Node's Lease in ``kube-node-lease`` is deleted (the garbage collector also does it
  through the Lease's ownerReference; this covers a Lease written before the Node existed).

:func:`select` is the pure part: which pods to delete and why, from the caches and the clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit

log = logging.getLogger(__name__)
Obj = dict[str, Any]
KEY = "podgc"
LEASE_NS = "kube-node-lease"


@dataclass
class Selection:
    terminated: list[Obj] = field(default_factory=list)
    orphaned: list[Obj] = field(default_factory=list)
    unscheduled_terminating: list[Obj] = field(default_factory=list)


def select(pods: list[Obj], nodes: set[str], missing_since: dict[str, float], now: float, *,
           threshold: int, quarantine: float) -> Selection:
    out = Selection()
    terminated = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                  and not (p.get("metadata") or {}).get("deletionTimestamp")]
    if threshold > 0 and len(terminated) > threshold:
        terminated.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        out.terminated = terminated[: len(terminated) - threshold]
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and node not in nodes and now - missing_since.get(node, now) >= quarantine:
            out.orphaned.append(p)
        elif not node and (p.get("metadata") or {}).get("deletionTimestamp"):
            out.unscheduled_terminating.append(p)
    return out


class PodGCController(kit.Controller):
    name = "pod-garbage-collector"
    workers = 1

    def __init__(self, api: kit.Api, *, threshold: int = 12500, period: float = 20.0, quarantine: float = 40.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(api)
        self.threshold = threshold
        self.period = period
        self.quarantine = quarantine
        self.clock = clock
        self.pods = self.informer("/api/v1/pods")
        self.nodes = self.informer("/api/v1/nodes")
        self.missing_since: dict[str, float] = {}
        self.nodes.add_handlers(on_add=lambda _n: self.queue.add(KEY), on_delete=self._node_deleted)
        self.queue.add(KEY)

    @classmethod
    def from_options(cls, api: kit.Api, options: dict[str, Any]) -> PodGCController:
        kw: dict[str, Any] = {}
        if "terminated_pod_gc_threshold" in options:
            kw["threshold"] = int(options["terminated_pod_gc_threshold"])
        for opt, arg in (("podgc_period", "period"), ("podgc_quarantine", "quarantine")):
            if opt in options:
                kw[arg] = float(options[opt])
        return cls(api, **kw)

    def _node_deleted(self, node: Obj) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        self.missing_since.setdefault(name, self.clock())
        self.queue.add(f"lease/{name}")
        self.queue.add(KEY)
        if self.quarantine > 0:
            self.queue.add_after(KEY, self.quarantine + 0.1)

    async def reconcile(self, key: str) -> float | None:
        if key.startswith("lease/"):
            await self._delete_lease(key.removeprefix("lease/"))
            return None
        now = self.clock()
        names = {str((n.get("metadata") or {}).get("name", "")) for n in self.nodes.items()}
        pods = self.pods.items()
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and node not in names:
                self.missing_since.setdefault(str(node), now)
        for gone in [n for n in self.missing_since if n in names]:
            del self.missing_since[gone]
        sel = select(pods, names, self.missing_since, now, threshold=self.threshold, quarantine=self.quarantine)
        for p in sel.terminated:
            log.info("pod GC: deleting terminated pod %s/%s (over the threshold of %d)",
                     p["metadata"].get("namespace"), p["metadata"]["name"], self.threshold)
            await self._force_delete(p)
        confirmed: dict[str, bool] = {}
        for p in sel.orphaned:
            node = str(p["spec"]["nodeName"])
            if node not in confirmed:
                confirmed[node] = await self._node_gone(node)
            if confirmed[node]:
                log.info("pod GC: deleting pod %s/%s bound to the deleted node %s",
                         p["metadata"].get("namespace"), p["metadata"]["name"], node)
                await self._mark_failed(p)
                await self._force_delete(p)
        for p in sel.unscheduled_terminating:
            await self._force_delete(p)
        waiting = [now - t for n, t in self.missing_since.items()]
        if waiting:
            return min(self.period, max(self.quarantine - max(waiting), 0.0) + 0.1)
        return self.period

    async def _node_gone(self, name: str) -> bool:
        try:
            await self.api.get(f"/api/v1/nodes/{name}")
        except ApiError as e:
            return e.status == 404
        return False

    async def _mark_failed(self, pod: Obj) -> None:
        m = pod["metadata"]
        st = pod.get("status") or {}
        if st.get("phase") in ("Succeeded", "Failed"):
            return
        now = kit.now_rfc3339()
        conds = [c for c in st.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conds.append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                      "message": "PodGC: node no longer exists", "lastTransitionTime": now})
        try:
            await self.api.patch(f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}/status",
                                 {"status": {"phase": "Failed", "conditions": conds}}, "merge")
        except ApiError as e:
            if e.status not in (404, 409, 422):
                raise

    async def _force_delete(self, pod: Obj) -> None:
        m = pod["metadata"]
        try:
            await self.api.delete(f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                                  {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                   "preconditions": {"uid": m.get("uid")}})
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    async def _delete_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{node}"
        try:
            lease = await self.api.get(path)
            holder = (lease.get("spec") or {}).get("holderIdentity")
            if holder not in (None, "", node):
                return
            await self.api.delete(path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                         "preconditions": {"uid": (lease.get("metadata") or {}).get("uid")}})
        except ApiError as e:
            if e.status not in (404, 409):
                raise
