"""A CRI client wired straight to a :class:`FakeRuntime` in the same process (no socket, no gRPC).

Hollow nodes run many agents with one fake runtime each in a single process. Over gRPC every CRI call
is paid twice in that process — the client's call object, serialization and completion hand-off, then
the server's — and a node relists every sandbox and container each second, so for 100 idle hollow
nodes about half of the process's CPU went to gRPC machinery (measured: docs/benchmarks-scale.md).
:class:`InProcessCRIClient` keeps everything the agent sees — it *is* a ``CRIClient``, so the
operation names, deadlines, observer metrics, response checks and ``CRIError`` mapping are the real
ones — and replaces only the two gRPC stubs with objects that await the servicer's handler directly.

What changes compared with the wire, and why it is safe here: messages are handed over by reference
instead of being serialized. The fake runtime copies what it keeps from a request (``CopyFrom``) and
builds each response anew (list entries are cached messages copied into a fresh response), so
neither side can see the other's later mutations. ``context.abort(code, details)`` raises the same
``grpc.aio.AioRpcError`` a real channel would, so error handling is unchanged. The event stream
(``GetContainerEvents``) answers UNIMPLEMENTED on first iteration, as the fake does over gRPC.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc
import grpc.aio

from pykubelet.cri.client import CRIClient, Observer
from pykubelet.fakecri.runtime import FakeRuntime


class _Context:
    """The part of ``grpc.aio.ServicerContext`` the fake runtime uses."""

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


_CONTEXT = _Context()


class _UnimplementedStream:
    """A server-streaming call whose first read fails with UNIMPLEMENTED."""

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   "fakecri: GetContainerEvents is not implemented (like containerd 1.6)")

    def cancel(self) -> bool:
        return False


class _DirectStub:
    """Stands in for ``RuntimeServiceStub``/``ImageServiceStub``: ``stub.Method(request, timeout=…)``
    awaits the servicer's ``Method(request, context)``."""

    def __init__(self, servicer: FakeRuntime) -> None:
        self._servicer = servicer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name == "GetContainerEvents":
            def stream(request: Any, **_: Any) -> _UnimplementedStream:
                return _UnimplementedStream()
            setattr(self, name, stream)
            return stream
        handler: Callable[[Any, Any], Awaitable[Any]] = getattr(self._servicer, name)

        async def call(request: Any, **_: Any) -> Any:  # deadline (timeout=) moot: nothing waits
            return await handler(request, _CONTEXT)

        setattr(self, name, call)  # resolved once per method
        return call


class InProcessCRIClient(CRIClient):
    """``CRIClient`` whose calls go straight to ``runtime`` (see the module docstring); ``endpoint``
    is only a name (what the agent reports), nothing listens there."""

    def __init__(self, runtime: FakeRuntime, endpoint: str = "unix:///run/pykubelet/fakecri-inprocess.sock", *,
                 timeout: float = 120.0, observer: Observer | None = None) -> None:
        super().__init__(endpoint, timeout=timeout, observer=observer)
        self.fake = runtime

    def _ensure_channel(self) -> None:
        if self._rt is None:
            stub: Any = _DirectStub(self.fake)
            self._rt = self._img = stub

    async def close(self) -> None:
        self._rt = self._img = None
