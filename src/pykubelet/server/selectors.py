"""Label and field selectors, parsed the way apimachinery parses them.

Label selectors (``k8s.io/apimachinery/pkg/labels``): comma-separated requirements, each one of
``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not
exist).  ``!=`` and ``notin`` also match objects without the label, as upstream.

Field selectors (``k8s.io/apimachinery/pkg/fields``): only ``=``, ``==`` and ``!=`` on a
per-resource allow-list of fields (upstream registers them in each resource's strategy via
``AddFieldLabelConversionFunc``); anything else is a 400 BadRequest, which is what kubectl shows
for an unsupported field label.  Missing fields compare as the empty string.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pykubelet.server.errors import bad_request

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VAL = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _split_top(s: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


def _check_key(k: str, sel: str) -> str:
    if not _LABEL_KEY.match(k) or len(k.split("/")[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key \"{k}\" in selector \"{sel}\"")
    return k


def _check_val(v: str, sel: str) -> str:
    if not _LABEL_VAL.match(v) or len(v) > 63:
        raise bad_request(f"unable to parse requirement: invalid label value: \"{v}\" in selector \"{sel}\"")
    return v


def _in_req(key: str, vals: set[str], positive: bool) -> Callable[[dict[str, str]], bool]:
    if positive:
        return lambda lb: key in lb and lb[key] in vals
    return lambda lb: key not in lb or lb[key] not in vals


def _eq_req(key: str, val: str, positive: bool) -> Callable[[dict[str, str]], bool]:
    if positive:
        return lambda lb: key in lb and lb[key] == val
    return lambda lb: lb.get(key) != val


def _exists_req(key: str, positive: bool) -> Callable[[dict[str, str]], bool]:
    if positive:
        return lambda lb: key in lb
    return lambda lb: key not in lb


def parse_label_selector(sel: str | None) -> Matcher:
    """Return a predicate over objects (matches metadata.labels)."""
    if not sel or not sel.strip():
        return lambda _o: True
    reqs: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_top(sel):
        m = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", part)
        if m:
            key = _check_key(m.group(1), sel)
            vals = {_check_val(v.strip(), sel) for v in m.group(3).split(",")}
            reqs.append(_in_req(key, vals, m.group(2) == "in"))
            continue
        m = re.match(r"^([^=!\s]+)\s*(==|!=|=)\s*(.*)$", part)
        if m:
            key = _check_key(m.group(1), sel)
            val = _check_val(m.group(3).strip(), sel)
            reqs.append(_eq_req(key, val, m.group(2) != "!="))
            continue
        if part.startswith("!"):
            key = _check_key(part[1:].strip(), sel)
            reqs.append(_exists_req(key, False))
            continue
        key = _check_key(part, sel)
        reqs.append(_exists_req(key, True))

    def match(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


# Field paths each resource supports beyond metadata.name / metadata.namespace.
FIELD_LABELS: dict[str, set[str]] = {
    "pods": {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    "nodes": {"spec.unschedulable"},
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    "events.events.k8s.io": {"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                             "reason", "type", "reportingController"},
    "secrets": {"type"},
    "namespaces": {"status.phase"},
    "certificatesigningrequests.certificates.k8s.io": {"spec.signerName"},
}


def field_value(obj: Obj, path: str) -> str:
    if path == "source":  # events: source is source.component upstream
        return str(((obj.get("source") or {}).get("component")) or "")
    cur: Any = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(sel: str | None, resource: str) -> tuple[Matcher, dict[str, str]]:
    """Return (predicate, exact-equality requirements).  The second lets callers narrow cheaply
    (e.g. metadata.namespace)."""
    if not sel or not sel.strip():
        return (lambda _o: True), {}
    allowed = {"metadata.name", "metadata.namespace"} | FIELD_LABELS.get(resource, set())
    reqs: list[tuple[str, bool, str]] = []
    eq: dict[str, str] = {}
    for part in _split_top(sel):
        m = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{sel}'; can't understand '{part}'")
        key, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in allowed:
            raise bad_request(f'field label not supported: {key}')
        reqs.append((key, op == "!=", val))
        if op != "!=":
            eq[key] = val

    def match(obj: Obj) -> bool:
        for key, neg, val in reqs:
            got = field_value(obj, key)
            if (got == val) == neg:
                return False
        return True

    return match, eq
