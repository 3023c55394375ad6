"""A CRI client whose ImageService lives on its own endpoint (``imageServiceEndpoint``).

Upstream kubelet dials ``--image-service-endpoint`` separately when it is set (a runtime may serve
images from another process, e.g. a lazy-pulling snapshotter's image service); otherwise both
services share the runtime's connection. :class:`SplitCRIClient` is the agent's usual ``CRIClient``
(same deadlines, observer metrics and error mapping) with a second gRPC channel for the image
stub, so nothing else in the agent needs to know the services are apart.
"""

from __future__ import annotations

import grpc
import grpc.aio
from cri_api.v1 import api_pb2_grpc as pb_grpc

from pykubelet.cri import CRIClient
from pykubelet.cri.client import Observer, parse_endpoint


class SplitCRIClient(CRIClient):
    def __init__(self, endpoint: str, image_endpoint: str, *, timeout: float = 120.0,
                 observer: Observer | None = None) -> None:
        super().__init__(endpoint, timeout=timeout, observer=observer)
        self.image_endpoint = image_endpoint
        self.image_target = parse_endpoint(image_endpoint)
        self._image_channel: grpc.aio.Channel | None = None

    def _ensure_channel(self) -> None:
        fresh = self._rt is None  # the base client (re)made its stubs: make the image stub too
        super()._ensure_channel()
        if self._image_channel is None or fresh:
            self._image_channel = grpc.aio.insecure_channel(self.image_target, options=[
                ("grpc.max_receive_message_length", self._max_message_size),
                ("grpc.max_send_message_length", self._max_message_size),
                ("grpc.enable_http_proxy", 0),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ]) if self._image_channel is None else self._image_channel
            self._img = pb_grpc.ImageServiceStub(self._image_channel)

    async def close(self) -> None:
        await super().close()
        if self._image_channel is not None:
            ch, self._image_channel = self._image_channel, None
            await ch.close()


def runtime_client(endpoint: str, image_endpoint: str, *, timeout: float, observer: Observer | None) -> CRIClient:
    """One channel when the endpoints are the same (or no image endpoint), two otherwise."""
    if image_endpoint and parse_endpoint(image_endpoint) != parse_endpoint(endpoint):
        return SplitCRIClient(endpoint, image_endpoint, timeout=timeout, observer=observer)
    return CRIClient(endpoint, timeout=timeout, observer=observer)
