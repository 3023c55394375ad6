"""Pod-template logic shared by the workload controllers (upstream ``pkg/controller/controller_utils.go``).

Pure functions over JSON dicts, no I/O:

- ``controller_ref`` / ``owner_ref``: the ownerReference a controller puts on what it creates
  (``controller: true``, ``blockOwnerDeletion: true``), and ``claim``: upstream's
  ``ClaimPods``/``ClaimReplicaSets`` decision for one object — keep (ours and selected), adopt
  (an orphan the selector matches, unless either side is being deleted), release (ours but no
  longer selected) or ignore; ``adopt_patch`` / ``release_patch`` are the strategic-merge patches
  (with the object's uid as precondition, as upstream's ``ownerRefControllerPatch``);
- ``pod_from_template``: a pod (``generateName`` or fixed name) from a template, with the
  template's labels/annotations/spec and the controller reference;
- ``is_pod_active`` / ``is_pod_ready`` / ``is_pod_available`` (Ready for ``minReadySeconds``);
- ``deletion_order``: ``ActivePodsWithRanks`` sorting — the pods a scale-down removes first:
  unassigned before assigned, Pending before Unknown before Running, not ready before ready,
  lower ``controller.kubernetes.io/pod-deletion-cost`` first, more pods of the same owner on the
  node first, ready for a shorter time first, more restarts first, newer first;
- ``template_hash``: the stable name suffix of a template (pod-template-hash /
  controller-revision-hash): FNV-32a over the canonical JSON of the template (plus the collision
  count), encoded with upstream's ``rand.SafeEncodeString`` alphabet, so equal templates give
  equal hashes across restarts (upstream hashes the Go struct dump; values differ, shape doesn't).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from pykubelet.common.timestamps import parse_time
from pykubelet.server.selectors import label_selector_matches

Obj = dict[str, Any]

POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def spec(o: Obj) -> Obj:
    return o.get("spec") or {}


def status(o: Obj) -> Obj:
    return o.get("status") or {}


def replicas(o: Obj) -> int:
    """``spec.replicas`` with upstream's default of 1 when unset."""
    r = spec(o).get("replicas")
    return int(r) if r is not None else 1


# --- owner references -----------------------------------------------------------------------


def owner_ref(owner: Obj, api_version: str, kind: str) -> Obj:
    m = meta(owner)
    return {"apiVersion": api_version, "kind": kind, "name": m.get("name", ""), "uid": m.get("uid", ""),
            "controller": True, "blockOwnerDeletion": True}


def controller_ref(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


class Claim(Enum):
    KEEP = "keep"
    ADOPT = "adopt"
    RELEASE = "release"
    IGNORE = "ignore"


def claim(owner: Obj, obj: Obj, selector: Any) -> Claim:
    """What ``ControllerRefManager.ClaimObject`` does with ``obj`` for ``owner``."""
    ref = controller_ref(obj)
    matches = label_selector_matches(selector, meta(obj).get("labels") or {})
    owner_uid = meta(owner).get("uid")
    if ref is not None:
        if ref.get("uid") != owner_uid:
            return Claim.IGNORE
        if matches:
            return Claim.KEEP
        if meta(owner).get("deletionTimestamp"):
            return Claim.IGNORE
        return Claim.RELEASE
    if not matches or meta(owner).get("deletionTimestamp") or meta(obj).get("deletionTimestamp"):
        return Claim.IGNORE
    return Claim.ADOPT


def adopt_patch(obj: Obj, ref: Obj) -> Obj:
    return {"metadata": {"ownerReferences": [ref], "uid": meta(obj).get("uid")}}


def release_patch(obj: Obj, owner_uid: str) -> Obj:
    return {"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": meta(obj).get("uid")}}


# --- pods -----------------------------------------------------------------------------------


def pod_from_template(template: Obj, namespace: str, ref: Obj | None, *, generate_name: str = "",
                      name: str = "", extra_labels: dict[str, str] | None = None) -> Obj:
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), **(extra_labels or {})}
    m: Obj = {"namespace": namespace, "labels": labels}
    if name:
        m["name"] = name
    else:
        m["generateName"] = generate_name
    if tmeta.get("annotations"):
        m["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        m["finalizers"] = list(tmeta["finalizers"])
    if ref is not None:
        m["ownerReferences"] = [ref]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": copy.deepcopy(template.get("spec") or {})}


def is_pod_active(pod: Obj) -> bool:
    """``controller.IsPodActive``: not terminal and not being deleted."""
    return status(pod).get("phase") not in ("Succeeded", "Failed") and not meta(pod).get("deletionTimestamp")


def _ready_condition(pod: Obj) -> Obj | None:
    for c in status(pod).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c
    return None


def is_pod_ready(pod: Obj) -> bool:
    c = _ready_condition(pod)
    return c is not None and c.get("status") == "True"


def is_pod_available(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    """Ready, and Ready since at least ``min_ready_seconds`` (``podutil.IsPodAvailable``)."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time((_ready_condition(pod) or {}).get("lastTransitionTime"))
    return since is not None and (now - since).total_seconds() >= min_ready_seconds


def available_in(pod: Obj, min_ready_seconds: int, now: datetime) -> float | None:
    """Seconds until a ready pod becomes available (None if not ready or already available)."""
    if not is_pod_ready(pod) or min_ready_seconds <= 0:
        return None
    since = parse_time((_ready_condition(pod) or {}).get("lastTransitionTime"))
    if since is None:
        return None
    left = min_ready_seconds - (now - since).total_seconds()
    return left if left > 0 else None


def _restarts(pod: Obj) -> int:
    return max((int(c.get("restartCount") or 0) for c in status(pod).get("containerStatuses") or []), default=0)


def _deletion_cost(pod: Obj) -> int:
    try:
        return int((meta(pod).get("annotations") or {}).get(POD_DELETION_COST, 0))
    except (TypeError, ValueError):
        return 0


_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def deletion_order(pods: Sequence[Obj]) -> list[Obj]:
    """Pods sorted so that the first are the ones to delete (``ActivePodsWithRanks``)."""
    per_node: dict[str, int] = {}
    for p in pods:
        node = spec(p).get("nodeName") or ""
        if node:
            per_node[node] = per_node.get(node, 0) + 1
    far_future = datetime.max.replace(tzinfo=UTC)

    def key(p: Obj) -> tuple[Any, ...]:
        node = spec(p).get("nodeName") or ""
        ready = is_pod_ready(p)
        ready_since = parse_time((_ready_condition(p) or {}).get("lastTransitionTime")) if ready else None
        created = parse_time(meta(p).get("creationTimestamp"))
        return (
            1 if node else 0,
            _PHASE_RANK.get(str(status(p).get("phase")), 0),
            1 if ready else 0,
            _deletion_cost(p),
            -per_node.get(node, 0),
            # ready more recently first: a later time sorts first
            -(ready_since.timestamp() if ready_since else 0.0),
            -_restarts(p),
            -(created or far_future).timestamp(),
        )

    return sorted(pods, key=key)


# --- hashing --------------------------------------------------------------------------------


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in s)


def template_hash(template: Any, collision_count: int | None = None) -> str:
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    return safe_encode(str(_fnv32a(data)))


def selector_matches(selector: Any, obj: Obj) -> bool:
    return label_selector_matches(selector, meta(obj).get("labels") or {})
