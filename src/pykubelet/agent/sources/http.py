"""Static pods from a URL: ``staticPodURL`` / ``--manifest-url`` (upstream ``pkg/kubelet/config/http.go``).

The third pod source.  Every ``httpCheckFrequency`` (20 s; at once, then on multiples of it on the
loop clock, ``common.ticks``) the URL is fetched with the
``staticPodURLHeader`` headers; the body is one Pod or a ``v1/PodList`` (upstream accepts both), in
JSON or YAML (several YAML documents too, as the file source).  A 200 answer replaces the source's
pods (an empty body means "no pods"); the pods get the same static defaults as manifests from the
file source (name ``<name>-<node>``, UID from a hash of node + URL + pod, ``config.source: http``)
and are published as mirror pods.  Any other status, a connection error or a body that does not
decode keeps the previous set and is logged (naming the URL), as upstream's ``extractFromURL``
errors do; the source counts as seen only after a first good answer.  Fetching is aiohttp on the
agent's loop; decoding reuses the file source's pure :func:`manifest_pods`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import yaml

from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.labels import CONFIG_SOURCE_ANNOTATION
from pykubelet.common.ticks import run_on_ticks

from .file import manifest_pods
from .podconfig import PodConfig

log = logging.getLogger(__name__)

Pod = dict[str, Any]
SOURCE = "http"


def url_pods(body: str, url: str, node_name: str) -> list[Pod]:
    """Decode a staticPodURL answer (Pod, PodList, YAML documents) into static pods; ValueError
    when it is unusable."""
    if not body.strip():
        return []
    try:
        docs = [d for d in yaml.safe_load_all(body) if d is not None]
    except yaml.YAMLError as e:
        raise ValueError(f"cannot parse: {e}") from None
    items: list[Any] = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "PodList":
            items.extend(d.get("items") or [])
        else:
            items.append(d)
    text = yaml.safe_dump_all(items) if items else ""
    pods = manifest_pods(text, url, node_name) if items else []
    for p in pods:
        p["metadata"]["annotations"][CONFIG_SOURCE_ANNOTATION] = SOURCE
    return pods


class HttpSource:
    """Polls the static pod URL and feeds PodConfig."""

    def __init__(self, url: str, node_name: str, config: PodConfig, *, interval: float = 20.0,
                 headers: dict[str, list[str]] | None = None, timeout: float = 10.0) -> None:
        self.url = url
        self.node_name = node_name
        self.config = config
        self.interval = interval
        self.headers = [(k, v) for k, vs in (headers or {}).items() for v in vs]
        self.timeout = timeout
        self._task: asyncio.Task[None] | None = None
        self._failures = 0

    async def fetch(self) -> list[Pod] | None:
        """The pods at the URL, or None when this poll failed (logged)."""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session, \
                    session.get(self.url, headers=self.headers) as resp:
                body = await resp.text()
                if resp.status != 200:
                    raise ValueError(f"{resp.status}: {body[:200]}")
            return url_pods(body, self.url, self.node_name)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as e:
            self._failures += 1
            if self._failures <= 10 or self._failures % 100 == 0:
                log.error("unable to read static pod URL %s: %s", self.url, e)
            return None

    async def sync_once(self) -> None:
        pods = await self.fetch()
        if pods is not None:
            self._failures = 0
            self.config.set(SOURCE, pods)

    def start(self) -> None:
        if self._task is None:
            self._task = run_on_ticks(self.sync_once, self.interval, name="static-pod-url-source", log=log,
                                      first_delay=0)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
