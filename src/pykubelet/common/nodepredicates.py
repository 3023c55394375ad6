"""Node predicates shared by the scheduler and the agent's admission: node affinity/selector and host ports.

Design: pure functions over the wire form (JSON dicts); the scheduler filters nodes with them and
the agent's node-side admission (upstream ``lifecycle.predicateAdmitHandler``, which runs the
scheduler's ``AdmissionCheck``) re-checks a pod that reached the node without the scheduler.

Upstream behaviour followed (``component-helpers/scheduling/corev1/nodeaffinity``, the NodePorts
plugin): ``nodeSelector`` labels must all match; required node affinity terms are ORed, the
requirements inside a term ANDed, an empty term matches nothing; operators In, NotIn, Exists,
DoesNotExist, Gt, Lt; ``matchFields`` knows ``metadata.name``. Two host ports conflict when port and
protocol are equal and the host IPs are equal or either is 0.0.0.0.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _spec(o: Obj) -> Obj:
    return o.get("spec") or {}


def _match_requirement(req: Obj, values: dict[str, str]) -> bool:
    key = req.get("key", "")
    op = req.get("operator")
    vals = [str(v) for v in req.get("values") or []]
    has = key in values
    if op == "In":
        return has and values[key] in vals
    if op == "NotIn":
        return not has or values[key] not in vals
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        if not has or len(vals) != 1:
            return False
        try:
            left, right = int(values[key]), int(vals[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def match_node_selector_terms(terms: list[Obj], node: Obj) -> bool:
    """Terms are ORed; requirements inside a term ANDed; an empty term matches nothing."""
    labels = {str(k): str(v) for k, v in (_meta(node).get("labels") or {}).items()}
    fields = {"metadata.name": str(_meta(node).get("name", ""))}
    for term in terms or []:
        exprs = term.get("matchExpressions") or []
        fexprs = term.get("matchFields") or []
        if not exprs and not fexprs:
            continue
        if all(_match_requirement(r, labels) for r in exprs) and all(
            _match_requirement(r, fields) for r in fexprs
        ):
            return True
    return False


def matches_node_affinity(pod: Obj, node: Obj) -> bool:
    spec = _spec(pod)
    labels = _meta(node).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or None
    )
    if required is not None:
        return match_node_selector_terms(required.get("nodeSelectorTerms") or [], node)
    return True


def host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    out = []
    for key in ("initContainers", "containers"):
        for c in _spec(pod).get(key) or []:
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    out.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(p["hostPort"])))
    return out


def ports_conflict(pod: Obj, node_pods: list[Obj]) -> bool:
    used = [hp for other in node_pods for hp in host_ports(other)]
    for ip, proto, port in host_ports(pod):
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False
