"""Go ``time.Duration`` text: parsing flags/config values and printing durations in messages.

Upstream components print durations with ``time.Duration.String()`` ("1m30s", "500ms", "0s") in
events, probe messages and serialised configuration, and read them with ``time.ParseDuration``.
Messages users compare with upstream's (``back-off 5m0s restarting failed container``, ``failed to
connect service … within 1s``) must print the same text, so both directions live here once.

Design: Python code carries durations as float seconds. ``format_duration`` rounds to whole
nanoseconds (Go's resolution) and then follows ``Duration.String`` exactly: under a second the
largest unit among ns/µs/ms with a trimmed decimal fraction; otherwise ``[<h>h][<m>m]<s>[.frac]s``
where the minutes appear whenever hours do ("1h0m0s"); a leading "-" for negative values.
``parse_duration`` accepts Go's grammar (a signed sequence of decimal numbers with units
ns/us/µs/ms/s/m/h; a bare "0" is the only unit-less string) and, for Python callers, plain numbers
as seconds. Kubectl's human-readable ages ("5m", "3d") are a different format and live with the
table printer.
"""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")

_NS_PER_S = 1_000_000_000


def parse_duration(value: str | float | int) -> float:
    """Parse a Go duration ("1h2m3.5s", "300ms", "0") into float seconds.

    Bare numbers are accepted as seconds for convenience in Python callers; strings must follow
    Go's ``time.ParseDuration`` grammar (a bare "0" is the only unit-less string allowed).
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    s = value.strip()
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {value!r}")
    pos = 0
    total = 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {value!r} (expected e.g. '10s', '1m30s', '500ms')")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def _split_frac(value: int, digits: int) -> tuple[int, str]:
    """(integer part, ".fraction" with trailing zeros trimmed or "") of value / 10**digits."""
    whole, frac = divmod(value, 10**digits)
    text = f"{frac:0{digits}d}".rstrip("0")
    return whole, ("." + text if text else "")


def format_duration(seconds: float) -> str:
    """Go ``time.Duration.String()`` of float seconds: "1m30s", "500ms", "1h0m0s", "0s"."""
    ns = round(seconds * _NS_PER_S)
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u == 0:
        return "0s"
    if u < 1000:
        return f"{sign}{u}ns"
    if u < 1_000_000:
        whole, frac = _split_frac(u, 3)
        return f"{sign}{whole}{frac}µs"
    if u < _NS_PER_S:
        whole, frac = _split_frac(u, 6)
        return f"{sign}{whole}{frac}ms"
    secs, frac = _split_frac(u, 9)
    mins, secs = divmod(secs, 60)
    out = f"{secs}{frac}s"
    if mins:
        hours, mins = divmod(mins, 60)
        out = f"{mins}m" + out
        if hours:
            out = f"{hours}h" + out
    return sign + out
