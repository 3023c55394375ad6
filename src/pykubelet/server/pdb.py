"""PodDisruptionBudgets: the status arithmetic and the eviction subresource's budget check.

Two halves of upstream's behaviour, both pure so they are tested without a server:

- :func:`compute_status` is what the disruption controller (``pkg/controller/disruption``) writes:
  ``expectedPods`` and ``desiredHealthy`` from ``minAvailable``/``maxUnavailable`` (an integer, or a
  percentage of the pods' controllers' scale, rounded up as upstream's
  ``GetScaledValueFromIntOrPercent``), ``currentHealthy`` (Ready pods not being deleted and not
  recently evicted, i.e. not in ``disruptedPods``), ``disruptionsAllowed`` and the
  ``DisruptionAllowed`` condition (reasons SufficientPods / InsufficientPods / SyncFailed).
  With ``minAvailable`` as an integer the expected count is the number of matching pods; any
  percentage, or ``maxUnavailable``, needs the scale of every pod's controller, and a pod without a
  controller makes the budget fail to sync (no disruptions allowed), as upstream.
- :func:`check_eviction` is ``pkg/registry/core/pod/storage/eviction.go``: terminal and pending
  pods, and pods already being deleted, are evicted without a budget; a pod covered by more than
  one budget is a 500; a budget not yet observed by the controller, or with no disruptions
  allowed, is a 429 TooManyRequests "Cannot evict pod as it would violate the pod's disruption
  budget." (kubectl drain retries on 429); otherwise the budget is charged: ``disruptionsAllowed``
  decremented and the pod recorded in ``disruptedPods`` until the controller sees it go.
  ``unhealthyPodEvictionPolicy`` (IfHealthyBudget, AlwaysAllow) decides whether a not-Ready pod
  may go without charging the budget.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pykubelet.server.selectors import label_selector_matches

Obj = dict[str, Any]

EVICTION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS_MESSAGE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
DISRUPTION_TARGET = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                     "message": "Eviction API: evicting"}
# Upstream DeletionTimeout: a disrupted pod not seen deleted within 2 minutes counts again.
DELETION_TIMEOUT = dt.timedelta(minutes=2)


def _time(s: Any) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(str(s), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _rfc3339(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def selects(pdb: Obj, pod: Obj) -> bool:
    """policy/v1: a null selector selects nothing, an empty one every pod of the namespace."""
    sel = (pdb.get("spec") or {}).get("selector")
    return sel is not None and label_selector_matches(sel, (pod.get("metadata") or {}).get("labels"))


def scaled_value(v: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``; raises ValueError on a malformed value."""
    if isinstance(v, int):
        return v
    s = str(v)
    if not s.endswith("%"):
        raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {s!r}")
    pct = int(s[:-1])
    return math.ceil(pct * total / 100) if round_up else math.floor(pct * total / 100)


def is_percent(v: Any) -> bool:
    return isinstance(v, str) and v.endswith("%")


@dataclass(frozen=True)
class Budget:
    expected: int
    desired: int
    error: str = ""


def budget(pdb: Obj, pods: list[Obj], controller_scale: dict[str, int]) -> Budget:
    """(expectedPods, desiredHealthy) as upstream's ``getExpectedPodCount``.

    ``controller_scale``: controller uid -> replicas for the controllers of ``pods`` (the caller
    resolves ReplicaSet->Deployment, StatefulSet, ReplicationController); a pod whose controller is
    missing from it makes the budget unsatisfiable."""
    spec = pdb.get("spec") or {}
    max_unavail, min_avail = spec.get("maxUnavailable"), spec.get("minAvailable")

    def scale() -> tuple[int, str]:
        seen: dict[str, int] = {}
        for p in pods:
            ref = next((r for r in (p.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")),
                       None)
            if ref is None:
                return 0, f"found no controller ref for pod \"{p['metadata'].get('name')}\""
            uid = str(ref.get("uid"))
            if uid not in controller_scale:
                return 0, f"found no controllers for pod \"{p['metadata'].get('name')}\""
            seen[uid] = controller_scale[uid]
        return sum(seen.values()), ""

    try:
        if max_unavail is not None:
            expected, err = scale()
            if err:
                return Budget(0, 0, err)
            mu = scaled_value(max_unavail, expected, True)
            return Budget(expected, max(expected - mu, 0))
        if min_avail is not None:
            if isinstance(min_avail, int):
                return Budget(len(pods), min_avail)
            expected, err = scale()
            if err:
                return Budget(0, 0, err)
            return Budget(expected, scaled_value(min_avail, expected, True))
    except ValueError as e:
        return Budget(0, 0, str(e))
    return Budget(len(pods), 0)


def compute_status(pdb: Obj, pods: list[Obj], controller_scale: dict[str, int],
                   now: dt.datetime) -> Obj:
    """The PDB ``status`` the disruption controller writes for ``pods`` (those it selects)."""
    old = pdb.get("status") or {}
    disrupted: dict[str, str] = {}
    live = {p["metadata"]["name"]: p for p in pods}
    for name, ts in (old.get("disruptedPods") or {}).items():
        t = _time(ts)
        p = live.get(name)
        if p is None or (p.get("metadata") or {}).get("deletionTimestamp") or t is None:
            continue
        if t + DELETION_TIMEOUT < now:
            continue  # the eviction did not delete it in time: it counts again
        disrupted[name] = str(ts)
    b = budget(pdb, pods, controller_scale)
    healthy = sum(1 for p in pods if pod_ready(p) and not (p.get("metadata") or {}).get("deletionTimestamp")
                  and p["metadata"]["name"] not in disrupted)
    gen = (pdb.get("metadata") or {}).get("generation", 1)
    if b.error:
        status: Obj = {"observedGeneration": gen, "disruptionsAllowed": 0, "currentHealthy": healthy,
                       "desiredHealthy": 0, "expectedPods": 0}
        cond = ("False", "SyncFailed", b.error)
    else:
        allowed = max(healthy - b.desired, 0)
        status = {"observedGeneration": gen, "disruptionsAllowed": allowed, "currentHealthy": healthy,
                  "desiredHealthy": b.desired, "expectedPods": b.expected}
        cond = ("True", "SufficientPods", "") if allowed > 0 else ("False", "InsufficientPods", "")
    if disrupted:
        status["disruptedPods"] = disrupted
    status["conditions"] = [_condition(old, *cond, gen=gen, now=now)]
    return status


def _condition(old_status: Obj, status: str, reason: str, message: str, *, gen: Any, now: dt.datetime) -> Obj:
    prev = next((c for c in old_status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    ltt = prev.get("lastTransitionTime") if prev and prev.get("status") == status else _rfc3339(now)
    return {"type": "DisruptionAllowed", "status": status, "reason": reason, "message": message,
            "observedGeneration": gen, "lastTransitionTime": ltt}


class Verdict(Enum):
    DELETE = "delete"  # evict without charging a budget
    CHARGE = "charge"  # evict and write the charged budget
    TOO_MANY = "too-many-requests"  # 429
    MULTIPLE = "multiple"  # 500
    FORBIDDEN = "forbidden"  # 403 (negative budget)


@dataclass
class EvictionDecision:
    verdict: Verdict
    pdb: Obj | None = None  # the charged budget (CHARGE) or the one refusing (TOO_MANY)
    cause: str = ""


def check_eviction(pod: Obj, pdbs: list[Obj], now: dt.datetime) -> EvictionDecision:
    """Whether the eviction API may delete ``pod`` given its namespace's budgets."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed", "Pending") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return EvictionDecision(Verdict.DELETE)
    matching = [p for p in pdbs if selects(p, pod)]
    if not matching:
        return EvictionDecision(Verdict.DELETE)
    if len(matching) > 1:
        return EvictionDecision(Verdict.MULTIPLE, cause=MULTIPLE_PDBS_MESSAGE)
    pdb = copy.deepcopy(matching[0])
    name = pdb["metadata"]["name"]
    st = pdb.get("status") or {}
    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
    if not pod_ready(pod):
        if policy == "AlwaysAllow":
            return EvictionDecision(Verdict.DELETE)
        if int(st.get("currentHealthy", 0)) >= int(st.get("desiredHealthy", 0)) and \
                int(st.get("observedGeneration", 0)) >= int(pdb["metadata"].get("generation", 1)):
            return EvictionDecision(Verdict.DELETE)
    if int(st.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
        return EvictionDecision(Verdict.TOO_MANY, pdb,
                                f"The disruption budget {name} is still being processed by the server.")
    allowed = int(st.get("disruptionsAllowed", 0))
    if allowed < 0:
        return EvictionDecision(Verdict.FORBIDDEN, pdb, "pdb disruptions allowed is negative")
    if allowed == 0:
        return EvictionDecision(Verdict.TOO_MANY, pdb,
                                f"The disruption budget {name} needs {st.get('desiredHealthy', 0)} healthy pods "
                                f"and has {st.get('currentHealthy', 0)} currently")
    st = pdb.setdefault("status", {})
    st["disruptionsAllowed"] = allowed - 1
    st.setdefault("disruptedPods", {})[pod["metadata"]["name"]] = _rfc3339(now)
    if st["disruptionsAllowed"] == 0:
        gen = pdb["metadata"].get("generation", 1)
        st["conditions"] = [_condition(st, "False", "InsufficientPods", "", gen=gen, now=now)]
    return EvictionDecision(Verdict.CHARGE, pdb)


def with_disruption_target(pod: Obj, now: dt.datetime) -> Obj:
    """The pod with the DisruptionTarget condition eviction adds before deleting."""
    out = copy.deepcopy(pod)
    conds = [c for c in (out.setdefault("status", {}).get("conditions") or []) if c.get("type") != "DisruptionTarget"]
    conds.append({**DISRUPTION_TARGET, "lastProbeTime": None, "lastTransitionTime": _rfc3339(now)})
    out["status"]["conditions"] = conds
    return out
