"""Serve a FakeRuntime over gRPC on a unix socket.

Like a real runtime (and kubemark's fake remote runtime) both RuntimeService and ImageService live
on one socket. A stale socket file left by a killed previous run is removed first, as containerd
does, so restarts "just work"; the message size limit matches the client's 16 MiB.

Stopping waits for the handlers, not only for the server: grpc.aio's ``Server.stop`` returns once
the core has cancelled or finished every call, but the asyncio task running a cancelled handler
learns of it later, through grpc's poller, and under load that can be many loop iterations after
``stop`` returned. Whoever stops the fake runtime (a test, hollow mode) expects nothing of it to run
afterwards, so ``FakeCRIServer.stop`` also waits, bounded, for the handler tasks it saw start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

import grpc.aio
from cri_api.v1 import api_pb2_grpc as pb_grpc

from pykubelet.cri.client import MAX_MESSAGE_SIZE, socket_path
from pykubelet.fakecri.runtime import FakeRuntime

# How long stop() waits for handler tasks after the server itself stopped; a handler still running
# then is left to the loop (and a test's leak check names it).
HANDLER_DRAIN_SECONDS = 5.0


class _HandlerTasks(grpc.aio.ServerInterceptor):
    """Remembers the task of every call in flight: grpc.aio runs the interceptor in the call's task."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task[object]] = set()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        task = asyncio.current_task()
        if task is not None and not task.done():
            self.running.add(task)
            task.add_done_callback(self.running.discard)
        return await continuation(handler_call_details)


class FakeCRIServer:
    """The gRPC server of one fake runtime; ``stop`` returns when none of its handlers runs."""

    def __init__(self, server: grpc.aio.Server, tasks: _HandlerTasks) -> None:
        self._server = server
        self._tasks = tasks

    async def stop(self, grace: float | None) -> None:
        await self._server.stop(grace)
        if self._tasks.running:
            await asyncio.wait(set(self._tasks.running), timeout=HANDLER_DRAIN_SECONDS)


async def serve(socket: str, runtime: FakeRuntime | None = None) -> tuple[FakeCRIServer, FakeRuntime]:
    """Start serving on ``socket`` (a path or unix:// endpoint); returns (server, runtime).

    Stop with ``await server.stop(grace)``.
    """
    path = socket_path(socket)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    rt = runtime if runtime is not None else FakeRuntime()
    tasks = _HandlerTasks()
    server = grpc.aio.server(
        interceptors=[tasks],
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
        ],
    )
    pb_grpc.add_RuntimeServiceServicer_to_server(rt, server)
    pb_grpc.add_ImageServiceServicer_to_server(rt, server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return FakeCRIServer(server, tasks), rt
