"""Pure formatting that matches crictl's output: truncated ids, "5 minutes ago", "1.24MB", tables.

crictl (cri-tools) prints with Go's ``text/tabwriter`` (columns padded to the widest cell plus three
spaces), ids cut to 13 characters after the ``sha256:`` prefix, times with go-units' HumanDuration
and sizes with HumanSizeWithPrecision (decimal units). Kept apart from the gRPC calls for tests.
"""

from __future__ import annotations

from collections.abc import Sequence

TRUNC = 13

_CONTAINER_STATES = {0: "Created", 1: "Running", 2: "Exited", 3: "Unknown"}
_SANDBOX_STATES = {0: "Ready", 1: "NotReady"}


def container_state(state: int) -> str:
    return _CONTAINER_STATES.get(state, "Unknown")


def sandbox_state(state: int) -> str:
    return _SANDBOX_STATES.get(state, "Unknown")


def truncate_id(id_: str, prefix: str = "", length: int = TRUNC) -> str:
    if prefix and id_.startswith(prefix):
        id_ = id_[len(prefix):]
    return id_[:length]


def human_duration(seconds: float) -> str:
    """go-units HumanDuration."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = s // 60
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = round(seconds / 3600)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // (24 * 7)} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // (24 * 30)} months"
    return f"{hours // (24 * 365)} years"


def ago(created_ns: int, now: float) -> str:
    return human_duration(max(0.0, now - created_ns / 1e9)) + " ago"


def _go_g(value: float, precision: int) -> str:
    """Go's %.{precision}g (no exponent for the magnitudes used here, trailing zeros dropped)."""
    text = f"{value:.{precision}g}"
    if "e" in text:
        text = f"{value:.{max(0, precision - len(str(int(value))))}f}"
    return text


def human_size(size: float, precision: int = 4) -> str:
    """go-units HumanSizeWithPrecision with decimal units (HumanSize uses precision 4)."""
    units = ["B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    i = 0
    while size >= 1000.0 and i < len(units) - 1:
        size /= 1000.0
        i += 1
    return f"{_go_g(size, precision)}{units[i]}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """text/tabwriter with minwidth 0, padding 3, as crictl configures it."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(header), *[list(r) for r in rows]]:
        cells = [cell.ljust(widths[i] + 3) if i < len(row) - 1 else cell for i, cell in enumerate(row)]
        lines.append("".join(cells).rstrip())
    return "\n".join(lines)


def split_image(tag_or_digest: str) -> tuple[str, str]:
    """``docker.io/library/busybox:1.36`` -> (repo, tag); ``repo@sha256:..`` -> (repo, digest)."""
    if "@" in tag_or_digest:
        repo, _, digest = tag_or_digest.partition("@")
        return repo, digest
    repo, sep, tag = tag_or_digest.rpartition(":")
    if not sep or "/" in tag:
        return tag_or_digest, "<none>"
    return repo, tag
