"""Serve a FakeRuntime over gRPC on a unix socket.

Like a real runtime (and kubemark's fake remote runtime) both RuntimeService and ImageService live
on one socket. A stale socket file left by a killed previous run is removed first, as containerd
does, so restarts "just work"; the message size limit matches the client's 16 MiB.
"""

from __future__ import annotations

import contextlib
import os

import grpc.aio
from cri_api.v1 import api_pb2_grpc as pb_grpc

from pykubelet.cri.client import MAX_MESSAGE_SIZE, socket_path
from pykubelet.fakecri.runtime import FakeRuntime


async def serve(socket: str, runtime: FakeRuntime | None = None) -> tuple[grpc.aio.Server, FakeRuntime]:
    """Start serving on ``socket`` (a path or unix:// endpoint); returns (server, runtime).

    Stop with ``await server.stop(grace)``.
    """
    path = socket_path(socket)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    rt = runtime if runtime is not None else FakeRuntime()
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
        ]
    )
    pb_grpc.add_RuntimeServiceServicer_to_server(rt, server)
    pb_grpc.add_ImageServiceServicer_to_server(rt, server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server, rt
