"""Defaulting and validation of PersistentVolumes, PersistentVolumeClaims and StorageClasses.

Pure functions over v1 JSON dicts returning ``[(field path, message)]`` in upstream's wording, so
the registry renders one 422 Invalid Status as for every other kind.

Upstream behaviour followed (``pkg/apis/core/v1/defaults.go``, ``pkg/apis/storage/v1/defaults.go``,
``pkg/apis/core/validation``, ``pkg/apis/storage/validation``):
- PersistentVolume: ``persistentVolumeReclaimPolicy`` Retain, ``volumeMode`` Filesystem, status
  phase Pending; access modes and ``capacity.storage`` required, exactly one volume source,
  ``hostPath.path`` / ``local.path`` required, a local volume needs node affinity; the volume source
  and a set node affinity are immutable.
- PersistentVolumeClaim: ``volumeMode`` Filesystem, status phase Pending; access modes and
  ``resources.requests[storage]`` required; the spec is immutable after creation except that
  ``volumeName`` may be set once (the binder does) and a bound claim's ``resources.requests``
  may change.
- StorageClass: ``reclaimPolicy`` Delete, ``volumeBindingMode`` Immediate; ``provisioner``
  required; provisioner, parameters, reclaimPolicy and volumeBindingMode immutable.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.server.validation import SUBDOMAIN_MSG, validate_name

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]

ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
PV_RECLAIM_POLICIES = ("Delete", "Recycle", "Retain")
SC_RECLAIM_POLICIES = ("Delete", "Retain")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
VOLUME_MODES = ("Block", "Filesystem")
# PersistentVolumeSource members (one of them, exactly)
PV_SOURCES = ("awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume",
              "flocker", "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs",
              "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos",
              "vsphereVolume")


def _spec(o: Obj) -> Obj:
    s = o.get("spec")
    if s is None:
        s = o["spec"] = {}
    return s if isinstance(s, dict) else {}


def _unsupported(value: Any, supported: tuple[str, ...]) -> str:
    return f"Unsupported value: {json.dumps(value)}: supported values: " + ", ".join(json.dumps(s) for s in supported)


# ------------------------------------------------------------------ defaults
def default_pv(pv: Obj) -> None:
    spec = _spec(pv)
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    status = pv.get("status")
    if not isinstance(status, dict):
        status = pv["status"] = {}
    status.setdefault("phase", "Pending")


def default_pvc(pvc: Obj) -> None:
    spec = _spec(pvc)
    spec.setdefault("volumeMode", "Filesystem")
    status = pvc.get("status")
    if not isinstance(status, dict):
        status = pvc["status"] = {}
    status.setdefault("phase", "Pending")


def default_storage_class(sc: Obj) -> None:
    sc.setdefault("reclaimPolicy", "Delete")
    sc.setdefault("volumeBindingMode", "Immediate")


# ------------------------------------------------------------------ validation
def _access_mode_errors(path: str, modes: Any, *, claim: bool) -> FieldErrors:
    if not modes:
        return [(path, "Required value: at least 1 access mode is required" if claim else "Required value")]
    errs = [(path, _unsupported(m, ACCESS_MODES)) for m in modes if m not in ACCESS_MODES]
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        errs.append((path, 'Forbidden: may not use ReadWriteOncePod with other access modes'))
    return errs


def _storage_errors(path: str, value: Any) -> FieldErrors:
    try:
        q = parse_quantity(value)
    except QuantityError:
        return [(path, f"Invalid value: {json.dumps(value)}: must be a quantity")]
    if q.value <= 0:
        return [(path, f"Invalid value: {json.dumps(value)}: must be greater than zero")]
    return []


def _class_name_errors(path: str, name: Any) -> FieldErrors:
    if name and validate_name("storageclasses", str(name)) is not None:
        return [(path, f"Invalid value: {json.dumps(name)}: {SUBDOMAIN_MSG}")]
    return []


def validate_pv(pv: Obj, old: Obj | None = None) -> FieldErrors:
    spec = pv.get("spec") or {}
    errs: FieldErrors = []
    errs += _access_mode_errors("spec.accessModes", spec.get("accessModes"), claim=False)
    capacity = spec.get("capacity") or {}
    if not capacity:
        errs.append(("spec.capacity", "Required value"))
    for k, v in capacity.items():
        if k != "storage":
            errs.append(("spec.capacity", _unsupported(k, ("storage",))))
        else:
            errs += _storage_errors("spec.capacity.storage", v)
    policy = spec.get("persistentVolumeReclaimPolicy")
    if policy and policy not in PV_RECLAIM_POLICIES:
        errs.append(("spec.persistentVolumeReclaimPolicy", _unsupported(policy, PV_RECLAIM_POLICIES)))
    mode = spec.get("volumeMode")
    if mode and mode not in VOLUME_MODES:
        errs.append(("spec.volumeMode", _unsupported(mode, VOLUME_MODES)))
    errs += _class_name_errors("spec.storageClassName", spec.get("storageClassName"))
    sources = [s for s in PV_SOURCES if spec.get(s) is not None]
    if not sources:
        errs.append(("spec", "Required value: must specify a volume type"))
    for extra in sources[1:]:
        errs.append((f"spec.{extra}", "Forbidden: may not specify more than 1 volume type"))
    if "hostPath" in sources and not (spec.get("hostPath") or {}).get("path"):
        errs.append(("spec.hostPath.path", "Required value"))
    if "local" in sources:
        if not (spec.get("local") or {}).get("path"):
            errs.append(("spec.local.path", "Required value"))
        if not spec.get("nodeAffinity"):
            errs.append(("spec.nodeAffinity", "Required value: Local volume requires node affinity"))
    if old is not None:
        ospec = old.get("spec") or {}
        if any(spec.get(s) != ospec.get(s) for s in PV_SOURCES):
            errs.append(("spec.persistentvolumesource",
                         "Forbidden: spec.persistentvolumesource is immutable after creation"))
        if ospec.get("nodeAffinity") and spec.get("nodeAffinity") != ospec.get("nodeAffinity"):
            errs.append(("spec.nodeAffinity", "Invalid value: field is immutable"))
    return errs


def validate_pvc(pvc: Obj, old: Obj | None = None) -> FieldErrors:
    spec = pvc.get("spec") or {}
    errs: FieldErrors = []
    errs += _access_mode_errors("spec.accessModes", spec.get("accessModes"), claim=True)
    requests = (spec.get("resources") or {}).get("requests") or {}
    if "storage" not in requests:
        errs.append(("spec.resources[storage]", "Required value"))
    else:
        errs += _storage_errors("spec.resources[storage]", requests["storage"])
    mode = spec.get("volumeMode")
    if mode and mode not in VOLUME_MODES:
        errs.append(("spec.volumeMode", _unsupported(mode, VOLUME_MODES)))
    errs += _class_name_errors("spec.storageClassName", spec.get("storageClassName"))
    if old is not None:
        ospec = copy.deepcopy(old.get("spec") or {})
        if not ospec.get("volumeName"):
            ospec["volumeName"] = spec.get("volumeName")  # the binder sets it once
            if ospec["volumeName"] is None:
                del ospec["volumeName"]
        if (old.get("status") or {}).get("phase") == "Bound":
            resources = spec.get("resources") or {}
            if "requests" in resources:
                ospec.setdefault("resources", {})["requests"] = resources["requests"]
        if ospec != spec:
            errs.append(("spec", "Forbidden: spec is immutable after creation except resources.requests and "
                                 "volumeAttributesClassName for bound claims"))
    return errs


def validate_storage_class(sc: Obj, old: Obj | None = None) -> FieldErrors:
    errs: FieldErrors = []
    if not sc.get("provisioner"):
        errs.append(("provisioner", "Required value"))
    policy = sc.get("reclaimPolicy")
    if policy and policy not in SC_RECLAIM_POLICIES:
        errs.append(("reclaimPolicy", _unsupported(policy, SC_RECLAIM_POLICIES)))
    mode = sc.get("volumeBindingMode")
    if mode and mode not in BINDING_MODES:
        errs.append(("volumeBindingMode", _unsupported(mode, BINDING_MODES)))
    if old is not None:
        if sc.get("parameters") != old.get("parameters"):
            errs.append(("parameters", "Forbidden: updates to parameters are forbidden."))
        if sc.get("provisioner") != old.get("provisioner"):
            errs.append(("provisioner", "Forbidden: updates to provisioner are forbidden."))
        if sc.get("reclaimPolicy") != old.get("reclaimPolicy"):
            errs.append(("reclaimPolicy", "Forbidden: updates to reclaimPolicy are forbidden."))
        if sc.get("volumeBindingMode") != old.get("volumeBindingMode"):
            errs.append(("volumeBindingMode", "Invalid value: field is immutable"))
    return errs
