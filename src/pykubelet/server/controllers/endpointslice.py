"""The EndpointSlice controller (upstream ``pkg/controller/endpointslice``), on the controller kit.

For every Service with a selector (not ExternalName) it keeps ``discovery.k8s.io/v1`` EndpointSlices
labelled ``kubernetes.io/service-name=<svc>`` and ``endpointslice.kubernetes.io/managed-by=
endpointslice-controller.k8s.io`` listing the selected pods that have an IP and are not terminal:

- conditions as upstream: ``ready`` = the pod's Ready condition is True and the pod is not
  terminating (``publishNotReadyAddresses`` makes every endpoint ready), ``serving`` = Ready
  regardless of termination, ``terminating`` = the pod has a deletionTimestamp; so a failing
  readiness probe takes a pod out of the proxy's rotation and a terminating one stays visible for
  the proxy's terminating-endpoint fallback.
- ports: each Service port with its ``targetPort`` resolved per pod (a name is looked up in the
  pod's container ports with the same protocol; a pod without it gets no such port, as upstream's
  ``FindPort``); pods whose resolved ports differ land in different slices, at most 100 endpoints
  per slice (``--max-endpoints-per-slice``' default).
- ``hostname`` = ``pod.spec.hostname`` when ``pod.spec.subdomain`` names the Service (the DNS
  records of pods behind a headless Service), ``targetRef`` and ``nodeName`` as upstream.

Reconcile is level-triggered: the desired slices are computed from the informer caches (pure
:func:`desired_slices`), existing slices of the Service are updated in place when they differ,
missing ones are created (``generateName: <svc>-``) and surplus ones deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"
MAX_ENDPOINTS_PER_SLICE = 100


def selects(selector: dict[str, str], labels: dict[str, str] | None) -> bool:
    """A Service's equality selector (an empty one selects nothing, as upstream)."""
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def managed_service(svc: Obj) -> bool:
    spec = svc.get("spec") or {}
    return bool(spec.get("selector")) and spec.get("type") != "ExternalName"


def find_port(pod: Obj, target: Any, protocol: str) -> int | None:
    """Upstream ``podutil.FindPort``: a number as is, a name from the containers' ports."""
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target and (p.get("protocol") or "TCP") == protocol:
                return int(p.get("containerPort") or 0) or None
    return None


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def endpoint_pods(svc: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The pods a Service's endpoints list: selected, with an IP, not Succeeded/Failed."""
    sel = (svc.get("spec") or {}).get("selector") or {}
    out = []
    for p in pods:
        st = p.get("status") or {}
        if not selects(sel, (p.get("metadata") or {}).get("labels")):
            continue
        if not st.get("podIP") or st.get("phase") in ("Succeeded", "Failed"):
            continue
        out.append(p)
    return sorted(out, key=lambda p: (p["metadata"].get("name", "")))


def pod_ports(svc: Obj, pod: Obj) -> list[Obj]:
    ports = []
    for sp in (svc.get("spec") or {}).get("ports") or []:
        proto = sp.get("protocol") or "TCP"
        num = find_port(pod, sp.get("targetPort", sp.get("port")), proto)
        if num is None:
            continue
        ports.append({"name": sp.get("name") or "", "port": num, "protocol": proto})
    return ports


def endpoint_of(svc: Obj, pod: Obj) -> Obj:
    meta, spec, st = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    terminating = bool(meta.get("deletionTimestamp"))
    ready = pod_ready(pod)
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    ips = [i.get("ip") for i in st.get("podIPs") or [] if i.get("ip") and ":" not in i["ip"]] or [st["podIP"]]
    ep: Obj = {"addresses": ips[:1],
               "conditions": {"ready": publish or (ready and not terminating), "serving": publish or ready,
                              "terminating": terminating},
               "targetRef": {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
                             "uid": meta.get("uid", "")}}
    if spec.get("nodeName"):
        ep["nodeName"] = spec["nodeName"]
    if spec.get("hostname") and spec.get("subdomain") == svc["metadata"].get("name"):
        ep["hostname"] = spec["hostname"]
    return ep


def desired_slices(svc: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The slices (without names) a Service should have: one group per distinct port list."""
    groups: dict[str, tuple[list[Obj], list[Obj]]] = {}
    for pod in endpoint_pods(svc, pods):
        ports = pod_ports(svc, pod)
        key = repr(ports)
        groups.setdefault(key, (ports, []))[1].append(endpoint_of(svc, pod))
    meta = svc["metadata"]
    out = []
    for ports, eps in groups.values():
        for i in range(0, len(eps), MAX_ENDPOINTS_PER_SLICE):
            out.append(_slice(meta, ports, eps[i:i + MAX_ENDPOINTS_PER_SLICE]))
    if not out:  # upstream keeps one (empty) slice per Service
        out.append(_slice(meta, [], []))
    return out


def _slice(svc_meta: Obj, ports: list[Obj], endpoints: list[Obj]) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": svc_meta.get("namespace", ""),
                     "labels": {SERVICE_NAME_LABEL: svc_meta.get("name", ""), MANAGED_BY_LABEL: MANAGED_BY},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": svc_meta.get("name", ""),
                                          "uid": svc_meta.get("uid", ""), "controller": True,
                                          "blockOwnerDeletion": True}]},
        "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
    }


def _content(s: Obj) -> tuple[Any, ...]:
    return (s.get("endpoints") or [], s.get("ports") or [], s.get("addressType"),
            ((s.get("metadata") or {}).get("labels") or {}))


class ServicePodController(kit.Controller):
    """Shared wiring of the two endpoint controllers: Services + pods informers; a pod change
    queues every Service of its namespace that selected it before or selects it now."""

    def __init__(self, api: kit.Api) -> None:
        super().__init__(api)
        self.services = self.informer("/api/v1/services")
        self.pods = self.informer("/api/v1/pods")
        self.services.add_handlers(on_add=self.enqueue, on_update=lambda o, n: self.enqueue(n),
                                   on_delete=self.enqueue)
        self.pods.add_handlers(on_add=self._pod_changed, on_update=self._pod_changed,
                               on_delete=self._pod_changed)

    def _pod_changed(self, *objs: Obj) -> None:
        ns = (objs[-1].get("metadata") or {}).get("namespace", "")
        for svc in self.services.items(ns):
            sel = (svc.get("spec") or {}).get("selector") or {}
            if any(selects(sel, (o.get("metadata") or {}).get("labels")) for o in objs):
                self.enqueue(svc)


class EndpointSliceController(ServicePodController):
    name = "endpointslice-controller"

    def __init__(self, api: kit.Api) -> None:
        super().__init__(api)
        self.slices = self.informer("/apis/discovery.k8s.io/v1/endpointslices",
                                    params={"labelSelector": f"{MANAGED_BY_LABEL}={MANAGED_BY}"})
        self.slices.add_handlers(on_update=lambda o, n: self._slice_changed(n), on_delete=self._slice_changed)

    def _slice_changed(self, sl: Obj) -> None:
        meta = sl.get("metadata") or {}
        svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if svc:
            self.queue.add(f"{meta.get('namespace', '')}/{svc}")

    async def reconcile(self, key: str) -> float | None:
        ns, name = kit.split_key(key)
        svc = self.services.get(key)
        existing = [s for s in self.slices.items(ns)
                    if ((s.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL) == name]
        base = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
        if svc is None or not managed_service(svc):
            for s in existing:  # the garbage collector's job upstream (ownerReferences)
                await self._delete(f"{base}/{s['metadata']['name']}")
            return None
        want = desired_slices(svc, self.pods.items(ns))
        unmatched = list(existing)
        todo = []
        for w in want:  # keep slices that already say exactly this
            same = next((s for s in unmatched if _content(s) == _content(w)), None)
            if same is not None:
                unmatched.remove(same)
            else:
                todo.append(w)
        for w in todo:
            if unmatched:
                cur = unmatched.pop(0)
                body = {**w, "metadata": {**cur["metadata"], "labels": w["metadata"]["labels"],
                                          "ownerReferences": w["metadata"]["ownerReferences"]}}
                self.slices.apply("MODIFIED", await self.api.replace(f"{base}/{cur['metadata']['name']}", body))
            else:
                body = {**w, "metadata": {**w["metadata"], "generateName": f"{name}-"}}
                self.slices.apply("ADDED", await self.api.create(base, body))
        for s in unmatched:
            await self._delete(f"{base}/{s['metadata']['name']}")
            self.slices.apply("DELETED", s)
        return None

    async def _delete(self, path: str) -> None:
        try:
            await self.api.delete(path)
        except ApiError as e:
            if e.status != 404:
                raise
