"""gRPC status codes and the error a failed call raises, without importing grpcio.

The agent talks to its runtime over :mod:`pykubelet.cri.unary_h2` (HTTP/2 on the event loop), so on
its default path nothing needs grpcio, whose import alone costs ~8.5 MB of RSS (its C core, the
aio module, the health/reflection plugins it loads); see docs/benchmarks-scale.md "Agent RSS:
imports". Codes and errors still have to look like grpcio's, because ``CRIError.code`` is compared
by callers, tests and the ``transport="grpcio"`` path, and the in-process fake runtime raises
grpcio's own ``AioRpcError``:

* :class:`StatusCode` has grpcio's member names and values (``NOT_FOUND`` = ``(5, "not found")``,
  the codes of gRPC's ``doc/statuscodes.md``); :meth:`StatusCode.of` turns a ``grpc.StatusCode``
  into the member of the same name, so both transports report the same ``CRIError.code``.
* :class:`RpcError` has ``code()`` and ``details()`` like ``grpc.aio.AioRpcError``.
* :func:`is_rpc_error` recognises either without importing grpc: if grpc is not in
  ``sys.modules``, no grpc error can exist in the process.
"""

from __future__ import annotations

import enum
import sys


class StatusCode(enum.Enum):
    """gRPC status codes with grpcio's names and values (``grpc.StatusCode``)."""

    OK = (0, "ok")
    CANCELLED = (1, "cancelled")
    UNKNOWN = (2, "unknown")
    INVALID_ARGUMENT = (3, "invalid argument")
    DEADLINE_EXCEEDED = (4, "deadline exceeded")
    NOT_FOUND = (5, "not found")
    ALREADY_EXISTS = (6, "already exists")
    PERMISSION_DENIED = (7, "permission denied")
    RESOURCE_EXHAUSTED = (8, "resource exhausted")
    FAILED_PRECONDITION = (9, "failed precondition")
    ABORTED = (10, "aborted")
    OUT_OF_RANGE = (11, "out of range")
    UNIMPLEMENTED = (12, "unimplemented")
    INTERNAL = (13, "internal")
    UNAVAILABLE = (14, "unavailable")
    DATA_LOSS = (15, "data loss")
    UNAUTHENTICATED = (16, "unauthenticated")

    @property
    def number(self) -> int:
        """The code's number on the wire (``grpc-status``)."""
        return int(self.value[0])

    @property
    def go_name(self) -> str:
        """Go's ``codes.Code`` String() spelling ("NotFound"), which upstream's messages show."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def of(cls, code: object) -> StatusCode:
        """This enum's member for ``code``: one of ours, a ``grpc.StatusCode`` (by name), or a
        number from ``grpc-status``; anything else is UNKNOWN, as gRPC maps unknown codes."""
        if isinstance(code, StatusCode):
            return code
        if isinstance(code, int):
            return _BY_NUMBER.get(code, StatusCode.UNKNOWN)
        name = getattr(code, "name", None)
        if isinstance(name, str) and name in cls.__members__:
            return cls[name]
        return StatusCode.UNKNOWN


_BY_NUMBER = {c.number: c for c in StatusCode}


class RpcError(Exception):
    """A failed call on the HTTP/2 transport: what ``grpc.aio.AioRpcError`` offers callers."""

    def __init__(self, code: StatusCode, details: str) -> None:
        super().__init__(code, details)
        self._code = code
        self._details = details

    def code(self) -> StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def __str__(self) -> str:
        return f'<RpcError: status = {self._code}, details = "{self._details}">'


def is_rpc_error(err: BaseException) -> bool:
    """Whether ``err`` is a gRPC call's failure: ours, or grpcio's when grpc has been imported."""
    if isinstance(err, RpcError):
        return True
    grpc = sys.modules.get("grpc")
    return grpc is not None and isinstance(err, grpc.RpcError)
