"""PriorityClasses (``scheduling.k8s.io/v1``) and the Priority admission plugin.

Follows ``plugin/pkg/admission/priority`` and ``pkg/apis/scheduling``:

* the two system classes exist from bootstrap: ``system-cluster-critical`` (2000000000) and
  ``system-node-critical`` (2000001000); user classes may not use the ``system-`` prefix nor a
  value above 1000000000; ``value`` and ``preemptionPolicy`` are immutable; ``preemptionPolicy``
  defaults to ``PreemptLowerPriority``; only one class may be ``globalDefault`` (403, "PriorityClass
  X is marked as default. Only one default can exist");
* a pod being created gets ``spec.priority`` (and ``preemptionPolicy``) from its
  ``priorityClassName``, or from the global default class (whose name it then carries), else 0;
  an unknown class is 403 ``no PriorityClass with name X was found``; a pod that states a
  different priority than its class gives is 403 as upstream.  (The registry defaults
  ``priority`` to 0 before admission, so 0 counts as "not given".)

Pure functions over JSON dicts; the registry supplies the stored classes and maps
:class:`~pykubelet.server.admission.AdmissionError` to 403 Forbidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pykubelet.server.admission import AdmissionError

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PREFIX = "system-"
SYSTEM_CLASSES: list[Obj] = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-node-critical"},
     "value": 2000001000, "description": "Used for system critical pods that must not be moved from their "
     "current node.", "preemptionPolicy": "PreemptLowerPriority"},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-cluster-critical"},
     "value": 2000000000, "description": "Used for system critical pods that must run in the cluster, but can be "
     "moved to another node if necessary.", "preemptionPolicy": "PreemptLowerPriority"},
]
_SYSTEM = {c["metadata"]["name"]: c["value"] for c in SYSTEM_CLASSES}


def default_class(pc: Obj) -> None:
    pc.setdefault("preemptionPolicy", "PreemptLowerPriority")


def validate_class(pc: Obj, old: Obj | None) -> FieldErrors:
    """ValidatePriorityClass (+ Update): value range, reserved names, immutable fields."""
    errs: FieldErrors = []
    name = (pc.get("metadata") or {}).get("name") or ""
    value = pc.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        errs.append(("value", "Required value" if value is None else f"Invalid value: {value!r}: must be an integer"))
    elif name.startswith(SYSTEM_PREFIX):
        if _SYSTEM.get(name) != value:
            errs.append(("metadata.name", f'Invalid value: "{name}": priority class names with \'{SYSTEM_PREFIX}\' '
                         "prefix are reserved for system use only"))
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(("value", f"Invalid value: {value}: maximum allowed value of a user defined priority is "
                     f"{HIGHEST_USER_DEFINABLE_PRIORITY}"))
    if pc.get("preemptionPolicy") not in ("PreemptLowerPriority", "Never"):
        errs.append(("preemptionPolicy", f'Unsupported value: "{pc.get("preemptionPolicy")}": supported values: '
                     '"Never", "PreemptLowerPriority"'))
    if old is not None:
        if value != old.get("value"):
            errs.append(("value", f"Invalid value: {value}: field is immutable"))
        if pc.get("preemptionPolicy") != old.get("preemptionPolicy"):
            errs.append(("preemptionPolicy", f'Invalid value: "{pc.get("preemptionPolicy")}": field is immutable'))
    return errs


def admit_class(pc: Obj, classes: Iterable[Obj]) -> None:
    """Only one globalDefault class (the admission plugin's check on create/update)."""
    if not pc.get("globalDefault"):
        return
    name = (pc.get("metadata") or {}).get("name")
    for other in classes:
        oname = (other.get("metadata") or {}).get("name")
        if other.get("globalDefault") and oname != name:
            raise AdmissionError(f"PriorityClass {oname} is marked as default. Only one default can exist")


def admit_pod(pod: Obj, classes: Iterable[Obj]) -> None:
    """Resolve the pod's priority from its PriorityClass (pod create)."""
    spec = pod.setdefault("spec", {})
    by_name = {(c.get("metadata") or {}).get("name"): c for c in classes}
    name = spec.get("priorityClassName") or ""
    pc: Obj | None
    if not name:
        defaults = [c for c in by_name.values() if c.get("globalDefault")]
        # upstream picks the lowest-valued default when (racily) several exist
        pc = min(defaults, key=lambda c: int(c.get("value") or 0)) if defaults else None
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    else:
        pc = by_name.get(name)
        if pc is None:
            raise AdmissionError(f"no PriorityClass with name {name} was found")
    priority = int(pc.get("value") or 0) if pc is not None else 0
    given = spec.get("priority")
    if isinstance(given, int) and given not in (0, priority):
        raise AdmissionError(f"the integer value of priority ({given}) must not be provided in pod spec; priority "
                             f"admission controller computed {priority} from the given PriorityClass name")
    spec["priority"] = priority
    policy = pc.get("preemptionPolicy") if pc is not None else None
    if policy:
        if spec.get("preemptionPolicy") not in (None, policy):
            raise AdmissionError(f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be "
                                 f"provided in pod spec; priority admission controller computed {policy} from the "
                                 "given PriorityClass name")
        spec["preemptionPolicy"] = policy
