"""Taint/toleration matching shared by the scheduler, the node lifecycle controller and the agent.

Design: pure functions over the wire form (plain JSON dicts, never mutated); non-dict entries in
a tolerations list are skipped, so a malformed pod can never crash a caller. Only the matching
rule lives here; what a caller does with an untolerated taint (reject, evict, admit) is its own
decision.

Upstream behaviour followed (k8s.io/api/core/v1 ``Toleration.ToleratesTaint`` and
k8s.io/component-helpers/scheduling/corev1 ``FindMatchingUntoleratedTaint``):
- a toleration with a non-empty ``effect`` only matches taints of that effect; an empty effect
  matches every effect;
- a toleration with a non-empty ``key`` only matches taints with that key; an empty key (valid
  only with operator Exists) matches every key, so ``{operator: Exists}`` tolerates everything;
- operator ``Exists`` ignores the value; ``Equal`` (also the default for an empty operator)
  requires the values to be equal, an absent value counting as ""; any other operator never
  matches;
- the untolerated-taint search looks only at taints whose effect is in the caller's set and
  returns them in node order (the scheduler reports the first one).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]

OP_EXISTS = "Exists"
OP_EQUAL = "Equal"


def tolerates_taint(toleration: Obj, taint: Obj) -> bool:
    """Upstream ``Toleration.ToleratesTaint``: does this one toleration match this taint?"""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or OP_EQUAL
    if op == OP_EXISTS:
        return True
    if op == OP_EQUAL:
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Any], taint: Obj) -> bool:
    """Upstream ``TolerationsTolerateTaint``: does any toleration of the list match the taint?"""
    return any(isinstance(t, Mapping) and tolerates_taint(t, taint) for t in tolerations)


def matching_tolerations(tolerations: Iterable[Any], taint: Obj) -> list[Obj]:
    """The tolerations of the list that match the taint (e.g. to read their tolerationSeconds)."""
    return [t for t in tolerations if isinstance(t, Mapping) and tolerates_taint(t, taint)]


def untolerated_taints(taints: Iterable[Any], tolerations: Iterable[Any],
                       effects: Collection[str] | None = None) -> list[Obj]:
    """Taints (in order) whose effect is in ``effects`` (all effects when None) that no toleration tolerates."""
    tols = [t for t in tolerations if isinstance(t, Mapping)]
    out: list[Obj] = []
    for taint in taints:
        if not isinstance(taint, Mapping):
            continue
        if effects is not None and taint.get("effect") not in effects:
            continue
        if not tolerations_tolerate_taint(tols, taint):
            out.append(taint)
    return out


def first_untolerated_taint(taints: Iterable[Any], tolerations: Iterable[Any],
                            effects: Collection[str] | None = None) -> Obj | None:
    """Upstream ``FindMatchingUntoleratedTaint``: the first untolerated taint of the effect set, or None."""
    found = untolerated_taints(taints, tolerations, effects)
    return found[0] if found else None
