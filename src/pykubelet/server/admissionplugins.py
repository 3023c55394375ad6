"""Glue between the registry and the Priority, LimitRanger and ResourceQuota admission plugins
(:mod:`priority`, :mod:`limitrange`, :mod:`quota`): each hook reads the objects a plugin needs
from the store and turns a plugin's refusal into upstream's 403 Forbidden
(``<resource>[.<group>] "<name>" is forbidden: <reason>``).  Upstream's chain order is kept:
LimitRanger, then Priority on the pod, ResourceQuota last on every create.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

from pykubelet.server import defaultstatus, limitrange, priority, quota, runtimeclass, tables
from pykubelet.server.admission import AdmissionError
from pykubelet.server.errors import StatusError
from pykubelet.server.resources import BY_GVR, ResourceInfo

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]
PC_KEY = "priorityclasses.scheduling.k8s.io"


class _Store(Protocol):
    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]: ...

    def peek(self, resource: str, namespace: str, name: str) -> Obj | None: ...

    def update(self, resource: str, namespace: str, name: str, obj: Obj) -> Obj: ...


def _forbidden(ri: ResourceInfo, name: str, why: str) -> StatusError:
    qual = f"{ri.resource}.{ri.group}" if ri.group else ri.resource
    return StatusError(403, "Forbidden", f'{qual} "{name}" is forbidden: {why}', name=name, kind=ri.resource,
                       group=ri.group)


def bootstrap(store: _Store, create: Callable[[ResourceInfo, Obj], Any]) -> None:
    """The system PriorityClasses every cluster has."""
    ri = BY_GVR[("scheduling.k8s.io", "v1", "priorityclasses")]
    for pc in priority.SYSTEM_CLASSES:
        if store.peek(ri.key, "", pc["metadata"]["name"]) is None:
            create(ri, copy.deepcopy(pc))


def validate(store: _Store, ri: ResourceInfo, obj: Obj, old: Obj | None) -> FieldErrors:
    """Defaults + validation (+ admission) of PriorityClasses and LimitRanges; the zero-valued
    status fields upstream's encoder prints (defaultstatus.py)."""
    defaultstatus.fill(ri.group, ri.resource, obj, creating=old is None)
    if ri.key == PC_KEY:
        priority.default_class(obj)
        errs = priority.validate_class(obj, old)
        if not errs:
            try:
                priority.admit_class(obj, (o for _, o in store.iter_raw(PC_KEY)))
            except AdmissionError as e:
                raise _forbidden(ri, (obj.get("metadata") or {}).get("name", ""), str(e)) from e
        return errs
    if ri.key == "limitranges":
        limitrange.default_limit_range(obj)
        return limitrange.validate_limit_range(obj)
    return []


def admit_pod(store: _Store, pod: Obj, ns: str, name: str) -> None:
    try:
        limitrange.admit_pod(pod, [o for _, o in store.iter_raw("limitranges", ns)])
        priority.admit_pod(pod, [o for _, o in store.iter_raw(PC_KEY)])
        runtimeclass.admit_pod(pod, [o for _, o in store.iter_raw("runtimeclasses.node.k8s.io")])
    except AdmissionError as e:
        raise StatusError(403, "Forbidden", f'pods "{name}" is forbidden: {e}', name=name, kind="pods") from e


def admit_create(store: _Store, ri: ResourceInfo, ns: str, obj: Obj) -> None:
    if not ri.namespaced or not ns:
        return
    try:
        quota.admit(store, ri.key, ns, obj)
    except quota.QuotaExceeded as e:
        raise _forbidden(ri, (obj.get("metadata") or {}).get("name", ""), str(e)) from e


def after_write(store: _Store, ri: ResourceInfo, ns: str) -> None:
    if ri.namespaced and ns:
        quota.sync(store, ns)


# ------------------------------------------------------------------ kubectl get columns
# Upstream's printers (pkg/printers/internalversion) for the kinds these plugins own, plus CRDs;
# registered into tables.PRINTERS from here so tables.py stays untouched.
def _name(o: Obj) -> str:
    return str((o.get("metadata") or {}).get("name", ""))


def _age(o: Obj, now: datetime) -> str:
    return tables.since((o.get("metadata") or {}).get("creationTimestamp"), now)


def _pc_row(o: Obj, now: datetime) -> tuple[list[Any], list[Obj] | None]:
    return [_name(o), o.get("value", 0), bool(o.get("globalDefault")), _age(o, now),
            o.get("preemptionPolicy", "")], None


def _usage_text(o: Obj, limits: bool) -> str:
    status = o.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    return ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items())
                     if k.startswith("limits.") == limits)


def _quota_row(o: Obj, now: datetime) -> tuple[list[Any], list[Obj] | None]:
    return [_name(o), _age(o, now), _usage_text(o, False), _usage_text(o, True)], None


def _created_row(o: Obj, now: datetime) -> tuple[list[Any], list[Obj] | None]:
    return [_name(o), (o.get("metadata") or {}).get("creationTimestamp", "")], None


_CREATED_AT = tables.col("Created At", "date", desc="CreationTimestamp is a timestamp representing the server "
                         "time when this object was created.")
tables.PRINTERS.setdefault("priorityclasses", (
    [tables.NAME_COL, tables.col("Value", "integer", desc="value of this priority class."),
     tables.col("Global-Default", "boolean", desc="globalDefault of this priority class."), tables.AGE_COL,
     tables.col("PreemptionPolicy", desc="preemptionPolicy of this priority class.")], _pc_row))
tables.PRINTERS.setdefault("resourcequotas", (
    [tables.NAME_COL, tables.AGE_COL, tables.col("Request", desc="Request represents a minimum amount of cpu/memory "
                                                 "that a container may consume."),
     tables.col("Limit", desc="Limits control the maximum amount of cpu/memory that a container may use "
                "independent of contention on the node.")], _quota_row))
tables.PRINTERS.setdefault("limitranges", ([tables.NAME_COL, _CREATED_AT], _created_row))
tables.PRINTERS.setdefault("customresourcedefinitions", ([tables.NAME_COL, _CREATED_AT], _created_row))
