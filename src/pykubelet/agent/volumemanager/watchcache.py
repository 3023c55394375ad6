"""ConfigMaps and Secrets read through one watch per referenced object (upstream
``pkg/kubelet/util/manager/watch_based_manager.go``, the ``Watch`` change detection strategy).

Upstream's kubelet does not GET a ConfigMap or Secret each time a pod's volume needs it: with
``configMapAndSecretChangeDetectionStrategy: Watch`` (the default) the first pod that references
``namespace/name`` starts a reflector on that one object (a LIST and a WATCH with
``fieldSelector=metadata.name=<name>``), every later read is answered from its store, and the watch is
stopped when the last pod referencing it is gone. The CA bundle ``kube-root-ca.crt`` that every
service-account token volume projects therefore costs one LIST and one WATCH per namespace, not one
GET per pod start and per refresh.

- ``get(kind, namespace, name, ref)`` records ``ref`` (the pod uid) as a reference, starts the watch
  when it is the first, waits for the first LIST (upstream waits for the reflector's sync), and
  answers the object or None (not found). The store then follows ADDED/MODIFIED/DELETED events, so a
  pod waiting for a missing object starts at its next retry after the object was created.
- A first LIST that fails raises to the reader (the same error a GET would give) and the entry is
  dropped, so the next read tries again; a watch that breaks after the sync is re-listed with a capped
  back-off while the last known object keeps being served (as a reflector does).
- ``release(ref)`` drops a pod's references (its volumes were torn down); ``stop()`` ends all watches.
- ``generation(key)`` counts the objects an entry's store received (from a LIST or an event), so the volume manager recomputes a volume only when an object
  it was made from changed (None once the entry is gone: recompute).

Objects are matched by name on the client side as well, so an API that ignores the field selector
still feeds each entry only its own object.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pykubelet.agent.types import JSONObj
from pykubelet.common.aio import cancel_and_wait

log = logging.getLogger(__name__)

RETRY_INITIAL = 1.0
RETRY_MAX = 30.0
WATCH_TIMEOUT = 300  # seconds a watch request asks the server to keep it open (re-watched after)

Key = tuple[str, str, str]  # plural, namespace, name


@runtime_checkable
class WatchApi(Protocol):
    """The verbs a reflector needs (``common.apiclient.ApiClient`` has them)."""

    async def list(self, path: str, params: Mapping[str, str] | None = None) -> JSONObj: ...

    def watch(self, path: str, *, resource_version: str | None = None, params: Mapping[str, str] | None = None,
              timeout_seconds: int | None = None) -> AsyncIterator[tuple[str, JSONObj]]: ...


def _name(obj: JSONObj) -> str:
    md = obj.get("metadata")
    return str(md.get("name", "")) if isinstance(md, dict) else ""


def _rv(obj: JSONObj) -> str | None:
    md = obj.get("metadata")
    rv = md.get("resourceVersion") if isinstance(md, dict) else None
    return str(rv) if rv else None


@dataclass
class _Entry:
    key: Key
    refs: set[str] = field(default_factory=set)
    obj: JSONObj | None = None
    synced: asyncio.Future[None] | None = None  # resolved (or failed) by the first LIST
    task: asyncio.Task[None] | None = None
    generation: int = 0  # bumped whenever ``obj`` becomes another object version

    def store(self, obj: JSONObj | None) -> None:
        """Every object the watch delivers counts as a change (a re-list after a broken watch costs
        one recomputation; nothing is missed)."""
        if obj is None and self.obj is None:
            return
        self.obj = obj
        self.generation += 1


class WatchedObjects:
    """The per-object watches and their stores; see the module docstring."""

    def __init__(self, api: WatchApi, *, retry_initial: float = RETRY_INITIAL, retry_max: float = RETRY_MAX,
                 on_list: Callable[[Key], None] | None = None) -> None:
        self.api = api
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.on_list = on_list
        self._entries: dict[Key, _Entry] = {}

    def watched(self) -> list[Key]:
        return list(self._entries)

    async def get(self, plural: str, namespace: str, name: str, ref: str) -> JSONObj | None:
        """The object as the watch last saw it, None when it does not exist; raises the first LIST's
        error when the watch could not be started."""
        key = (plural, namespace, name)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key, synced=asyncio.get_running_loop().create_future())
            entry.task = asyncio.get_running_loop().create_task(self._run(entry), name=f"watch-{plural}-{name}")
        entry.refs.add(ref)
        assert entry.synced is not None
        try:
            await asyncio.shield(entry.synced)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._entries.get(key) is entry:
                del self._entries[key]
            raise
        return entry.obj

    def generation(self, key: Key) -> int | None:
        """How many times the object of ``key`` changed since its watch started; None when unwatched."""
        entry = self._entries.get(key)
        return entry.generation if entry is not None else None

    def release(self, ref: str) -> None:
        """Drop ``ref``'s references; a watch nobody references any more stops."""
        for key, entry in list(self._entries.items()):
            entry.refs.discard(ref)
            if not entry.refs:
                del self._entries[key]
                if entry.task is not None:
                    entry.task.cancel()

    async def stop(self) -> None:
        entries = list(self._entries.values())
        self._entries.clear()
        await cancel_and_wait(*(e.task for e in entries))

    async def _run(self, entry: _Entry) -> None:
        plural, namespace, name = entry.key
        path = f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"
        params = {"fieldSelector": f"metadata.name={name}"}
        delay = self.retry_initial
        assert entry.synced is not None
        while True:
            try:
                if self.on_list is not None:
                    self.on_list(entry.key)
                listed = await self.api.list(path, params)
                items = [o for o in listed.get("items") or [] if isinstance(o, dict) and _name(o) == name]
                entry.store(items[0] if items else None)
                md = listed.get("metadata")
                rv = str(md.get("resourceVersion") or "") if isinstance(md, dict) else ""
                if not entry.synced.done():
                    entry.synced.set_result(None)
                delay = self.retry_initial
                while True:  # watch from the listed version; a stream the server ended is re-watched
                    started = asyncio.get_running_loop().time()
                    async for etype, obj in self.api.watch(path, resource_version=rv or None, params=params,
                                                           timeout_seconds=WATCH_TIMEOUT):
                        rv = _rv(obj) or rv
                        if etype == "BOOKMARK" or _name(obj) != name:
                            continue
                        if etype in ("ADDED", "MODIFIED"):
                            entry.store(obj)
                        elif etype == "DELETED":
                            entry.store(None)
                    if asyncio.get_running_loop().time() - started < self.retry_initial:
                        await asyncio.sleep(self.retry_initial)  # never a hot loop on a server closing at once
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not entry.synced.done():
                    entry.synced.set_exception(e)
                    entry.synced.exception()  # retrieved by the readers; never "never retrieved"
                    return
                log.info("watch of %s %s/%s ended (%s); listing again in %.0fs", plural, namespace, name, e, delay)
                await asyncio.sleep(delay)
                delay = min(self.retry_max, delay * 2)
