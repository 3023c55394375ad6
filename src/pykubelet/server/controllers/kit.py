"""The controller kit: informers, a rate-limited work queue, expectations, events and a runner.

Every controller of the dev control plane is built the way upstream's kube-controller-manager
controllers are (client-go ``tools/cache`` + ``util/workqueue``), and the way kopf runs one queue
per object: *level-triggered*.  Watch events never carry the work; they only say "look at this
object again".  A worker then reads the current state from the informer caches and makes the world
match the spec.  Missing an event, handling one twice, or restarting therefore never loses work: the
next look at the object sees the whole current state.

Pieces (all asyncio, one loop, no threads):

- :class:`Informer` — list then watch one collection path over
  :class:`pykubelet.common.apiclient.ApiClient` into an in-memory cache keyed ``ns/name`` (``name``
  for cluster-scoped objects), calling ``on_add(obj)`` / ``on_update(old, new)`` /
  ``on_delete(obj)`` handlers.  A watch that ends with 410 Gone (resourceVersion too old) or any
  error relists (after a short back-off for errors) and replays the difference against the cache as
  add/update/delete calls, like client-go's Reflector + DeltaFIFO ``Replace``.  ``synced`` is set
  after the first list (``HasSynced``).  Handlers must be cheap and must not await: they enqueue keys.
- :class:`WorkQueue` — client-go's rate-limited queue semantics: a key is queued at most once
  (dedup, the "dirty" set); a key being processed is never handed to a second worker, and if it is
  added meanwhile it is processed again after ``done()``; ``add_after`` delays; ``add_rate_limited``
  applies :class:`ItemExponentialFailureRateLimiter` (per-key ``base * 2**failures`` capped at
  ``maximum``; 5 ms and 1000 s as upstream's ``DefaultControllerRateLimiter``), ``forget`` resets it.
- :class:`Expectations` — upstream ``ControllerExpectations``: after issuing N creates/deletes a
  controller waits until its informer has observed them (or a TTL passed) before it counts pods
  again, so it does not create the same replicas twice while the watch catches up.
- :class:`EventRecorder` — best-effort core/v1 Events with upstream's aggregation of repeats,
  written by a background task so recording never delays a reconcile (upstream's broadcaster).
- :class:`SharedInformers` — client-go's SharedInformerFactory: the controllers of one server share
  one list+watch per collection (ten controllers watching every pod would otherwise decode each pod
  event ten times). A controller built inside :func:`sharing` gets the shared informer from
  ``self.informer(path)``; its handlers are added to it (replayed as adds when it has synced
  already, as client-go does for a late handler) and removed when the controller stops, so a
  restarted controller never leaves its old handlers behind. :func:`follow` feeds the same shared
  informers to controllers written around a list+watch loop of their own (scheduler, node
  lifecycle, PV controller), so one decoded copy of each pod serves them all.
- :class:`Controller` — the runner: informers + queue + ``workers`` coroutines calling
  ``reconcile(key)``.  An exception re-queues the key rate-limited (logged); success ``forget``s
  it; ``reconcile`` may return seconds after which the key is looked at again (``AddAfter``).
  ``run()`` returns only by cancellation and stops every task it started before propagating it.

A controller subclass declares its informers in ``__init__`` (``self.informer(path)``), wires
handlers that call ``self.queue.add(key)``, and implements ``reconcile``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import logging
import random
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

from pykubelet.common.apiclient import ApiError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
AddHandler = Callable[[Obj], None]
UpdateHandler = Callable[[Obj, Obj], None]
DeleteHandler = Callable[[Obj], None]


class Api(Protocol):
    """The subset of ``ApiClient`` the kit and the controllers use."""

    async def get(self, path: str, params: Any = None) -> Obj: ...
    async def list(self, path: str, params: Any = None) -> Obj: ...
    async def create(self, path: str, body: Obj, params: Any = None) -> Obj: ...
    async def replace(self, path: str, body: Obj, params: Any = None) -> Obj: ...
    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Obj: ...
    async def delete(self, path: str, body: Obj | None = None, params: Any = None) -> Obj: ...
    def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
              timeout_seconds: int | None = None) -> Any: ...


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Obj) -> str:
    """``namespace/name`` or ``name`` (client-go ``MetaNamespaceKeyFunc``)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)``; namespace ``""`` for cluster-scoped keys."""
    ns, _, name = key.rpartition("/")
    return ns, name


# --- informer -------------------------------------------------------------------------------


class Informer:
    """List+watch one collection into a cache, calling handlers for each change."""

    def __init__(self, api: Api, path: str, *, params: dict[str, str] | None = None,
                 error_backoff: float = 1.0, watch_timeout: tuple[int, int] = (300, 600)) -> None:
        self.api = api
        self.path = path
        self.params = dict(params or {})
        self.cache: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.error_backoff = error_backoff
        self.watch_timeout = watch_timeout
        self._on_add: list[AddHandler] = []
        self._on_update: list[UpdateHandler] = []
        self._on_delete: list[DeleteHandler] = []
        self.resource_version: str | None = None

    def add_handlers(self, *, on_add: AddHandler | None = None, on_update: UpdateHandler | None = None,
                     on_delete: DeleteHandler | None = None) -> None:
        if on_add:
            self._on_add.append(on_add)
        if on_update:
            self._on_update.append(on_update)
        if on_delete:
            self._on_delete.append(on_delete)
        building = _BUILDING.get()
        if building is not None and building.factory.owns(self):
            building.handlers.append(_Handlers(self, on_add, on_update, on_delete, late=self.synced.is_set()))

    def remove_handlers(self, h: _Handlers) -> None:
        for fns, fn in ((self._on_add, h.on_add), (self._on_update, h.on_update), (self._on_delete, h.on_delete)):
            if fn is not None:
                with contextlib.suppress(ValueError):
                    fns.remove(fn)  # type: ignore[arg-type]

    # cache reads ----------------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        return self.cache.get(key)

    def items(self, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            return list(self.cache.values())
        prefix = namespace + "/"
        return [o for k, o in self.cache.items() if k.startswith(prefix)]

    # event application (also used by tests) ---------------------------------------------------

    def _call(self, fns: Iterable[Callable[..., None]], *args: Obj) -> None:
        for fn in fns:
            try:
                fn(*args)
            except Exception:  # a handler bug must not stop the informer
                log.exception("informer %s: handler failed", self.path)

    def apply(self, etype: str, obj: Obj) -> None:
        key = key_of(obj)
        if etype == "DELETED":
            old = self.cache.pop(key, None)
            self._call(self._on_delete, old if old is not None else obj)
            return
        old = self.cache.get(key)
        self.cache[key] = obj
        if old is None:
            self._call(self._on_add, obj)
        else:
            self._call(self._on_update, old, obj)

    def replace(self, items: list[Obj]) -> None:
        """A fresh list: objects missing from it are deleted, the others added/updated."""
        fresh = {key_of(o): o for o in items}
        for key in [k for k in self.cache if k not in fresh]:
            self._call(self._on_delete, self.cache.pop(key))
        for key, obj in fresh.items():
            prev = self.cache.get(key)
            self.cache[key] = obj
            if prev is None:
                self._call(self._on_add, obj)
            else:
                self._call(self._on_update, prev, obj)

    async def run(self) -> None:
        """List+watch forever (until cancelled); relist after 410 Gone and errors."""
        while True:
            try:
                lst = await self.api.list(self.path, self.params or None)
                self.replace([o for o in lst.get("items") or [] if isinstance(o, dict)])
                self.resource_version = (lst.get("metadata") or {}).get("resourceVersion")
                self.synced.set()
                while True:  # watches end normally after timeoutSeconds; resume from the last rv
                    async for etype, obj in self.api.watch(
                            self.path, resource_version=self.resource_version, params=self.params or None,
                            timeout_seconds=random.randint(*self.watch_timeout)):
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self.resource_version = str(rv)
                        if etype in ("ADDED", "MODIFIED", "DELETED"):
                            self.apply(etype, obj)
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.status == 410:
                    log.debug("informer %s: %s; relisting", self.path, e)
                    continue
                log.info("informer %s: %s; relisting in %.1fs", self.path, e, self.error_backoff)
                await asyncio.sleep(self.error_backoff)
            except Exception:
                log.exception("informer %s failed; relisting in %.1fs", self.path, self.error_backoff)
                await asyncio.sleep(self.error_backoff)


class _Handlers:
    """The handlers one controller added to a shared informer (to replay and to remove)."""

    def __init__(self, informer: Informer, on_add: AddHandler | None, on_update: UpdateHandler | None,
                 on_delete: DeleteHandler | None, *, late: bool) -> None:
        self.informer = informer
        self.late = late  # added after the informer's first list: it missed those adds
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete


class SharedInformers:
    """One :class:`Informer` per (path, params) for all the controllers built with :func:`sharing`."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._informers: dict[tuple[str, tuple[tuple[str, str], ...]], Informer] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def informer(self, path: str, **kw: Any) -> Informer:
        params: dict[str, str] = dict(kw.pop("params", None) or {})
        key = (path, tuple(sorted(params.items())))
        inf = self._informers.get(key)
        if inf is None:
            inf = self._informers[key] = Informer(self.api, path, params=params, **kw)
        return inf

    def owns(self, inf: Informer) -> bool:
        return any(i is inf for i in self._informers.values())

    def start(self, inf: Informer) -> None:
        """Run ``inf`` (once, for every controller that uses it) until :meth:`close`."""
        task = self._tasks.get(id(inf))
        if task is None or task.done():
            self._tasks[id(inf)] = asyncio.get_running_loop().create_task(inf.run(), name=f"shared:{inf.path}")

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


EventHandler = Callable[[str, Obj], None]


async def follow(factory: SharedInformers, path: str, handler: EventHandler,
                 on_synced: Callable[[], None] | None = None) -> None:
    """Feed ``handler(type, obj)`` from ``factory``'s informer of ``path`` until cancelled.

    For the controllers written around their own list+watch loop (scheduler, node lifecycle, PV
    controller): they get the events of the one shared watch, so a pod is decoded and cached once
    for all of them instead of once each. Objects in the shared cache are shared: handlers must not
    change them. A relist's difference arrives as ADDED / MODIFIED / DELETED, as a relist of their
    own would. ``on_synced`` is called once the cache holds the first list (its objects already
    handed over as ADDED). The handlers are removed when the caller is cancelled.
    """
    inf = factory.informer(path)
    h = _Handlers(inf, lambda o: handler("ADDED", o), lambda _old, new: handler("MODIFIED", new),
                  lambda o: handler("DELETED", o), late=inf.synced.is_set())
    inf.add_handlers(on_add=h.on_add, on_update=h.on_update, on_delete=h.on_delete)
    try:
        if h.late:  # the informer listed before this follower came: replay its cache as adds
            for obj in list(inf.cache.values()):
                handler("ADDED", obj)
        factory.start(inf)
        await inf.synced.wait()
        if on_synced is not None:
            on_synced()
        await asyncio.Future()  # events arrive through the handlers until cancelled
    finally:
        inf.remove_handlers(h)


class _Building:
    def __init__(self, factory: SharedInformers) -> None:
        self.factory = factory
        self.handlers: list[_Handlers] = []


_BUILDING: contextvars.ContextVar[_Building | None] = contextvars.ContextVar("kit_building", default=None)


@contextlib.contextmanager
def sharing(factory: SharedInformers) -> Iterator[_Building]:
    """Controllers constructed inside this block use ``factory``'s informers."""
    building = _Building(factory)
    token = _BUILDING.set(building)
    try:
        yield building
    finally:
        _BUILDING.reset(token)


# --- work queue -----------------------------------------------------------------------------


class ItemExponentialFailureRateLimiter:
    """Per-key ``base * 2**failures`` capped at ``maximum`` (client-go, same defaults)."""

    def __init__(self, base: float = 0.005, maximum: float = 1000.0) -> None:
        self.base = base
        self.maximum = maximum
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if n > 62:
            return self.maximum
        return min(self.base * (2 ** n), self.maximum)

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)


class WorkQueue:
    """client-go's rate-limiting work queue on asyncio (keys are strings)."""

    def __init__(self, rate_limiter: ItemExponentialFailureRateLimiter | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate_limiter = rate_limiter or ItemExponentialFailureRateLimiter()
        self.clock = clock
        self._queue: list[str] = []
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._waiting: list[tuple[float, int, str]] = []  # (ready_at, seq, key)
        self._seq = itertools.count()
        self._waiters: list[asyncio.Future[None]] = []
        self._shutdown = False
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def add(self, key: str) -> None:
        """Queue ``key`` unless it is queued already; if a worker has it, once it is done."""
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._notify()

    def add_after(self, key: str, delay: float) -> None:
        if self._shutdown:
            return
        if delay <= 0:
            self.add(key)
            return
        heapq.heappush(self._waiting, (self.clock() + delay, next(self._seq), key))
        self._arm_timer()

    def add_rate_limited(self, key: str) -> None:
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: str) -> None:
        self.rate_limiter.forget(key)

    def num_requeues(self, key: str) -> int:
        return self.rate_limiter.num_requeues(key)

    def _promote_due(self) -> None:
        now = self.clock()
        while self._waiting and self._waiting[0][0] <= now:
            _, _, key = heapq.heappop(self._waiting)
            self.add(key)

    def _arm_timer(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiting:
            delay = max(0.0, self._waiting[0][0] - self.clock())
            self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._promote_due()
        self._arm_timer()

    def get_nowait(self) -> str | None:
        self._promote_due()
        if not self._queue:
            return None
        key = self._queue.pop(0)
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    async def get(self) -> str | None:
        """The next key to process (this worker owns it until ``done``); ``None`` after shutdown."""
        while True:
            if self._shutdown:
                return None
            key = self.get_nowait()
            if key is not None:
                return key
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._notify()

    def shutdown(self) -> None:
        self._shutdown = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._notify()


# --- expectations ---------------------------------------------------------------------------


class Expectations:
    """Upstream ``ControllerExpectations``: outstanding creates/deletes per controller key."""

    TTL = 300.0  # upstream ExpectationsTimeout: 5 minutes

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._e: dict[str, tuple[int, int, float]] = {}

    def expect(self, key: str, adds: int = 0, dels: int = 0) -> None:
        self._e[key] = (adds, dels, self.clock())

    def raise_expectations(self, key: str, adds: int = 0, dels: int = 0) -> None:
        a, d, t = self._e.get(key, (0, 0, self.clock()))
        self._e[key] = (a + adds, d + dels, t)

    def creation_observed(self, key: str) -> None:
        if key in self._e:
            a, d, t = self._e[key]
            self._e[key] = (a - 1, d, t)

    def deletion_observed(self, key: str) -> None:
        if key in self._e:
            a, d, t = self._e[key]
            self._e[key] = (a, d - 1, t)

    def satisfied(self, key: str) -> bool:
        e = self._e.get(key)
        if e is None:
            return True
        a, d, t = e
        return (a <= 0 and d <= 0) or self.clock() - t > self.TTL

    def delete(self, key: str) -> None:
        self._e.pop(key, None)


# --- events ---------------------------------------------------------------------------------


class EventRecorder:
    """Best-effort core/v1 Events from ``component``; repeats bump ``count`` as upstream's.

    Like upstream's broadcaster, recording never blocks the controller: ``event`` queues the event
    and returns; one sender task (started on first use, stopped by ``close``) writes them in order.
    A full queue (1000, upstream's size) drops events with a log line.
    """

    def __init__(self, api: Api, component: str) -> None:
        self.api = api
        self.component = component
        self._last: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._pending: asyncio.Queue[tuple[Obj, str, str, str, str]] = asyncio.Queue(maxsize=1000)
        self._sender: asyncio.Task[None] | None = None

    async def event(self, obj: Obj, etype: str, reason: str, message: str) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_loop(), name=f"events:{self.component}")
        try:
            self._pending.put_nowait((obj, etype, reason, message, now_rfc3339()))
        except asyncio.QueueFull:
            log.warning("%s: event queue full, dropping %s %s", self.component, reason, message)

    async def flush(self) -> None:
        """Wait until every queued event was written (tests)."""
        await self._pending.join()

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)

    async def _send_loop(self) -> None:
        while True:
            item = await self._pending.get()
            try:
                await self._write(*item)
            finally:
                self._pending.task_done()

    async def _write(self, obj: Obj, etype: str, reason: str, message: str, now: str) -> None:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        ident = (str(meta.get("uid", "")), reason, message)
        try:
            prev = self._last.get(ident)
            if prev is not None:
                with contextlib.suppress(ApiError):
                    await self.api.patch(f"/api/v1/namespaces/{ns}/events/{prev[0]}",
                                         {"count": prev[1] + 1, "lastTimestamp": now})
                    self._last[ident] = (prev[0], prev[1] + 1)
                    return
            name = f"{meta.get('name', '')}.{secrets.token_hex(8)}"
            await self.api.create(f"/api/v1/namespaces/{ns}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""),
                                   "namespace": ns, "name": meta.get("name", ""), "uid": meta.get("uid", ""),
                                   "resourceVersion": meta.get("resourceVersion", "")},
                "reason": reason, "message": message, "type": etype, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": self.component},
                "reportingComponent": self.component, "reportingInstance": "",
            })
            if len(self._last) > 4096:
                self._last.clear()
            self._last[ident] = (name, 1)
        except Exception:  # events are best effort, as upstream's recorder
            log.warning("recording event %s failed", reason, exc_info=True)


# --- controller runner ----------------------------------------------------------------------


class Controller:
    """Base: informers + a work queue + ``workers`` reconcile coroutines.

    Subclasses set ``name``, create informers with :meth:`informer` in ``__init__`` and implement
    :meth:`reconcile`.  ``from_options`` builds one from the server's ``controller_kwargs``.
    """

    name: ClassVar[str] = "controller"
    workers: int = 2

    def __init__(self, api: Api, *, workers: int | None = None) -> None:
        self.api = api
        if workers is not None:
            self.workers = workers
        self.queue = WorkQueue()
        self.informers: list[Informer] = []
        self.recorder = EventRecorder(api, self.name)
        building = _BUILDING.get()
        self._building = building  # its handler list fills while the subclass wires its informers

    @classmethod
    def from_options(cls, api: Api, options: dict[str, Any]) -> Controller:
        return cls(api)

    def informer(self, path: str, **kw: Any) -> Informer:
        inf = self._building.factory.informer(path, **kw) if self._building is not None else Informer(self.api, path, **kw)
        self.informers.append(inf)
        return inf

    def _shared(self, inf: Informer) -> bool:
        return self._building is not None and self._building.factory.owns(inf)

    def enqueue(self, obj: Obj) -> None:
        self.queue.add(key_of(obj))

    async def reconcile(self, key: str) -> float | None:
        """Make the object ``key`` match its spec; return seconds to look again, or None."""
        raise NotImplementedError

    async def wait_synced(self) -> None:
        for inf in self.informers:
            await inf.synced.wait()

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is None:
                return
            try:
                again = await self.reconcile(key)
            except asyncio.CancelledError:
                self.queue.done(key)
                raise
            except Exception as e:
                if isinstance(e, ApiError) and e.status == 409:
                    log.debug("%s: %s: conflict, retrying: %s", self.name, key, e)
                else:
                    log.warning("%s: syncing %s failed (retry %d): %s", self.name, key,
                                self.queue.num_requeues(key) + 1, e,
                                exc_info=not isinstance(e, ApiError))
                self.queue.done(key)
                self.queue.add_rate_limited(key)
                continue
            self.queue.forget(key)
            self.queue.done(key)
            if again is not None:
                self.queue.add_after(key, again)

    async def run(self) -> None:
        tasks = [asyncio.create_task(inf.run(), name=f"{self.name}:{inf.path}")
                 for inf in self.informers if not self._shared(inf)]
        mine = [h for h in self._building.handlers if h.informer in self.informers] if self._building else []
        for inf in self.informers:
            if self._shared(inf):
                if inf.synced.is_set():  # a late handler hears of what is there already (client-go)
                    for h in mine:
                        if h.informer is inf and h.late and h.on_add is not None:
                            for obj in list(inf.cache.values()):
                                h.on_add(obj)
                assert self._building is not None
                self._building.factory.start(inf)
        try:
            await self.wait_synced()
            tasks += [asyncio.create_task(self._worker(), name=f"{self.name}:worker{i}")
                      for i in range(self.workers)]
            await asyncio.gather(*tasks)
        finally:
            self.queue.shutdown()
            for h in mine:
                h.informer.remove_handlers(h)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.recorder.close()
