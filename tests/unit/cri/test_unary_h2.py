"""The pieces of the CRI client's HTTP/2 transport that need no peer: deadlines on the wire, HPACK."""

from __future__ import annotations

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
