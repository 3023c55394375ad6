"""The CRI v1 protobuf messages (``cri_api.v1.api_pb2``), loaded without grpcio.

The messages come from the ``container-runtime-interface-api`` package, whose ``cri_api/__init__.py``
also imports ``api_pb2_grpc`` (the grpcio stubs), so ``from cri_api.v1 import api_pb2`` imports
grpcio (~8.5 MB of RSS) even though ``api_pb2`` itself needs only protobuf. The agent's CRI client
speaks gRPC's wire format itself (:mod:`pykubelet.cri.unary_h2`) and needs only the messages, so
this module loads ``cri_api/v1/api_pb2.py`` the way the importlib documentation's recipe
"Importing a source file directly" does: find the installed package without executing it
(``importlib.util.find_spec`` of a top-level name does not run its ``__init__``), then execute the
one file as the module ``cri_api.v1.api_pb2`` and register it in ``sys.modules`` under that name.

Registering it under its own name matters: protobuf registers each message type once per process.
When something later imports ``cri_api`` (the grpcio transport, gRPC probes, the fake runtime),
the package's ``from .v1.api_pb2 import *`` and the stubs' ``from cri_api.v1 import api_pb2`` find
this very module in ``sys.modules``, so everyone shares the same message classes. If ``cri_api``
was imported first, its module is simply reused.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING

MODULE = "cri_api.v1.api_pb2"


def _load() -> ModuleType:
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("cri_api")
    if package is None or not package.submodule_search_locations:
        raise ImportError("the container-runtime-interface-api package (cri_api) is not installed", name=MODULE)
    path = os.path.join(next(iter(package.submodule_search_locations)), "v1", "api_pb2.py")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a file path always has a loader
        raise ImportError(f"cannot load {path}", name=MODULE, path=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(MODULE, None)
        raise
    return module


if TYPE_CHECKING:
    from cri_api.v1 import api_pb2 as pb
else:
    pb = _load()

__all__ = ["pb"]
