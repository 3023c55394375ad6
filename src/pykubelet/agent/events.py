"""Event recorder (upstream client-go tools/record with the kubelet's settings).

``recorder.event(obj, type_, reason, message)`` never blocks and never raises: the event goes onto a
bounded in-memory queue and a background task writes it. Like upstream's ``EventCorrelator``:

- aggregation: events with the same key (involved object, type, reason, message, source) within
  10 minutes update the existing Event (``count`` + 1, ``lastTimestamp``) with a PATCH instead of
  creating a new one;
- spam filter: a token bucket per involved object (burst 25, one token per 5 minutes) drops excess;
- a failed write is retried a few times, then dropped with a log line;
- rate limit: the writes (creations and count PATCHes, retries included) share one token bucket of
  ``eventRecordQPS`` writes a second after a burst of ``eventBurst`` (kubelet defaults 50 and 100; a
  QPS of 0 means no limit), as upstream's kubelet builds its event client with that QPS and burst.
  A burst of pod starts (three events each) then leaves the API server to the pods' own writes:
  without it a 1,000-pod start wrote ~3,000 Events while the pods' statuses waited behind them, and
  the queue's bound (below) drops what the limit cannot write in time, as upstream's does.

With ``api=None`` (unit tests) events are only kept in ``recorder.recorded`` (bounded) and logged.
With an API client nothing is kept there: the Event is in the API, and the last 1,000 events
(reference dict, reason, message; ~0.2 kB each) were resident memory nobody read (issue 17's
110 pods at 60 MB).

Logging: each event is logged at debug level (``-v 4``), as upstream's kubelet logs its events
through ``StartStructuredLogging(3)``, below the default verbosity: the Event itself is in the API,
and a 1,000-pod start records ~4,000 of them. Like upstream's broadcaster (1,000 queued, then
``DropIfChannelFull``) a full queue drops the event; the drops are reported in one warning per
``DROP_REPORT_INTERVAL`` with their count (upstream logs each one), not 3,000 lines in a burst.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pykubelet.agent.status.generate import rfc3339
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiError

log = logging.getLogger(__name__)

AGGREGATE_WINDOW = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
DROP_REPORT_INTERVAL = 10.0  # seconds: at most one "event queue full" warning per interval


class _WriteLimiter:
    """client-go's token bucket (``flowcontrol.NewTokenBucketRateLimiter``), as a reservation:
    ``delay()`` takes a token and says how long to wait before the write it pays for. The bucket
    holds at most ``burst`` tokens and refills at ``qps`` a second; ``qps <= 0`` means no limit."""

    __slots__ = ("_last", "_tokens", "burst", "qps")

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = float(max(1, burst))  # a burst of 0 would refuse every write (rate.Limiter)
        self._tokens = self.burst
        self._last = time.monotonic()

    def delay(self, now: float) -> float:
        if self.qps <= 0:
            return 0.0
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps) - 1.0
        self._last = now
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


@dataclass(slots=True)
class _Seen:
    """An Event written in the aggregation window: its name, where, and its count so far."""

    name: str
    namespace: str
    count: int
    last_seen: float


class EventRecorder:
    def __init__(self, api: Any | None, *, component: str = "kubelet", host: str = "",
                 qps: float = 50.0, burst: int = 100) -> None:
        self.api = api
        self._limiter = _WriteLimiter(qps, burst)
        self.component = component
        self.host = host
        self.recorded: collections.deque[tuple[dict[str, Any], str, str, str]] = collections.deque(maxlen=1000)
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._seen: dict[tuple[str, ...], _Seen] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0  # events dropped because the queue was full (observability / tests)
        self._unreported = 0  # of those, not yet in a warning
        self._reported_at = float("-inf")

    # -- public API --------------------------------------------------------------------------
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        md = obj.get("metadata") or {}
        ref = {
            "kind": obj.get("kind") or "Pod",
            "apiVersion": obj.get("apiVersion") or "v1",
            "name": md.get("name", ""),
            "namespace": md.get("namespace", "") or ("default" if (obj.get("kind") or "Pod") == "Pod" else ""),
            "uid": md.get("uid", ""),
        }
        if md.get("resourceVersion"):
            ref["resourceVersion"] = md["resourceVersion"]
        log.debug("event %s %s/%s %s: %s", type_, ref["namespace"], ref["name"], reason, message)
        if self.api is None:
            self.recorded.append((ref, type_, reason, message))
            return
        if not self._allow(ref["uid"] or ref["name"]):
            return
        try:
            self._queue.put_nowait({"ref": ref, "type": type_, "reason": reason, "message": message,
                                    "ts": time.time()})
        except asyncio.QueueFull:
            self._dropped(reason, message)
            return
        self._ensure_task()

    def reasons_for(self, name: str) -> list[str]:
        return [r for ref, _t, r, _m in self.recorded if ref["name"] == name]

    async def flush(self, wait: float = 5.0) -> None:
        """Wait (at most ``wait`` seconds) until queued events are written."""
        try:
            async with asyncio.timeout(wait):
                await self._queue.join()
        except TimeoutError:
            pass

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    # -- internals ---------------------------------------------------------------------------
    def _dropped(self, reason: str, message: str) -> None:
        self.dropped += 1
        self._unreported += 1
        now = time.monotonic()
        if now - self._reported_at >= DROP_REPORT_INTERVAL:
            log.warning("event queue full (%d queued): dropped %d event(s) since the last report, "
                        "the last %s %s", self._queue.qsize(), self._unreported, reason, message)
            self._unreported = 0
            self._reported_at = now

    def _allow(self, key: str) -> bool:
        now = time.monotonic()
        tokens, last = self._buckets.get(key, (float(SPAM_BURST), now))
        tokens = min(float(SPAM_BURST), tokens + (now - last) * SPAM_QPS)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        return True

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            try:
                self._task = asyncio.get_running_loop().create_task(self._writer(), name="event-writer")
            except RuntimeError:
                pass

    async def _writer(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._write_retrying(item)
            finally:
                self._queue.task_done()

    async def _write_retrying(self, item: dict[str, Any]) -> None:
        for attempt in range(3):
            try:
                await self._write(item)
                return
            except Exception as e:  # any write failure (API error, connection loss): retry, then drop
                if attempt == 2:
                    log.warning("dropping event %s: %s", item["reason"], e)
                else:
                    await asyncio.sleep(0.5 * (attempt + 1))

    async def _paced(self) -> None:
        """Wait for the write's token (``eventRecordQPS`` / ``eventBurst``)."""
        delay = self._limiter.delay(time.monotonic())
        if delay > 0:
            await asyncio.sleep(delay)

    async def _write(self, item: dict[str, Any]) -> None:
        api = self.api
        assert api is not None
        ref = item["ref"]
        ns = ref["namespace"] or "default"
        key = (ref["kind"], ns, ref["name"], ref["uid"], item["type"], item["reason"], item["message"])
        now = rfc3339(item["ts"])
        seen = self._seen.get(key)
        if seen is not None and item["ts"] - seen.last_seen < AGGREGATE_WINDOW:
            seen.count += 1
            seen.last_seen = item["ts"]
            try:
                await self._paced()
                await api.patch(
                    f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                    {"count": seen.count, "lastTimestamp": now},
                    patch_type="merge",
                )
                return
            except ApiError as e:
                if e.status != 404:
                    raise
                # The Event expired (or was deleted): fall through and create a new one.
        name = f"{ref['name']}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": ref,
            "reason": item["reason"],
            "message": item["message"],
            "type": item["type"],
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        await self._paced()
        await api.create(f"/api/v1/namespaces/{ns}/events", body)
        self._seen[key] = _Seen(name, ns, 1, item["ts"])
        if len(self._seen) > 4096:
            cutoff = item["ts"] - AGGREGATE_WINDOW
            for k in [k for k, v in self._seen.items() if v.last_seen < cutoff]:
                del self._seen[k]
