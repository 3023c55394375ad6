"""A measuring prototype, not a client: the least a unary gRPC call over HTTP/2 can cost from asyncio.

``bench_grpc_call.py --variants h2_floor`` uses it to show how much of grpcio's per-call client CPU
is the protocol itself and how much is grpcio's machinery (its C-core call stack, the completion
queue and the threads that hand each completion to the event loop). It speaks just enough HTTP/2
(RFC 9113) and gRPC for unary calls to a local runtime: one connection over a unix socket, the
request as one HEADERS and one DATA frame written together, responses parsed straight from
``data_received`` on the loop thread (no extra thread), header blocks decoded with ``hpack`` (the
pure-Python HPACK of python-hyper; install it to run this variant), PING and SETTINGS acknowledged,
receive windows opened wide up front and topped up. It sends ``grpc-timeout`` and cancels with
RST_STREAM, but it has no local deadline timer, no send flow control (requests must fit the peer's
initial window), no reconnect and no GOAWAY handling: what a real client would have to add.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
BIG_WINDOW = 2**31 - 1
_HDR = struct.Struct(">I")


def _frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((ftype, flags)) + _HDR.pack(stream) + payload


def _lit(name_index: int | None, name: str, value: str) -> bytes:
    """A literal header field without indexing (no Huffman): RFC 7541 6.2.2."""
    v = value.encode()
    assert len(v) < 127 and len(name) < 127
    if name_index is not None:
        head = bytes((name_index,)) if name_index < 15 else bytes((0x0F, name_index - 15))
    else:
        head = b"\x00" + bytes((len(name),)) + name.encode()
    return head + bytes((len(v),)) + v


class H2Error(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"grpc-status {code}: {message}")
        self.code, self.message = code, message


class _Stream:
    __slots__ = ("data", "fut", "headers")

    def __init__(self, fut: asyncio.Future[bytes]) -> None:
        self.fut = fut
        self.data = bytearray()
        self.headers: list[tuple[str, str]] = []


class H2Unary(asyncio.Protocol):
    """One HTTP/2 connection making unary gRPC calls (see the module docstring)."""

    def __init__(self) -> None:
        import hpack

        self._decoder = hpack.Decoder()
        self._buf = bytearray()
        self._streams: dict[int, _Stream] = {}
        self._next_id = 1
        self._transport: asyncio.Transport | None = None
        self._consumed = 0
        self._block: tuple[int, int, bytearray] | None = None  # stream, flags, header block in progress
        self._prefix: dict[str, bytes] = {}

    @classmethod
    async def connect(cls, path: str) -> H2Unary:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_unix_connection(cls, path)
        return proto

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        settings = struct.pack(">HI", 2, 0) + struct.pack(">HI", 4, BIG_WINDOW)  # no push; wide stream window
        transport.write(PREFACE + _frame(SETTINGS, 0, 0, settings)
                        + _frame(WINDOW_UPDATE, 0, 0, _HDR.pack(BIG_WINDOW - 65535)))

    def connection_lost(self, exc: Exception | None) -> None:
        for st in self._streams.values():
            if not st.fut.done():
                st.fut.set_exception(H2Error(14, f"connection lost: {exc}"))
        self._streams.clear()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def unary(self, method: str, request: bytes, grpc_timeout: float | None) -> bytes:
        prefix = self._prefix.get(method)
        if prefix is None:
            prefix = self._prefix[method] = (b"\x83\x86" + _lit(4, ":path", method) + _lit(1, ":authority", "localhost")
                                              + _lit(31, "content-type", "application/grpc") + _lit(None, "te", "trailers"))
        block = prefix if grpc_timeout is None else prefix + _lit(None, "grpc-timeout", f"{max(1, int(grpc_timeout * 1000))}m")
        sid = self._next_id
        self._next_id += 2
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._streams[sid] = _Stream(fut)
        msg = b"\x00" + _HDR.pack(len(request)) + request
        assert self._transport is not None
        self._transport.write(_frame(HEADERS, END_HEADERS, sid, block) + _frame(DATA, END_STREAM, sid, msg))
        try:
            return await fut
        except asyncio.CancelledError:
            if self._streams.pop(sid, None) is not None and self._transport is not None:
                self._transport.write(_frame(RST_STREAM, 0, sid, _HDR.pack(8)))  # CANCEL
            raise

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, n = 0, len(buf)
        while n - pos >= 9:
            length = int.from_bytes(buf[pos:pos + 3], "big")
            if n - pos < 9 + length:
                break
            ftype, flags = buf[pos + 3], buf[pos + 4]
            sid = _HDR.unpack_from(buf, pos + 5)[0] & 0x7FFFFFFF
            payload = bytes(buf[pos + 9:pos + 9 + length])
            pos += 9 + length
            self._frame_received(ftype, flags, sid, payload)
        del buf[:pos]

    def _frame_received(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == DATA:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            st = self._streams.get(sid)
            if st is not None:
                st.data += payload
            self._consumed += len(payload)
            if self._consumed > BIG_WINDOW // 2 and self._transport is not None:
                self._transport.write(_frame(WINDOW_UPDATE, 0, 0, _HDR.pack(self._consumed)))
                self._consumed = 0
            if flags & END_STREAM:
                self._finish(sid)
        elif ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                if flags & PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                if flags & PRIORITY:
                    payload = payload[5:]
                self._block = (sid, flags, bytearray(payload))
            elif self._block is not None:
                self._block[2].extend(payload)
            if flags & END_HEADERS and self._block is not None:
                bsid, bflags, raw = self._block
                self._block = None
                headers = self._decoder.decode(bytes(raw))  # always decoded: keeps the dynamic table in step
                st = self._streams.get(bsid)
                if st is not None:
                    st.headers.extend(headers)
                if bflags & END_STREAM:
                    self._finish(bsid)
        elif ftype == SETTINGS:
            if not flags & ACK and self._transport is not None:
                self._transport.write(_frame(SETTINGS, ACK, 0, b""))
        elif ftype == PING:
            if not flags & ACK and self._transport is not None:
                self._transport.write(_frame(PING, ACK, 0, payload))
        elif ftype == RST_STREAM:
            st = self._streams.pop(sid, None)
            if st is not None and not st.fut.done():
                st.fut.set_exception(H2Error(13, f"stream reset, http2 error {_HDR.unpack(payload)[0]}"))

    def _finish(self, sid: int) -> None:
        st = self._streams.pop(sid, None)
        if st is None or st.fut.done():
            return
        status, message = 2, "no grpc-status"
        for k, v in st.headers:
            if k == "grpc-status":
                status = int(v)
            elif k == "grpc-message":
                message = v
        if status != 0:
            st.fut.set_exception(H2Error(status, message))
        elif len(st.data) < 5 or st.data[0] != 0:
            st.fut.set_exception(H2Error(13, "malformed or compressed response"))
        else:
            st.fut.set_result(bytes(st.data[5:5 + _HDR.unpack_from(st.data, 1)[0]]))


def parse(response_type: Any, raw: bytes) -> Any:
    return response_type.FromString(raw)
