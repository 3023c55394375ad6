"""Container log reading for ``/containerLogs`` (the CRI log format).

Upstream (pkg/kubelet/kuberuntime/logs) reads the file the runtime writes at
``ContainerStatus.log_path``. Each line is ``<RFC3339Nano> <stdout|stderr> <tags> <message>\\n``
where tags is ``F`` (full line) or ``P`` (partial: the runtime split a long line, the next
entries continue it). We follow the same options as upstream ``PodLogOptions``:

* ``tailLines`` counts *logical* lines (partial chunks joined), read from the end of the file;
* ``sinceSeconds``/``sinceTime`` drop entries whose runtime timestamp is older;
* ``timestamps`` prefixes each logical line with the runtime's timestamp (of its first chunk; upstream
  prefixes every chunk, which garbles joined lines, so we join first);
* ``limitBytes`` stops after that many bytes of output;
* ``follow`` keeps reading after EOF.  Like upstream's ``waitLogs`` we notice rotation (the
  kubelet's log manager renames ``N.log`` and the runtime reopens a fresh file, or the file is
  truncated) by comparing inode/size and reopen from the start; the stream ends once the container is
  no longer running and the file is drained, or when the client goes away.

Blocking file I/O runs in a worker thread (``asyncio.to_thread``) so a slow disk never stalls the
event loop. Parsing is pure and unit-tested separately.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import BinaryIO

_TS_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339_nano(value: str) -> int:
    """Parse an RFC3339(Nano) timestamp into integer nanoseconds since the epoch.

    Raises ValueError on malformed input (callers turn that into a 400)."""
    m = _TS_RE.match(value.strip())
    if not m:
        raise ValueError(f"invalid RFC3339 timestamp {value!r}")
    base, frac, tz = m.groups()
    tzv = "+00:00" if tz == "Z" else tz
    d = dt.datetime.fromisoformat(base + tzv)
    nanos = int((frac or "0").ljust(9, "0"))
    return int(d.timestamp()) * 1_000_000_000 + nanos


def format_rfc3339_nano(ns: int) -> str:
    """Format nanoseconds since the epoch like Go's time.RFC3339Nano in UTC."""
    secs, rem = divmod(ns, 1_000_000_000)
    base = dt.datetime.fromtimestamp(secs, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if rem:
        base += "." + f"{rem:09d}".rstrip("0")
    return base + "Z"


@dataclass(slots=True)
class LogEntry:
    """One parsed CRI log line (or a joined logical line)."""

    timestamp: str
    ts_ns: int
    stream: str  # "stdout" | "stderr"
    partial: bool
    content: bytes


def parse_cri_line(line: bytes) -> LogEntry | None:
    """Parse one CRI log line (without or with trailing newline). None for garbage lines."""
    if line.endswith(b"\n"):
        line = line[:-1]
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    ts_raw, stream_raw, tags = parts[0], parts[1], parts[2]
    content = parts[3] if len(parts) == 4 else b""
    try:
        ts = ts_raw.decode("ascii")
        ts_ns = parse_rfc3339_nano(ts)
    except (UnicodeDecodeError, ValueError):
        return None
    stream = stream_raw.decode("ascii", "replace")
    if stream not in ("stdout", "stderr"):
        return None
    tag_list = tags.split(b":")
    partial = b"P" in tag_list
    return LogEntry(ts, ts_ns, stream, partial, content)


class LineJoiner:
    """Joins partial (``P``) chunks per stream into logical lines, as the runtime split them."""

    def __init__(self) -> None:
        self._pending: dict[str, LogEntry] = {}

    def feed(self, entry: LogEntry) -> LogEntry | None:
        prev = self._pending.pop(entry.stream, None)
        if prev is not None:
            entry = LogEntry(prev.timestamp, prev.ts_ns, entry.stream, entry.partial,
                             prev.content + entry.content)
        if entry.partial:
            self._pending[entry.stream] = entry
            return None
        return entry

    def flush(self) -> list[LogEntry]:
        """Pending partial lines (used at the very end of a non-follow read)."""
        out = list(self._pending.values())
        self._pending.clear()
        return out


@dataclass
class LogOptions:
    """Validated subset of upstream PodLogOptions understood by the kubelet."""

    follow: bool = False
    tail_lines: int | None = None
    since_ns: int | None = None
    timestamps: bool = False
    limit_bytes: int | None = None
    stream: str | None = None  # None = both, else "stdout"/"stderr"
    previous: bool = False


def _parse_bool(value: str | None, name: str) -> bool:
    if value is None or value == "":
        return False
    v = value.lower()
    if v in ("1", "t", "true"):
        return True
    if v in ("0", "f", "false"):
        return False
    raise ValueError(f"invalid value for {name}: {value!r}")


def options_from_query(query: dict[str, str], now_ns: int) -> LogOptions:
    """Build LogOptions from the kubelet query (same names as PodLogOptions). ValueError on bad input."""
    opts = LogOptions(
        follow=_parse_bool(query.get("follow"), "follow"),
        timestamps=_parse_bool(query.get("timestamps"), "timestamps"),
        previous=_parse_bool(query.get("previous"), "previous"),
    )
    if query.get("tailLines"):
        n = int(query["tailLines"])
        if n < 0:
            raise ValueError("tailLines must be >= 0")
        opts.tail_lines = n
    if query.get("limitBytes"):
        n = int(query["limitBytes"])
        if n < 1:
            raise ValueError("limitBytes must be >= 1")
        opts.limit_bytes = n
    if query.get("sinceSeconds") and query.get("sinceTime"):
        raise ValueError("at most one of sinceTime or sinceSeconds may be specified")
    if query.get("sinceSeconds"):
        n = int(query["sinceSeconds"])
        if n < 1:
            raise ValueError("sinceSeconds must be >= 1")
        opts.since_ns = now_ns - n * 1_000_000_000
    elif query.get("sinceTime"):
        opts.since_ns = parse_rfc3339_nano(query["sinceTime"])
    stream = query.get("stream")
    if stream:
        s = stream.lower()
        if s == "all":
            opts.stream = None
        elif s in ("stdout", "stderr"):
            opts.stream = s
        else:
            raise ValueError(f"invalid stream {stream!r}")
    return opts


def render(entry: LogEntry, timestamps: bool) -> bytes:
    out = entry.content + b"\n"
    if timestamps:
        out = entry.timestamp.encode() + b" " + out
    return out


def _accept(entry: LogEntry, opts: LogOptions) -> bool:
    """Stream filter, applied to raw chunks before joining."""
    return opts.stream is None or entry.stream == opts.stream


def _recent(entry: LogEntry, opts: LogOptions) -> bool:
    """since filter, applied to joined lines (a line is as old as its first chunk)."""
    return opts.since_ns is None or entry.ts_ns >= opts.since_ns


def select_lines(data: bytes, opts: LogOptions, joiner: LineJoiner | None = None) -> tuple[list[LogEntry], bytes]:
    """Parse a whole buffer; returns accepted logical lines (tail applied) and the unparsed remainder
    (an incomplete last line, kept for follow mode)."""
    lines = data.split(b"\n")
    remainder = lines.pop()  # "" if data ended with a newline
    joiner = joiner if joiner is not None else LineJoiner()
    keep: collections.deque[LogEntry] | list[LogEntry]
    keep = collections.deque(maxlen=opts.tail_lines) if opts.tail_lines is not None else []
    for raw in lines:
        entry = parse_cri_line(raw)
        if entry is None or not _accept(entry, opts):
            continue
        full = joiner.feed(entry)
        if full is not None and _recent(full, opts):
            keep.append(full)
    if not opts.follow:
        # A trailing partial chunk at EOF of a finished log is still output.
        for e in joiner.flush():
            if _recent(e, opts):
                keep.append(e)
    return list(keep), remainder


@dataclass
class _FollowState:
    f: BinaryIO
    ino: int
    pos: int = 0
    buf: bytes = b""
    joiner: LineJoiner = field(default_factory=LineJoiner)


def _open(path: str) -> tuple[BinaryIO, int]:
    f = open(path, "rb")
    return f, os.fstat(f.fileno()).st_ino


def _read_all(f: BinaryIO) -> bytes:
    return f.read()


def _rotated(path: str, st: _FollowState) -> bool:
    try:
        s = os.stat(path)
    except FileNotFoundError:
        return False  # mid-rotation: keep the old file until the new one appears
    return s.st_ino != st.ino or s.st_size < st.pos


async def read_logs(
    path: str,
    opts: LogOptions,
    *,
    is_running: Callable[[], Awaitable[bool]] | None = None,
    client_gone: Callable[[], bool] = lambda: False,
    poll_interval: float = 0.2,
    running_check_interval: float = 1.0,
) -> AsyncIterator[bytes]:
    """Yield rendered log output for ``path`` honouring ``opts`` (limitBytes applied here)."""
    remaining = opts.limit_bytes

    def clip(chunk: bytes) -> tuple[bytes, bool]:
        nonlocal remaining
        if remaining is None:
            return chunk, False
        chunk = chunk[:remaining]
        remaining -= len(chunk)
        return chunk, remaining <= 0

    f, ino = await asyncio.to_thread(_open, path)
    st = _FollowState(f=f, ino=ino)
    try:
        data = await asyncio.to_thread(_read_all, f)
        st.pos = len(data)
        entries, st.buf = select_lines(data, opts, st.joiner)
        out = b"".join(render(e, opts.timestamps) for e in entries)
        if out:
            out, done = clip(out)
            yield out
            if done:
                return
        if not opts.follow:
            return
        loop = asyncio.get_running_loop()
        next_check = loop.time()
        finishing = False
        while True:
            if client_gone():
                return
            chunk = await asyncio.to_thread(_read_all, st.f)
            if chunk:
                st.pos += len(chunk)
                data = st.buf + chunk
                lines = data.split(b"\n")
                st.buf = lines.pop()
                rendered: list[bytes] = []
                for raw in lines:
                    entry = parse_cri_line(raw)
                    if entry is None or not _accept(entry, opts):
                        continue
                    full = st.joiner.feed(entry)
                    if full is not None and _recent(full, opts):
                        rendered.append(render(full, opts.timestamps))
                if rendered:
                    out, done = clip(b"".join(rendered))
                    yield out
                    if done:
                        return
                continue
            if await asyncio.to_thread(_rotated, path, st):
                with contextlib.suppress(FileNotFoundError):
                    nf, nino = await asyncio.to_thread(_open, path)
                    await asyncio.to_thread(st.f.close)
                    st.f, st.ino, st.pos, st.buf = nf, nino, 0, b""
                    continue
            if finishing:
                return
            if is_running is not None and loop.time() >= next_check:
                next_check = loop.time() + running_check_interval
                if not await is_running():
                    # One more pass drains whatever was written before the exit.
                    finishing = True
                    continue
            await asyncio.sleep(poll_interval)
    finally:
        await asyncio.to_thread(st.f.close)
