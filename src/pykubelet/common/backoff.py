"""Per-key exponential back-off with an injected clock (upstream client-go ``flowcontrol.Backoff``).

Shared code (like upstream's client-go utility): the agent's crash-loop and image-pull back-offs use it.

Used for CrashLoopBackOff (key = pod + container + spec hash, upstream ``GetStableKey``) and for
image pull back-off (key = pod + image). Semantics follow upstream exactly:

- ``next(key, event_time)``: first call (or after the entry expired) sets the delay to ``initial``,
  later calls double it up to ``maximum``; ``last_update`` becomes ``event_time``.
- ``is_in_backoff_since(key, event_time)``: True while ``now - event_time < delay``.
- an entry expires when ``event_time - last_update > 2 * maximum`` (10 minutes for 300 s): a
  container that ran that long restarts with the initial delay again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Entry:
    delay: float
    last_update: float


class Backoff:
    def __init__(
        self, initial: float = 10.0, maximum: float = 300.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[str, _Entry] = {}

    def _expired(self, event_time: float, last_update: float) -> bool:
        return event_time - last_update > 2 * self.maximum

    def get(self, key: str) -> float:
        e = self._entries.get(key)
        return e.delay if e else 0.0

    def next(self, key: str, event_time: float) -> float:
        e = self._entries.get(key)
        if e is None or self._expired(event_time, e.last_update):
            e = _Entry(self.initial, event_time)
            self._entries[key] = e
        else:
            e.delay = min(e.delay * 2, self.maximum)
            e.last_update = event_time
        return e.delay

    def is_in_backoff_since(self, key: str, event_time: float, now: float | None = None) -> bool:
        e = self._entries.get(key)
        if e is None:
            return False
        now = self.clock() if now is None else now
        if self._expired(now, e.last_update):
            return False
        return now - event_time < e.delay

    def reset(self, key: str) -> None:
        self._entries.pop(key, None)

    def gc(self) -> None:
        now = self.clock()
        for key in [k for k, e in self._entries.items() if self._expired(now, e.last_update)]:
            del self._entries[key]

    def remaining(self, key: str, event_time: float) -> float:
        e = self._entries.get(key)
        if e is None:
            return 0.0
        return max(0.0, e.delay - (self.clock() - event_time))
