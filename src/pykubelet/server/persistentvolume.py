"""The persistent-volume controller, with a built-in local-path provisioner and storage protection.

What kube-controller-manager's PV binder (``pkg/controller/volume/persistentvolume``), the
pvc/pv-protection controllers and an external provisioner (rancher's local-path-provisioner, as
kind and k3s ship it) do together, for one machine:

- **provisioning**: a claim whose StorageClass names :data:`PROVISIONER` gets a hostPath
  PersistentVolume ``pvc-<claim uid>`` at ``<base dir>/<pv name>`` (the directory is made here:
  in the all-in-one the agent runs on this machine), sized as the claim asks, with the class's
  reclaim policy and a required node affinity (``kubernetes.io/hostname``) to the claim's node.
  With ``volumeBindingMode: WaitForFirstConsumer`` that node is the one the scheduler wrote into
  the claim's ``volume.kubernetes.io/selected-node`` annotation once a pod using it was placed;
  with ``Immediate`` it is the first Ready node;
- **binding**: a provisioned volume, a volume the claim names (``spec.volumeName``) or the smallest
  Available volume of the claim's class that offers its access modes and size (and, when a node is
  selected, may be used there) is bound both ways: ``PV.spec.claimRef`` first, then
  ``PVC.spec.volumeName``, then both statuses ``Bound`` (the claim's with capacity and access
  modes), with upstream's annotations ``pv.kubernetes.io/bind-completed`` and
  ``pv.kubernetes.io/bound-by-controller``;
- **reclaiming**: a volume whose claim is gone (or was replaced by one with another uid) is
  ``Released``; with ``persistentVolumeReclaimPolicy: Delete`` it is deleted, and a volume this
  provisioner made also loses its directory; ``Retain`` keeps both;
- **protection**: a deleted claim keeps its ``kubernetes.io/pvc-protection`` finalizer while a pod
  that is not finished uses it; a deleted volume keeps ``kubernetes.io/pv-protection`` while it is
  Bound.  (The API server adds both finalizers on create when this controller runs, as upstream's
  StorageObjectInUseProtection admission.)

Design: :func:`plan` is pure (objects in, :class:`Action` list out); :class:`PersistentVolumeController`
keeps list+watch caches and carries the actions out through the API (never the storage), like the
scheduler.  Every action is idempotent and the plan is recomputed after each change, so a lost
race (409) just waits for the next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from pykubelet.common.apiclient import ApiError
from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.server.controllers import kit
from pykubelet.server.scheduler import match_node_selector_terms

log = logging.getLogger(__name__)

Obj = dict[str, Any]

PROVISIONER = "pykubelet.io/local-path"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
HOSTNAME_LABEL = "kubernetes.io/hostname"
RESYNC_PERIOD = 15.0


class ActionType(Enum):
    CREATE_PV = "create-pv"  # obj: the PersistentVolume; path: directory to make
    CLAIM_PV = "claim-pv"  # name: PV; obj: claimRef
    BIND_PVC = "bind-pvc"  # namespace/name: claim; obj: {"volumeName", "capacity", "accessModes"}
    SET_PV_PHASE = "set-pv-phase"  # name; obj: {"phase"}
    SET_PVC_PHASE = "set-pvc-phase"  # namespace/name; obj: {"phase"}
    DELETE_PV = "delete-pv"  # name; path: directory to remove ("" = none)
    REMOVE_FINALIZER = "remove-finalizer"  # resource, namespace/name, obj: {"finalizer"}


@dataclass
class Action:
    type: ActionType
    name: str
    namespace: str = ""
    obj: Obj = field(default_factory=dict)
    path: str = ""
    resource: str = ""


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _spec(o: Obj) -> Obj:
    return o.get("spec") or {}


def _status(o: Obj) -> Obj:
    return o.get("status") or {}


def _storage(q: Any) -> Decimal:
    try:
        return parse_quantity(q).value
    except QuantityError:
        return Decimal(0)


def claim_key(pvc: Obj) -> str:
    return f"{_meta(pvc).get('namespace', '')}/{_meta(pvc).get('name', '')}"


def pv_name_for(pvc: Obj) -> str:
    """External provisioners name a volume ``pvc-<claim uid>``."""
    return f"pvc-{_meta(pvc).get('uid', '')}"


def claim_ref(pvc: Obj) -> Obj:
    m = _meta(pvc)
    return {"kind": "PersistentVolumeClaim", "namespace": m.get("namespace", ""), "name": m.get("name", ""),
            "uid": m.get("uid", ""), "apiVersion": "v1", "resourceVersion": m.get("resourceVersion", "")}


def pv_node_ok(pv: Obj, node: Obj | None, node_name: str) -> bool:
    """Whether the volume's required node affinity admits the node (no affinity: any node)."""
    required = ((_spec(pv).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
    if not required:
        return True
    if node is None:
        node = {"metadata": {"name": node_name, "labels": {HOSTNAME_LABEL: node_name}}}
    return match_node_selector_terms(required, node)


def provisioned_pv(pvc: Obj, sc: Obj, node: str, base_dir: Path) -> Obj:
    name = pv_name_for(pvc)
    spec = _spec(pvc)
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER},
                     "labels": {}},
        "spec": {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")},
            "accessModes": list(spec.get("accessModes") or []),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
            "storageClassName": _meta(sc).get("name", ""),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": str(base_dir / name), "type": "DirectoryOrCreate"},
            "claimRef": claim_ref(pvc),
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}]}},
        },
    }


def _node_ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in _status(node).get("conditions") or [])


def _matches(pv: Obj, pvc: Obj, node_name: str, nodes: dict[str, Obj]) -> bool:
    """A static volume the claim may bind: same class, offers the access modes and the size, not
    deleting, usable on the selected node (if any)."""
    ps, cs = _spec(pv), _spec(pvc)
    if _meta(pv).get("deletionTimestamp") or _status(pv).get("phase") not in (None, "", "Available", "Pending"):
        return False
    if (ps.get("storageClassName") or "") != (cs.get("storageClassName") or ""):
        return False
    if (ps.get("volumeMode") or "Filesystem") != (cs.get("volumeMode") or "Filesystem"):
        return False
    if not set(cs.get("accessModes") or []) <= set(ps.get("accessModes") or []):
        return False
    want = _storage(((cs.get("resources") or {}).get("requests") or {}).get("storage", "0"))
    if _storage((ps.get("capacity") or {}).get("storage", "0")) < want:
        return False
    return not node_name or pv_node_ok(pv, nodes.get(node_name), node_name)


def _claim_uses(pod: Obj, ns: str, claim: str) -> bool:
    if _meta(pod).get("namespace") != ns or _status(pod).get("phase") in ("Succeeded", "Failed"):
        return False
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim
               for v in _spec(pod).get("volumes") or [] if isinstance(v, dict))


def plan(pvcs: list[Obj], pvs: list[Obj], classes: list[Obj], nodes: list[Obj], pods: list[Obj], *,
         base_dir: Path) -> list[Action]:
    """What to do next, given the current objects (pure; call again after acting)."""
    actions: list[Action] = []
    pv_by_name = {str(_meta(pv).get("name", "")): pv for pv in pvs}
    sc_by_name = {str(_meta(sc).get("name", "")): sc for sc in classes}
    node_by_name = {str(_meta(n).get("name", "")): n for n in nodes}
    claims_by_uid = {str(_meta(c).get("uid", "")): c for c in pvcs}
    claims_by_key = {claim_key(c): c for c in pvcs}
    reserved: set[str] = set()  # volumes claimed in this round

    for pvc in pvcs:
        meta, spec = _meta(pvc), _spec(pvc)
        ns, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
        if meta.get("deletionTimestamp"):
            if PVC_PROTECTION in (meta.get("finalizers") or []) and not any(_claim_uses(p, ns, name) for p in pods):
                actions.append(Action(ActionType.REMOVE_FINALIZER, name, ns, {"finalizer": PVC_PROTECTION},
                                      resource="persistentvolumeclaims"))
            continue
        vol_name = str(spec.get("volumeName") or "")
        if vol_name:
            pv = pv_by_name.get(vol_name)
            if pv is None:
                if _status(pvc).get("phase") == "Bound":
                    actions.append(Action(ActionType.SET_PVC_PHASE, name, ns, {"phase": "Lost"}))
                continue
            ref = _spec(pv).get("claimRef") or {}
            if not ref:
                actions.append(Action(ActionType.CLAIM_PV, vol_name, obj=claim_ref(pvc)))
            elif ref.get("uid") in (uid, None, "") and ref.get("name") == name and ref.get("namespace") == ns:
                if _status(pvc).get("phase") != "Bound":
                    actions.append(Action(ActionType.BIND_PVC, name, ns, _bind_fields(pv)))
            continue
        # unbound claim: a volume already reserved for it?
        pv = next((v for v in pvs if (_spec(v).get("claimRef") or {}).get("uid") == uid), None)
        if pv is not None:
            actions.append(Action(ActionType.BIND_PVC, name, ns, _bind_fields(pv)))
            reserved.add(str(_meta(pv).get("name", "")))
            continue
        sc = sc_by_name.get(str(spec.get("storageClassName") or ""))
        node_name = str((meta.get("annotations") or {}).get(SELECTED_NODE) or "")
        wffc = sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"
        if wffc and not node_name:
            continue  # waiting for the first consumer to be scheduled
        candidates = [v for v in pvs if not _spec(v).get("claimRef") and str(_meta(v).get("name")) not in reserved
                      and _matches(v, pvc, node_name, node_by_name)]
        if candidates:
            best = min(candidates, key=lambda v: (_storage((_spec(v).get("capacity") or {}).get("storage", "0")),
                                                  str(_meta(v).get("name", ""))))
            reserved.add(str(_meta(best).get("name", "")))
            actions.append(Action(ActionType.CLAIM_PV, str(_meta(best).get("name", "")), obj=claim_ref(pvc)))
            continue
        if sc is None or sc.get("provisioner") != PROVISIONER:
            continue
        if not node_name:
            ready = sorted(n for n, o in node_by_name.items() if _node_ready(o))
            if not ready:
                continue
            node_name = ready[0]
        new_pv = provisioned_pv(pvc, sc, node_name, base_dir)
        if new_pv["metadata"]["name"] not in pv_by_name:
            actions.append(Action(ActionType.CREATE_PV, new_pv["metadata"]["name"], obj=new_pv,
                                  path=new_pv["spec"]["hostPath"]["path"]))

    for pv in pvs:
        meta, spec = _meta(pv), _spec(pv)
        name = str(meta.get("name", ""))
        phase = _status(pv).get("phase")
        ref = spec.get("claimRef") or {}
        claim = None
        if ref:
            claim = claims_by_uid.get(str(ref.get("uid") or "")) if ref.get("uid") else \
                claims_by_key.get(f"{ref.get('namespace', '')}/{ref.get('name', '')}")
        if meta.get("deletionTimestamp"):
            in_use = claim is not None and _spec(claim).get("volumeName") == name
            if PV_PROTECTION in (meta.get("finalizers") or []) and not in_use:
                actions.append(Action(ActionType.REMOVE_FINALIZER, name, "", {"finalizer": PV_PROTECTION},
                                      resource="persistentvolumes"))
            continue
        if not ref:
            if phase != "Available" and name not in reserved:
                actions.append(Action(ActionType.SET_PV_PHASE, name, obj={"phase": "Available"}))
            continue
        if claim is None:  # gone, or replaced by a new claim of the same name
            if phase != "Released":
                actions.append(Action(ActionType.SET_PV_PHASE, name, obj={"phase": "Released"}))
            if spec.get("persistentVolumeReclaimPolicy") == "Delete":
                ours = (meta.get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
                path = str((spec.get("hostPath") or {}).get("path") or "") if ours else ""
                actions.append(Action(ActionType.DELETE_PV, name, path=path))
            continue
        if _spec(claim).get("volumeName") == name and phase != "Bound":
            actions.append(Action(ActionType.SET_PV_PHASE, name, obj={"phase": "Bound"}))
    return actions


def _bind_fields(pv: Obj) -> Obj:
    return {"volumeName": _meta(pv).get("name", ""), "capacity": dict(_spec(pv).get("capacity") or {}),
            "accessModes": list(_spec(pv).get("accessModes") or [])}


def inside(base: Path, path: str) -> bool:
    """Whether ``path`` is a directory strictly inside ``base`` (never remove anything else)."""
    try:
        p = Path(path).resolve()
        return p != base.resolve() and base.resolve() in p.parents
    except (OSError, ValueError):
        return False


class PVApi(Protocol):
    """The subset of ``ApiClient`` the controller uses."""

    async def list(self, path: str, params: Any = None) -> Obj: ...
    async def create(self, path: str, body: Obj, params: Any = None) -> Obj: ...
    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Obj: ...
    async def delete(self, path: str, body: Any = None, params: Any = None) -> Obj: ...
    def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
              timeout_seconds: int | None = None) -> Any: ...


_PATHS = {
    "pvcs": "/api/v1/persistentvolumeclaims",
    "pvs": "/api/v1/persistentvolumes",
    "classes": "/apis/storage.k8s.io/v1/storageclasses",
    "nodes": "/api/v1/nodes",
    "pods": "/api/v1/pods",
}


class PersistentVolumeController:
    """List+watch claims, volumes, classes, nodes and pods; act on :func:`plan`."""

    def __init__(self, api: PVApi, *, base_dir: Path, resync_period: float = RESYNC_PERIOD,
                 informers: kit.SharedInformers | None = None) -> None:
        self.api = api
        self.informers = informers  # the server's shared watches (one decoded pod for all controllers)
        self.base_dir = base_dir
        self.resync_period = resync_period
        self.cache: dict[str, dict[str, Obj]] = {k: {} for k in _PATHS}
        self._synced: set[str] = set()
        self._wake = asyncio.Event()

    def snapshot(self) -> dict[str, list[Obj]]:
        return {k: list(v.values()) for k, v in self.cache.items()}

    async def sync_once(self) -> list[Action]:
        if not self.cache["pvcs"] and not self.cache["pvs"]:
            return []  # nothing to plan: no copy of every pod per pod event
        s = self.snapshot()
        actions = plan(s["pvcs"], s["pvs"], s["classes"], s["nodes"], s["pods"], base_dir=self.base_dir)
        for a in actions:
            try:
                await self.execute(a)
            except ApiError as e:
                if e.status not in (404, 409):
                    log.warning("persistent volume controller: %s %s/%s failed: %s", a.type.value, a.namespace,
                                a.name, e)
            except OSError as e:
                log.warning("persistent volume controller: %s %s: %s", a.type.value, a.path or a.name, e)
        return actions

    async def execute(self, a: Action) -> None:
        t = a.type
        if t is ActionType.CREATE_PV:
            await asyncio.to_thread(self._make_dir, a.path)
            await self.api.create(_PATHS["pvs"], a.obj)
            log.info("provisioned %s at %s for claim %s/%s", a.name, a.path, a.obj["spec"]["claimRef"]["namespace"],
                     a.obj["spec"]["claimRef"]["name"])
        elif t is ActionType.CLAIM_PV:
            await self.api.patch(f"{_PATHS['pvs']}/{a.name}", {"spec": {"claimRef": a.obj}})
        elif t is ActionType.BIND_PVC:
            path = f"/api/v1/namespaces/{a.namespace}/persistentvolumeclaims/{a.name}"
            await self.api.patch(path, {"metadata": {"annotations": {BIND_COMPLETED: "yes",
                                                                     BOUND_BY_CONTROLLER: "yes"}},
                                        "spec": {"volumeName": a.obj["volumeName"]}})
            await self.api.patch(f"{path}/status", {"status": {"phase": "Bound", "capacity": a.obj["capacity"],
                                                               "accessModes": a.obj["accessModes"]}})
            await self.api.patch(f"{_PATHS['pvs']}/{a.obj['volumeName']}/status", {"status": {"phase": "Bound"}})
        elif t is ActionType.SET_PV_PHASE:
            await self.api.patch(f"{_PATHS['pvs']}/{a.name}/status", {"status": {"phase": a.obj["phase"]}})
        elif t is ActionType.SET_PVC_PHASE:
            await self.api.patch(f"/api/v1/namespaces/{a.namespace}/persistentvolumeclaims/{a.name}/status",
                                 {"status": {"phase": a.obj["phase"]}})
        elif t is ActionType.DELETE_PV:
            if a.path and inside(self.base_dir, a.path):
                await asyncio.to_thread(shutil.rmtree, a.path, True)
            await self.api.delete(f"{_PATHS['pvs']}/{a.name}")
            log.info("deleted released volume %s%s", a.name, f" and {a.path}" if a.path else "")
        elif t is ActionType.REMOVE_FINALIZER:
            coll = "persistentvolumes" if a.resource == "persistentvolumes" else \
                f"namespaces/{a.namespace}/persistentvolumeclaims"
            obj = self.cache["pvs" if a.resource == "persistentvolumes" else "pvcs"].get(
                a.name if a.resource == "persistentvolumes" else f"{a.namespace}/{a.name}") or {}
            left = [f for f in _meta(obj).get("finalizers") or [] if f != a.obj["finalizer"]]
            await self.api.patch(f"/api/v1/{coll}/{a.name}", [
                {"op": "test", "path": "/metadata/resourceVersion", "value": _meta(obj).get("resourceVersion")},
                {"op": "replace", "path": "/metadata/finalizers", "value": left}], "json")

    def _make_dir(self, path: str) -> None:
        if not inside(self.base_dir, path):
            raise OSError(f"{path} is not inside {self.base_dir}")
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        p.chmod(0o777)  # as local-path-provisioner: any pod user may write its volume

    @staticmethod
    def _key(kind: str, o: Obj) -> str:
        m = _meta(o)
        return f"{m.get('namespace', '')}/{m.get('name', '')}" if kind in ("pvcs", "pods") else str(m.get("name", ""))

    def _synced_kind(self, kind: str) -> None:
        self._synced.add(kind)
        self._wake.set()

    async def _reflect(self, kind: str) -> None:
        path = _PATHS[kind]
        cache = self.cache[kind]
        if self.informers is not None:  # the shared watch of path feeds this controller
            def handle(etype: str, obj: Obj) -> None:
                key = self._key(kind, obj)
                if etype == "DELETED":
                    cache.pop(key, None)
                else:
                    cache[key] = obj
                if kind != "pods" or self.cache["pvcs"] or self.cache["pvs"]:
                    self._wake.set()  # pods matter only once there are claims or volumes
            await kit.follow(self.informers, path, handle, lambda: self._synced_kind(kind))
            return
        while True:
            try:
                lst = await self.api.list(path)
                fresh = {self._key(kind, o): o for o in lst.get("items") or []}
                cache.clear()
                cache.update(fresh)
                self._synced.add(kind)
                self._wake.set()
                rv = (lst.get("metadata") or {}).get("resourceVersion")
                async for etype, obj in self.api.watch(path, resource_version=rv):
                    key = self._key(kind, obj)
                    if etype == "DELETED":
                        cache.pop(key, None)
                    elif etype in ("ADDED", "MODIFIED"):
                        cache[key] = obj
                    else:
                        continue
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("watch %s ended: %s; relisting", path, e)
                await asyncio.sleep(1.0)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._reflect(k)) for k in _PATHS]
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_period):
                        await self._wake.wait()
                self._wake.clear()
                if len(self._synced) == len(_PATHS):
                    await self.sync_once()
                    await asyncio.sleep(0.05)  # let the watches deliver our own writes first
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
