"""CRI v1 client for the kubelet (and anything else that talks to a container runtime).

The protobuf messages are re-exported as ``pykubelet.cri.pb`` so callers never import the
generated package directly; see ``client.py`` for the design and the upstream behaviour followed.
"""

from cri_api.v1 import api_pb2 as pb

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

__all__ = [
    "CRI_API_VERSION",
    "DEFAULT_ENDPOINT",
    "MAX_MESSAGE_SIZE",
    "CRIClient",
    "CRIError",
    "Observer",
    "from_rpc_error",
    "image_spec",
    "is_not_found",
    "parse_endpoint",
    "pb",
    "socket_path",
]
