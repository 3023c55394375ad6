"""The pieces of the CRI client's HTTP/2 transport that need no peer: deadlines on the wire, HPACK,
read coalescing."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Iterator
from typing import Any

import hpack
import pytest

from pykubelet.cri.status import RpcError
from pykubelet.cri.unary_h2 import _Connection, _table_neutral, grpc_timeout


def test_deadlines_are_sent_rounded_up_in_at_most_eight_digits() -> None:
    assert grpc_timeout(120.0) == "120000m"
    assert grpc_timeout(0.0001) == "1m"  # never 0: that would be an expired deadline
    assert grpc_timeout(1.0004) == "1001m"
    assert grpc_timeout(200_000.0) == "200000S"
    assert grpc_timeout(10.0**9) == "277778H"


def test_only_blocks_that_cannot_change_the_dynamic_table_count_as_neutral() -> None:
    enc = hpack.Encoder()
    first = enc.encode([("grpc-status", "0")])  # literal with incremental indexing
    again = enc.encode([("grpc-status", "0")])  # now an indexed field
    assert not _table_neutral(first)
    assert _table_neutral(again)
    assert _table_neutral(b"\x88")  # :status 200 from the static table
    assert _table_neutral(bytes.fromhex("000c677270632d6d65737361676500"))  # grpc-message "" not indexed
    assert not _table_neutral(b"\x3f\xe1\x1f")  # dynamic table size update
    assert not _table_neutral(b"\x00\x05ab")  # truncated


def test_cached_header_blocks_follow_the_dynamic_table() -> None:
    enc = hpack.Encoder()
    conn = _Connection(1024)
    first = enc.encode([("x-a", "1")])
    assert conn._decode(first) == [("x-a", "1")]
    indexed = enc.encode([("x-a", "1")])
    assert conn._decode(indexed) == [("x-a", "1")]
    assert conn._decode(indexed) == [("x-a", "1")]  # from the cache
    # a new entry shifts the dynamic indexes: the same bytes now mean the newer field
    assert conn._decode(enc.encode([("x-b", "2")])) == [("x-b", "2")]
    assert conn._decode(indexed) == [("x-b", "2")]


class _Transport:
    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_stream_messages_split_across_frames_arrive_whole_and_in_order() -> None:
    from pykubelet.cri.unary_h2 import _DATA, _END_HEADERS, _END_STREAM, _HEADERS, _frame

    conn = _Connection(1024)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    st = await conn.open_stream(b"\x83\x86", b"\x00\x00\x00\x00\x00", None)
    assert st.sink is not None
    enc = hpack.Encoder()
    wire = b"".join(struct.pack(">BI", 0, len(m)) + m for m in (b"first", b"", b"x" * 300))
    conn.data_received(_frame(_HEADERS, _END_HEADERS, st.id, enc.encode([(":status", "200")]))
                       + _frame(_DATA, 0, st.id, wire[:7]))
    assert list(st.sink.messages) == []  # nothing whole yet
    conn.data_received(_frame(_DATA, 0, st.id, wire[7:20]) + _frame(_DATA, 0, st.id, wire[20:]))
    assert list(st.sink.messages) == [b"first", b"", b"x" * 300] and not st.fut.done()
    conn.data_received(_frame(_HEADERS, _END_HEADERS | _END_STREAM, st.id, enc.encode([("grpc-status", "0")])))
    assert st.fut.result() == b"" and st.id not in conn.streams


async def test_a_stream_message_over_the_receive_limit_fails_the_call() -> None:
    from pykubelet.cri.status import RpcError, StatusCode
    from pykubelet.cri.unary_h2 import _DATA, _END_HEADERS, _HEADERS, _RST_STREAM, _frame

    conn = _Connection(16)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    st = await conn.open_stream(b"\x83\x86", b"\x00\x00\x00\x00\x00", None)
    conn.data_received(_frame(_HEADERS, _END_HEADERS, st.id, hpack.Encoder().encode([(":status", "200")]))
                       + _frame(_DATA, 0, st.id, struct.pack(">BI", 0, 17)))
    err = st.fut.exception()
    assert isinstance(err, RpcError) and err.code() is StatusCode.RESOURCE_EXHAUSTED
    conn._flush()
    assert _frame(_RST_STREAM, 0, st.id, struct.pack(">I", 8)) in transport.written  # the runtime is told


class _PausableTransport(_Transport):
    """A transport that records when reading is paused and resumed (read coalescing)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.pauses = 0

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True


def _response(enc: hpack.Encoder, sid: int, message: bytes) -> bytes:
    """A unary response as a gRPC server writes it: headers, one message, trailers."""
    from pykubelet.cri.unary_h2 import _DATA, _END_HEADERS, _END_STREAM, _HEADERS, _frame

    return (_frame(_HEADERS, _END_HEADERS, sid, enc.encode([(":status", "200")]))
            + _frame(_DATA, 0, sid, struct.pack(">BI", 0, len(message)) + message)
            + _frame(_HEADERS, _END_HEADERS | _END_STREAM, sid, enc.encode([("grpc-status", "0")])))


async def _written_together(conn: _Connection, n: int) -> list[asyncio.Task[bytes]]:
    """``n`` calls started in one loop iteration, their requests written (one write)."""
    calls = [asyncio.ensure_future(conn.call(b"\x83\x86", b"\x00\x00\x00\x00\x00", 5.0)) for _ in range(n)]
    for _ in range(3):  # the calls send, then the end-of-iteration flush writes
        await asyncio.sleep(0)
    assert not conn._out
    return calls


async def test_responses_to_calls_written_together_are_read_together() -> None:
    from pykubelet.cri import unary_h2

    conn = _Connection(1024)
    transport = _PausableTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    first, second, third = await _written_together(conn, 3)
    enc = hpack.Encoder()
    conn.data_received(_response(enc, 1, b"one"))
    # the first answer is in; its siblings are still in flight: the next read waits for them
    assert not transport.reading and transport.pauses == 1
    assert await first == b"one"
    await asyncio.sleep(unary_h2.READ_COALESCE * 5)
    assert transport.reading  # resumed after READ_COALESCE, whatever arrived meanwhile
    conn.data_received(_response(enc, 3, b"two"))
    assert transport.reading and transport.pauses == 1  # once per write: stragglers are read at once
    conn.data_received(_response(enc, 5, b"three"))
    assert [await second, await third] == [b"two", b"three"]
    # a later write's answers are again read together
    fourth, fifth = await _written_together(conn, 2)
    conn.data_received(_response(enc, 7, b"four"))
    assert transport.pauses == 2 and await fourth == b"four"
    await asyncio.sleep(unary_h2.READ_COALESCE * 5)
    conn.data_received(_response(enc, 9, b"five"))
    assert transport.reading and await fifth == b"five"


async def test_a_lone_call_and_a_response_cut_short_never_pause_reading() -> None:
    conn = _Connection(1 << 20)
    transport = _PausableTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    enc = hpack.Encoder()
    (lone,) = await _written_together(conn, 1)
    conn.data_received(_response(enc, 1, b"x"))
    assert await lone == b"x" and transport.pauses == 0
    # a large response arrives in pieces: reading goes on at full speed until its last frame
    big, small = await _written_together(conn, 2)
    wire = _response(enc, 3, b"y" * 100_000)
    for i in range(0, len(wire) - 20, 4096):
        conn.data_received(wire[i:min(i + 4096, len(wire) - 20)])
        assert transport.pauses == 0
    conn.data_received(wire[len(wire) - 20:])  # the last frame: now the sibling is waited for
    assert await big == b"y" * 100_000 and transport.pauses == 1
    conn.close("done")
    with pytest.raises(RpcError):
        await small


async def test_a_slow_batch_or_a_closed_connection_does_not_wait(monkeypatch: Any) -> None:
    from pykubelet.cri import unary_h2

    monkeypatch.setattr(unary_h2, "FAST_BATCH", 0.0)  # every batch is older than "fast"
    conn = _Connection(1024)
    transport = _PausableTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    enc = hpack.Encoder()
    calls = await _written_together(conn, 2)
    await asyncio.sleep(0.005)
    conn.data_received(_response(enc, 1, b"a"))
    assert transport.pauses == 0 and await calls[0] == b"a"
    monkeypatch.setattr(unary_h2, "FAST_BATCH", 10.0)
    calls = await _written_together(conn, 2)
    conn.data_received(_response(enc, 5, b"b"))
    assert transport.pauses == 1 and conn._resume is not None
    conn.connection_lost(None)  # the resume timer goes with the connection
    assert conn._resume is None
    assert await calls[0] == b"b"
    with pytest.raises(RpcError):
        await calls[1]


@contextlib.contextmanager
def _one_clock_reading(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The running loop's clock stands still inside, as within one turn of uvloop's loop (asyncio's
    own loop reads the clock for each call, which can cross a millisecond between two calls)."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    with monkeypatch.context() as m:
        m.setattr(loop, "time", lambda: now)
        yield


async def test_calls_with_the_same_deadline_share_one_timer_that_still_expires_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pykubelet.cri.status import StatusCode

    conn = _Connection(1024)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    enc = hpack.Encoder()
    with _one_clock_reading(monkeypatch):
        calls = [asyncio.ensure_future(conn.call(b"\x83\x86", b"\x00\x00\x00\x00\x00", 0.05)) for _ in range(3)]
        await asyncio.sleep(0)
    assert len(conn._deadlines) == 1 and next(iter(conn._deadlines.values())).open == 3
    conn.data_received(_response(enc, 1, b"ok"))
    assert await calls[0] == b"ok" and next(iter(conn._deadlines.values())).open == 2
    for late in calls[1:]:
        with pytest.raises(RpcError) as err:
            await late
        assert err.value.code() is StatusCode.DEADLINE_EXCEEDED
    assert conn._deadlines == {}
    # calls that all end in time cancel the shared timer with the last of them
    with _one_clock_reading(monkeypatch):
        more = [asyncio.ensure_future(conn.call(b"\x83\x86", b"\x00\x00\x00\x00\x00", 5.0)) for _ in range(2)]
        await asyncio.sleep(0)
    (d,) = conn._deadlines.values()
    handle = d.handle
    conn.data_received(_response(enc, 7, b"a") + _response(enc, 9, b"b"))
    assert [await c for c in more] == [b"a", b"b"]
    assert conn._deadlines == {} and handle is not None and handle.cancelled()


async def test_calls_with_long_deadlines_started_apart_share_a_timer_that_is_never_early() -> None:
    conn = _Connection(1024)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    calls, started = [], []
    for _ in range(4):  # each in a loop iteration of its own, a few ms apart
        before = loop.time()
        calls.append(asyncio.ensure_future(conn.call(b"\x83\x86", b"\x00\x00\x00\x00\x00", 120.0)))
        await asyncio.sleep(0)  # the call starts
        started.append((before, loop.time()))
        await asyncio.sleep(0.002)
    assert len(conn._deadlines) <= 2  # one tenth of a second each (the calls may straddle two)
    assert sum(d.open for d in conn._deadlines.values()) == 4
    for st in conn.streams.values():
        assert st.timer is not None
        before, after = started[(st.id - 1) // 2]
        assert before + 120.0 <= st.timer.when < after + 120.1
        assert abs(st.timer.when * 10 - round(st.timer.when * 10)) < 1e-6  # on the tenth of a second
    before = loop.time()
    short = asyncio.ensure_future(conn.call(b"\x83\x86", b"\x00\x00\x00\x00\x00", 5.0))
    await asyncio.sleep(0)
    st = conn.streams[9]
    assert st.timer is not None and before + 5.0 <= st.timer.when < loop.time() + 5.001  # a deadline below 10 s: 1 ms
    enc = hpack.Encoder()
    conn.data_received(b"".join(_response(enc, sid, b"ok") for sid in (1, 3, 5, 7, 9)))
    assert [await c for c in [*calls, short]] == [b"ok"] * 5
    assert conn._deadlines == {}


async def test_a_connection_reading_on_a_grid_reads_answers_in_flight_at_the_next_grid_point() -> None:
    grid = 0.05
    conn = _Connection(1 << 20, read_grid=grid)
    transport = _PausableTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    enc = hpack.Encoder()
    (lone,) = await _written_together(conn, 1)
    conn.data_received(_response(enc, 1, b"x"))
    assert await lone == b"x" and transport.pauses == 0  # nothing else in flight: nothing to wait for
    first, second, third = await _written_together(conn, 3)
    conn.data_received(_response(enc, 3, b"one"))
    assert await first == b"one"
    assert not transport.reading and transport.pauses == 1  # the rest is read at the next grid point
    assert conn._resume is not None
    when = conn._resume.when()
    assert abs(when / grid - round(when / grid)) < 1e-9  # on the grid, like the prober's own wake-ups
    await asyncio.sleep(when - asyncio.get_running_loop().time() + grid / 5)
    assert transport.reading
    conn.data_received(_response(enc, 5, b"two"))  # one call still in flight: paused again
    assert transport.pauses == 2 and await second == b"two" and conn._resume is not None
    await asyncio.sleep(conn._resume.when() - asyncio.get_running_loop().time() + grid / 5)
    assert transport.reading
    # a large answer arrives in pieces: read at full speed until its last frame, then nothing waits
    wire = _response(enc, 7, b"y" * 100_000)
    for i in range(0, len(wire), 4096):
        conn.data_received(wire[i:i + 4096])
    assert await third == b"y" * 100_000 and transport.pauses == 2 and transport.reading
    fourth, fifth = await _written_together(conn, 2)
    conn.data_received(_response(enc, 9, b"four"))
    assert conn._resume is not None
    conn.connection_lost(None)  # the resume timer goes with the connection
    assert conn._resume is None and await fourth == b"four"
    with pytest.raises(RpcError):
        await fifth
