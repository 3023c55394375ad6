"""The server-streaming GetContainerEvents over the client's own HTTP/2 transport, and no grpcio.

The stream must behave as grpc.aio's did (the evented PLEG's contract, upstream
``GetContainerEvents``): each event as it comes, a clean end, the runtime's error with its code
after the events sent before it, and a cancelled reader cancelling the stream on the runtime.
Served by the fake runtime over real gRPC (grpcio's server), so the framing is checked against
gRPC's own implementation. Last, the agent's CRI client with the default transport must work
without importing grpcio at all (its import alone is ~8.5 MB of the agent's RSS).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from pykubelet.cri import CRIClient, CRIError, StatusCode, pb
from pykubelet.fakecri import FakeRuntime
from tests.fakes import eventually, fake_cri


class EventsRuntime(FakeRuntime):
    """GetContainerEvents sends ``events`` container ids, then ends, fails (``error``) or waits."""

    def __init__(self, events: list[str], *, error: tuple[Any, str] | None = None, hang: bool = False) -> None:
        super().__init__()
        self.events = events
        self.error = error
        self.hang = hang
        self.streams = 0
        self.stream_cancelled = 0

    async def GetContainerEvents(self, request: pb.GetEventsRequest, context: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        self.streams += 1
        try:
            for cid in self.events:
                yield pb.ContainerEventResponse(container_id=cid, container_event_type=pb.CONTAINER_STARTED_EVENT,
                                                created_at=1)
            if self.error is not None:
                await context.abort(*self.error)
            if self.hang:
                await asyncio.Event().wait()
        except (asyncio.CancelledError, GeneratorExit):
            # A cancelled stream reaches the handler as CancelledError when it waits, or as the
            # generator's close (GeneratorExit) when grpc was sending the message it last yielded.
            self.stream_cancelled += 1
            raise


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="fcri", dir="/tmp")  # short: unix socket paths max ~107 bytes
    yield f"{d}/cri.sock"
    shutil.rmtree(d, ignore_errors=True)


async def test_a_stream_that_ends_yields_every_event_then_stops(sock: str) -> None:
    seen: list[tuple[str, Any]] = []
    ids = [f"c{i}" for i in range(300)]  # more than one DATA frame's worth
    async with fake_cri(sock, EventsRuntime(ids), observer=lambda op, s, e: seen.append((op, e))) as (client, _rt):
        got = [ev.container_id async for ev in client.get_container_events()]
        assert got == ids
        assert seen[-1] == ("get_container_events", None)
        assert (await client.version()).runtime_name == "fakecri"  # the connection is still good


async def test_a_stream_that_fails_gives_its_events_then_the_runtimes_error(sock: str) -> None:
    seen: list[tuple[str, Any]] = []
    rt = EventsRuntime(["a", "b"], error=(grpc.StatusCode.UNAVAILABLE, "runtime is restarting"))
    async with fake_cri(sock, rt, observer=lambda op, s, e: seen.append((op, e))) as (client, _rt):
        got: list[str] = []
        with pytest.raises(CRIError) as ei:
            async for ev in client.get_container_events():
                got.append(ev.container_id)
        assert got == ["a", "b"]
        assert ei.value.unavailable and ei.value.details == "runtime is restarting"
        assert str(ei.value) == "get_container_events: rpc error: code = Unavailable desc = runtime is restarting"
        assert seen[-1] == ("get_container_events", ei.value)


async def test_an_unimplemented_stream_fails_on_the_first_read(sock: str) -> None:
    async with fake_cri(sock) as (client, _rt):  # the fake answers UNIMPLEMENTED, like containerd 1.6
        with pytest.raises(CRIError) as ei:
            async for _ in client.get_container_events():
                raise AssertionError("no event expected")
        assert ei.value.unimplemented


async def test_cancelling_the_reader_cancels_the_stream_on_the_runtime(sock: str) -> None:
    async with fake_cri(sock, EventsRuntime(["a"], hang=True)) as (client, rt):
        assert isinstance(rt, EventsRuntime)
        got: list[str] = []

        async def read() -> None:
            async for ev in client.get_container_events():
                got.append(ev.container_id)

        task = asyncio.create_task(read())
        await eventually(lambda: got == ["a"], timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: rt.stream_cancelled == 1, timeout=10)
        assert (await client.version()).runtime_name == "fakecri"


async def test_a_reader_that_stops_early_cancels_the_stream_on_the_runtime(sock: str) -> None:
    async with fake_cri(sock, EventsRuntime(["a", "b"], hang=True)) as (client, rt):
        assert isinstance(rt, EventsRuntime)
        events = client.get_container_events()
        async for ev in events:
            assert ev.container_id == "a"
            break
        await events.aclose()  # what `async for` leaves to the caller, and the agent does
        await eventually(lambda: rt.stream_cancelled == 1, timeout=10)


async def test_a_stream_whose_runtime_goes_away_fails_unavailable(sock: str) -> None:
    from pykubelet.fakecri import serve

    server, _rt = await serve(sock, EventsRuntime(["a"], hang=True))
    client = CRIClient(f"unix://{sock}", timeout=5)
    try:
        got: list[str] = []
        with pytest.raises(CRIError) as ei:
            async for ev in client.get_container_events():
                got.append(ev.container_id)
                await server.stop(None)
        assert got == ["a"]
        assert ei.value.code in (StatusCode.UNAVAILABLE, StatusCode.CANCELLED), ei.value
    finally:
        await client.close()
        await server.stop(None)


def test_the_default_transport_never_imports_grpcio(sock: str) -> None:
    """A client process (the agent's imports, then every kind of call) must not load grpc."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        import pykubelet.agent.main
        from pykubelet.cri import CRIClient, CRIError

        async def main():
            client = CRIClient("unix://{sock}", timeout=5)
            await client.connect(wait=10)
            assert await client.list_containers() == []
            try:
                async for _ in client.get_container_events():
                    pass
            except CRIError as e:
                assert e.unimplemented, e
            await client.close()
            print("grpc" in sys.modules, "cri_api" in sys.modules, client.transport)

        asyncio.run(main())
    """)

    async def run() -> str:
        async with fake_cri(sock):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", script, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**os.environ, "PYKUBELET_CRI_TRANSPORT": ""})
            out, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()
            return out.decode().strip()

    assert asyncio.run(run()) == "False False h2"
