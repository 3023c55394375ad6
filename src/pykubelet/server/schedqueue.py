"""The dev scheduler's scheduling queue: active pods, backing-off pods and unschedulable pods.

Why.  Retrying every pod that did not fit on a timer turns 10,000 unschedulable pods into 10,000
scheduling attempts (and FailedScheduling event writes) every few seconds although nothing in
the cluster changed.  Upstream's ``PriorityQueue`` (``pkg/scheduler/internal/queue``) avoids that
with three sub-queues, and this class follows it:

- ``activeQ``: pods to try now (here FIFO: the dev scheduler has no priorities);
- ``backoffQ``: pods that failed recently; each failed attempt doubles the pod's backoff,
  from ``podInitialBackoffSeconds`` (1 s) up to ``podMaxBackoffSeconds`` (10 s), counted from
  the last attempt; a pod leaves backoffQ for activeQ when its backoff has elapsed;
- ``unschedulablePods``: pods that did not fit.  They stay there until a cluster event that may
  make them fit (a node added or changed in labels/taints/allocatable/readiness, a bound pod
  deleted or finished, a volume object changed: :meth:`move_all`), or until they have waited
  ``podMaxInUnschedulablePodsDuration`` (5 min), checked every 30 s as upstream's
  ``flushUnschedulablePodsLeftover``; then they go to backoffQ if still backing off, else activeQ;
- a "move request" that arrives while a pod is being tried (between :meth:`pop_all` and
  :meth:`unschedulable`) would be lost if the pod then went to unschedulablePods, so such a
  pod goes to backoffQ instead (upstream's ``moveRequestCycle`` vs ``schedulingCycle``).

Pure logic: no I/O, the clock is passed in (monotonic seconds), so the rules are unit-tested
directly; ``Scheduler`` calls it from its watch handlers and its loop.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

INITIAL_BACKOFF = 1.0  # podInitialBackoffSeconds
MAX_BACKOFF = 10.0  # podMaxBackoffSeconds
MAX_IN_UNSCHEDULABLE = 300.0  # podMaxInUnschedulablePodsDuration
LEFTOVER_FLUSH_INTERVAL = 30.0  # how often unschedulablePods is checked for pods waiting too long


def backoff_duration(attempts: int) -> float:
    """Backoff after ``attempts`` failed attempts: 1 s, 2 s, 4 s, 8 s, then 10 s."""
    d = INITIAL_BACKOFF
    for _ in range(1, attempts):
        d *= 2
        if d > MAX_BACKOFF:
            return MAX_BACKOFF
    return min(d, MAX_BACKOFF)


@dataclass
class _Entry:
    attempts: int = 0
    last_attempt: float = 0.0
    unschedulable_since: float | None = None  # set while in unschedulablePods
    backoff_until: float | None = None  # set while in backoffQ
    cycle: int = 0  # scheduling cycle of the last pop


class SchedulingQueue:
    """Keys (``ns/name``) of pods waiting to be scheduled, in exactly one of the three sub-queues."""

    def __init__(self, max_in_unschedulable: float = MAX_IN_UNSCHEDULABLE) -> None:
        self.max_in_unschedulable = max_in_unschedulable
        self.flush_interval = min(LEFTOVER_FLUSH_INTERVAL, max_in_unschedulable)
        self._entries: dict[str, _Entry] = {}
        self._active: dict[str, None] = {}  # insertion-ordered set
        self._backoff: list[tuple[float, str]] = []  # heap; stale rows skipped
        self._cycle = 0
        self._move_cycle = -1
        self._next_flush = 0.0
        self._parked: set[str] = set()  # keys in unschedulablePods

    # what is where -------------------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def is_unschedulable(self, key: str) -> bool:
        e = self._entries.get(key)
        return e is not None and e.unschedulable_since is not None

    def active_count(self) -> int:
        return len(self._active)

    def unschedulable_count(self) -> int:
        return len(self._parked)

    def backoff_count(self) -> int:
        return sum(1 for e in self._entries.values() if e.backoff_until is not None)

    # transitions ---------------------------------------------------------------------------
    def add(self, key: str) -> None:
        """A pod that needs scheduling appeared (or an attempt must be retried at once): activeQ,
        unless it already waits in one of the queues."""
        if key in self._entries:
            return
        self._entries[key] = _Entry()
        self._active[key] = None

    def activate(self, key: str) -> None:
        """Put ``key`` in activeQ now, wherever it waits (an API error on binding, not a misfit)."""
        e = self._entries.setdefault(key, _Entry())
        e.unschedulable_since = e.backoff_until = None
        self._parked.discard(key)
        self._active[key] = None

    def delete(self, key: str) -> None:
        """The pod is gone or no longer needs scheduling (bound, terminal): forget its attempts."""
        self._entries.pop(key, None)
        self._active.pop(key, None)
        self._parked.discard(key)

    def pop_all(self, now: float) -> list[str]:
        """Pods to try now, oldest first: activeQ after moving due backoffs and leftovers."""
        self.flush(now)
        keys = list(self._active)
        self._active.clear()
        self._cycle += 1
        for key in keys:
            self._entries[key].cycle = self._cycle
        return keys

    def unschedulable(self, key: str, now: float) -> None:
        """An attempt found no node: count it and park the pod until something changes."""
        e = self._entries.setdefault(key, _Entry())
        e.attempts += 1
        e.last_attempt = now
        self._active.pop(key, None)
        if self._move_cycle >= e.cycle:  # the cluster changed while this pod was being tried
            self._to_backoff_or_active(key, e, now)
        else:
            e.backoff_until = None
            e.unschedulable_since = now
            self._parked.add(key)

    def backoff(self, key: str, now: float) -> None:
        """An attempt failed with an error (not a misfit): count it and retry after the backoff."""
        e = self._entries.setdefault(key, _Entry())
        e.attempts += 1
        e.last_attempt = now
        self._active.pop(key, None)
        self._to_backoff_or_active(key, e, now)

    def move_all(self, now: float) -> None:
        """A cluster event that may make unschedulable pods fit: all of them leave unschedulablePods."""
        self._move_cycle = self._cycle
        for key in list(self._parked):
            self._to_backoff_or_active(key, self._entries[key], now)

    def flush(self, now: float) -> None:
        """Backoffs that have elapsed go to activeQ; every 30 s, pods that waited 5 min in
        unschedulablePods are moved as by a cluster event."""
        while self._backoff and self._backoff[0][0] <= now:
            until, key = heapq.heappop(self._backoff)
            e = self._entries.get(key)
            if e is not None and e.backoff_until == until:
                e.backoff_until = None
                self._active[key] = None
        if now >= self._next_flush:
            self._next_flush = now + self.flush_interval
            for key in list(self._parked):
                e = self._entries[key]
                if e.unschedulable_since is not None and now - e.unschedulable_since >= self.max_in_unschedulable:
                    self._to_backoff_or_active(key, e, now)

    def next_due(self, now: float) -> float | None:
        """Seconds until :meth:`flush` has something to do (None: only a cluster event or a new pod will)."""
        while self._backoff:
            until, key = self._backoff[0]
            e = self._entries.get(key)
            if e is not None and e.backoff_until == until:
                break
            heapq.heappop(self._backoff)
        due: list[float] = []
        if self._backoff:
            due.append(self._backoff[0][0])
        if self._parked:
            due.append(max(self._next_flush, now))
        return max(0.0, min(due) - now) if due else None

    def _to_backoff_or_active(self, key: str, e: _Entry, now: float) -> None:
        e.unschedulable_since = None
        self._parked.discard(key)
        until = e.last_attempt + backoff_duration(e.attempts) if e.attempts else now
        if until > now:
            e.backoff_until = until
            heapq.heappush(self._backoff, (until, key))
        else:
            e.backoff_until = None
            self._active[key] = None
