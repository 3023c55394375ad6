"""SPDY/3.1 framing and a small asyncio stream multiplexer (the transport of kubectl exec/port-forward).

Kubernetes' streaming protocols (remotecommand ``v*.channel.k8s.io`` and ``portforward.k8s.io``)
run over SPDY/3.1 as implemented by moby/spdystream (apimachinery ``httpstream/spdy``). What matters
for interoperability with that implementation:

* frame layout of SPDY draft 3: control frames ``1|version(15)|type(16)|flags(8)|length(24)``, data
  frames ``0|stream-id(31)|flags(8)|length(24)``;
* header blocks are ``count(32)`` followed by ``len(32) name len(32) value`` pairs (names lower-case,
  multiple values joined by NUL), compressed with *one zlib stream per direction for the whole
  session* (sync-flushed per frame) primed with the SPDY/3 dictionary — Go's constant, i.e. without a
  trailing NUL byte;
* clients use odd stream ids, servers even ones; a stream is opened by SYN_STREAM, accepted by
  SYN_REPLY, half-closed by a frame carrying FLAG_FIN, aborted by RST_STREAM;
* spdystream does no flow control, so neither do we (WINDOW_UPDATE is accepted and ignored);
  PINGs are echoed, GOAWAY ends the session.

``SpdySession`` works for either role over any byte transport given as an async ``read()`` and a
``write(bytes)`` coroutine, so the same code serves SPDY upgraded HTTP connections and SPDY tunnelled
inside websocket binary messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

VERSION = 3
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

RST_PROTOCOL_ERROR = 1
RST_INVALID_STREAM = 2
RST_REFUSED_STREAM = 3
RST_CANCEL = 5
RST_INTERNAL_ERROR = 6

MAX_FRAME = (1 << 24) - 1
DATA_CHUNK = 32 * 1024

HEADER_DICTIONARY = (
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put"
    b"\x00\x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eaccept-charset"
    b"\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00\x00\x00\raccept-ranges"
    b"\x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\rauthorization\x00\x00\x00\rcache-control"
    b"\x00\x00\x00\nconnection\x00\x00\x00\x0ccontent-base\x00\x00\x00\x10content-encoding"
    b"\x00\x00\x00\x10content-language\x00\x00\x00\x0econtent-length\x00\x00\x00\x10content-location"
    b"\x00\x00\x00\x0bcontent-md5\x00\x00\x00\rcontent-range\x00\x00\x00\x0ccontent-type"
    b"\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00\x00\x06expect\x00\x00\x00\x07expires"
    b"\x00\x00\x00\x04from\x00\x00\x00\x04host\x00\x00\x00\x08if-match\x00\x00\x00\x11if-modified-since"
    b"\x00\x00\x00\rif-none-match\x00\x00\x00\x08if-range\x00\x00\x00\x13if-unmodified-since"
    b"\x00\x00\x00\rlast-modified\x00\x00\x00\x08location\x00\x00\x00\x0cmax-forwards"
    b"\x00\x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\x00\x13proxy-authorization"
    b"\x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0bretry-after\x00\x00\x00\x06server"
    b"\x00\x00\x00\x02te\x00\x00\x00\x07trailer\x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade"
    b"\x00\x00\x00\nuser-agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\x07warning"
    b"\x00\x00\x00\x10www-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\x00\x00\x00\x06status"
    b"\x00\x00\x00\x06200 OK\x00\x00\x00\x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url"
    b"\x00\x00\x00\x06public\x00\x00\x00\nset-cookie\x00\x00\x00\nkeep-alive\x00\x00\x00\x06origin"
    b"100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    b"203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    b"403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    b"Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    b"chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    b"text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


class SpdyError(Exception):
    pass


Headers = dict[str, list[str]]


@dataclass
class DataFrame:
    stream_id: int
    flags: int
    data: bytes


@dataclass
class ControlFrame:
    type: int
    flags: int
    payload: bytes


Frame = DataFrame | ControlFrame


def encode_data(stream_id: int, data: bytes, flags: int = 0) -> bytes:
    if len(data) > MAX_FRAME:
        raise SpdyError("data frame too large")
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


def encode_control(type_: int, flags: int, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME:
        raise SpdyError("control frame too large")
    return struct.pack(">HHI", 0x8000 | VERSION, type_, (flags << 24) | len(payload)) + payload


class FrameParser:
    """Incremental frame parser: feed bytes, get complete frames."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        while len(self._buf) >= 8:
            word0, word1 = struct.unpack_from(">II", self._buf)
            length = word1 & 0xFFFFFF
            flags = word1 >> 24
            if length > self._max:
                raise SpdyError("frame too large")
            if len(self._buf) < 8 + length:
                break
            payload = bytes(self._buf[8 : 8 + length])
            del self._buf[: 8 + length]
            if word0 & 0x80000000:
                version = (word0 >> 16) & 0x7FFF
                if version != VERSION:
                    raise SpdyError(f"unsupported SPDY version {version}")
                out.append(ControlFrame(word0 & 0xFFFF, flags, payload))
            else:
                out.append(DataFrame(word0 & 0x7FFFFFFF, flags, payload))
        return out


class HeaderCompressor:
    def __init__(self) -> None:
        self._z = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY,
                                   HEADER_DICTIONARY)

    def compress(self, headers: Headers) -> bytes:
        raw = bytearray(struct.pack(">I", len(headers)))
        for name, values in headers.items():
            n = name.lower().encode()
            v = "\x00".join(values).encode()
            raw += struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v
        return self._z.compress(bytes(raw)) + self._z.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    def __init__(self) -> None:
        self._z = zlib.decompressobj(15, HEADER_DICTIONARY)

    def decompress(self, block: bytes) -> Headers:
        try:
            raw = self._z.decompress(block)
        except zlib.error as e:
            raise SpdyError(f"header decompression failed: {e}") from e
        try:
            (count,) = struct.unpack_from(">I", raw, 0)
            off = 4
            headers: Headers = {}
            for _ in range(count):
                (ln,) = struct.unpack_from(">I", raw, off)
                name = raw[off + 4 : off + 4 + ln].decode()
                off += 4 + ln
                (lv,) = struct.unpack_from(">I", raw, off)
                value = raw[off + 4 : off + 4 + lv].decode()
                off += 4 + lv
                headers.setdefault(name.lower(), []).extend(value.split("\x00"))
            return headers
        except (struct.error, UnicodeDecodeError) as e:
            raise SpdyError(f"bad header block: {e}") from e


def header(headers: Headers, name: str) -> str:
    values = headers.get(name.lower()) or [""]
    return values[0]


class SpdyStream:
    """One SPDY stream: a bidirectional byte pipe with half-close."""

    def __init__(self, session: SpdySession, stream_id: int, headers: Headers) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self.reply_headers: Headers | None = None
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.remote_closed = False
        self.local_closed = False
        self.reset = False
        self.replied = asyncio.Event()

    def _feed(self, data: bytes) -> None:
        if data:
            self._queue.put_nowait(data)

    def _remote_fin(self) -> None:
        if not self.remote_closed:
            self.remote_closed = True
            self._queue.put_nowait(b"")

    async def read(self) -> bytes:
        """Next chunk; b"" once the peer half-closed (or reset) the stream."""
        if self.remote_closed and self._queue.empty():
            return b""
        return await self._queue.get()

    async def write(self, data: bytes) -> None:
        if self.local_closed or self.reset:
            raise SpdyError("stream closed")
        for i in range(0, len(data), DATA_CHUNK):
            await self.session._send(encode_data(self.id, data[i : i + DATA_CHUNK]))

    async def close(self) -> None:
        """Half-close (FIN) our side."""
        if self.local_closed or self.reset or self.session.closed:
            self.local_closed = True
            return
        self.local_closed = True
        with contextlib.suppress(Exception):
            await self.session._send(encode_data(self.id, b"", FLAG_FIN))
        self.session._maybe_forget(self)

    async def send_reset(self, status: int = RST_CANCEL) -> None:
        if self.reset:
            return
        self.reset = True
        self._remote_fin()
        with contextlib.suppress(Exception):
            await self.session._send(encode_control(RST_STREAM, 0, struct.pack(">II", self.id, status)))
        self.session._streams.pop(self.id, None)

    async def reply(self, headers: Headers | None = None, fin: bool = False) -> None:
        """Server side: accept the stream with SYN_REPLY."""
        payload = struct.pack(">I", self.id) + self.session._compressor.compress(headers or {})
        await self.session._send(encode_control(SYN_REPLY, FLAG_FIN if fin else 0, payload))
        if fin:
            self.local_closed = True


class SpdySession:
    """A SPDY/3.1 session over an arbitrary byte transport; see module docstring."""

    def __init__(
        self,
        read: Callable[[], Awaitable[bytes]],
        write: Callable[[bytes], Awaitable[None]],
        *,
        client: bool,
        on_stream: Callable[[SpdyStream], Awaitable[None]] | None = None,
    ) -> None:
        self._read = read
        self._write = write
        self.client = client
        self._on_stream = on_stream
        self._next_id = 1 if client else 2
        self._streams: dict[int, SpdyStream] = {}
        self._compressor = HeaderCompressor()
        self._decompressor = HeaderDecompressor()
        self._parser = FrameParser()
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        self.done = asyncio.Event()
        self._incoming: asyncio.Queue[SpdyStream | None] = asyncio.Queue()

    async def _send(self, data: bytes) -> None:
        if self.closed:
            raise SpdyError("session closed")
        async with self._write_lock:
            await self._write(data)

    def _maybe_forget(self, s: SpdyStream) -> None:
        if s.local_closed and s.remote_closed:
            self._streams.pop(s.id, None)

    async def open_stream(self, headers: Headers, *, wait_reply: bool = True, fin: bool = False) -> SpdyStream:
        sid = self._next_id
        self._next_id += 2
        s = SpdyStream(self, sid, headers)
        self._streams[sid] = s
        payload = struct.pack(">IIBB", sid, 0, 0, 0) + self._compressor.compress(headers)
        await self._send(encode_control(SYN_STREAM, FLAG_FIN if fin else 0, payload))
        if fin:
            s.local_closed = True
        if wait_reply:
            waiter = asyncio.ensure_future(s.replied.wait())
            done_wait = asyncio.ensure_future(self.done.wait())
            try:
                await asyncio.wait({waiter, done_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                done_wait.cancel()
            if not s.replied.is_set():
                raise SpdyError("session closed before stream was accepted")
            if s.reset:
                raise SpdyError("stream was reset by the peer")
        return s

    async def accept(self) -> SpdyStream | None:
        """Next stream opened by the peer (when no on_stream callback is set); None at session end."""
        return await self._incoming.get()

    async def ping(self, ping_id: int = 1) -> None:
        await self._send(encode_control(PING, 0, struct.pack(">I", ping_id)))

    async def run(self) -> None:
        """Read frames until the transport ends; then every stream sees EOF."""
        try:
            while True:
                data = await self._read()
                if not data:
                    break
                for frame in self._parser.feed(data):
                    await self._handle(frame)
        except (SpdyError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in list(self._streams.values()):
            s.replied.set()
            s._remote_fin()
        self._streams.clear()
        self._incoming.put_nowait(None)
        self.done.set()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._send(encode_control(GOAWAY, 0, struct.pack(">II", 0, 0)))
        self._shutdown()
        for t in list(self._tasks):
            t.cancel()

    async def _handle(self, frame: Frame) -> None:
        if isinstance(frame, DataFrame):
            s = self._streams.get(frame.stream_id)
            if s is None:
                return
            s._feed(frame.data)
            if frame.flags & FLAG_FIN:
                s._remote_fin()
                self._maybe_forget(s)
            return
        p = frame.payload
        if frame.type == SYN_STREAM:
            sid = struct.unpack_from(">I", p, 0)[0] & 0x7FFFFFFF
            headers = self._decompressor.decompress(p[10:])
            s = SpdyStream(self, sid, headers)
            self._streams[sid] = s
            if frame.flags & FLAG_FIN:
                s._remote_fin()
            if self._on_stream is not None:
                t = asyncio.ensure_future(self._on_stream(s))
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
            else:
                self._incoming.put_nowait(s)
        elif frame.type == SYN_REPLY:
            sid = struct.unpack_from(">I", p, 0)[0] & 0x7FFFFFFF
            headers = self._decompressor.decompress(p[4:])
            rs = self._streams.get(sid)
            if rs is not None:
                rs.reply_headers = headers
                rs.replied.set()
                if frame.flags & FLAG_FIN:
                    rs._remote_fin()
        elif frame.type == HEADERS:
            self._decompressor.decompress(p[4:])  # keep the zlib context in sync
        elif frame.type == RST_STREAM:
            sid = struct.unpack_from(">I", p, 0)[0] & 0x7FFFFFFF
            rs = self._streams.pop(sid, None)
            if rs is not None:
                rs.reset = True
                rs.replied.set()
                rs._remote_fin()
        elif frame.type == PING:
            (pid,) = struct.unpack_from(">I", p, 0)
            # Only echo pings that the peer originated (odd from clients, even from servers).
            if (pid % 2 == 1) != self.client:
                await self._send(encode_control(PING, 0, p[:4]))
        elif frame.type == GOAWAY:
            raise SpdyError("peer sent GOAWAY")
        # SETTINGS, WINDOW_UPDATE and unknown control frames are ignored.
