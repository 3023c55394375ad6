"""A lean HTTP/1.1 keep-alive client for short request/response calls (the API client's unary path).

Why not aiohttp here: every API request the agent makes (a TokenRequest and a status PATCH per
started pod, ~3 event POSTs) went through aiohttp's ``ClientSession.request``, and at a 1,000-pod
start that client side was ~20 % of the agent's CPU samples: request and response objects, header
multidicts, URL objects, payload writers, a timer handle and several tasks' worth of callbacks per
call. An API call needs far less: one write of a prebuilt request, one parse of the answer by
``httptools`` (llhttp, the parser of Node.js, bound by the uvloop maintainers) straight from the
protocol's ``data_received``, and one future. Streams (watches) stay on aiohttp.

What it keeps from a general client, following Go's net/http ``Transport`` (what client-go uses):
- keep-alive: a connection goes back to the pool after a complete response unless either side said
  ``Connection: close`` (or HTTP/1.0), newest first; idle connections are closed after
  ``IDLE_TIMEOUT`` seconds (aiohttp's connector default). Only ``IDLE_KEEP`` of them (net/http's
  ``DefaultMaxIdleConnsPerHost``) wait that long: the others a burst opened (a 1,000-pod start opens
  the whole ``limit``) are closed after ``SURPLUS_IDLE_TIMEOUT``, which frees their TLS buffers
  (~250 kB each) before the node settles, while a burst still reuses them (net/http closes them at
  once);
- a bounded pool: at most ``limit`` connections at once, further requests wait in order for one;
- a reused connection that the server closed while idle: the request goes to another connection
  when it provably was not sent (the connection was seen closed before the write) or it is
  replayable (GET/HEAD/OPTIONS/TRACE, net/http's ``isReplayable``) and no byte of an answer came;
  otherwise the error is the caller's, as in ``persistConn.shouldRetryRequest``;
- bodies by Content-Length, chunked, or until the server closes; ``Content-Encoding: gzip`` or
  ``deflate`` is decoded, though the request never asks for it (no ``Accept-Encoding``);
- per-call timeout over the whole call (pool wait, connect, answer), as net/http's
  ``Client.Timeout``; a timed-out or cancelled call closes its connection (its answer may still come).

Errors are ``OSError`` (connection refused, reset, TLS, closed before a complete answer, a malformed
answer as ``ProtocolError``) and ``TimeoutError``; the caller maps them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import zlib
from dataclasses import dataclass
from typing import cast

import httptools

IDLE_TIMEOUT = 15.0
IDLE_KEEP = 2  # idle connections kept for IDLE_TIMEOUT; more are closed after SURPLUS_IDLE_TIMEOUT
SURPLUS_IDLE_TIMEOUT = 1.0
CONNECT_TIMEOUT = 10.0
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class ProtocolError(OSError):
    """The server's answer was not HTTP/1.1 as we understand it, or ended early."""


class ConnectError(OSError):
    """No connection could be made in ``CONNECT_TIMEOUT`` seconds."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: at most one request in flight, its answer parsed as it arrives."""

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        self.generation = pool.generation
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        # None once the connection is lost: the parser calls back into this object, and the cycle
        # would keep the transport and its TLS buffers (~250 kB) until a full collection.
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._status = 0
        self._waiter: asyncio.Future[Response] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._chunks: list[bytes] = []
        self._got_bytes = False
        self._headers_done = False
        self._framed = False  # Content-Length or Transfer-Encoding given: EOF is not the end
        self._keep_alive = False
        self._encoding = b""

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if self._waiter is None or parser is None:  # nothing asked: a server talking out of turn is not to be trusted
            self._close()
            return
        self._got_bytes = True
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(ProtocolError(f"malformed HTTP response: {e}"))

    def eof_received(self) -> bool | None:
        return False  # close; connection_lost finishes an answer that ends at EOF

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            if self._headers_done and not self._framed:
                self._complete()  # the body was "until the server closes"
            else:
                what = "answering" if self._got_bytes else "any answer"
                self._fail(exc or ProtocolError(f"server closed the connection before {what}"))
        self._parser = None
        self.pool._lost(self)

    # --- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.lower()
        if n == b"content-length" or n == b"transfer-encoding":
            self._framed = True
        elif n == b"content-encoding":
            self._encoding = value.strip().lower()

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._status = self._parser.get_status_code() if self._parser is not None else 0

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._status < 200:  # interim (100 Continue, 103 Early Hints): the answer follows
            self._chunks = []
            self._headers_done = self._framed = False
            self._encoding = b""
            return
        # llhttp clears the message's flags right after this callback, so ask now, not later.
        self._keep_alive = self._parser is not None and self._parser.should_keep_alive()
        self._complete()

    # --- one exchange -------------------------------------------------------------------------

    def send(self, request: bytes, deadline: float | None) -> asyncio.Future[Response]:
        assert self.transport is not None
        loop = self.pool.loop
        self._waiter = waiter = loop.create_future()
        if deadline is not None:
            self._timer = loop.call_at(deadline, self._timed_out)
        self._chunks = []
        self._got_bytes = self._headers_done = self._framed = self._keep_alive = False
        self._encoding = b""
        self.transport.write(request)
        return waiter

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(TimeoutError("no complete answer in time"))

    @property
    def got_bytes(self) -> bool:
        return self._got_bytes

    def keep_alive(self) -> bool:
        return not self.closed and self._keep_alive

    def _complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        body = b"".join(self._chunks) if len(self._chunks) != 1 else self._chunks[0]
        self._chunks = []
        if self._encoding and self._encoding != b"identity" and body:
            try:
                body = _decode(self._encoding, body)
            except (zlib.error, ValueError) as e:
                waiter.set_exception(ProtocolError(f"undecodable {self._encoding.decode(errors='replace')} body: {e}"))
                self._close()
                return
        waiter.set_result(Response(self._status, body))

    def _fail(self, exc: BaseException) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _expire(waiter: asyncio.Future[_Connection | None]) -> None:
    """A call's deadline passed while it waited for a connection."""
    if not waiter.done():
        waiter.set_exception(TimeoutError("no connection free in time"))


def _decode(encoding: bytes, body: bytes) -> bytes:
    if encoding in (b"gzip", b"x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == b"deflate":  # zlib-wrapped per RFC 9110; some servers send it raw
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)
    raise ValueError("unsupported content encoding")


class Http1Pool:
    """Keep-alive connections to one ``host:port`` (TLS when ``ssl_context`` is given), at most ``limit``.

    Bound to the event loop it was created on; the owner makes a new one for another loop.
    """

    def __init__(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None, limit: int, *, idle_timeout: float | None = None
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.host, self.port, self.ssl = host, port, ssl_context
        self.limit = max(1, limit)
        self.idle_timeout = IDLE_TIMEOUT if idle_timeout is None else idle_timeout
        self.generation = 0
        self._idle: collections.deque[_Connection] = collections.deque()  # oldest left, newest right
        self._open = 0  # connections existing or being made, waiters' reserved slots included
        self._all: set[_Connection] = set()
        self._waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self.closed = False

    async def request(self, method: str, request: bytes, timeout: float | None) -> Response:  # noqa: ASYNC109 - the caller's per-request timeout
        """Send ``request`` (the full HTTP/1.1 message) and return the answer.

        The timeout covers the whole call. While the pool is full it is a timer on the wait for a
        connection, while connecting an ``asyncio.timeout``; once the request is written it is one
        timer on the connection, which fails the exchange and closes the connection: a call costs
        one or two ``call_at`` instead of a context manager and a task lookup (at a 1,000-pod start
        nearly every call waits for a connection).
        """
        loop = self.loop
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            conn = self._take_idle()
            if conn is None:
                conn = await self._acquire(deadline)
                transport = conn.transport
                if conn.closed or transport is None or transport.is_closing():
                    self._release(conn, reuse=False)  # closed while handed over: nothing was written to it
                    continue
            try:
                response = await conn.send(request, deadline)
            except TimeoutError:
                self._release(conn, reuse=False)  # send() closed it: its answer may still come
                raise
            except OSError:
                # net/http's shouldRetryRequest: only on a reused connection, only without an answer
                # begun, only what may be sent twice (the write itself is not known to have failed).
                retry = conn.reused and not conn.got_bytes and method in _REPLAYABLE
                self._release(conn, reuse=False)
                if retry:
                    continue
                raise
            except BaseException:  # cancellation: its answer may still come, so not reusable
                conn.abort()
                self._release(conn, reuse=False)
                raise
            self._release(conn, reuse=conn.keep_alive())
            return response

    # --- the pool -----------------------------------------------------------------------------

    def _take_idle(self) -> _Connection | None:
        """The newest idle connection still open, or None."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            transport = conn.transport
            if conn.closed or transport is None or transport.is_closing():
                self._forget(conn)  # closed while idle: nothing was written to it
                continue
            conn.reused = True
            return conn
        return None

    async def _acquire(self, deadline: float | None) -> _Connection:
        if self.closed:
            raise ProtocolError("connection pool closed")
        if self._open >= self.limit:
            fut: asyncio.Future[_Connection | None] = self.loop.create_future()
            self._waiters.append(fut)
            timer = None if deadline is None else self.loop.call_at(deadline, _expire, fut)
            try:
                got = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._hand_back(fut.result())
                else:
                    self._unqueue(fut)
                raise
            except TimeoutError:  # _expire: nothing was handed over
                self._unqueue(fut)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if got is not None:
                got.reused = True
                return got
            # a slot was handed over (self._open still counts it): connect below
        else:
            self._open += 1
        try:
            if deadline is None:
                return await self._connect()
            async with asyncio.timeout_at(deadline):
                return await self._connect()
        except BaseException:
            self._slot_freed()
            raise

    def _unqueue(self, waiter: asyncio.Future[_Connection | None]) -> None:
        """Take a waiter that gave up out of the queue, unless a release already dropped it (a done
        waiter is skipped there, in the time between its end and its task running again)."""
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self), self.host, self.port,
                    ssl=self.ssl, server_hostname=self.host if self.ssl is not None else None)
        except TimeoutError as e:  # the connect's own limit (or ETIMEDOUT), not the call's timeout
            raise ConnectError(f"connect to {self.host}:{self.port}: timed out") from e
        self._all.add(conn)
        if conn.closed:  # lost during the handshake's last step
            self._all.discard(conn)
            raise ProtocolError("connection closed right after it was made")
        return conn

    def _hand_back(self, conn: _Connection | None) -> None:
        """A waiter that was given something but was cancelled returns it."""
        if conn is None:
            self._slot_freed()
        else:
            self._release(conn, reuse=True)

    def _release(self, conn: _Connection, *, reuse: bool) -> None:
        if not reuse or conn.closed or conn.generation != self.generation:
            if not conn.closed:
                conn._close()
            self._forget(conn)
            return
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        conn.idle_since = self.loop.time()
        self._idle.append(conn)
        self._schedule_sweep()

    def _forget(self, conn: _Connection) -> None:
        if conn in self._all:
            self._all.discard(conn)
            self._slot_freed()

    def _slot_freed(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to the waiter, which connects
                return
        self._open -= 1

    def _lost(self, conn: _Connection) -> None:
        """The server (or we) closed ``conn``; an idle one is dropped now, a busy one on release."""
        if conn in self._idle:
            self._idle.remove(conn)
            self._forget(conn)

    def _expiry(self) -> float:
        """When the oldest idle connection is to be closed: sooner while more than IDLE_KEEP idle."""
        wait = self.idle_timeout if len(self._idle) <= IDLE_KEEP else min(SURPLUS_IDLE_TIMEOUT, self.idle_timeout)
        return self._idle[0].idle_since + wait

    def _schedule_sweep(self) -> None:
        if not self._idle:
            return
        at = self._expiry()
        if self._sweeper is not None:
            if self._sweeper.when() <= at:
                return
            self._sweeper.cancel()
        self._sweeper = self.loop.call_at(at, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = self.loop.time()
        while self._idle and self._expiry() <= now:
            conn = self._idle.popleft()
            conn._close()
            self._forget(conn)
        self._schedule_sweep()

    def drop_connections(self) -> None:
        """Close the idle connections now and the busy ones when their call ends (new TLS client
        certificate: upstream's ``closeAllConns``); calls in flight finish on their connection."""
        self.generation += 1
        while self._idle:
            conn = self._idle.pop()
            conn._close()
            self._forget(conn)

    def close(self) -> None:
        """Close every connection, busy ones too (their calls fail with a connection error)."""
        self.closed = True
        self.generation += 1
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(ProtocolError("connection pool closed"))
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
