"""The disruption controller: PodDisruptionBudget status (``pkg/controller/disruption``).

A budget's key is looked at when the budget changes or when a pod it selects changes; its status
(``currentHealthy``, ``desiredHealthy``, ``expectedPods``, ``disruptionsAllowed``, ``disruptedPods``,
the DisruptionAllowed condition, ``observedGeneration``) is computed by
:func:`pykubelet.server.pdb.compute_status` and written through ``/status``.  The eviction
subresource in the API server reads that status and charges it (:func:`pykubelet.server.pdb.check_eviction`).

Percentages and ``maxUnavailable`` need the scale of each selected pod's controller, found as
upstream's finders do: a ReplicaSet's owning Deployment (else the ReplicaSet), a StatefulSet, a
ReplicationController: each read live (``spec.replicas``).  A budget with pods in
``disruptedPods`` is looked at again when their 2-minute deletion timeout can expire.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server import pdb as pdbmod
from pykubelet.server.controllers import kit

log = logging.getLogger(__name__)
Obj = dict[str, Any]

_PATHS = {("apps", "ReplicaSet"): "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
          ("apps", "StatefulSet"): "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
          ("apps", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
          ("", "ReplicationController"): "/api/v1/namespaces/{ns}/replicationcontrollers/{name}"}


def _controller_ref(obj: Obj) -> Obj | None:
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


class DisruptionController(kit.Controller):
    name = "disruption-controller"

    def __init__(self, api: kit.Api) -> None:
        super().__init__(api)
        self.pdbs = self.informer("/apis/policy/v1/poddisruptionbudgets")
        self.pods = self.informer("/api/v1/pods")
        self.pdbs.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue)
        self.pods.add_handlers(on_add=self._pod_changed, on_update=self._pod_updated, on_delete=self._pod_changed)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_changed(old)
        self._pod_changed(new)

    def _pod_changed(self, pod: Obj) -> None:
        ns = (pod.get("metadata") or {}).get("namespace")
        for b in self.pdbs.items(ns):
            if pdbmod.selects(b, pod):
                self.enqueue(b)

    async def _scale_of(self, ns: str, ref: Obj) -> tuple[str, int] | None:
        """(uid, replicas) of the scale-owning controller of a pod's controller ``ref``."""
        key = (_group(str(ref.get("apiVersion", ""))), str(ref.get("kind", "")))
        path = _PATHS.get(key)
        if path is None or key == ("apps", "Deployment"):
            return None
        try:
            obj = await self.api.get(path.format(ns=ns, name=ref.get("name", "")))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        if (obj.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None
        if key == ("apps", "ReplicaSet"):
            owner = _controller_ref(obj)
            if owner is not None and owner.get("kind") == "Deployment":
                try:
                    dep = await self.api.get(_PATHS[("apps", "Deployment")].format(ns=ns, name=owner.get("name", "")))
                except ApiError as e:
                    if e.status != 404:
                        raise
                else:
                    if (dep.get("metadata") or {}).get("uid") == owner.get("uid"):
                        # the pods' controller for counting is the ReplicaSet; its scale the Deployment's
                        return str(ref.get("uid")), int((dep.get("spec") or {}).get("replicas", 1))
        return str(ref.get("uid")), int((obj.get("spec") or {}).get("replicas", 1))

    async def reconcile(self, key: str) -> float | None:
        budget = self.pdbs.get(key)
        if budget is None:
            return None
        ns, name = kit.split_key(key)
        pods = [p for p in self.pods.items(ns) if pdbmod.selects(budget, p)]
        spec = budget.get("spec") or {}
        scales: dict[str, int] = {}
        if spec.get("maxUnavailable") is not None or pdbmod.is_percent(spec.get("minAvailable")):
            for p in pods:
                ref = _controller_ref(p)
                if ref is not None and str(ref.get("uid")) not in scales:
                    found = await self._scale_of(ns, ref)
                    if found is not None:
                        scales[found[0]] = found[1]
        now = dt.datetime.now(dt.UTC)
        status = pdbmod.compute_status(budget, pods, scales, now)
        if status != (budget.get("status") or {}):
            body = copy.deepcopy(budget)
            body["status"] = status
            out = await self.api.replace(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}/status", body)
            self.pdbs.cache[key] = out
            if status.get("conditions", [{}])[0].get("reason") == "SyncFailed":
                await self.recorder.event(budget, "Warning", "CalculateExpectedPodCountFailed",
                                          f"Failed to calculate the number of expected pods: "
                                          f"{status['conditions'][0].get('message')}")
        if status.get("disruptedPods"):
            return pdbmod.DELETION_TIMEOUT.total_seconds() / 4
        return None
