"""In-memory fake CRI v1 runtime (kubemark hollow-node style) served over gRPC on a unix socket.

See runtime.py for the semantics, behaviour.py for how command lines map to exits.
"""

from pykubelet.fakecri.behaviour import Behaviour, behaviour_for
from pykubelet.fakecri.runtime import (
    BUSYBOX_IMAGE,
    DEFAULT_IMAGES,
    PAUSE_IMAGE,
    RUNTIME_NAME,
    FakeContainer,
    FakeImage,
    FakeRuntime,
    FakeSandbox,
    normalize_image,
)
from pykubelet.fakecri.server import serve

__all__ = [
    "BUSYBOX_IMAGE",
    "DEFAULT_IMAGES",
    "PAUSE_IMAGE",
    "RUNTIME_NAME",
    "Behaviour",
    "FakeContainer",
    "FakeImage",
    "FakeRuntime",
    "FakeSandbox",
    "behaviour_for",
    "normalize_image",
    "serve",
]
