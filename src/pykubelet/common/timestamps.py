"""Kubernetes timestamps (RFC 3339 as ``metav1.Time`` writes them) read back into ``datetime``.

One parser for the control plane's controllers, Tables and node lifecycle: objects written by other
clients may carry fractional seconds, an offset instead of ``Z``, or garbage; garbage reads as
``None`` (callers treat the time as unknown) rather than raising, and a naive time is taken as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)
