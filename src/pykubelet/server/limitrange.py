"""LimitRange (core/v1) and the LimitRanger admission plugin, as ``plugin/pkg/admission/limitranger``.

* LimitRange items are defaulted as ``SetDefaults_LimitRangeItem``: for ``Container`` items a
  missing ``default`` comes from ``max``, a missing ``defaultRequest`` from ``default`` and then
  ``min``.
* On pod create every container (init containers included) without a limit / request for a
  resource the namespace's ``Container`` items default gets it (LimitRanger's mutating half), then
  each item is enforced with upstream's messages: ``minimum cpu usage per Container is 100m, but
  request is 50m``, ``maximum memory usage per Container is 1Gi, but limit is 2Gi``, ``... No
  request is specified`` / ``No limit is specified``, ``cpu max limit to request ratio per
  Container is 2, but provided ratio is 4.000000``; ``Pod`` items apply the same checks to the pod
  total (sum of app containers, at least the largest init container).  Several failures are
  reported together as ``[a, b]``, as upstream's aggregate error.

Pure functions; the registry passes the namespace's LimitRanges and turns
:class:`~pykubelet.server.admission.AdmissionError` into 403 Forbidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from pykubelet.common.quantity import QuantityError, format_quantity, parse_quantity
from pykubelet.server.admission import AdmissionError

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]
_KINDS = ("min", "max", "default", "defaultRequest", "maxLimitRequestRatio")


def default_limit_range(lr: Obj) -> None:
    for item in (lr.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        for k, v in (item.get("max") or {}).items():
            default.setdefault(k, v)
        for k, v in default.items():
            request.setdefault(k, v)
        for k, v in (item.get("min") or {}).items():
            request.setdefault(k, v)
        if not default:
            del item["default"]
        if not request:
            del item["defaultRequest"]


def validate_limit_range(lr: Obj) -> FieldErrors:
    errs: FieldErrors = []
    for i, item in enumerate((lr.get("spec") or {}).get("limits") or []):
        if not isinstance(item, dict):
            errs.append((f"spec.limits[{i}]", "Invalid value: must be an object"))
            continue
        if item.get("type") not in ("Container", "Pod", "PersistentVolumeClaim"):
            errs.append((f"spec.limits[{i}].type", f'Unsupported value: "{item.get("type")}": supported values: '
                         '"Container", "Pod", "PersistentVolumeClaim"'))
        for kind in _KINDS:
            for res, q in (item.get(kind) or {}).items():
                try:
                    parse_quantity(q)
                except QuantityError as e:
                    errs.append((f"spec.limits[{i}].{kind}[{res}]", f"Invalid value: {q!r}: {e}"))
        mins, maxs = item.get("min") or {}, item.get("max") or {}
        for res in set(mins) & set(maxs):
            try:
                if parse_quantity(mins[res]).value > parse_quantity(maxs[res]).value:
                    errs.append((f"spec.limits[{i}].min[{res}]", f"Invalid value: \"{mins[res]}\": min value "
                                 f"{mins[res]} is greater than max value {maxs[res]}"))
            except QuantityError:
                pass
    return errs


def _q(v: Any) -> Decimal | None:
    try:
        return parse_quantity(v).value if v is not None else None
    except QuantityError:
        return None


def _containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [c for c in (spec.get("initContainers") or []) + (spec.get("containers") or []) if isinstance(c, dict)]


def _apply_defaults(pod: Obj, item: Obj) -> None:
    for c in _containers(pod):
        res = c.setdefault("resources", {})
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        for k, v in (item.get("default") or {}).items():
            limits.setdefault(k, v)
        for k, v in (item.get("defaultRequest") or {}).items():
            requests.setdefault(k, v)
        if limits:
            res["limits"] = limits
        if requests:
            res["requests"] = requests


def _check(kind: str, requests: dict[str, Decimal], limits: dict[str, Decimal], item: Obj) -> list[str]:
    out: list[str] = []
    for res, q in (item.get("min") or {}).items():
        mn, req = _q(q), requests.get(res)
        if req is None:
            out.append(f"minimum {res} usage per {kind} is {q}.  No request is specified")
        elif mn is not None and req < mn:
            out.append(f"minimum {res} usage per {kind} is {q}, but request is {_fmt(req, q)}")
    for res, q in (item.get("max") or {}).items():
        mx, lim = _q(q), limits.get(res)
        if lim is None:
            out.append(f"maximum {res} usage per {kind} is {q}.  No limit is specified")
        elif mx is not None and lim > mx:
            out.append(f"maximum {res} usage per {kind} is {q}, but limit is {_fmt(lim, q)}")
    for res, q in (item.get("maxLimitRequestRatio") or {}).items():
        ratio, req, lim = _q(q), requests.get(res), limits.get(res)
        if lim is None:
            out.append(f"{res} max limit to request ratio per {kind} is {q}, but no limit is specified")
        elif not req:
            out.append(f"{res} max limit to request ratio per {kind} is {q}, but no request is specified or "
                       "request is 0")
        elif ratio is not None and lim / req > ratio:
            out.append(f"{res} max limit to request ratio per {kind} is {q}, but provided ratio is "
                       f"{float(lim / req):f}")
    return out


def _fmt(value: Decimal, like: Any) -> str:
    fmt = parse_quantity(like).format
    return format_quantity(value, fmt)


def _amounts(c: Obj, which: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for k, v in ((c.get("resources") or {}).get(which) or {}).items():
        q = _q(v)
        if q is not None:
            out[k] = q
    return out


def admit_pod(pod: Obj, limit_ranges: Iterable[Obj]) -> None:
    """Default, then enforce, every LimitRange item of the pod's namespace."""
    items = [i for lr in limit_ranges for i in (lr.get("spec") or {}).get("limits") or [] if isinstance(i, dict)]
    for item in items:
        if item.get("type") == "Container":
            _apply_defaults(pod, item)
    errors: list[str] = []
    spec = pod.get("spec") or {}
    for item in items:
        if item.get("type") == "Container":
            for c in _containers(pod):
                errors += _check("Container", _amounts(c, "requests"), _amounts(c, "limits"), item)
        elif item.get("type") == "Pod":
            totals: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
            for which in totals:
                for c in spec.get("containers") or []:
                    for k, v in _amounts(c, which).items():
                        totals[which][k] = totals[which].get(k, Decimal(0)) + v
                for c in spec.get("initContainers") or []:
                    for k, v in _amounts(c, which).items():
                        totals[which][k] = max(totals[which].get(k, Decimal(0)), v)
            errors += _check("Pod", totals["requests"], totals["limits"], item)
    if errors:
        raise AdmissionError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
