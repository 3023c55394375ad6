"""The garbage collector: ownerReferences, cascading deletion, orphaning (``pkg/controller/garbagecollector``).

Upstream's collector keeps a graph of every object of every resource that supports
list/watch/delete, by uid, with edges from ownerReferences, and works two queues; this one keeps the
same graph (``uid -> object``, ``owner uid -> dependent uids``) fed by one kit informer per resource
found through discovery (refreshed every ``rediscover_period`` seconds, so custom resources join
when their CRD appears) and one level-triggered queue of uids.  Looking at a uid:

- an object being deleted with the ``orphan`` finalizer (DELETE ``propagationPolicy: Orphan``):
  its uid is removed from every dependent's ownerReferences, then the finalizer;
- an object being deleted with ``foregroundDeletion``: its dependents are looked at (they see an
  owner "waiting for dependents deletion" and delete themselves); once no dependent with
  ``blockOwnerDeletion: true`` is left, the finalizer goes and the API server removes the owner;
- an object with ownerReferences: :func:`classify` sorts the owners into solid (exist), dangling
  (gone: not in the graph and a live GET by name says 404 or another uid) and waiting (deleting in
  the foreground).  No solid owner -> the object is deleted (background, or foreground when an
  owner waits and the object itself has dependents); solid owners plus dangling/waiting ones -> the
  dangling and waiting references are removed (a JSON merge patch with the uid as precondition).

Deletes carry ``preconditions.uid`` so a recreated object of the same name is never hit.  The
API-server half (which finalizers a DELETE adds) is :mod:`pykubelet.server.garbagecollection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit
from pykubelet.server.garbagecollection import FOREGROUND, ORPHAN

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass(frozen=True)
class ResourceKind:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self) -> str:
        return f"{self.prefix}/{self.resource}"

    def path(self, ns: str, name: str) -> str:
        if self.namespaced:
            return f"{self.prefix}/namespaces/{ns}/{self.resource}/{name}"
        return f"{self.prefix}/{self.resource}/{name}"


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


async def discover(api: kit.Api) -> list[ResourceKind]:
    """Every resource (preferred version of each group) that supports list, watch and delete."""
    out: list[ResourceKind] = []
    gvs: list[tuple[str, str]] = [("", "v1")]
    groups = await api.get("/apis")
    for g in groups.get("groups") or []:
        pv = (g.get("preferredVersion") or {}).get("version") or ((g.get("versions") or [{}])[0]).get("version")
        if pv:
            gvs.append((str(g.get("name", "")), str(pv)))
    for group, version in gvs:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            lst = await api.get(path)
        except ApiError as e:
            log.info("garbage collector: discovery of %s failed: %s", path, e)
            continue
        for r in lst.get("resources") or []:
            verbs = set(r.get("verbs") or [])
            if "/" in str(r.get("name", "")) or not {"list", "watch", "delete"} <= verbs:
                continue
            out.append(ResourceKind(group, version, str(r["name"]), str(r.get("kind", "")), bool(r.get("namespaced"))))
    return out


class OwnerState(Enum):
    SOLID = "solid"
    DANGLING = "dangling"
    WAITING = "waiting"  # being deleted in the foreground, waiting for its dependents
    UNKNOWN = "unknown"  # its kind is not served (yet): treated as solid


def owner_state(owner: Obj | None) -> OwnerState:
    if owner is None:
        return OwnerState.DANGLING
    meta = owner.get("metadata") or {}
    if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
        return OwnerState.WAITING
    return OwnerState.SOLID


class Action(Enum):
    KEEP = "keep"
    DELETE = "delete"
    REMOVE_REFS = "remove-refs"


@dataclass(frozen=True)
class Decision:
    action: Action
    policy: str = ""
    remove: tuple[str, ...] = ()


def classify(obj: Obj, states: dict[str, OwnerState], has_dependents: bool) -> Decision:
    """What to do with ``obj`` given the state of each owner uid (``attemptToDeleteItem``)."""
    meta = obj.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid")]
    if not refs:
        return Decision(Action.KEEP)
    if meta.get("deletionTimestamp"):
        return Decision(Action.KEEP)  # already going; its own finalizers are processed elsewhere
    solid = [r for r in refs if states.get(r["uid"]) in (OwnerState.SOLID, OwnerState.UNKNOWN, None)]
    dangling = [r["uid"] for r in refs if states.get(r["uid"]) is OwnerState.DANGLING]
    waiting = [r["uid"] for r in refs if states.get(r["uid"]) is OwnerState.WAITING]
    if solid:
        if not dangling and not waiting:
            return Decision(Action.KEEP)
        return Decision(Action.REMOVE_REFS, remove=tuple(dangling + waiting))
    if waiting and has_dependents:
        return Decision(Action.DELETE, "Foreground")
    fins = meta.get("finalizers") or []
    policy = "Orphan" if ORPHAN in fins else "Foreground" if FOREGROUND in fins else "Background"
    return Decision(Action.DELETE, policy)


def blocking_dependents(owner_uid: str, dependents: list[Obj]) -> list[Obj]:
    """Dependents whose reference to the owner has ``blockOwnerDeletion: true``."""
    return [d for d in dependents
            if any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion")
                   for r in (d.get("metadata") or {}).get("ownerReferences") or [])]


@dataclass
class _Node:
    rk: ResourceKind
    obj: Obj


class GarbageCollector(kit.Controller):
    name = "garbage-collector-controller"
    workers = 4

    def __init__(self, api: kit.Api, *, rediscover_period: float = 30.0) -> None:
        super().__init__(api)
        self.rediscover_period = rediscover_period
        self.nodes: dict[str, _Node] = {}
        self.dependents: dict[str, set[str]] = {}
        self.kinds: dict[tuple[str, str], ResourceKind] = {}  # (group, kind) -> resource
        self._watched: set[tuple[str, str]] = set()
        self._extra: set[asyncio.Task[None]] = set()

    @classmethod
    def from_options(cls, api: kit.Api, options: dict[str, Any]) -> GarbageCollector:
        return cls(api, **{k: options[k] for k in ("rediscover_period",) if k in options})

    # graph maintenance ----------------------------------------------------------------------
    def _observe(self, rk: ResourceKind, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        old = self.nodes.get(uid)
        if old is not None:
            for r in (old.obj.get("metadata") or {}).get("ownerReferences") or []:
                self.dependents.get(str(r.get("uid")), set()).discard(uid)
        self.nodes[uid] = _Node(rk, obj)
        refs = meta.get("ownerReferences") or []
        for r in refs:
            self.dependents.setdefault(str(r.get("uid")), set()).add(uid)
            if r.get("uid") in self.nodes and owner_state(self.nodes[str(r["uid"])].obj) is OwnerState.WAITING:
                self.queue.add(str(r["uid"]))
        fins = meta.get("finalizers") or []
        if refs or (meta.get("deletionTimestamp") and (ORPHAN in fins or FOREGROUND in fins)):
            self.queue.add(uid)

    def _forget(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        self.nodes.pop(uid, None)
        for r in meta.get("ownerReferences") or []:
            ouid = str(r.get("uid"))
            self.dependents.get(ouid, set()).discard(uid)
            if ouid in self.nodes:
                self.queue.add(ouid)  # a foreground owner may now be free to go
        for dep in self.dependents.get(uid, set()):
            self.queue.add(dep)  # their owner is gone

    def _watch(self, rk: ResourceKind) -> kit.Informer | None:
        self.kinds.setdefault((rk.group, rk.kind), rk)
        if (rk.group, rk.resource) in self._watched:
            return None
        self._watched.add((rk.group, rk.resource))
        inf = kit.Informer(self.api, rk.collection())
        inf.add_handlers(on_add=lambda o: self._observe(rk, o), on_update=lambda _o, n: self._observe(rk, n),
                         on_delete=self._forget)
        return inf

    async def run(self) -> None:
        for rk in await discover(self.api):
            inf = self._watch(rk)
            if inf is not None:
                self.informers.append(inf)
        refresher = asyncio.create_task(self._rediscover(), name=f"{self.name}:discovery")
        try:
            await super().run()
        finally:
            refresher.cancel()
            for t in list(self._extra):
                t.cancel()
            await asyncio.gather(refresher, *self._extra, return_exceptions=True)

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self.rediscover_period)
            try:
                found = await discover(self.api)
            except (ApiError, OSError) as e:
                log.info("garbage collector: rediscovery failed: %s", e)
                continue
            for rk in found:
                inf = self._watch(rk)
                if inf is not None:
                    log.info("garbage collector: now watching %s", rk.collection())
                    t = asyncio.create_task(inf.run(), name=f"{self.name}:{rk.collection()}")
                    self._extra.add(t)

    # lookups -------------------------------------------------------------------------------
    async def _owner_state(self, dep: _Node, ref: Obj) -> OwnerState:
        uid = str(ref.get("uid"))
        cached = self.nodes.get(uid)
        if cached is not None:
            return owner_state(cached.obj)
        rk = self.kinds.get((_group_of(str(ref.get("apiVersion", ""))), str(ref.get("kind", ""))))
        if rk is None:
            return OwnerState.UNKNOWN
        ns = str((dep.obj.get("metadata") or {}).get("namespace") or "")
        if rk.namespaced and not ns:
            return OwnerState.DANGLING  # a cluster-scoped object cannot have a namespaced owner
        try:
            live = await self.api.get(rk.path(ns, str(ref.get("name", ""))))
        except ApiError as e:
            if e.status == 404:
                return OwnerState.DANGLING
            raise
        if (live.get("metadata") or {}).get("uid") != uid:
            return OwnerState.DANGLING
        return owner_state(live)

    def _dependents_of(self, uid: str) -> list[_Node]:
        return [self.nodes[d] for d in self.dependents.get(uid, set()) if d in self.nodes]

    # reconcile -------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> float | None:
        node = self.nodes.get(key)
        if node is None:
            return None
        meta = node.obj.get("metadata") or {}
        fins = meta.get("finalizers") or []
        if meta.get("deletionTimestamp") and ORPHAN in fins:
            await self._orphan(key, node)
            return None
        if meta.get("deletionTimestamp") and FOREGROUND in fins:
            return await self._foreground(key, node)
        states = {str(r.get("uid")): await self._owner_state(node, r) for r in meta.get("ownerReferences") or []}
        d = classify(node.obj, states, bool(self._dependents_of(key)))
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name", ""))
        if d.action is Action.DELETE:
            log.info("garbage collector: deleting %s %s/%s (owners gone; propagation %s)", node.rk.kind, ns, name,
                     d.policy)
            with contextlib.suppress(ApiError):  # 404/409: gone or recreated meanwhile
                await self.api.delete(node.rk.path(ns, name), {
                    "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": d.policy,
                    "preconditions": {"uid": key}})
        elif d.action is Action.REMOVE_REFS:
            await self._remove_refs(node, set(d.remove))
        if any(s is OwnerState.UNKNOWN for s in states.values()):
            return self.rediscover_period  # look again once the owner's kind may be known
        return None

    async def _remove_refs(self, node: _Node, uids: set[str]) -> None:
        meta = node.obj.get("metadata") or {}
        keep = [r for r in meta.get("ownerReferences") or [] if r.get("uid") not in uids]
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name", ""))
        try:
            await self.api.patch(node.rk.path(ns, name),
                                 {"metadata": {"ownerReferences": keep or None, "uid": meta.get("uid")}}, "merge")
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    async def _orphan(self, uid: str, node: _Node) -> None:
        for dep in self._dependents_of(uid):
            await self._remove_refs(dep, {uid})
        await self._drop_finalizer(node, ORPHAN)

    async def _foreground(self, uid: str, node: _Node) -> float | None:
        deps = self._dependents_of(uid)
        for d in deps:
            self.queue.add(str(d.obj["metadata"]["uid"]))
        if blocking_dependents(uid, [d.obj for d in deps]):
            return 2.0  # dependent deletions are observed through the informers; this is a safety net
        await self._drop_finalizer(node, FOREGROUND)
        return None

    async def _drop_finalizer(self, node: _Node, finalizer: str) -> None:
        meta = node.obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name", ""))
        fins = [f for f in meta.get("finalizers") or [] if f != finalizer]
        try:
            await self.api.patch(node.rk.path(ns, name), {"metadata": {
                "finalizers": fins or None, "resourceVersion": meta.get("resourceVersion")}}, "merge")
        except ApiError as e:
            if e.status == 404:
                return
            raise  # 409: retried with the newer object
