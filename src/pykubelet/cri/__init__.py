"""CRI v1 client for the kubelet (and anything else that talks to a container runtime).

The protobuf messages are re-exported as ``pykubelet.cri.pb`` so callers never import the
generated package directly (``messages.py`` loads them without grpcio); see ``client.py`` for the
design and the upstream behaviour followed. Nothing here imports grpcio unless the grpcio transport
is chosen (``status.py``).
"""

from pykubelet.cri.client import (
    CRI_API_VERSION,
    DEFAULT_ENDPOINT,
    MAX_MESSAGE_SIZE,
    CRIClient,
    CRIError,
    Observer,
    from_rpc_error,
    image_spec,
    is_not_found,
    parse_endpoint,
    socket_path,
)
from pykubelet.cri.messages import pb
from pykubelet.cri.status import RpcError, StatusCode

__all__ = [
    "CRI_API_VERSION",
    "DEFAULT_ENDPOINT",
    "MAX_MESSAGE_SIZE",
    "CRIClient",
    "CRIError",
    "Observer",
    "RpcError",
    "StatusCode",
    "from_rpc_error",
    "image_spec",
    "is_not_found",
    "parse_endpoint",
    "pb",
    "socket_path",
]
