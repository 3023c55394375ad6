"""The pieces of the CRI client's HTTP/2 transport that need no peer: deadlines on the wire, HPACK."""

from __future__ import annotations

import struct

import hpack

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
