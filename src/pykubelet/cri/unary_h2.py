"""gRPC calls (unary and server-streaming) over HTTP/2 on a unix socket, made on the event loop's thread.

Why not grpcio for these: every grpc.aio unary call costs the agent's process 250-300 µs of CPU on
this 2-core machine (``bench/bench_grpc_call.py``; docs/benchmarks-scale.md "Probes"): grpcio's
C-core call stack, its completion queue, the poller thread that hands each completion to the loop
through a socket, and EventEngine threads doing the I/O. Every other way of using grpcio from
asyncio measured dearer (sync channel futures, executors). Speaking HTTP/2 from ``data_received``
on the loop thread costs about half, and the agent makes ~12 CRI calls per pod start and one per
exec probe. The CRI needs only a small part of gRPC: unary calls and one server stream
(``GetContainerEvents``), no client streaming, no compression, no TLS, one local peer. Carrying the
stream here too means the agent never imports grpcio (~8.5 MB of RSS) unless asked to.

What is kept from gRPC's semantics (RFC 9113 for HTTP/2; gRPC's PROTOCOL-HTTP2.md for the rest):

* the deadline is sent as ``grpc-timeout`` and enforced locally by a loop timer (a runtime that
  never answers gets DEADLINE_EXCEEDED "Deadline Exceeded", and the stream is reset). Calls whose
  deadlines fall in the same millisecond share one timer (:class:`_Deadline`, at most 1 ms late):
  the calls a prober slot starts together all have the same deadline, so they arm and cancel one
  timer instead of one each. A deadline of ``LONG_DEADLINE`` (10 s) or more is rounded up to a
  tenth of a second (at most 1 % late): every call of a pod start has the default 2 minutes and
  an exec probe's guard is its timeout + 10 s, so calls started within 100 ms of one another share
  a timer (a loop timer armed and cancelled costs ~4 µs on uvloop; without this a 1,000-pod start
  armed one for 1 call in 3, when the calls started in lockstep);
* a cancelled awaiting task resets the stream (RST_STREAM CANCEL), so the runtime sees the
  cancellation as with grpcio;
* errors are :class:`pykubelet.cri.status.RpcError` (``code()``/``details()`` as grpc.aio's
  ``AioRpcError``) with the server's ``grpc-status``/``grpc-message``
  (percent-decoded); HTTP statuses, stream resets and lost connections map to codes as gRPC
  specifies (503 → UNAVAILABLE, RST_STREAM REFUSED_STREAM → UNAVAILABLE, CANCEL → CANCELLED, a
  connection that fails or closes → UNAVAILABLE);
* like grpc's transparent retry, a call the server provably did not process (refused stream, or a
  GOAWAY whose last stream id is below it) is sent again once on a new connection;
* reconnect: a connection that closes or receives GOAWAY is dropped and the next call dials again,
  so a runtime restart, or one that starts after the agent, is reached without an agent restart
  (failing fast with UNAVAILABLE meanwhile, like grpc's default ``wait_for_ready=False``);
* flow control both ways (the peer's windows are honoured; ours are opened wide because a unary
  response is bounded by the 16 MiB receive limit), SETTINGS (max concurrent streams, initial
  window, max frame size) and PING are honoured; message size limits give RESOURCE_EXHAUSTED;
* a server stream (:class:`StreamCall`) behaves as grpc.aio's ``UnaryStreamCall``: ``async for``
  yields each message as it arrives, ends at the OK status and raises the call's error otherwise,
  ``cancel()`` resets the stream and a read after it raises ``asyncio.CancelledError``.

Header blocks from the peer are decoded with ``hpack`` (python-hyper's HPACK, which keeps the
dynamic table); requests use literal fields without indexing, so our encoder keeps no state.
"""

from __future__ import annotations

import asyncio
import math
import struct
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, cast
from urllib.parse import unquote

import hpack

from pykubelet.cri.status import RpcError, StatusCode

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = (
    0, 1, 3, 4, 5, 6, 7, 8, 9)
_END_STREAM = _ACK = 0x1
_END_HEADERS, _PADDED, _PRIORITY = 0x4, 0x8, 0x20
_S_HEADER_TABLE_SIZE, _S_ENABLE_PUSH, _S_MAX_CONCURRENT, _S_INITIAL_WINDOW, _S_MAX_FRAME = 1, 2, 3, 4, 5
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65535
_U32 = struct.Struct(">I")
_FRAME_HEAD = struct.Struct(">IBI")  # 24-bit length and 8-bit type as one u32, flags, stream id
_MESSAGE_HEAD = struct.Struct(">BI")  # gRPC length-prefixed message: compressed flag, length
_MAX_STREAM_ID = 2**31 - 1
_RST_CANCEL = 8
_RST_REFUSED = 7
# Read coalescing (see ``_Connection._after_read``): a read that leaves calls of the last write in
# flight waits this long before the next read, if that write went out at most FAST_BATCH ago
READ_COALESCE = 0.005
FAST_BATCH = 0.010
LONG_DEADLINE = 10.0  # seconds: from here a deadline's timer is on a 100 ms grid (see the module docstring)

# RST_STREAM error code -> gRPC status (PROTOCOL-HTTP2.md "Errors")
_RST_CODES = {7: StatusCode.UNAVAILABLE, 8: StatusCode.CANCELLED, 11: StatusCode.RESOURCE_EXHAUSTED,
              12: StatusCode.PERMISSION_DENIED}
# HTTP status -> gRPC status when there is no grpc-status (http-grpc-status-mapping.md)
_HTTP_CODES = {400: StatusCode.INTERNAL, 401: StatusCode.UNAUTHENTICATED,
               403: StatusCode.PERMISSION_DENIED, 404: StatusCode.UNIMPLEMENTED,
               429: StatusCode.UNAVAILABLE, 502: StatusCode.UNAVAILABLE,
               503: StatusCode.UNAVAILABLE, 504: StatusCode.UNAVAILABLE}


class Message(Protocol):
    def SerializeToString(self) -> bytes: ...


class RawUnary(Protocol):
    """What a caller that serializes its own request needs of a unary method (``UnaryMethod.raw``;
    ``CRIClient`` narrows a stub's method to it with ``isinstance(m, UnaryMethod)``, no runtime check
    of the protocol itself)."""

    def raw(self, request: bytes, *, timeout: float | None = None) -> Awaitable[object]: ...


def rpc_error(code: StatusCode, details: str) -> RpcError:
    """The error a failed call raises (``code()``/``details()`` as grpc.aio's AioRpcError)."""
    return RpcError(code, details)


class _Retry(Exception):
    """The server did not process the stream: it may be sent again on a new connection."""


def _frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return _FRAME_HEAD.pack(len(payload) << 8 | ftype, flags, stream) + payload


def _int(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 5.1) whose first byte carries ``first`` in the high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: str | int, value: str) -> bytes:
    """A header field as a literal without indexing (RFC 7541 6.2.2), no Huffman coding."""
    v = value.encode()
    if isinstance(name, int):  # index of the name in the static table
        head = _int(name, 4, 0)
    else:
        n = name.encode()
        head = b"\x00" + _int(len(n), 7, 0) + n
    return head + _int(len(v), 7, 0) + v


def _hpack_int(block: bytes, i: int, prefix_bits: int) -> tuple[int, int]:
    """An HPACK integer at ``block[i]`` (RFC 7541 5.1): (value, index after it)."""
    mask = (1 << prefix_bits) - 1
    value = block[i] & mask
    i += 1
    if value == mask:
        shift = 0
        while True:
            b = block[i]
            i += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
    return value, i


def _table_neutral(block: bytes) -> bool:
    """Whether decoding an HPACK header block leaves the dynamic table as it is: indexed fields and
    literals without indexing or never indexed only (RFC 7541 6.1, 6.2.2, 6.2.3)."""
    i, n = 0, len(block)
    try:
        while i < n:
            b = block[i]
            if b & 0x80:  # indexed field
                i = _hpack_int(block, i, 7)[1]
                continue
            if b & 0xE0:  # literal with incremental indexing (01...), table size update (001...)
                return False
            name_index, i = _hpack_int(block, i, 4)
            if name_index == 0:
                length, i = _hpack_int(block, i, 7)
                i += length
            length, i = _hpack_int(block, i, 7)
            i += length
    except IndexError:
        return False
    return i == n


def grpc_timeout(seconds: float) -> str:
    """The ``grpc-timeout`` value: at most 8 digits, rounded up so the server never cuts it short."""
    ms = max(1, math.ceil(seconds * 1000))
    if ms < 10**8:
        return f"{ms}m"
    s = math.ceil(seconds)
    return f"{s}S" if s < 10**8 else f"{min(10**8 - 1, math.ceil(s / 3600))}H"


class _Sink:
    """The messages a server-streaming call has received and its reader has not taken yet."""

    __slots__ = ("buf", "messages", "received", "unacked", "waiter")

    def __init__(self) -> None:
        self.buf = bytearray()  # a message not yet whole
        self.messages: deque[bytes] = deque()
        self.received = 0  # messages received in all
        self.unacked = 0  # DATA bytes since our last WINDOW_UPDATE for the stream
        self.waiter: asyncio.Future[None] | None = None  # the reader, waiting for a message or the end

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)


class _Deadline:
    """The loop timer of the calls whose deadlines fall at ``when`` (see the module docstring):
    armed by the first, cancelled when the last of them ends (``release``), fired otherwise."""

    __slots__ = ("handle", "open", "streams", "table", "when")

    def __init__(self, table: dict[float, _Deadline], when: float) -> None:
        self.table = table
        self.when = when
        self.open = 0  # calls not ended yet
        self.streams: list[_Stream] = []
        self.handle: asyncio.TimerHandle | None = None

    def release(self) -> None:
        """One of the calls ended before its deadline."""
        self.open -= 1
        if not self.open:
            if self.handle is not None:
                self.handle.cancel()
            if self.table.get(self.when) is self:
                del self.table[self.when]


class _Stream:
    """One call. ``fut`` settles with the unary response's message, or for a server-streaming call
    (``sink`` set) with ``b""`` at its clean end; either way with the call's error if it fails."""

    __slots__ = ("data", "fut", "headers", "http_status", "id", "send_window", "sink", "timer", "window_waiter")

    def __init__(self, sid: int, fut: asyncio.Future[bytes], send_window: int, sink: _Sink | None = None) -> None:
        self.id = sid
        self.fut = fut
        self.data: bytes | bytearray = b""  # the first DATA payload as is; a bytearray once there are more
        self.headers: list[tuple[str, str]] = []
        self.http_status = ""
        self.send_window = send_window
        self.sink = sink
        self.timer: _Deadline | None = None  # its deadline's shared timer, until the call ends
        self.window_waiter: asyncio.Future[None] | None = None


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection; calls are streams on it (client-initiated, odd ids)."""

    def __init__(self, max_receive: int, read_grid: float | None = None) -> None:
        self._max_receive = max_receive
        self._read_grid = read_grid  # reads on a grid of the loop clock (see _read_on_grid), or as they come
        self._decoder = hpack.Decoder()
        self._buf = bytearray()
        self.streams: dict[int, _Stream] = {}
        self._next_id = 1
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set by connection_made
        self.closed = False
        self.goaway = False
        self._received = 0  # connection-level bytes since our last WINDOW_UPDATE
        self._block: tuple[int, int, bytearray] | None = None  # header block being continued
        self._decoded: dict[bytes, list[tuple[str, str]]] = {}
        self._out: list[bytes] = []  # frames not yet written (see _send)
        # the streams opened since the last write, and those of the last write that opened any:
        # ids in [_batch_lo, _batch_hi), written at _batch_at (loop clock); see _after_read
        self._flushed_id = 1
        self._batch_lo = self._batch_hi = 1
        self._batch_at = 0.0
        self._batch_answered = False  # a call of the last write finished: its siblings are due
        self._last_sid = 0  # stream of the last frame parsed by data_received
        self._resume: asyncio.TimerHandle | None = None  # reading paused until this timer fires
        # the peer's settings (defaults until its SETTINGS frame arrives)
        self.max_concurrent = 2**31
        self._initial_window = _DEFAULT_WINDOW
        self._max_frame = 16384
        self.send_window = _DEFAULT_WINDOW
        self._conn_window_waiters: list[asyncio.Future[None]] = []
        self._slot_waiters: list[asyncio.Future[None]] = []
        self._deadlines: dict[float, _Deadline] = {}  # when (loop clock, whole ms) -> its timer

    @property
    def usable(self) -> bool:
        return not self.closed and not self.goaway and self._next_id < _MAX_STREAM_ID

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        self.transport = transport
        self._loop = asyncio.get_running_loop()
        settings = struct.pack(">HIHI", _S_ENABLE_PUSH, 0, _S_INITIAL_WINDOW, _MAX_WINDOW)
        transport.write(PREFACE + _frame(_SETTINGS, 0, 0, settings)
                        + _frame(_WINDOW_UPDATE, 0, 0, _U32.pack(_MAX_WINDOW - _DEFAULT_WINDOW)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_resume_timer()
        self._fail_all(rpc_error(StatusCode.UNAVAILABLE, f"Socket closed{f': {exc}' if exc else ''}"))

    def close(self, details: str) -> None:
        self.closed = True
        self._fail_all(rpc_error(StatusCode.CANCELLED, details))
        self._close_transport()

    def _send(self, data: bytes) -> None:
        """Queue frames; they go out in one write at the end of this loop iteration, so the calls
        a prober slot starts together (and their acknowledgements) cost one syscall, not one each."""
        self._out.append(data)
        if len(self._out) == 1:
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self._next_id != self._flushed_id:  # this write opens streams: the batch to wait for
            self._batch_lo, self._batch_hi = self._flushed_id, self._next_id
            self._batch_answered = False
            self._flushed_id = self._next_id
            self._batch_at = (self._loop or asyncio.get_running_loop()).time()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def _close_transport(self) -> None:
        self._flush()
        self._stop_resume_timer()
        if self.transport is not None:
            self.transport.close()

    def _stop_resume_timer(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None

    def _fail_all(self, err: BaseException) -> None:
        streams, self.streams = self.streams, {}
        for st in streams.values():
            self._settle(st, err)
        self._wake(self._conn_window_waiters)
        self._wake(self._slot_waiters)

    # ---------------------------------------------------------------- calls

    async def _wait_for_slot(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait while the peer's limit of concurrent streams is reached; ``_Retry`` once this
        connection cannot take new streams (closed, GOAWAY, stream ids used up)."""
        while len(self.streams) >= self.max_concurrent and self.usable:
            w = loop.create_future()
            self._slot_waiters.append(w)
            await w
        if not self.usable:
            raise _Retry

    def _new_stream(self, loop: asyncio.AbstractEventLoop, seconds: float | None, sink: _Sink | None = None) -> _Stream:
        """Register the next stream (its deadline timer armed); the caller sends its request."""
        sid = self._next_id
        self._next_id += 2
        st = _Stream(sid, loop.create_future(), self._initial_window, sink)
        self.streams[sid] = st
        if seconds is not None:
            due = loop.time() + seconds
            # never early; at most 1 ms late, or 100 ms (<= 1 %) for a deadline of LONG_DEADLINE or more
            when = math.ceil(due * 1000.0) / 1000.0 if seconds < LONG_DEADLINE else math.ceil(due * 10.0) / 10.0
            d = self._deadlines.get(when)
            if d is None:
                d = self._deadlines[when] = _Deadline(self._deadlines, when)
                d.handle = loop.call_at(when, self._expire_due, d)
            d.open += 1
            d.streams.append(st)
            st.timer = d
        return st

    async def call(self, header_block: bytes, message: bytes, seconds: float | None) -> bytes:
        loop = self._loop or asyncio.get_running_loop()
        if len(self.streams) >= self.max_concurrent or not self.usable:  # the hot path awaits nothing here
            await self._wait_for_slot(loop)
        st = self._new_stream(loop, seconds)
        sid, fut = st.id, st.fut
        try:
            n = len(message)
            if n and n <= self.send_window and n <= st.send_window and n <= self._max_frame:
                self.send_window -= n
                st.send_window -= n
                self._send(b"".join((_FRAME_HEAD.pack(len(header_block) << 8 | _HEADERS, _END_HEADERS, sid), header_block,
                                     _FRAME_HEAD.pack(n << 8 | _DATA, _END_STREAM, sid), message)))
            else:
                self._send(_frame(_HEADERS, _END_HEADERS, sid, header_block))
                await self._send_data(st, message)
            return await fut
        except asyncio.CancelledError:
            if self.streams.pop(sid, None) is not None:
                self._reset(st, _RST_CANCEL)
            raise
        finally:
            if st.timer is not None:
                st.timer.release()
                st.timer = None

    async def open_stream(self, header_block: bytes, message: bytes, seconds: float | None) -> _Stream:
        """Start a server-streaming call: its stream, with the request sent (or being sent).

        The caller reads ``st.sink`` and ``st.fut`` (:class:`StreamCall`) and must ``cancel`` the
        stream if it stops reading before the end."""
        loop = self._loop or asyncio.get_running_loop()
        await self._wait_for_slot(loop)
        st = self._new_stream(loop, seconds, _Sink())
        self._send(_frame(_HEADERS, _END_HEADERS, st.id, header_block))
        try:
            await self._send_data(st, message)
        except asyncio.CancelledError:
            self.cancel(st)
            raise
        return st

    def cancel(self, st: _Stream) -> bool:
        """Reset a call that is still open (RST_STREAM CANCEL) and fail it with CANCELLED."""
        if self.streams.pop(st.id, None) is None:
            return False
        self._reset(st, _RST_CANCEL)
        self._settle(st, rpc_error(StatusCode.CANCELLED, "Locally cancelled by application!"))
        return True

    async def _send_data(self, st: _Stream, message: bytes) -> None:
        """DATA frames within the peer's windows and frame size (requests bigger than one frame)."""
        loop = asyncio.get_running_loop()
        view = memoryview(message)
        while True:
            if st.fut.done():
                return
            n = min(len(view), self.send_window, st.send_window, self._max_frame)
            if n <= 0 and view:
                w = loop.create_future()
                st.window_waiter = w  # also woken when the call ends (deadline, reset, connection lost)
                if self.send_window <= 0:
                    self._conn_window_waiters.append(w)
                await w
                continue
            self.send_window -= n
            st.send_window -= n
            last = n == len(view)
            self._send(_frame(_DATA, _END_STREAM if last else 0, st.id, bytes(view[:n])))
            if last:
                return
            view = view[n:]

    def _expire_due(self, d: _Deadline) -> None:
        """The deadline of the calls in ``d`` that have not ended: each gets DEADLINE_EXCEEDED."""
        if self._deadlines.get(d.when) is d:
            del self._deadlines[d.when]
        d.handle = None
        for st in d.streams:
            if st.timer is d:
                self._expire(st)

    def _expire(self, st: _Stream) -> None:
        st.timer = None
        if self.streams.pop(st.id, None) is not None:
            self._reset(st, _RST_CANCEL)
            self._settle(st, rpc_error(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))

    def _reset(self, st: _Stream, code: int) -> None:
        if not self.closed:
            self._send(_frame(_RST_STREAM, 0, st.id, _U32.pack(code)))
        self._stream_gone()

    def _stream_gone(self) -> None:
        if self._slot_waiters:
            self._wake(self._slot_waiters[:1])
            del self._slot_waiters[:1]
        if self.goaway and not self.streams:
            self._close_transport()

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        for w in waiters:
            if not w.done():
                w.set_result(None)
        waiters.clear()

    @staticmethod
    def _settle(st: _Stream, result: bytes | BaseException) -> None:
        if st.timer is not None:
            st.timer.release()
            st.timer = None
        if st.window_waiter is not None and not st.window_waiter.done():
            st.window_waiter.set_result(None)
        if st.fut.done():
            return
        if isinstance(result, BaseException):
            st.fut.set_exception(result)
        else:
            st.fut.set_result(result)
        if st.sink is not None:
            st.sink.wake()

    # ---------------------------------------------------------------- frames in

    def data_received(self, data: bytes) -> None:
        # parse straight from ``data`` when nothing is left over from before (the usual case: the
        # runtime's frames arrive whole), else from the buffer the leftover was kept in
        buf: bytes | bytearray = data
        if self._buf:
            self._buf += data
            buf = self._buf
        pos, end = 0, len(buf)
        try:
            while end - pos >= 9:
                length_type, flags, sid = _FRAME_HEAD.unpack_from(buf, pos)
                length = length_type >> 8
                if end - pos < 9 + length:
                    break
                payload = buf[pos + 9:pos + 9 + length]
                pos += 9 + length
                sid &= 0x7FFFFFFF
                self._last_sid = sid
                self._frame_received(length_type & 0xFF, flags, sid,
                                     payload if type(payload) is bytes else bytes(payload))
        except Exception as e:  # a malformed frame or header block: the connection is unusable
            self.closed = True
            self._fail_all(rpc_error(StatusCode.INTERNAL, f"HTTP/2 protocol error: {e!r}"))
            self._close_transport()
            return
        if buf is self._buf:
            del self._buf[:pos]
        elif pos < end:
            self._buf += buf[pos:]
        if self._read_grid is not None:
            self._read_on_grid(self._read_grid)
        elif self._batch_answered:
            self._after_read()

    def _read_on_grid(self, grid: float) -> None:
        """A connection whose answers may wait (``UnaryChannel(read_grid=...)``): after a read that
        leaves calls in flight, stop reading until the next multiple of ``grid`` on the loop clock.

        Why: each read is a wake-up of the loop, and on this VM a wake-up from an idle core costs
        the agent more CPU than the exec probe's Python (docs/benchmarks-scale.md, "Probes: reads
        on the prober's grid"). The prober wakes on the same grid (``WAKE_GRID``), and loop timers
        due at the same time fire in the same loop iteration, so the answers that arrive while
        reading is paused are read with the next slot's wake-up instead of one wake-up each: in a
        steady state the loop wakes once per slot for the timers, reads everything answered since
        the last slot, and writes the slot's new calls. The cost is at most ``grid`` of latency
        per answer. Reading goes on at full speed while a response is cut short (a large one
        arrives in many reads) and when no call is in flight (a lone call's answer is read at once).
        The connection carries only such calls: a call that needs its answer at once goes on
        another."""
        loop = self._loop
        if (self._resume is not None or not self.streams or self._buf or self._last_sid in self.streams
                or self.closed or loop is None):
            return
        # the same float the prober computes for its slots (an int times the grid), so both timers
        # land on the same millisecond
        self._pause_reading_until(loop, (math.floor(loop.time() / grid) + 1) * grid)

    def _pause_reading_until(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Stop reading until ``when`` on the loop clock (``_resume`` holds the timer)."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()
            self._resume = loop.call_at(when, self._resume_reading)

    def _after_read(self) -> None:
        """Read coalescing: after the read that brought the first answers to the calls of one
        write while other calls of that write are still in flight, pause reading for
        ``READ_COALESCE`` so that their responses, which a runtime answering at once sends a few
        hundred µs apart, are read together.

        Why: every read is a wake-up of the loop, and a wake-up from an idle core costs more on a
        VM than the parsing (docs/benchmarks-scale.md, "Probes: fewer wake-ups"). The prober
        writes the ExecSync calls of its wake slot in one write; the runtime answers each on its
        own, so without this the agent wakes once or twice per probe. Only when it can pay off:
        once per write, never for a lone call, never in the middle of a response (the read ended
        at a frame boundary with a stream's last frame, so a large message is read at full
        speed), and only if the write is younger than ``FAST_BATCH`` (a runtime whose calls take
        longer, like a real exec, gains nothing from waiting). The cost is at most
        ``READ_COALESCE`` of latency for the calls answered while reading is paused, far below any
        CRI deadline."""
        self._batch_answered = False
        lo, hi = self._batch_lo, self._batch_hi
        self._batch_lo = hi  # once per write
        loop = self._loop
        if (self._resume is not None or self._buf or self._last_sid in self.streams or self.closed
                or loop is None or loop.time() - self._batch_at > FAST_BATCH):
            return
        streams = self.streams
        for sid in range(lo, hi, 2):
            if sid in streams:
                self._pause_reading_until(loop, loop.time() + READ_COALESCE)
                return

    def _resume_reading(self) -> None:
        self._resume = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _frame_received(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == _DATA:
            self._on_data(flags, sid, payload)
        elif ftype == _HEADERS or ftype == _CONTINUATION:
            self._on_headers(ftype, flags, sid, payload)
        elif ftype == _SETTINGS:
            if not flags & _ACK:
                self._on_settings(payload)
        elif ftype == _WINDOW_UPDATE:
            inc = _U32.unpack(payload)[0] & 0x7FFFFFFF
            if sid == 0:
                self.send_window += inc
                self._wake(self._conn_window_waiters)
            else:
                st = self.streams.get(sid)
                if st is not None:
                    st.send_window += inc
                    if st.window_waiter is not None and not st.window_waiter.done():
                        st.window_waiter.set_result(None)
        elif ftype == _PING:
            if not flags & _ACK:
                self._send(_frame(_PING, _ACK, 0, payload))
        elif ftype == _RST_STREAM:
            code = _U32.unpack(payload)[0]
            st = self.streams.pop(sid, None)
            if st is not None:
                self._stream_gone()
                err: BaseException = (_Retry() if code == _RST_REFUSED else rpc_error(
                    _RST_CODES.get(code, StatusCode.INTERNAL), f"Received RST_STREAM with error code {code}"))
                self._settle(st, err)
        elif ftype == _GOAWAY:
            self._on_goaway(payload)
        elif ftype == _PUSH_PROMISE:
            raise ValueError("PUSH_PROMISE received although push is disabled")
        # PRIORITY and unknown frame types are ignored (RFC 9113 4.1, 5.5)

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        self._received += len(payload)  # padding counts against flow control too
        if self._received > _MAX_WINDOW // 2:
            self._send(_frame(_WINDOW_UPDATE, 0, 0, _U32.pack(self._received)))
            self._received = 0
        if flags & _PADDED:
            payload = payload[1:len(payload) - payload[0]]
        st = self.streams.get(sid)
        if st is None:
            return
        if st.sink is not None:
            self._on_stream_data(st, st.sink, flags, payload)
            return
        if not st.data:
            st.data = payload  # the usual unary response: one DATA frame, kept without a copy
        else:
            if type(st.data) is bytes:
                st.data = bytearray(st.data)
            st.data += payload
        if len(st.data) > self._max_receive + 5:
            del self.streams[sid]
            self._reset(st, _RST_CANCEL)
            self._settle(st, rpc_error(StatusCode.RESOURCE_EXHAUSTED,
                                       f"Received message larger than max ({len(st.data) - 5} vs. {self._max_receive})"))
            return
        if flags & _END_STREAM:
            self._finish(st)

    def _on_stream_data(self, st: _Stream, sink: _Sink, flags: int, payload: bytes) -> None:
        """DATA of a server-streaming call: whole length-prefixed messages go to its reader."""
        sink.unacked += len(payload)
        if sink.unacked > _MAX_WINDOW // 2:  # the stream's window: a long-lived stream outlasts 2 GiB
            self._send(_frame(_WINDOW_UPDATE, 0, st.id, _U32.pack(sink.unacked)))
            sink.unacked = 0
        buf = sink.buf
        buf += payload
        got = False
        while len(buf) >= 5:
            compressed, size = _MESSAGE_HEAD.unpack_from(buf, 0)
            error = None
            if compressed:
                error = rpc_error(StatusCode.INTERNAL, "the server sent a compressed message")
            elif size > self._max_receive:
                error = rpc_error(StatusCode.RESOURCE_EXHAUSTED,
                                  f"Received message larger than max ({size} vs. {self._max_receive})")
            if error is not None:
                del self.streams[st.id]
                self._reset(st, _RST_CANCEL)
                self._settle(st, error)
                return
            if len(buf) < 5 + size:
                break
            sink.messages.append(bytes(buf[5:5 + size]))
            del buf[:5 + size]
            sink.received += 1
            got = True
        if got:
            sink.wake()
        if flags & _END_STREAM:
            self._finish(st)

    def _on_headers(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == _HEADERS and flags & (_END_HEADERS | _PADDED | _PRIORITY) == _END_HEADERS:
            # the usual case: a whole, unpadded block in one frame, decoded without copying it
            self._block = None
            bsid, bflags, raw = sid, flags, payload
        else:
            if ftype == _HEADERS:
                if flags & _PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                if flags & _PRIORITY:
                    payload = payload[5:]
                self._block = (sid, flags, bytearray(payload))
            elif self._block is not None and self._block[0] == sid:
                self._block[2].extend(payload)
            else:
                raise ValueError("CONTINUATION without a header block")
            if not flags & _END_HEADERS:
                return
            bsid, bflags, block = self._block
            self._block = None
            raw = bytes(block)
        headers = self._decode(raw)  # decoded even for a stream we dropped: HPACK state
        st = self.streams.get(bsid)
        if st is None:
            return
        for k, v in headers:
            if k == ":status":
                st.http_status = v
        # the decoded list may be the cache's: shared, never changed in place
        st.headers = st.headers + headers if st.headers else headers
        if bflags & _END_STREAM:
            self._finish(st)

    def _decode(self, raw: bytes) -> list[tuple[str, str]]:
        """HPACK-decode a header block, from a cache when the block cannot change the dynamic table.

        After the first response a runtime's header blocks are the same few bytes (``:status 200``,
        ``content-type``, ``grpc-status 0`` as indexed fields, an empty ``grpc-message`` literal).
        Such a block's meaning stays the same until a block that may change the table (a literal
        with incremental indexing, a table size update) is decoded: that empties the cache."""
        hit = self._decoded.get(raw)
        if hit is not None:
            return hit
        headers = [(str(k), str(v)) for k, v in self._decoder.decode(raw)]
        if not _table_neutral(raw):
            self._decoded.clear()
        else:
            if len(self._decoded) >= 64:  # error messages are literals: many different blocks
                self._decoded.clear()
            self._decoded[raw] = headers
        return headers

    def _on_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - len(payload) % 6, 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == _S_MAX_CONCURRENT:
                self.max_concurrent = value
            elif key == _S_INITIAL_WINDOW:
                delta = value - self._initial_window
                self._initial_window = value
                for st in self.streams.values():
                    st.send_window += delta
                    if delta > 0 and st.window_waiter is not None and not st.window_waiter.done():
                        st.window_waiter.set_result(None)
            elif key == _S_MAX_FRAME:
                self._max_frame = value
        self._send(_frame(_SETTINGS, _ACK, 0, b""))
        self._wake(self._slot_waiters)

    def _on_goaway(self, payload: bytes) -> None:
        last = _U32.unpack_from(payload, 0)[0] & 0x7FFFFFFF
        self.goaway = True
        for sid in [s for s in self.streams if s > last]:  # never processed: safe to send again
            self._settle(self.streams.pop(sid), _Retry())
        self._wake(self._slot_waiters)
        if not self.streams:
            self._close_transport()

    def _finish(self, st: _Stream) -> None:
        if self.streams.pop(st.id, None) is None:
            return
        if self._batch_lo <= st.id < self._batch_hi:
            self._batch_answered = True
        self._stream_gone()
        status: int | None = None
        message = ""
        for k, v in st.headers:
            if k == "grpc-status":
                status = int(v) if v.isdigit() else 2
            elif k == "grpc-message":
                message = unquote(v)
        if status is None:
            code = StatusCode.INTERNAL if st.http_status == "200" else _HTTP_CODES.get(
                int(st.http_status) if st.http_status.isdigit() else 0, StatusCode.UNKNOWN)
            self._settle(st, rpc_error(code, f"no grpc-status in the response (HTTP status {st.http_status or 'none'})"))
            return
        if status != 0:
            self._settle(st, rpc_error(StatusCode.of(status), message))
            return
        if st.sink is not None:  # a server stream's clean end; a message cut short is an error
            self._settle(st, rpc_error(StatusCode.INTERNAL, "the server sent a truncated message")
                         if st.sink.buf else b"")
            return
        data = st.data
        if len(data) < 5 or data[0] != 0:
            why = "a compressed message" if data and data[0] else "no message"
            self._settle(st, rpc_error(StatusCode.INTERNAL, f"the server sent {why} for a unary call"))
            return
        size = _U32.unpack_from(data, 1)[0]
        if len(data) != 5 + size:
            self._settle(st, rpc_error(StatusCode.INTERNAL, "the server sent a truncated or second message"))
            return
        self._settle(st, bytes(data[5:]))  # one copy (bytes() of a bytes slice is the slice itself)


class UnaryChannel:
    """Unary calls to one unix socket over a lazily dialled, redialled HTTP/2 connection."""

    def __init__(self, path: str, *, max_receive: int, max_send: int, authority: str = "localhost",
                 read_grid: float | None = None) -> None:
        self.path = path
        self._max_receive = max_receive
        self._read_grid = read_grid  # see _Connection._read_on_grid
        self._max_send = max_send
        self._authority = authority
        self._conn: _Connection | None = None
        self._dialing: asyncio.Future[_Connection] | None = None
        self._closed = False
        self._timeout_fields: dict[float, bytes] = {}  # seconds -> encoded grpc-timeout header field

    def method(self, path: str, parse: Callable[[bytes], Any]) -> UnaryMethod:
        prefix = (b"\x83\x86"  # :method POST, :scheme http (static table 3, 6)
                  + _literal(4, path) + _literal(1, self._authority)  # :path, :authority
                  + _literal(31, "application/grpc") + _literal("te", "trailers"))  # content-type
        return UnaryMethod(self, prefix, parse)

    def stream_method(self, path: str, parse: Callable[[bytes], Any]) -> StreamMethod:
        """A server-streaming method: ``m(request)`` is a :class:`StreamCall`."""
        return StreamMethod(self.method(path, parse))

    def _block(self, prefix: bytes, seconds: float | None) -> bytes:
        """The request's header block: the method's fields and the deadline's grpc-timeout."""
        if seconds is None:
            return prefix
        field = self._timeout_fields.get(seconds)
        if field is None:
            if len(self._timeout_fields) >= 64:
                self._timeout_fields.clear()
            field = self._timeout_fields[seconds] = _literal("grpc-timeout", grpc_timeout(seconds))
        return prefix + field

    async def open_stream(self, prefix: bytes, request: bytes, seconds: float | None,
                          deadline: float | None) -> tuple[_Connection, _Stream]:
        """Start a server-streaming call, sent again (at most twice) on a new connection when the
        runtime provably did not process it, like a unary call."""
        if len(request) > self._max_send:
            raise rpc_error(StatusCode.RESOURCE_EXHAUSTED,
                            f"Sent message larger than max ({len(request)} vs. {self._max_send})")
        message = _MESSAGE_HEAD.pack(0, len(request)) + request
        loop = asyncio.get_running_loop()
        for _ in range(3):
            conn = await self._connection()
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                return conn, await conn.open_stream(self._block(prefix, seconds if left is None else left), message, left)
            except _Retry:
                continue
        raise rpc_error(StatusCode.UNAVAILABLE, "the runtime refused the stream or went away (GOAWAY)")

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.usable:
            return conn
        if self._closed:
            raise rpc_error(StatusCode.CANCELLED, "Channel closed!")
        if self._dialing is None:  # one dial for all the calls that find no connection
            self._dialing = asyncio.ensure_future(self._dial())
        dialing = self._dialing
        try:
            return await asyncio.shield(dialing)
        finally:
            if dialing.done() and self._dialing is dialing:
                self._dialing = None

    async def _dial(self) -> _Connection:
        loop = asyncio.get_running_loop()
        max_receive, read_grid = self._max_receive, self._read_grid
        try:
            _, conn = await loop.create_unix_connection(lambda: _Connection(max_receive, read_grid), self.path)
        except OSError as e:
            raise rpc_error(StatusCode.UNAVAILABLE,
                            f"failed to connect to all addresses; last error: UNAVAILABLE: unix:{self.path}: "
                            f"{e.strerror or e}") from None
        if self._closed:
            conn.close("Channel closed!")
            raise rpc_error(StatusCode.CANCELLED, "Channel closed!")
        self._conn = conn
        return conn

    async def call(self, prefix: bytes, request: bytes, seconds: float | None,
                   parse: Callable[[bytes], Any] = bytes) -> Any:
        """One unary call: ``parse`` of the response message's bytes.

        Per call this is on the path of every exec probe (200/s), so the usual case takes no
        detour: the grpc-timeout field of a deadline seen before comes from a small cache (the
        prober passes the same deadline every time), and a live connection is used without
        awaiting ``_connection`` or asking asyncio for the running loop."""
        if len(request) > self._max_send:
            raise rpc_error(StatusCode.RESOURCE_EXHAUSTED,
                            f"Sent message larger than max ({len(request)} vs. {self._max_send})")
        block = prefix if seconds is None else self._block(prefix, seconds)
        message = _MESSAGE_HEAD.pack(0, len(request)) + request
        conn = self._conn
        if conn is not None and not conn.usable:
            conn = None
        # a live connection's loop is the running one: on Python 3.11 ``asyncio.get_running_loop()``
        # makes a getpid(2) system call every time
        loop = (conn._loop if conn is not None else None) or asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        first = 0
        if conn is not None:
            first = 1
            try:
                return parse(await conn.call(block, message, seconds))
            except _Retry:
                pass
        for attempt in range(first, 3):
            conn = await self._connection()
            left = None if deadline is None else deadline - loop.time()
            try:
                return parse(await conn.call(block, message, left))
            except _Retry:
                if attempt == 2:
                    break
        raise rpc_error(StatusCode.UNAVAILABLE, "the runtime refused the stream or went away (GOAWAY)")

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close("Channel closed!")


class UnaryMethod:
    """``method(request, timeout=...)``, awaitable, like a grpc.aio stub's unary-unary callable."""

    __slots__ = ("_channel", "_parse", "_prefix")

    def __init__(self, channel: UnaryChannel, prefix: bytes, parse: Callable[[bytes], Any]) -> None:
        self._channel = channel
        self._prefix = prefix
        self._parse = parse

    def __call__(self, request: Message, *, timeout: float | None = None) -> Awaitable[Any]:
        # a plain function returning the channel's coroutine: one coroutine fewer per call
        return self._channel.call(self._prefix, request.SerializeToString(), timeout, self._parse)

    def raw(self, request: bytes, *, timeout: float | None = None) -> Awaitable[Any]:
        """The same call with the request already serialized (a caller that sends the same request
        again and again keeps its bytes: ``CRIClient.exec_sync``)."""
        return self._channel.call(self._prefix, request, timeout, self._parse)


class StreamMethod:
    """``method(request, timeout=...)`` of a server-streaming method: a :class:`StreamCall`, like a
    grpc.aio stub's unary-stream callable."""

    __slots__ = ("_unary",)

    def __init__(self, unary: UnaryMethod) -> None:
        self._unary = unary

    def __call__(self, request: Message, *, timeout: float | None = None) -> StreamCall:
        u = self._unary
        return StreamCall(u._channel, u._prefix, request.SerializeToString(), timeout, u._parse)


class StreamCall:
    """A server-streaming call, read with ``async for``; what grpc.aio's ``UnaryStreamCall`` offers.

    As with grpc.aio: the call starts when it is made (here: on the loop's next turn, as a task);
    iteration yields each response message, stops at the server's OK status and raises the call's
    error (:class:`RpcError`) otherwise, after the messages received before it. ``cancel()`` resets
    the stream (the runtime sees the cancellation) and a read after it raises
    ``asyncio.CancelledError``; a reader whose task is cancelled cancels the call too. A deadline
    (``timeout``) ends the call with DEADLINE_EXCEEDED; a stream the runtime refused, or that a
    GOAWAY shows it never processed, is sent again on a new connection. Backpressure: the stream's
    flow-control window is given back as data arrives, so messages the reader has not taken yet
    wait in memory (as in grpcio, whose reader also buffers what the window lets in).
    """

    def __init__(self, channel: UnaryChannel, prefix: bytes, request: bytes, seconds: float | None,
                 parse: Callable[[bytes], Any]) -> None:
        self._parse = parse
        self._cancelled = False
        self._conn: _Connection | None = None
        self._st: _Stream | None = None
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        self._args = (prefix, request, seconds, deadline)
        self._channel = channel
        self._start = loop.create_task(self._open())

    async def _open(self) -> None:
        self._conn, self._st = await self._channel.open_stream(*self._args)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self._cancelled:
            raise asyncio.CancelledError
        try:
            if not self._start.done():
                await asyncio.shield(self._start)
            self._start.result()  # the call could not be started: its error
            while True:
                st = self._st
                assert st is not None
                sink = st.sink
                assert sink is not None
                if sink.messages:
                    return self._parse(sink.messages.popleft())
                if st.fut.done():
                    err = st.fut.exception()
                    if err is None:
                        raise StopAsyncIteration
                    if isinstance(err, _Retry) and not sink.received:  # never processed: send again
                        self._start = asyncio.get_running_loop().create_task(self._open())
                        await asyncio.shield(self._start)
                        continue
                    if isinstance(err, _Retry):  # pragma: no cover - a processed stream is not refused
                        err = rpc_error(StatusCode.UNAVAILABLE, "the runtime went away (GOAWAY)")
                    if self._cancelled:
                        raise asyncio.CancelledError
                    raise err
                w = asyncio.get_running_loop().create_future()
                sink.waiter = w
                try:
                    await w
                finally:
                    sink.waiter = None
        except asyncio.CancelledError:
            self.cancel()
            raise

    def cancel(self) -> bool:
        """Cancel the call if it has not ended; True if this cancelled it (as grpc.aio's ``cancel``)."""
        if self._cancelled:
            return False
        if not self._start.done():
            self._cancelled = True
            self._start.cancel()
            return True
        if self._start.cancelled() or self._start.exception() is not None:
            return False
        st, conn = self._st, self._conn
        assert st is not None and conn is not None
        if st.fut.done():
            if not st.fut.cancelled():
                st.fut.exception()  # retrieved: the reader stopped before the end
            return False
        self._cancelled = True
        cancelled = conn.cancel(st)
        if st.fut.done() and not st.fut.cancelled():
            st.fut.exception()  # CANCELLED, which nobody reads: a read now raises CancelledError
        return cancelled

    def done(self) -> bool:
        return self._cancelled or (self._start.done() and (
            self._start.cancelled() or self._start.exception() is not None
            or (self._st is not None and self._st.fut.done())))
