"""In-memory stand-in for the ApiClient methods the controllers call (list/watch/get/create/patch/delete)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

from pykubelet.common.apiclient import ApiError


def _merge(dst: dict[str, Any], patch: dict[str, Any], strategic: bool) -> None:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v, strategic)
        elif strategic and k == "conditions" and isinstance(v, list) and isinstance(dst.get(k), list):
            for c in v:
                for i, old in enumerate(dst[k]):
                    if old.get("type") == c.get("type"):
                        dst[k][i] = {**old, **c}
                        break
                else:
                    dst[k].append(c)
        else:
            dst[k] = copy.deepcopy(v)


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  # path -> object
        self.calls: list[tuple[str, str, Any]] = []
        self.watchers: dict[str, list[asyncio.Queue[tuple[str, dict[str, Any]]]]] = {}
        self.changed = asyncio.Condition()

    def put(self, path: str, obj: dict[str, Any], notify: str | None = None) -> None:
        self.objects[path] = copy.deepcopy(obj)
        if notify:
            self._notify(path, notify, obj)

    def _collection(self, path: str) -> str:
        return path.rsplit("/", 1)[0]

    def _notify(self, path: str, etype: str, obj: dict[str, Any]) -> None:
        coll = self._collection(path)
        for wpath, queues in self.watchers.items():
            if coll == wpath or (wpath == "/api/v1/pods" and "/pods/" in path):
                for q in queues:
                    q.put_nowait((etype, copy.deepcopy(obj)))

    async def _record(self, verb: str, path: str, body: Any) -> None:
        self.calls.append((verb, path, copy.deepcopy(body)))
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, pred: Any) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: pred(self)), 10)

    async def list(self, path: str, params: Any = None) -> dict[str, Any]:
        items = [
            copy.deepcopy(o)
            for p, o in self.objects.items()
            if self._collection(p) == path or (path == "/api/v1/pods" and "/pods/" in p and p.count("/") == 6)
        ]
        return {"items": items, "metadata": {"resourceVersion": "1"}}

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if path not in self.objects:
            raise ApiError(404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def watch(
        self, path: str, *, resource_version: str | None = None, params: Any = None, timeout_seconds: int | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        q: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.watchers.setdefault(path, []).append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self.watchers[path].remove(q)

    async def create(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        await self._record("create", path, body)
        if path.endswith("/binding"):
            pod_path = path.rsplit("/", 1)[0]
            pod = self.objects[pod_path]
            pod["spec"]["nodeName"] = body["target"]["name"]
            self._notify(pod_path, "MODIFIED", pod)
            return {"kind": "Status", "status": "Success"}
        name = body["metadata"]["name"]
        self.objects[f"{path}/{name}"] = copy.deepcopy(body)
        return body

    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> dict[str, Any]:
        await self._record("patch", path, body)
        target = path[: -len("/status")] if path.endswith("/status") else path
        if target not in self.objects:
            raise ApiError(404, "NotFound", f"{target} not found")
        _merge(self.objects[target], body, patch_type == "strategic")
        return copy.deepcopy(self.objects[target])

    async def replace(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        await self._record("replace", path, body)
        target = path[: -len("/status")] if path.endswith("/status") else path
        self.objects[target] = copy.deepcopy(body)
        return body

    async def delete(self, path: str, body: Any = None, params: Any = None) -> dict[str, Any]:
        await self._record("delete", path, body)
        obj = self.objects.pop(path, None)
        if obj is None:
            raise ApiError(404, "NotFound", f"{path} not found")
        self._notify(path, "DELETED", obj)
        return obj
