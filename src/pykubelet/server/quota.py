"""ResourceQuota (core/v1): the ResourceQuota admission plugin and the quota status upstream's
resource-quota controller keeps (``plugin/pkg/admission/resourcequota``,
``pkg/quota/v1/evaluator/core``).

* Usage is evaluated per object as upstream's evaluators do: a pod (not Succeeded/Failed) uses
  ``pods``/``count/pods`` 1 and its ``requests.*``/``limits.*`` (``cpu``/``memory`` = requests),
  summing app containers and taking at least the largest init container; a Service uses
  ``services``, ``services.nodeports`` (one per port of a NodePort/LoadBalancer Service) and
  ``services.loadbalancers``; a claim uses ``persistentvolumeclaims`` and ``requests.storage``;
  ConfigMaps/Secrets their plural; every kind ``count/<resource>[.<group>]``.
* Quota scopes ``Terminating``/``NotTerminating``/``BestEffort``/``NotBestEffort`` and a
  ``scopeSelector`` on ``PriorityClass`` (In/NotIn/Exists/DoesNotExist) select which pods count.
* Create is refused with 403 ``exceeded quota: NAME, requested: pods=1, used: pods=2, limited:
  pods=2`` (only the exceeded resources, sorted) or ``failed quota: NAME: must specify
  limits.cpu for: c1`` when a constrained compute resource is missing from a container.
* ``status.hard``/``status.used`` are recomputed after every write in a namespace that has
  quotas (the controller's full resync, done synchronously here: a dev cluster's namespaces are
  small), so ``kubectl describe quota`` shows current usage.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any, Protocol

from pykubelet.common.quantity import QuantityError, format_quantity, parse_quantity

Obj = dict[str, Any]
KEY = "resourcequotas"
_COMPUTE = ("cpu", "memory", "ephemeral-storage")


class _Store(Protocol):
    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]: ...

    def update(self, resource: str, namespace: str, name: str, obj: Obj) -> Obj: ...


class QuotaExceeded(Exception):
    """The admission refusal (message after ``<resource> "<name>" is forbidden: ``)."""


def _q(v: Any) -> Decimal:
    try:
        return parse_quantity(v).value
    except (QuantityError, TypeError):
        return Decimal(0)


def _pod_compute(pod: Obj) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    spec = pod.get("spec") or {}
    totals: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for which, acc in totals.items():
        for c in spec.get("containers") or []:
            for k, v in ((c.get("resources") or {}).get(which) or {}).items():
                acc[k] = acc.get(k, Decimal(0)) + _q(v)
        for c in spec.get("initContainers") or []:
            for k, v in ((c.get("resources") or {}).get(which) or {}).items():
                acc[k] = max(acc.get(k, Decimal(0)), _q(v))
    return totals["requests"], totals["limits"]


def usage(key: str, obj: Obj) -> dict[str, Decimal]:
    """What one stored object of ``key`` (storage key: ``pods``, ``deployments.apps``) uses."""
    out: dict[str, Decimal] = {f"count/{key}": Decimal(1)}
    if key == "pods":
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return {}
        out["pods"] = Decimal(1)
        requests, limits = _pod_compute(obj)
        for k, v in requests.items():
            out[f"requests.{k}"] = v
            if k in _COMPUTE:
                out[k] = v
        for k, v in limits.items():
            out[f"limits.{k}"] = v
    elif key == "services":
        spec = obj.get("spec") or {}
        out["services"] = Decimal(1)
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            out["services.nodeports"] = Decimal(len(spec.get("ports") or []))
        if spec.get("type") == "LoadBalancer":
            out["services.loadbalancers"] = Decimal(1)
    elif key == "persistentvolumeclaims":
        out["persistentvolumeclaims"] = Decimal(1)
        storage = (((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
        if storage is not None:
            out["requests.storage"] = _q(storage)
    elif key in ("configmaps", "secrets", "resourcequotas", "replicationcontrollers"):
        out[key] = Decimal(1)
    return out


def _best_effort(pod: Obj) -> bool:
    req, lim = _pod_compute(pod)
    return not req and not lim


def _matches(quota: Obj, key: str, obj: Obj) -> bool:
    spec = quota.get("spec") or {}
    scopes = list(spec.get("scopes") or [])
    exprs = list((spec.get("scopeSelector") or {}).get("matchExpressions") or [])
    if not scopes and not exprs:
        return True
    if key != "pods":
        return False  # every scope upstream knows selects pods
    pspec = obj.get("spec") or {}
    checks = {"Terminating": pspec.get("activeDeadlineSeconds") is not None,
              "NotTerminating": pspec.get("activeDeadlineSeconds") is None,
              "BestEffort": _best_effort(obj), "NotBestEffort": not _best_effort(obj)}
    for s in scopes:
        if not checks.get(s, False):
            return False
    for e in exprs:
        name, op, values = e.get("scopeName"), e.get("operator"), e.get("values") or []
        if name == "PriorityClass":
            pc = pspec.get("priorityClassName") or ""
            ok = {"In": pc in values, "NotIn": pc not in values, "Exists": bool(pc),
                  "DoesNotExist": not pc}.get(str(op), False)
        else:
            ok = checks.get(str(name), False) if op == "Exists" else not checks.get(str(name), True)
        if not ok:
            return False
    return True


def _keys_for(hard: dict[str, Any]) -> set[str]:
    keys = {"pods"}
    for r in hard:
        if r in ("services", "services.nodeports", "services.loadbalancers"):
            keys.add("services")
        elif r in ("persistentvolumeclaims", "requests.storage"):
            keys.add("persistentvolumeclaims")
        elif r in ("configmaps", "secrets", "resourcequotas", "replicationcontrollers"):
            keys.add(r)
        elif r.startswith("count/"):
            keys.add(r[len("count/"):])
    return keys


def used(store: _Store, quota: Obj, ns: str) -> dict[str, Decimal]:
    hard = (quota.get("spec") or {}).get("hard") or {}
    out: dict[str, Decimal] = {r: Decimal(0) for r in hard}
    for key in _keys_for(hard):
        for _k, obj in store.iter_raw(key, ns):
            if not _matches(quota, key, obj):
                continue
            for r, v in usage(key, obj).items():
                if r in out:
                    out[r] += v
    return out


def _fmt(r: str, v: Decimal, hard: dict[str, Any]) -> str:
    try:
        fmt = parse_quantity(hard[r]).format if r in hard else "DecimalSI"
    except QuantityError:
        fmt = "DecimalSI"
    return format_quantity(v, fmt)


def _pretty(vals: dict[str, Decimal], hard: dict[str, Any]) -> str:
    return ",".join(f"{r}={_fmt(r, v, hard)}" for r, v in sorted(vals.items()))


def admit(store: _Store, key: str, ns: str, obj: Obj) -> None:
    """Raise :class:`QuotaExceeded` if creating ``obj`` would exceed a quota of ``ns``."""
    for _k, quota in sorted(store.iter_raw(KEY, ns)):
        hard_raw = (quota.get("spec") or {}).get("hard") or {}
        if not _matches(quota, key, obj):
            continue
        name = quota["metadata"]["name"]
        req = usage(key, obj)
        if key == "pods":
            missing: list[str] = []
            for r in sorted(hard_raw):
                res = r.split(".", 1)[1] if r.startswith(("requests.", "limits.")) else r
                which = "limits" if r.startswith("limits.") else "requests"
                if res not in _COMPUTE or r == "requests.storage":
                    continue
                lacking = [c.get("name", "") for c in (obj.get("spec") or {}).get("containers") or []
                           if res not in ((c.get("resources") or {}).get(which) or {})]
                if lacking:
                    missing.append(f"{which}.{res} for: {','.join(lacking)}")
            if missing:
                raise QuotaExceeded(f"failed quota: {name}: must specify " + "; ".join(missing))
        requested = {r: v for r, v in req.items() if r in hard_raw}
        if not requested:
            continue
        now = used(store, quota, ns)
        exceeded = [r for r, v in requested.items() if now.get(r, Decimal(0)) + v > _q(hard_raw[r])]
        if exceeded:
            raise QuotaExceeded(
                f"exceeded quota: {name}, requested: {_pretty({r: requested[r] for r in exceeded}, hard_raw)}, "
                f"used: {_pretty({r: now.get(r, Decimal(0)) for r in exceeded}, hard_raw)}, "
                f"limited: {','.join(f'{r}={hard_raw[r]}' for r in sorted(exceeded))}")


def sync(store: _Store, ns: str) -> None:
    """Recompute ``status`` of every quota in ``ns`` (the resource-quota controller)."""
    if not ns:
        return
    for (_, name), quota in list(store.iter_raw(KEY, ns)):
        hard = (quota.get("spec") or {}).get("hard") or {}
        status = {"hard": dict(hard), "used": {r: _fmt(r, v, hard) for r, v in used(store, quota, ns).items()}}
        if quota.get("status") != status:
            new = dict(quota)
            new["status"] = status
            store.update(KEY, ns, name, new)
