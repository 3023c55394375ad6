"""The Endpoints controller (upstream ``pkg/controller/endpoint``), on the controller kit.

Keeps the legacy ``v1/Endpoints`` object named like each Service with a selector: ``subsets``
grouped by the resolved port list, ready pods in ``addresses`` and the others in
``notReadyAddresses``.  As upstream, terminating pods are left out unless the Service has
``publishNotReadyAddresses`` (then every selected pod is in ``addresses``).  The pod selection and
port resolution are the EndpointSlice controller's (shared pure functions), so the two objects
never disagree.  Endpoints the controller did not create (a selector-less Service's, e.g.
``default/kubernetes``) are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit
from pykubelet.server.controllers.endpointslice import (
    ServicePodController,
    endpoint_pods,
    managed_service,
    pod_ports,
    pod_ready,
)

Obj = dict[str, Any]


def desired_subsets(svc: Obj, pods: Iterable[Obj]) -> list[Obj]:
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    groups: dict[str, Obj] = {}
    for pod in endpoint_pods(svc, pods):
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if meta.get("deletionTimestamp") and not publish:
            continue
        ports = pod_ports(svc, pod)
        if not ports:
            continue
        addr: Obj = {"ip": pod["status"]["podIP"],
                     "targetRef": {"kind": "Pod", "namespace": meta.get("namespace", ""),
                                   "name": meta.get("name", ""), "uid": meta.get("uid", "")}}
        if spec.get("nodeName"):
            addr["nodeName"] = spec["nodeName"]
        if spec.get("hostname") and spec.get("subdomain") == svc["metadata"].get("name"):
            addr["hostname"] = spec["hostname"]
        sub = groups.setdefault(repr(ports), {"ports": [
            {k: v for k, v in p.items() if k != "name" or v} for p in ports]})
        sub.setdefault("addresses" if publish or pod_ready(pod) else "notReadyAddresses", []).append(addr)
    return list(groups.values())


class EndpointsController(ServicePodController):
    name = "endpoint-controller"

    def __init__(self, api: kit.Api) -> None:
        super().__init__(api)
        self.endpoints = self.informer("/api/v1/endpoints")

    async def reconcile(self, key: str) -> float | None:
        ns, name = kit.split_key(key)
        svc = self.services.get(key)
        path = f"/api/v1/namespaces/{ns}/endpoints/{name}"
        cur = self.endpoints.get(key)
        if svc is None:
            if cur is not None:  # upstream deletes the Endpoints of a deleted Service
                try:
                    await self.api.delete(path)
                except ApiError as e:
                    if e.status != 404:
                        raise
            return None
        if not managed_service(svc):
            return None
        subsets = desired_subsets(svc, self.pods.items(ns))
        labels = dict(svc["metadata"].get("labels") or {})
        if (svc.get("spec") or {}).get("clusterIP") == "None":
            labels["service.kubernetes.io/headless"] = ""
        body: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                     "metadata": {"name": name, "namespace": ns, "labels": labels},
                     "subsets": subsets}
        if cur is None:
            try:
                self.endpoints.apply("ADDED", await self.api.create(f"/api/v1/namespaces/{ns}/endpoints", body))
            except ApiError as e:
                if e.status != 409:
                    raise
                cur = await self.api.get(path)
        if cur is not None:
            if (cur.get("subsets") or []) == subsets and (cur["metadata"].get("labels") or {}) == labels:
                return None
            body["metadata"]["resourceVersion"] = cur["metadata"].get("resourceVersion")
            self.endpoints.apply("MODIFIED", await self.api.replace(path, body))
        return None
