"""The RuntimeClass admission plugin (upstream ``plugin/pkg/admission/runtimeclass``).

A pod naming a ``runtimeClassName`` is checked against the ``node.k8s.io/v1`` RuntimeClass when it is
created, so that a pod which could never start is refused at once, not left pending on the node.
Upstream behaviour, kept here:

- an unknown class refuses the pod: ``pod rejected: RuntimeClass "<name>" not found``;
- the class's ``overhead.podFixed`` becomes the pod's ``spec.overhead`` (what the scheduler, quota and
  the node's pod cgroup count on top of the containers); a pod that sets its own, different overhead
  is refused, and so is a pod that sets an overhead its class does not define;
- the class's ``scheduling.nodeSelector`` is merged into the pod's (a conflicting key refuses the pod)
  and its ``scheduling.tolerations`` are appended unless the pod already has them.

Pure: the caller passes the RuntimeClasses and turns ``AdmissionError`` into a 403.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pykubelet.server.admission import AdmissionError

Obj = dict[str, Any]


def _find(classes: Iterable[Obj], name: str) -> Obj | None:
    return next((c for c in classes if (c.get("metadata") or {}).get("name") == name), None)


def admit_pod(pod: Obj, classes: Iterable[Obj]) -> None:
    """Mutate (overhead, scheduling) and validate a pod being created; raise AdmissionError."""
    spec = pod.setdefault("spec", {})
    name = spec.get("runtimeClassName")
    if not name:
        if spec.get("overhead"):
            raise AdmissionError("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
        return
    rc = _find(classes, str(name))
    if rc is None:
        raise AdmissionError(f'pod rejected: RuntimeClass "{name}" not found')
    fixed = (rc.get("overhead") or {}).get("podFixed")
    if fixed:
        if spec.get("overhead") and spec["overhead"] != fixed:
            raise AdmissionError("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
        spec["overhead"] = dict(fixed)
    elif spec.get("overhead"):
        raise AdmissionError("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
    scheduling = rc.get("scheduling") or {}
    selector = scheduling.get("nodeSelector") or {}
    if selector:
        merged = dict(spec.get("nodeSelector") or {})
        for k, v in selector.items():
            if k in merged and merged[k] != v:
                raise AdmissionError(f"conflict: runtimeClass.scheduling.nodeSelector[{k}] = {v}; "
                                     f"pod.spec.nodeSelector[{k}] = {merged[k]}")
            merged[k] = v
        spec["nodeSelector"] = merged
    tolerations = scheduling.get("tolerations") or []
    if tolerations:
        have = list(spec.get("tolerations") or [])
        have += [t for t in tolerations if t not in have]
        spec["tolerations"] = have
