"""What a CRI call does when it is cancelled, runs past its deadline, or the runtime restarts under it.

These are the guarantees the agent relies on from ``CRIClient`` whatever carries the call (the prober
passes its hung-runtime guard as the call's deadline; pod workers cancel syncs in flight; a runtime
restart must not need an agent restart): checked over a real unix socket against the fake runtime
served by gRPC, whose ExecSync is made to hang.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from cri_api.v1 import api_pb2 as pb

from pykubelet.cri import CRIClient, CRIError, StatusCode
from pykubelet.fakecri import FakeRuntime, serve
from tests.fakes import eventually, fake_cri


class HangingExecRuntime(FakeRuntime):
    """ExecSync never answers; records when a call reaches it and when the runtime sees it cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.exec_started = 0
        self.exec_cancelled = 0

    async def ExecSync(self, request: pb.ExecSyncRequest, context: Any) -> pb.ExecSyncResponse:
        self.exec_started += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.exec_cancelled += 1
            raise
        raise AssertionError("unreachable")


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="fcri", dir="/tmp")  # short: unix socket paths max ~107 bytes
    yield f"{d}/cri.sock"
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def hanging(sock: str) -> AsyncIterator[tuple[CRIClient, HangingExecRuntime, list[tuple[str, Any]]]]:
    seen: list[tuple[str, Any]] = []
    async with fake_cri(sock, HangingExecRuntime(), observer=lambda op, s, e: seen.append((op, e))) as (client, rt):
        assert isinstance(rt, HangingExecRuntime)
        yield client, rt, seen


async def test_cancelling_the_awaiting_task_cancels_the_call_on_the_runtime(hanging: Any) -> None:
    client, rt, seen = hanging
    task = asyncio.create_task(client.exec_sync("any", ["true"], timeout=5))
    await eventually(lambda: rt.exec_started == 1, timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: rt.exec_cancelled == 1, timeout=10)
    assert [op for op, _ in seen] == ["version"]  # a cancelled call is no runtime error


async def test_a_call_past_its_deadline_fails_with_deadline_exceeded_and_is_counted(hanging: Any) -> None:
    client, rt, seen = hanging
    with pytest.raises(CRIError) as ei:
        await client.exec_sync("any", ["true"], timeout=5, deadline=0.3)
    assert ei.value.deadline_exceeded
    assert ei.value.code is StatusCode.DEADLINE_EXCEEDED
    assert str(ei.value).startswith("exec_sync: rpc error: code = DeadlineExceeded desc = ")
    assert seen[-1][0] == "exec_sync" and seen[-1][1] is ei.value
    await eventually(lambda: rt.exec_cancelled == 1, timeout=10)  # the runtime stops waiting too


async def test_the_same_client_reaches_a_restarted_runtime(sock: str) -> None:
    server, _ = await serve(sock)
    client = CRIClient(f"unix://{sock}", timeout=5)
    try:
        await client.connect(wait=5)
        await server.stop(None)
        with pytest.raises(CRIError) as ei:
            await client.version()
        assert ei.value.unavailable
        server, _ = await serve(sock)
        v = await client.connect(wait=20)
        assert v.runtime_name == "fakecri"
        assert (await client.status()).status.conditions[0].type == "RuntimeReady"
    finally:
        await client.close()
        await server.stop(None)


async def test_requests_larger_than_the_runtimes_flow_control_window_arrive_whole(sock: str) -> None:
    async with fake_cri(sock) as (client, _rt):
        await client.pull_image("busybox:1.36")
        big = {f"note-{i}": "x" * 1000 for i in range(1000)}  # ~1 MB: many DATA frames and window updates
        configs = [pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name=f"p{i}", namespace="default", uid=f"u{i}"),
                                       annotations=big) for i in range(5)]
        sandboxes = await asyncio.gather(*(client.run_pod_sandbox(cfg) for cfg in configs))
        assert len(set(sandboxes)) == 5
        status = await client.pod_sandbox_status(sandboxes[0])
        assert dict(status.status.annotations) == big


async def test_hundreds_of_concurrent_calls_all_complete(sock: str) -> None:
    async with fake_cri(sock) as (client, _rt):
        answers = await asyncio.gather(*(client.version() for _ in range(500)))
        assert {a.runtime_name for a in answers} == {"fakecri"}


async def test_a_runtime_error_keeps_its_code_and_message(sock: str) -> None:
    async with fake_cri(sock) as (client, _rt):
        with pytest.raises(CRIError) as ei:
            await client.container_status("no-such-container")
        assert ei.value.not_found
        assert "no-such-container" in ei.value.details
        assert (await client.version()).runtime_name == "fakecri"  # the connection is still good


class EchoExecRuntime(FakeRuntime):
    """ExecSync answers ``cmd[1]`` repeated ``cmd[2]`` times on stdout, after ``cmd[3]`` ms."""

    async def ExecSync(self, request: pb.ExecSyncRequest, context: Any) -> pb.ExecSyncResponse:
        _, text, times, ms = request.cmd
        await asyncio.sleep(int(ms) / 1000)
        return pb.ExecSyncResponse(stdout=text.encode() * int(times), exit_code=0)


async def test_exec_answers_read_on_a_grid_all_arrive_whole_among_ordinary_calls(sock: str) -> None:
    async with fake_cri(sock, EchoExecRuntime()) as (client, _rt):
        sizes = [1, 10, 1000, 300_000] * 25  # the large ones span many reads
        delays = [0, 3, 70, 130]  # answered before, around and after the next grid point

        async def probe(i: int, size: int) -> bytes:
            argv = ["echo", f"{i % 10}", str(size), str(delays[i % 4])]
            return bytes((await client.exec_sync(f"c{i}", argv, 1, deadline=11, read_grid=0.05)).stdout)

        outputs, answers = await asyncio.gather(asyncio.gather(*(probe(i, s) for i, s in enumerate(sizes))),
                                                asyncio.gather(*(client.version() for _ in range(50))))
        assert outputs == [f"{i % 10}".encode() * s for i, s in enumerate(sizes)]
        assert {v.runtime_name for v in answers} == {"fakecri"}
        # a later call, with nothing else in flight, is read as it comes on the same connection
        again = await client.exec_sync("c0", ["echo", "z", "3", "0"], 1, read_grid=0.05)
        assert bytes(again.stdout) == b"zzz"
