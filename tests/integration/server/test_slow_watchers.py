"""A watch client that never reads costs the API server bounded memory and nobody else's time.

Upstream's watch cache gives each watcher a bounded channel and terminates a watcher that stays
behind; the client sees its watch end and watches again.  Here a raw TLS socket with a tiny
receive buffer opens a pod watch and never reads past the response head, while a normal client
watches the same pods and big pods are created: the normal watcher gets every event, every
create completes, the stalled watch never holds more than its limit and is closed with a log line
naming its client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pykubelet.server.main import ServerHandle, run_server
from tests.builders import pod
from tests.integration.server.conftest import Http, eventually

LIMIT = 50
PODS = 200
BIG = "x" * 48 * 1024  # 48 KiB of annotation per pod: 200 pods overfill any socket buffer


@pytest.fixture
async def srv(tmp_path: Any) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, controllers=False) as s:
        s.http.watch_queue_limit = LIMIT
        yield s


class StalledClient:
    """A blocking TLS socket (4 KiB receive buffer) that sends a watch request and never reads."""

    def __init__(self, srv: ServerHandle, path: str) -> None:
        self.srv, self.path = srv, path
        self.sock: ssl.SSLSocket | None = None

    def open(self) -> None:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
        host, port = self.srv.url.removeprefix("https://").split(":")
        raw.settimeout(10)
        raw.connect((host, int(port)))
        ctx = ssl.create_default_context(cafile=str(self.srv.ca_file))
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        self.sock.sendall((f"GET {self.path} HTTP/1.1\r\nHost: {host}\r\n"
                           f"Authorization: Bearer {self.srv.admin_token}\r\n"
                           "User-Agent: stalled-watcher/1.0\r\n\r\n").encode())

    def drain_to_end(self) -> str:
        """Read until the server ends the connection: 'closed' (EOF), 'reset', or 'open' (timeout)."""
        assert self.sock is not None
        self.sock.settimeout(10)
        try:
            while self.sock.recv(65536):
                pass
            return "closed"
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return "reset"
        except TimeoutError:
            return "open"

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()


async def test_a_watch_client_that_never_reads_is_closed_without_slowing_other_watchers_or_writers(
        srv: ServerHandle, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pykubelet.server.storage")
    http = Http(srv)
    stalled = StalledClient(srv, "/api/v1/namespaces/default/pods?watch=true")
    seen: list[str] = []
    reader: asyncio.Task[None] | None = None
    try:
        async def follow() -> None:
            async with http.session.get(srv.url + "/api/v1/namespaces/default/pods",
                                        params={"watch": "true"},
                                        headers={"Authorization": f"Bearer {srv.admin_token}"}) as r:
                async for line in r.content:
                    ev = json.loads(line)
                    if ev["type"] == "ADDED":
                        seen.append(ev["object"]["metadata"]["name"])
                    if len(seen) == PODS:
                        return

        reader = asyncio.create_task(follow())
        await asyncio.to_thread(stalled.open)
        await eventually(lambda: _true(len(srv.store.watchers("pods")) == 2), "both pod watches to start")
        most_queued = 0

        async def sample() -> None:
            nonlocal most_queued
            while True:
                most_queued = max([most_queued, *(w.backlog() for w in srv.store.watchers("pods"))])
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        try:
            for i in range(PODS):
                status, body = await http.req("POST", "/api/v1/namespaces/default/pods",
                                              pod(f"big-{i:04d}", annotations={"big": BIG}))
                assert status == 201, body
        finally:
            sampler.cancel()
        await asyncio.wait_for(reader, 60)  # the normal watcher got every pod, in order
        assert seen == [f"big-{i:04d}" for i in range(PODS)]
        assert most_queued <= LIMIT
        assert len(srv.store.watchers("pods")) == 1  # the stalled watch is gone
        assert await asyncio.to_thread(stalled.drain_to_end) in ("closed", "reset")
        lines = [r.getMessage() for r in caplog.records if "unresponsiveness" in r.getMessage()]
        assert len(lines) == 1 and "stalled-watcher/1.0" in lines[0] and "pods" in lines[0], lines
    finally:
        if reader is not None:
            reader.cancel()
        stalled.close()
        await http.close()


async def test_a_terminated_watcher_can_watch_again_from_its_last_resource_version(srv: ServerHandle) -> None:
    ev_store = srv.store
    w = ev_store.watch("pods", "default", ev_store.revision, limit=2, client="test")
    http = Http(srv)
    try:
        for i in range(3):
            status, _ = await http.req("POST", "/api/v1/namespaces/default/pods", pod(f"p{i}"))
            assert status == 201
        events = []
        while (ev := w.queue.get_nowait()) is not None:
            events.append(ev)
        assert w.terminated and [e.name for e in events] == ["p0", "p1"]
        status, watch = await http.req("GET", "/api/v1/namespaces/default/pods",
                                       params={"watch": "true", "resourceVersion": str(events[-1].rv),
                                               "timeoutSeconds": "1"})
        assert status == 200
        assert watch["type"] == "ADDED" and watch["object"]["metadata"]["name"] == "p2"  # one event
    finally:
        await http.close()


async def _true(value: bool) -> bool:
    return value
