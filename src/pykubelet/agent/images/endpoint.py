"""A CRI client whose ImageService lives on its own endpoint (``imageServiceEndpoint``).

Upstream kubelet dials ``--image-service-endpoint`` separately when it is set (a runtime may serve
images from another process, e.g. a lazy-pulling snapshotter's image service); otherwise both
services share the runtime's connection. :class:`SplitCRIClient` is the agent's usual ``CRIClient``
(same deadlines, observer metrics, error mapping and transport) with the image stub on a
connection of its own (``CRIClient(image_endpoint=...)``), so nothing else in the agent needs to
know the services are apart.
"""

from __future__ import annotations

from pykubelet.cri import CRIClient
from pykubelet.cri.client import Observer, parse_endpoint


class SplitCRIClient(CRIClient):
    def __init__(self, endpoint: str, image_endpoint: str, *, timeout: float = 120.0,
                 observer: Observer | None = None) -> None:
        super().__init__(endpoint, timeout=timeout, observer=observer, image_endpoint=image_endpoint)


def runtime_client(endpoint: str, image_endpoint: str, *, timeout: float, observer: Observer | None) -> CRIClient:
    """One connection when the endpoints are the same (or no image endpoint), two otherwise."""
    if image_endpoint and parse_endpoint(image_endpoint) != parse_endpoint(endpoint):
        return SplitCRIClient(endpoint, image_endpoint, timeout=timeout, observer=observer)
    return CRIClient(endpoint, timeout=timeout, observer=observer)
