"""In-process lists and watches for the controllers that run inside the API server.

Upstream's kube-controller-manager and scheduler are separate processes: their informers list and
watch over HTTP. Here they run in the API server's own event loop, and over HTTP every event of the
shared informers cost a TLS round through the server's watch handler and the client's chunk parser
before the JSON was decoded. :class:`InProcessReads` serves the informers' ``list`` and ``watch``
of built-in collections from the store directly (the same objects, the same resourceVersions, the
same 410 Expired when a watch starts behind the history) and passes every other call (gets and all
writes, which need admission, validation and auth) to the wrapped API client.

What stays as over HTTP: each event is decoded from the store's compact JSON of that revision (the
bytes the HTTP watchers get), so every controller owns the objects it receives and can never change
the store's; objects are served as stored (built-in kinds carry kind and apiVersion); a watch ends
after its timeout and the informer resumes from its last resourceVersion. Not served here (the call
goes over HTTP): lists and watches with parameters (selectors), custom resources (their
presentation is per version), ``events.k8s.io`` (converted from core Events; but see below) and
anything that is not a collection path.

Removed, as client-go's ``TransformStripManagedFields`` does for kube-controller-manager's and the
scheduler's informers: ``metadata.managedFields``, which no controller reads and which is a large
share of each cached object. ``metadata_only=True`` serves what upstream's metadata informers
(``PartialObjectMetadata``) give the garbage collector: apiVersion, kind and metadata, copied from
the stored object without decoding the rest. Its ``events.k8s.io`` events are served here too:
they are the core Events under another presentation (``events_conv.from_core`` keeps the metadata
as stored, and uid, resourceVersion and ownerReferences are the object's), so their metadata is the
core Event's with ``apiVersion: events.k8s.io/v1``. Over HTTP that one watch cost, per Event, the
conversion, a watch line, its TLS write and the client's decoding of the whole Event (~0.06 ms of
the server's CPU per Event, a quarter of storing and delivering it; ``bench_hollow.py``'s nodes
and scheduler write 4-5 Events per pod).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server import jsonbytes
from pykubelet.server.controllers.kit import Api, Obj
from pykubelet.server.errors import StatusError
from pykubelet.server.resources import lookup
from pykubelet.server.storage import Storage, WatchEvent


def collection(path: str) -> tuple[str, str | None] | None:
    """``(storage key, namespace or None)`` of a built-in collection path served in-process,
    ``None`` for any other path."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns: str | None = None
    if len(rest) == 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if len(rest) != 1 or group == "events.k8s.io":
        return None
    ri = lookup(group, version, rest[0])
    if ri is None or ri.virtual or (ns is not None and not ri.namespaced):
        return None
    return ri.key, ns


# events.k8s.io/v1 Events: stored as core Events (one storage key, the same objects), presented
# converted; only their metadata is served in-process (module docstring)
_EVENTS_V1 = ("events.k8s.io", "v1", "events")


def metadata_collection(path: str) -> tuple[str, str | None, str | None] | None:
    """Like :func:`collection`, for metadata-only reads: ``(storage key, namespace or None,
    apiVersion to present or None for the stored one)``; ``events.k8s.io`` Events included."""
    target = collection(path)
    if target is not None:
        return target[0], target[1], None
    parts = path.strip("/").split("/")
    if len(parts) < 4 or parts[0] != "apis" or (parts[1], parts[2], parts[-1]) != _EVENTS_V1:
        return None
    if len(parts) == 4:
        return "events", None, "events.k8s.io/v1"
    if len(parts) == 6 and parts[3] == "namespaces" and parts[4]:
        return "events", parts[4], "events.k8s.io/v1"
    return None


def _decode(data: bytes) -> Obj:
    obj: Obj = jsonbytes.decode(data)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _metadata(obj: Obj, api_version: str | None = None) -> Obj:
    """apiVersion (``api_version`` when given), kind and a copy of the metadata (without
    managedFields) of a stored object."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": api_version or obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: _own(v) for k, v in meta.items() if k != "managedFields"}}


def _own(v: Any) -> Any:
    """``copy.deepcopy(v)`` of a metadata value: a string or number is the value itself (as
    ``deepcopy`` returns it), a map of strings (labels, annotations) a new map of the same
    strings, without ``deepcopy``'s dispatch and memo for each (the garbage collector's
    metadata informers copy every pod revision's and Event's metadata)."""
    t = type(v)
    if t is str or t is int or v is None or t is bool:
        return v
    if t is dict and all(type(x) is str for x in v.values()):
        return dict(v)
    return copy.deepcopy(v)


class InProcessReads:
    """An :class:`~pykubelet.server.controllers.kit.Api` whose lists and watches of built-in
    collections read ``store`` in this process; everything else goes to ``api``."""

    def __init__(self, api: Api, store: Storage, *, metadata_only: bool = False) -> None:
        self.api = api
        self.store = store
        self.metadata_only = metadata_only

    def _target(self, path: str, params: Any) -> tuple[str, str | None, str | None] | None:
        """``(storage key, namespace, apiVersion to present or None)`` when read here."""
        if params:
            return None
        if self.metadata_only:
            return metadata_collection(path)
        target = collection(path)
        return None if target is None else (target[0], target[1], None)

    def _object(self, resource: str, ns: str, name: str, obj: Obj, api_version: str | None = None) -> Obj | None:
        if self.metadata_only:
            return _metadata(obj, api_version)
        data = self.store.encoded(resource, ns, name)
        return None if data is None else _decode(data)

    # served here --------------------------------------------------------------------------------

    async def list(self, path: str, params: Any = None) -> Obj:
        target = self._target(path, params)
        if target is None:
            return await self.api.list(path, params)
        resource, ns, api_version = target
        items = []
        for (ons, name), stored in self.store.iter_raw(resource, ns):
            obj = self._object(resource, ons, name, stored, api_version)
            if obj is not None:
                items.append(obj)
        return {"items": items, "metadata": {"resourceVersion": str(self.store.revision)}}

    def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
              timeout_seconds: int | None = None) -> AsyncIterator[tuple[str, Obj]]:
        target = self._target(path, params)
        if target is None:
            return self.api.watch(path, resource_version=resource_version, params=params,  # type: ignore[no-any-return]
                                  timeout_seconds=timeout_seconds)
        return self._watch(*target, resource_version, timeout_seconds)

    async def _watch(self, resource: str, ns: str | None, api_version: str | None, resource_version: str | None,
                     timeout_seconds: int | None) -> AsyncIterator[tuple[str, Obj]]:
        try:
            since = int(resource_version) if resource_version not in (None, "", "0") else None
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid resourceVersion {resource_version!r}") from None
        try:
            w = self.store.watch(resource, ns, since)
        except StatusError as e:  # 410 Expired: the informer relists, as over HTTP
            raise ApiError(e.code, e.reason, e.message) from None
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_seconds):
                    while True:
                        ev: WatchEvent | None = await w.queue.get()
                        if ev is None:  # the store closed or ended the watch
                            return
                        yield ev.type, _metadata(ev.obj, api_version) if self.metadata_only else _decode(ev.encoded())
        finally:
            self.store.unwatch(w)

    # passed on ----------------------------------------------------------------------------------

    async def get(self, path: str, params: Any = None) -> Obj:
        return await self.api.get(path, params)

    async def create(self, path: str, body: Obj, params: Any = None) -> Obj:
        return await self.api.create(path, body, params)

    async def replace(self, path: str, body: Obj, params: Any = None) -> Obj:
        return await self.api.replace(path, body, params)

    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Obj:
        return await self.api.patch(path, body, patch_type, params)

    async def delete(self, path: str, body: Obj | None = None, params: Any = None) -> Obj:
        return await self.api.delete(path, body, params)
