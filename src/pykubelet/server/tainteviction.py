"""Taint-based eviction: per-pod timers and bounded workers deleting pods from NoExecute-tainted nodes.

Upstream (pkg/controller/tainteviction, formerly the node lifecycle controller's
NoExecuteTaintManager; a separate controller since SeparateTaintEvictionController) watches nodes
and pods and, for every pod on a node with NoExecute taints, decides:
- a taint the pod does not tolerate: delete now;
- every taint tolerated: delete at the smallest ``tolerationSeconds`` of the tolerations used
  (never, if none of them sets one);
- no NoExecute taint left, or the pod now tolerates for ever: the scheduled deletion is cancelled
  (Normal event ``TaintManagerEviction`` "Cancelling deletion of Pod NS/NAME").
Scheduled deletions sit in a timed queue keyed by pod; when one fires the controller records the
Normal event ``TaintManagerEviction`` "Marking for deletion Pod NS/NAME", sets the pod condition
``DisruptionTarget=True`` (reason ``DeletionByTaintManager``, "Taint manager: deleting due to
NoExecute taint") and deletes the pod (graceful), retrying a failed attempt a few times.

Here the node lifecycle controller feeds this one from its own node and pod caches (one watch of
each, not two), so its monitoring pass only hands over taints: the pass stays O(nodes) whatever
the number of pods, and no node's health check waits for a deletion.  The start of a toleration is
the taint's ``timeAdded`` (so a restarted controller does not grant a fresh period).  Deletions run
in :data:`EVICTION_WORKERS` workers (upstream: 8 workers; its API client's QPS bounds the deletes).

Also here, shared with the node lifecycle controller: :class:`KeyQueue` (upstream's workqueue: a
key queued twice is processed once, never by two workers at the same time) and
:class:`EventRecorder` (upstream's event broadcaster: events are written in the background, never
awaited by the worker that records them, at most 1,000 queued -- more are dropped with a log line).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pykubelet.common.apiclient import ApiError
from pykubelet.common.timestamps import parse_time
from pykubelet.common.tolerations import matching_tolerations

log = logging.getLogger(__name__)

Obj = dict[str, Any]

EVICTION_WORKERS = 8  # upstream tainteviction UpdateWorkerSize
DELETE_RETRIES = 5  # upstream: attempts of addConditionAndDeletePod per firing
RETRY_AFTER = 1.0  # seconds before a pod whose deletion failed every attempt is tried again
EVENT_QUEUE_LIMIT = 1000  # upstream event broadcaster's queue
EVENT_WRITERS = 2
CONTROLLER_NAME = "node-controller"
TAINT_EVICTION_REASON = "TaintManagerEviction"


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _spec(o: Obj) -> Obj:
    return o.get("spec") or {}


# --- decisions ------------------------------------------------------------------------------


def noexecute_taints(node: Obj | None) -> list[Obj]:
    if node is None:
        return []
    return [t for t in _spec(node).get("taints") or [] if isinstance(t, dict) and t.get("effect") == "NoExecute"]


def _toleration_seconds(tol: Mapping[str, Any]) -> int | None:
    """A toleration's tolerationSeconds (None: forever; a malformed value counts as forever)."""
    value = tol.get("tolerationSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def eviction_time(pod: Obj, taints: list[Obj], now: datetime) -> datetime | None:
    """When the pod must be deleted because of NoExecute taints (None: never)."""
    noexec = [t for t in taints if t.get("effect") == "NoExecute"]
    if not noexec:
        return None
    tolerations = _spec(pod).get("tolerations") or []
    used: list[Mapping[str, Any]] = []
    for taint in noexec:
        match = matching_tolerations(tolerations, taint)
        if not match:
            return now
        used.extend(match)
    seconds = [s for s in (_toleration_seconds(t) for t in used) if s is not None]
    if not seconds:
        return None
    minimum = min(seconds)
    added = [parse_time(t.get("timeAdded")) for t in noexec]
    start = min((a for a in added if a is not None), default=now)
    if minimum <= 0:
        return start
    return start + timedelta(seconds=minimum)


def disruption_target_condition(now: datetime) -> Obj:
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastTransitionTime": fmt_time(now),
    }


# --- queues ---------------------------------------------------------------------------------


class KeyQueue:
    """Deduplicating FIFO of keys with upstream workqueue semantics (dirty / processing sets)."""

    def __init__(self) -> None:
        self._order: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._again: set[str] = set()  # added while being processed: queued once that ends
        self._nonempty = asyncio.Event()

    def add(self, key: str) -> None:
        if key in self._processing:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._order.append(key)
            self._nonempty.set()

    def __len__(self) -> int:
        return len(self._order)

    def busy(self) -> bool:
        return bool(self._order or self._processing)

    def take(self) -> str | None:
        if not self._order:
            self._nonempty.clear()
            return None
        key = self._order.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    async def get(self) -> str:
        while True:
            key = self.take()
            if key is not None:
                return key
            await self._nonempty.wait()

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)


async def run_workers(queue: KeyQueue, handle: Callable[[str], Awaitable[None]], count: int) -> None:
    """``count`` workers taking keys from ``queue`` for ever."""

    async def worker() -> None:
        while True:
            key = await queue.get()
            try:
                await handle(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("work on %s failed", key)
            finally:
                queue.done(key)

    await asyncio.gather(*(worker() for _ in range(count)))


async def drain(queue: KeyQueue, handle: Callable[[str], Awaitable[None]], count: int) -> None:
    """Process what is queued now with ``count`` in flight, in the caller's task (tests, shutdown)."""
    sem = asyncio.Semaphore(count)
    while len(queue):
        keys = [k for k in (queue.take() for _ in range(len(queue))) if k is not None]

        async def one(key: str) -> None:
            async with sem:
                try:
                    await handle(key)
                except Exception:
                    log.exception("work on %s failed", key)
                finally:
                    queue.done(key)

        await asyncio.gather(*(one(k) for k in keys))


class TimedKeys:
    """Keys each due at a time (upstream TimedWorkerQueue); a key is scheduled at most once."""

    def __init__(self) -> None:
        self._due: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, int, str]] = []
        self._seq = 0
        self.changed = asyncio.Event()

    def __contains__(self, key: str) -> bool:
        return key in self._due

    def when(self, key: str) -> datetime | None:
        return self._due.get(key)

    def schedule(self, key: str, at: datetime) -> None:
        self._due[key] = at
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, key))
        self.changed.set()

    def cancel(self, key: str) -> bool:
        return self._due.pop(key, None) is not None

    def pop_due(self, now: datetime) -> list[str]:
        out = []
        while self._heap and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            if self._due.get(key) == at:
                del self._due[key]
                out.append(key)
        return out

    def next_due(self) -> datetime | None:
        while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # cancelled or rescheduled
        return self._heap[0][0] if self._heap else None


# --- I/O ------------------------------------------------------------------------------------


class PodWriteApi(Protocol):
    async def create(self, path: str, body: Obj, params: Any = None) -> Obj: ...
    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Obj: ...
    async def delete(self, path: str, body: Obj | None = None, params: Any = None) -> Obj: ...


class EventRecorder:
    """Events on pods written in the background; recording never waits for the API."""

    def __init__(self, api: PodWriteApi, clock: Callable[[], datetime], component: str = CONTROLLER_NAME) -> None:
        self.api = api
        self.clock = clock
        self.component = component
        self._queue: deque[tuple[str, Obj]] = deque()
        self._nonempty = asyncio.Event()
        self._dropped = 0

    def record(self, pod: Obj, etype: str, reason: str, message: str) -> None:
        if len(self._queue) >= EVENT_QUEUE_LIMIT:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 100 == 0:
                log.warning("event queue full (%d events): dropping event %s for pod %s (%d dropped so far)",
                            EVENT_QUEUE_LIMIT, reason, _meta(pod).get("name"), self._dropped)
            return
        meta = _meta(pod)
        ns = str(meta.get("namespace") or "default")
        ts = fmt_time(self.clock())
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name', '')}.{secrets.token_hex(8)}", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns,
                               "name": meta.get("name", ""), "uid": meta.get("uid", "")},
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        self._queue.append((ns, body))
        self._nonempty.set()

    async def _write(self, ns: str, body: Obj) -> None:
        try:
            await self.api.create(f"/api/v1/namespaces/{ns}/events", body)
        except Exception as e:  # best effort, like upstream's recorder
            log.debug("event %s for %s/%s not recorded: %s", body["reason"], ns,
                      body["involvedObject"]["name"], e)

    async def run(self, writers: int = EVENT_WRITERS) -> None:
        async def writer() -> None:
            while True:
                if not self._queue:
                    self._nonempty.clear()
                    await self._nonempty.wait()
                    continue
                ns, body = self._queue.popleft()
                await self._write(ns, body)

        await asyncio.gather(*(writer() for _ in range(writers)))

    async def flush(self) -> None:
        while self._queue:
            ns, body = self._queue.popleft()
            await self._write(ns, body)


def pod_key(pod: Obj) -> str:
    m = _meta(pod)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


class TaintEvictionController:
    """Deletes pods from NoExecute-tainted nodes once their tolerations run out."""

    def __init__(
        self,
        api: PodWriteApi,
        *,
        get_pod: Callable[[str], Obj | None],
        get_node: Callable[[str], Obj | None],
        pods_on: Callable[[str], Iterable[tuple[str, Obj]]],
        recorder: EventRecorder,
        clock: Callable[[], datetime],
        workers: int = EVICTION_WORKERS,
    ) -> None:
        self.api = api
        self.get_pod = get_pod
        self.get_node = get_node
        self.pods_on = pods_on
        self.recorder = recorder
        self.clock = clock
        self.workers = workers
        self.timers = TimedKeys()
        self.queue = KeyQueue()
        self._taints: dict[str, list[Obj]] = {}  # node -> its NoExecute taints as last processed
        self._evicting: set[str] = set()  # fired: deleted or being deleted (never written twice)

    # inputs (called from the owner's caches; no I/O, no await) ---------------------------------

    def node_updated(self, name: str, node: Obj | None) -> None:
        """The node's NoExecute taints may have changed: re-decide its pods if they did."""
        taints = noexecute_taints(node)
        if taints == self._taints.get(name, []):
            return
        if taints:
            self._taints[name] = taints
        else:
            self._taints.pop(name, None)
        now = self.clock()
        for key, pod in self.pods_on(name):
            self._process(key, pod, taints, now)

    def pod_updated(self, key: str, pod: Obj | None) -> None:
        if pod is None:
            self._evicting.discard(key)
        if pod is None or _meta(pod).get("deletionTimestamp") or not _spec(pod).get("nodeName"):
            self.timers.cancel(key)  # gone or going: nothing to cancel out loud
            return
        taints = self._taints.get(str(_spec(pod).get("nodeName")), [])
        self._process(key, pod, taints, self.clock())

    def _process(self, key: str, pod: Obj, taints: list[Obj], now: datetime) -> None:
        if key in self._evicting:
            return
        if _meta(pod).get("deletionTimestamp"):
            self.timers.cancel(key)
            return
        when = eviction_time(pod, taints, now) if taints else None
        if when is None:
            self._cancel_with_event(key, pod)
            return
        if self.timers.when(key) == when:
            return
        self.timers.schedule(key, when)

    def _cancel_with_event(self, key: str, pod: Obj) -> None:
        if self.timers.cancel(key):
            self.recorder.record(pod, "Normal", TAINT_EVICTION_REASON, f"Cancelling deletion of Pod {key}")

    # work --------------------------------------------------------------------------------------

    def fire_due(self) -> None:
        for key in self.timers.pop_due(self.clock()):
            self._evicting.add(key)
            self.queue.add(key)

    async def _evict(self, key: str) -> None:
        pod = self.get_pod(key)
        if pod is None or _meta(pod).get("deletionTimestamp"):
            return
        now = self.clock()
        taints = noexecute_taints(self.get_node(str(_spec(pod).get("nodeName") or "")))
        when = eviction_time(pod, taints, now)
        if when is None or when > now:  # the taint went or changed meanwhile: decide again
            self._evicting.discard(key)
            self._process(key, pod, taints, now)
            return
        ns, name = key.split("/", 1)
        log.info("taint eviction: deleting pod %s", key)
        self.recorder.record(pod, "Normal", TAINT_EVICTION_REASON, f"Marking for deletion Pod {key}")
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        for attempt in range(DELETE_RETRIES):
            try:
                await self.api.patch(f"{path}/status", {"status": {"conditions": [disruption_target_condition(now)]}},
                                     "strategic")
                await self.api.delete(path)
                return
            except ApiError as e:
                if e.status == 404:
                    return
                err: Exception = e
            except Exception as e:
                err = e
            if attempt + 1 < DELETE_RETRIES:
                await asyncio.sleep(0.01)
        log.warning("taint eviction: deleting pod %s failed %d times (%s); trying again in %.0f s",
                    key, DELETE_RETRIES, err, RETRY_AFTER)
        self._evicting.discard(key)
        self.timers.schedule(key, now + timedelta(seconds=RETRY_AFTER))

    async def settle(self) -> None:
        """Fire what is due and delete it, in the caller's task (tests)."""
        self.fire_due()
        await drain(self.queue, self._evict, self.workers)

    async def run(self) -> None:
        async def timer() -> None:
            while True:
                self.fire_due()
                nxt = self.timers.next_due()
                wait = 1.0 if nxt is None else max(0.0, min(1.0, (nxt - self.clock()).total_seconds()))
                self.timers.changed.clear()
                try:
                    await asyncio.wait_for(self.timers.changed.wait(), timeout=wait)
                except TimeoutError:
                    pass

        await asyncio.gather(timer(), run_workers(self.queue, self._evict, self.workers))
