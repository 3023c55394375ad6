"""Pods bound to this node, from the API server (upstream ``config/apiserver.go`` + a reflector).

Design: a reflector loop — LIST ``/api/v1/pods?fieldSelector=spec.nodeName=<node>``, then WATCH
from the list's resourceVersion; every event updates a local store (uid → pod) and the complete
store is handed to ``PodConfig.set("api", ...)``, which diffs it into ADD/UPDATE/DELETE/REMOVE/
RECONCILE (upstream uses an UndeltaStore pushing SET the same way).

Upstream reflector behaviour followed:
- each watch event hands PodConfig the change of that one pod (``PodConfig.update``/``remove``);
  only a (re)list hands over the whole store, which PodConfig diffs against what it had;
- a watch that ends (server timeout, ``timeoutSeconds`` of 5-10 min) or breaks is resumed from the
  last resourceVersion seen (including BOOKMARK events), so nothing is missed and nothing relisted;
- 410 Gone/Expired (the resourceVersion is too old) → full relist; pods that vanished while we were
  away disappear from the store, so PodConfig emits REMOVE for them;
- errors back off exponentially (0.8 s doubling to 30 s, starting over after 2 minutes without a
  failure) and are logged, never raised;
- mirror pods (annotation ``kubernetes.io/config.mirror``) are not sent: the kubelet runs the static
  pod from the file source, the mirror is only its reflection in the API;
- optional ``resync_period`` forces a relist periodically (upstream kubelet uses 0 = never; it is
  exposed for resilience against a server that silently drops events).

Memory: the decoded pods are the agent's largest data (the store, whose objects PodConfig's state
and the engine share). ``json`` makes a new object for every value, so 1,000 pods held 1,000 copies
of "imagePullPolicy", of each toleration, of each managedFields tree..., and every watch event of a
pod a whole new tree although a status write changes a few fields. :func:`shared_copy` rebuilds each
pod as it arrives with its strings interned and every part equal to the same part of a *model*
replaced by the model's object: the model is the pod's previous version (a MODIFIED event shares all
that did not change with the object the engine already holds) and, for a new pod or a part the
previous version lacks (the managedFields entry of the kubelet's first status write), the pod
stored just before it (pods of one ReplicaSet, or of a burst, share their spec's unchanged parts,
their managedFields trees, their tolerations). Replaying the watch events of a 1,000-pod start in
process, the store, PodConfig's state and the engine's pods cost 7.6 kB per pod (22.6 kB with
interned strings only and the engine's deep copies). Sharing is safe because nothing writes a pod
after it arrived: the store replaces whole pods, PodConfig copies what it annotates, and the engine
never changes a pod (``tests/integration/agent/test_engine_never_changes_pods.py`` runs it over
frozen pods). Upstream's informer also hands the kubelet pointers to the objects it decoded, shared
read-only. Interned strings are freed with their last user, so unique values (uids, timestamps) do
not accumulate.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
import random
import sys
import time
from math import copysign
from typing import Any

import msgspec

from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.common.labels import API_SOURCE
from pykubelet.common.podutil import is_mirror_pod

from .podconfig import PodConfig

log = logging.getLogger(__name__)

Pod = dict[str, Any]
SOURCE = API_SOURCE
BACKOFF_RESET = 120.0  # seconds without a failure after which the back-off starts over


_NO_DICT: dict[str, Any] = {}  # "no model" placeholders: never returned, never written
_NO_LIST: list[Any] = []
_MISSING = object()
_dumps = marshal.dumps
_encode = msgspec.json.Encoder().encode


def shared_copy(obj: Any, model: Any = None, second: Any = None) -> Any:
    """``obj`` (decoded JSON: dicts, lists, scalars) rebuilt with every string key and value replaced
    by its interned instance and every part equal to the same part of ``model`` (same keys or
    indexes from the top) replaced by ``model``'s object; where ``model`` has no such part,
    ``second``'s is the model, and a part that differs from ``model``'s is first compared whole with
    ``second``'s. When all of ``obj`` equals ``model``, ``model`` itself. No argument is changed,
    and the result equals ``obj`` (same values, types and key order). Below the top, a part
    identical to its model (:func:`_identical`, in C) is not walked: a status write's event walks
    only the pod's metadata and status, a new pod of a burst only what differs from the pod before
    it (43 instead of 72 µs per event of a 1,000-pod start); parts with no model are walked once,
    interning their strings. The whole-part comparison with ``second`` serves the status writes of
    a burst: each pod's new status managedFields entry differs from its own previous one but
    equals the one of the pod written just before, so it is shared, not walked (status echoes of
    a 1,000-pod start: ~25 % less CPU in this function, 6.7 → 4.9 kB per pod for the store and
    PodConfig's state)."""
    t = type(obj)
    if t is dict:
        return _shared_dict(obj, model if type(model) is dict else second if type(second) is dict else _NO_DICT,
                            second if type(model) is dict and type(second) is dict else _NO_DICT)
    if t is list:
        return _shared_list(obj, model if type(model) is list else second if type(second) is list else _NO_LIST,
                            second if type(model) is list and type(second) is list else _NO_LIST)
    if t is str:
        return sys.intern(obj)
    return model if type(model) is t and model == obj and (t is not float or _same_zero(obj, model)) else obj


def _same_zero(a: Any, b: Any) -> bool:
    """Two equal floats are the same number: only ``0.0`` and ``-0.0`` are equal and differ
    (``json`` keeps the sign; the engine would see the model's)."""
    return copysign(1.0, a) == copysign(1.0, b)


def _identical(obj: Any, model: Any) -> bool:
    """``obj`` and ``model`` (decoded JSON) are the same document: equal with the same types (``==``
    alone takes ``1``, ``1.0`` and ``True`` for one another) and the same key order (``==`` ignores
    it). ``==`` first: a deep compare in C that stops at the first difference, so the parts that
    changed cost little to reject. When equal, their JSON encodings (msgspec, in C, ~3x cheaper
    than ``marshal``) settle the rest: ``1``, ``1.0``, ``true``, ``0.0`` and ``-0.0`` are written
    differently, keys in their order; equal values that encode alike (``inf`` and ``nan`` as
    ``null``) are the same value, as ``==`` already said. What msgspec cannot write (a lone surrogate
    that ``json`` decoded) goes to ``marshal`` format 2 (no references, no interning marks: the bytes
    depend on the values, their types and order only). The model's own strings are interned
    already, so reusing it loses nothing."""
    if obj != model:  # also False for the "no model" placeholders unless obj is empty
        return False
    try:
        return _encode(obj) == _encode(model)
    except (ValueError, TypeError, msgspec.EncodeError):
        return _dumps(obj, 2) == _dumps(model, 2)


def _shared_dict(obj: dict[str, Any], model: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    intern = sys.intern
    get = model.get
    get2 = second.get
    same = model is not _NO_DICT and len(obj) == len(model)
    out: dict[str, Any] = {}
    for k, v in obj.items():
        m = own = get(k, _MISSING)  # ``m`` may become ``second``'s part; "same" means ``own``
        t = type(v)
        if t is str:
            v = intern(v)
        elif t is dict:
            m2 = get2(k)
            if type(m) is not dict:
                m, m2 = (m2, _NO_DICT) if type(m2) is dict else (_NO_DICT, _NO_DICT)
            elif type(m2) is not dict:
                m2 = _NO_DICT
            if v:
                v = (m if _identical(v, m) else m2 if m2 is not _NO_DICT and _identical(v, m2)
                     else _shared_dict(v, m, m2))
            elif not m and m is not _NO_DICT:  # the many empty leaves of managedFields
                v = m
        elif t is list:
            m2 = get2(k)
            if type(m) is not list:
                m, m2 = (m2, _NO_LIST) if type(m2) is list else (_NO_LIST, _NO_LIST)
            elif type(m2) is not list:
                m2 = _NO_LIST
            v = (m if v and _identical(v, m) else m2 if v and m2 is not _NO_LIST and _identical(v, m2)
                 else _shared_list(v, m, m2))
        elif type(m) is t and m == v and (t is not float or _same_zero(v, m)):
            v = m
        if v is not own:
            same = False
        out[intern(k) if type(k) is str else k] = v
    if same and (len(out) < 2 or list(out) == list(model)):
        return model
    return out


def _shared_list(obj: list[Any], model: list[Any], second: list[Any]) -> list[Any]:
    intern = sys.intern
    n, n2 = len(model), len(second)
    same = model is not _NO_LIST and len(obj) == n
    out: list[Any] = []
    for i, v in enumerate(obj):
        m = own = model[i] if i < n else _MISSING
        t = type(v)
        if t is str:
            v = intern(v)
        elif t is dict:
            m2 = second[i] if i < n2 else _NO_DICT
            if type(m) is not dict:
                m, m2 = (m2, _NO_DICT) if type(m2) is dict else (_NO_DICT, _NO_DICT)
            elif type(m2) is not dict:
                m2 = _NO_DICT
            if v:
                v = (m if _identical(v, m) else m2 if m2 is not _NO_DICT and _identical(v, m2)
                     else _shared_dict(v, m, m2))
            elif not m and m is not _NO_DICT:
                v = m
        elif t is list:
            m2 = second[i] if i < n2 else _NO_LIST
            if type(m) is not list:
                m, m2 = (m2, _NO_LIST) if type(m2) is list else (_NO_LIST, _NO_LIST)
            elif type(m2) is not list:
                m2 = _NO_LIST
            v = (m if v and _identical(v, m) else m2 if v and m2 is not _NO_LIST and _identical(v, m2)
                 else _shared_list(v, m, m2))
        elif type(m) is t and m == v and (t is not float or _same_zero(v, m)):
            v = m
        if v is not own:
            same = False
        out.append(v)
    return model if same else out


class ApiServerSource:
    """List+watch of this node's pods."""

    def __init__(
        self,
        api: ApiClient,
        node_name: str,
        config: PodConfig,
        *,
        resync_period: float = 0.0,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff_max: float = 30.0,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.config = config
        self.resync_period = resync_period
        self.watch_timeout = watch_timeout
        self.backoff_max = backoff_max
        self.resource_version: str | None = None
        self.store: dict[str, Pod] = {}
        self._last: Pod | None = None  # the pod stored last: the model of the next new pod
        self.lists = 0  # number of LISTs done (for tests/diagnostics)
        self._task: asyncio.Task[None] | None = None

    @property
    def _params(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self.node_name}"}

    def _mine(self, pod: Pod) -> bool:
        return (pod.get("spec") or {}).get("nodeName") == self.node_name

    def _push(self) -> None:
        self.config.set(SOURCE, [p for p in self.store.values() if not is_mirror_pod(p)])

    async def relist(self) -> None:
        lst = await self.api.list("/api/v1/pods", params=self._params)
        self.lists += 1
        store: dict[str, Pod] = {}
        for pod in lst.get("items") or []:
            uid = (pod.get("metadata") or {}).get("uid")
            if uid and self._mine(pod):
                pod.setdefault("apiVersion", "v1")  # the list's own object, before sharing
                pod.setdefault("kind", "Pod")
                store[uid] = self._shared(uid, pod)
        self.store = store
        self.resource_version = str((lst.get("metadata") or {}).get("resourceVersion") or "") or None
        self._push()

    def _shared(self, uid: str, pod: Pod) -> Pod:
        """``pod`` as the store keeps it: :func:`shared_copy` modelled on its previous version, or on
        the pod stored last when it is new (see the module docstring)."""
        model = self.store.get(uid)
        shared: Pod = shared_copy(pod, model, self._last) if model is not None else shared_copy(pod, self._last)
        self._last = shared
        return shared

    def apply_event(self, etype: str, obj: Pod) -> bool:
        """Apply one watch event to the store and hand the change of that one pod to PodConfig
        (never the whole store: a watch event costs O(1), not O(pods)); True when the store changed."""
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if etype == "BOOKMARK":
            return False
        uid = meta.get("uid")
        if not uid:
            return False
        if etype == "DELETED" or (etype in ("ADDED", "MODIFIED") and not self._mine(obj)):
            if self.store.pop(uid, None) is None:
                return False
            self.config.remove(SOURCE, uid)
            return True
        if etype in ("ADDED", "MODIFIED"):
            obj = self.store[uid] = self._shared(uid, obj)
            if is_mirror_pod(obj):
                self.config.remove(SOURCE, uid)  # the kubelet runs static pods from their file
            else:
                self.config.update(SOURCE, obj)
            return True
        return False

    async def _watch(self, deadline: float | None) -> None:
        timeout = random.randint(*self.watch_timeout)
        if deadline is not None:
            timeout = max(1, min(timeout, int(deadline - time.monotonic()) + 1))
        async for etype, obj in self.api.watch(
            "/api/v1/pods", resource_version=self.resource_version, params=self._params, timeout_seconds=timeout
        ):
            self.apply_event(etype, obj)
            if deadline is not None and time.monotonic() >= deadline:
                return

    async def run(self) -> None:
        initial = min(0.8, self.backoff_max)
        backoff = initial
        last_failure = float("-inf")
        next_resync: float | None = None
        while True:
            try:
                if self.resource_version is None or (next_resync is not None and time.monotonic() >= next_resync):
                    await self.relist()
                    next_resync = time.monotonic() + self.resync_period if self.resync_period > 0 else None
                await self._watch(next_resync)
                backoff = initial
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.status == 410:
                    log.info("pod watch expired (%s); relisting", e.message)
                    self.resource_version = None
                    continue
                backoff, last_failure = self._backoff(backoff, initial, last_failure)
                log.warning("pod list/watch for node %s failed: %s; retrying in %.1fs", self.node_name, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max)
            except Exception as e:
                backoff, last_failure = self._backoff(backoff, initial, last_failure)
                log.warning("pod list/watch for node %s failed: %r; retrying in %.1fs", self.node_name, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max)

    @staticmethod
    def _backoff(current: float, initial: float, last_failure: float) -> tuple[float, float]:
        """Upstream's reflector back-off manager: after 2 minutes without a failure, start over from
        the initial delay (a server restarted now and then must not leave a 30 s back-off behind)."""
        now = time.monotonic()
        return (initial if now - last_failure > BACKOFF_RESET else current), now

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="api-pod-source")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
