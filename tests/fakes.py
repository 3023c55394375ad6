"""Fakes for the seams the code under test talks through: the Kubernetes API, events, clocks, CRI exec.

One fake per seam, shared by every test, so a test reads as behaviour ("the pod's status was
patched") rather than as a hand-rolled stub, and a change in a seam is made once.

- ``FakeApi`` stands in for ``pykubelet.common.apiclient.ApiClient``: objects live in a dict keyed by
  their API path, writes behave like the API server's (404/409 as ``ApiError``, JSON merge patch with
  ``null`` deleting a key, strategic merge of ``conditions`` by type, ``metadata.uid`` in a patch as a
  precondition, the ``binding`` subresource setting ``spec.nodeName``) and are recorded in ``calls``.
  Like client-go's fake clientset, *reactors* let a test answer a verb on a path itself (a
  TokenReview, a scripted LIST), and scripted watches replay events and errors before live ones.
- ``FakeEventRecorder`` records (type, reason, message) like ``agent.events.EventRecorder.event``.
- ``FakeClock`` is a callable clock the test moves by hand (no sleeping, no timing).
- ``FakeExecRuntime`` answers CRI ``ExecSync`` (probes and hooks) with a scripted result.
- ``FakeImageService`` answers CRI ``ImageStatus`` / ``PullImage`` from a set of present images.
- ``eventually`` polls a condition of a fake or of a real runtime until it holds (or times out).
- ``free_port`` is a loopback TCP port free right now, for a server a test starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from pykubelet.common.apiclient import ApiError
from pykubelet.cri import CRIClient, pb
from pykubelet.cri.client import Observer
from pykubelet.fakecri import FakeRuntime, serve

JSON = dict[str, Any]

# ------------------------------------------------------------------------------------------ the API


class ApiCall(NamedTuple):
    """One write to the fake API: verb is create, replace, patch or delete."""

    verb: str
    path: str
    body: Any


# A reactor answers (verb, path, body-or-params) itself; returning None lets the fake handle it.
Reactor = Callable[[str, str, Any], Any]


def _merge(dst: JSON, patch: JSON, strategic: bool) -> None:
    """RFC 7386 merge (null deletes, maps merge, lists replace); strategic merges conditions by type."""
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


def _not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"{path} not found")


class FakeApi:
    """In-memory ApiClient: objects by API path, writes recorded, optional reactors and watch scripts."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}  # API path -> object
        self.calls: list[ApiCall] = []  # every write, in order
        self.patch_types: list[str] = []  # the patch_type of each patch call
        self.lists: list[tuple[str, JSON]] = []  # (path, params) of each LIST
        self.watches: list[tuple[str, str | None]] = []  # (path, resource_version) of each WATCH
        # Each scripted watch replays its events, then raises its error (if any) or ends the stream;
        # once the scripts are used up, watches get live events and ``watch_scripts_done`` is set.
        self.watch_scripts: list[tuple[list[tuple[str, JSON]], Exception | None]] = []
        self.watch_scripts_done = asyncio.Event()
        self.resource_version = "1"
        self._reactors: list[tuple[str, str, Reactor]] = []
        self._watchers: dict[str, list[asyncio.Queue[tuple[str, JSON]]]] = {}
        self._changed = asyncio.Condition()

    # -- setting up
    def put(self, path: str, obj: JSON, notify: str | None = None) -> None:
        """Store an object as-is (no call recorded); ``notify`` sends that watch event (ADDED, ...)."""
        self.objects[path] = copy.deepcopy(obj)
        if notify:
            self._notify(path, notify, obj)

    def react(self, verb: str, path_suffix: str, reactor: Reactor) -> None:
        """Let ``reactor(verb, path, body)`` answer ``verb`` on paths ending with ``path_suffix``."""
        self._reactors.append((verb, path_suffix, reactor))

    # -- what the test reads back
    @property
    def created(self) -> list[Any]:
        return [c.body for c in self.calls if c.verb == "create"]

    @property
    def patched(self) -> list[tuple[str, Any]]:
        return [(c.path, c.body) for c in self.calls if c.verb == "patch"]

    @property
    def deleted(self) -> list[tuple[str, Any]]:
        return [(c.path, c.body) for c in self.calls if c.verb == "delete"]

    async def wait_for(self, pred: Callable[[FakeApi], bool], timeout: float = 10) -> None:  # noqa: ASYNC109
        """Wait until ``pred(api)`` holds; it is checked after every write."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: pred(self)), timeout)

    # -- internals
    def _react(self, verb: str, path: str, arg: Any) -> Any:
        for v, suffix, reactor in self._reactors:
            if v == verb and path.endswith(suffix):
                out = reactor(verb, path, arg)
                if out is not None:
                    return out
        return None

    @staticmethod
    def _collection(path: str) -> str:
        return path.rsplit("/", 1)[0]

    @staticmethod
    def _in_collection(obj_path: str, coll: str) -> bool:
        if FakeApi._collection(obj_path) == coll:
            return True
        # cluster-wide list of a namespaced resource: /api/v1/pods holds /api/v1/namespaces/*/pods/*
        parts, cparts = obj_path.split("/"), coll.split("/")
        return (len(cparts) == 4 and len(parts) == 7 and parts[3] == "namespaces"
                and parts[:3] == cparts[:3] and parts[5] == cparts[3])

    def _notify(self, path: str, etype: str, obj: JSON) -> None:
        for wpath, queues in self._watchers.items():
            if self._in_collection(path, wpath):
                for q in queues:
                    q.put_nowait((etype, copy.deepcopy(obj)))

    async def _record(self, verb: str, path: str, body: Any) -> None:
        self.calls.append(ApiCall(verb, path, copy.deepcopy(body)))
        async with self._changed:
            self._changed.notify_all()

    @staticmethod
    def _target(path: str) -> str:
        return path[: -len("/status")] if path.endswith("/status") else path

    # -- the ApiClient surface
    async def close(self) -> None:
        pass

    async def get(self, path: str, params: Any = None) -> JSON:
        reacted = self._react("get", path, params)
        if reacted is not None:
            return reacted  # type: ignore[no-any-return]
        target = self._target(path)
        if target not in self.objects:
            raise _not_found(path)
        return copy.deepcopy(self.objects[target])

    async def list(self, path: str, params: Any = None) -> JSON:
        self.lists.append((path, dict(params or {})))
        reacted = self._react("list", path, params)
        if reacted is not None:
            return reacted  # type: ignore[no-any-return]
        items = [copy.deepcopy(o) for p, o in self.objects.items() if self._in_collection(p, path)]
        return {"items": items, "metadata": {"resourceVersion": self.resource_version}}

    async def watch(
        self, path: str, *, resource_version: str | None = None, params: Any = None, timeout_seconds: int | None = None
    ) -> AsyncIterator[tuple[str, JSON]]:
        self.watches.append((path, resource_version))
        if self.watch_scripts:
            events, err = self.watch_scripts.pop(0)
            for ev in events:
                yield ev
            if err is not None:
                raise err
            return
        self.watch_scripts_done.set()
        q: asyncio.Queue[tuple[str, JSON]] = asyncio.Queue()
        self._watchers.setdefault(path, []).append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._watchers[path].remove(q)

    async def create(self, path: str, body: JSON, params: Any = None) -> JSON:
        await self._record("create", path, body)
        reacted = self._react("create", path, body)
        if reacted is not None:
            return reacted  # type: ignore[no-any-return]
        if path.endswith("/binding"):
            pod_path = self._collection(path)
            pod = self.objects[pod_path]
            pod["spec"]["nodeName"] = body["target"]["name"]
            self._notify(pod_path, "MODIFIED", pod)
            return {"kind": "Status", "status": "Success"}
        name = body["metadata"]["name"]
        if f"{path}/{name}" in self.objects:
            raise ApiError(409, "AlreadyExists", f"{path}/{name} already exists")
        self.objects[f"{path}/{name}"] = copy.deepcopy(body)
        self._notify(f"{path}/{name}", "ADDED", body)
        return copy.deepcopy(body)

    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> JSON:
        await self._record("patch", path, body)
        self.patch_types.append(patch_type)
        reacted = self._react("patch", path, body)
        if reacted is not None:
            return reacted  # type: ignore[no-any-return]
        target = self._target(path)
        if target not in self.objects:
            raise _not_found(target)
        obj = self.objects[target]
        uid = ((body.get("metadata") or {}).get("uid")) if isinstance(body, dict) else None
        if uid and uid != obj.get("metadata", {}).get("uid"):
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                           f"UID in object meta: {obj.get('metadata', {}).get('uid')}")
        _merge(obj, body, patch_type == "strategic")
        self._notify(target, "MODIFIED", obj)
        return copy.deepcopy(obj)

    async def replace(self, path: str, body: JSON, params: Any = None) -> JSON:
        await self._record("replace", path, body)
        reacted = self._react("replace", path, body)
        if reacted is not None:
            return reacted  # type: ignore[no-any-return]
        target = self._target(path)
        self.objects[target] = copy.deepcopy(body)
        self._notify(target, "MODIFIED", body)
        return copy.deepcopy(body)

    async def delete(self, path: str, body: Any = None, params: Any = None) -> JSON:
        await self._record("delete", path, body)
        reacted = self._react("delete", path, body)
        if reacted is not None:
            return reacted  # type: ignore[no-any-return]
        obj = self.objects.pop(path, None)
        if obj is None:
            raise _not_found(path)
        self._notify(path, "DELETED", obj)
        return obj


async def eventually(pred: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1) -> Any:  # noqa: ASYNC109
    """Poll ``pred()`` until it returns something truthy, and return that; TimeoutError otherwise."""
    async with asyncio.timeout(timeout):
        while not (v := pred()):  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(interval)
        return v


# --------------------------------------------------------------------------- events, clock, exec


class FakeEventRecorder:
    """Records events as (type, reason, message), the way agent.events.EventRecorder.event is called."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.objects: list[JSON] = []

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        self.objects.append(obj)
        self.events.append((type_, reason, message))

    @property
    def reasons(self) -> list[str]:
        return [reason for _t, reason, _m in self.events]


class FakeClock:
    """A clock (``clock() -> float``) that moves only when the test moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeMirrorClient:
    """Mirror pods (``interfaces.MirrorClient``) that the API refuses ``refusals`` times first, as it
    does before the node is registered (a mirror needs the Node's owner reference)."""

    def __init__(self, refusals: int = 0) -> None:
        self.refusals = refusals
        self.calls = 0
        self.mirrors: dict[tuple[str, str], JSON] = {}

    async def ensure_mirror(self, static_pod: JSON) -> JSON | None:
        self.calls += 1
        if self.calls <= self.refusals:
            return None
        md = static_pod.get("metadata") or {}
        key = (md.get("namespace") or "default", md.get("name") or "")
        return self.mirrors.setdefault(key, {"metadata": {"namespace": key[0], "name": key[1]}})

    async def delete_mirror(self, namespace: str, name: str, uid: str | None = None) -> bool:
        return self.mirrors.pop((namespace, name), None) is not None


class FakeExecRuntime:
    """CRI ExecSync with a scripted answer: exit code and output, an error, or never answering."""

    def __init__(self, exit_code: int = 0, stdout: bytes = b"", stderr: bytes = b"",
                 error: Exception | None = None, block: bool = False) -> None:
        self.exit_code, self.stdout, self.stderr, self.error, self.block = exit_code, stdout, stderr, error, block
        self.calls: list[tuple[str, list[str], int]] = []  # (container id, command, timeout)

    async def exec_sync(self, container_id: str, cmd: Any, timeout: int = 0) -> pb.ExecSyncResponse:  # noqa: ASYNC109
        self.calls.append((container_id, list(cmd), timeout))
        if self.block:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        return pb.ExecSyncResponse(stdout=self.stdout, stderr=self.stderr, exit_code=self.exit_code)


class FakeImageService:
    """CRI ImageStatus / PullImage over a set of present images; pulls recorded, or failing."""

    def __init__(self, present: set[str], fail: bool = False) -> None:
        self.present = present
        self.fail = fail
        self.pulls: list[tuple[str, Any]] = []  # (image, auth)

    async def image_status(self, image: str) -> pb.ImageStatusResponse:
        if image in self.present:
            return pb.ImageStatusResponse(image=pb.Image(id="sha256:" + image, size=10))
        return pb.ImageStatusResponse()

    async def pull_image(self, image: str, auth: Any = None, sandbox_config: Any = None) -> str:
        self.pulls.append((image, auth))
        if self.fail:
            raise RuntimeError("unreachable registry")
        self.present.add(image)
        return "sha256:" + image


@contextlib.asynccontextmanager
async def fake_cri(sock: str, runtime: FakeRuntime | None = None, *, call_timeout: float = 10,
                   observer: Observer | None = None) -> AsyncIterator[tuple[CRIClient, FakeRuntime]]:
    """The fake runtime served over gRPC on ``sock`` and a connected ``CRIClient``; both stopped on exit."""
    server, rt = await serve(sock, runtime)
    client = CRIClient(f"unix://{sock}", timeout=call_timeout, observer=observer)
    try:
        await client.connect(wait=5)
        yield client, rt
    finally:
        await client.close()
        await server.stop(1)  # lets a handler still sending its answer finish (no task outlives the test)


def free_port() -> int:
    """A loopback TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
