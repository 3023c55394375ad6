"""The node heartbeat Lease (coordination.k8s.io/v1, namespace kube-node-lease).

Design: one asyncio task renews ``kube-node-lease/<node>`` every ``renew_interval`` seconds (upstream
uses a quarter of ``nodeLeaseDurationSeconds``: 40 s → 10 s).  The lease body is built by a pure
function; the loop does GET → create on 404, otherwise PUT with the stored resourceVersion (a 409
Conflict just means someone else wrote it: re-read and retry next round).  The Lease carries an
owner reference to the Node once the Node's UID is known, so deleting the Node garbage-collects its
lease — exactly like upstream ``pkg/kubelet/nodelease`` + ``component-helpers/apimachinery/lease``.

On failures the controller retries with exponential backoff from 200 ms up to the renew interval
(upstream: 200 ms doubling to 7 s) and never raises out of the loop: the node lifecycle controller
is what should notice a dead kubelet, not a crashed agent. After any failed call the stored Lease
is dropped and re-read (a timed-out PUT may have been applied, so its resourceVersion is stale).
Every call carries a request timeout (upstream's heartbeat client timeout), so an API server that
accepts connections but does not answer (paused, overloaded) turns into a retry, not a hang. The
first renewal that succeeds after failures calls ``on_recovered`` -- the node status manager uses
it to send the full node status at once, so the node's Lease and its status recover together.
The next renewal is due ``renew_interval`` after one ends, rounded down onto the agent's 1 s grid
(``common.ticks.due_on_sync_tick``): never later than the interval (upstream's is the interval plus
up to 4 % jitter), and it wakes the loop in the same iteration as the PLEG relist, not on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.common.ticks import due_on_sync_tick

from .setters import format_micro_time

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
Obj = dict[str, Any]


def lease_path(node_name: str | None = None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
    return f"{base}/{node_name}" if node_name else base


def build_lease(
    node_name: str, duration_seconds: int, now: float, node_uid: str | None, existing: Obj | None = None
) -> Obj:
    """The lease to write: ``existing`` with holder/duration/renewTime refreshed, or a new one."""
    lease: Obj = dict(existing) if existing else {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node_name, "namespace": LEASE_NAMESPACE},
    }
    meta = dict(lease.get("metadata") or {})
    spec = dict(lease.get("spec") or {})
    spec["holderIdentity"] = node_name
    spec["leaseDurationSeconds"] = duration_seconds
    spec["renewTime"] = format_micro_time(now)
    if node_uid and not meta.get("ownerReferences"):
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
        ]
    lease["metadata"] = meta
    lease["spec"] = spec
    return lease


class LeaseController:
    """Keeps the node's Lease fresh."""

    def __init__(
        self,
        api: ApiClient,
        node_name: str,
        *,
        duration_seconds: int = 40,
        renew_interval: float | None = None,
        node_uid: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.time,
        request_timeout: float | None = 10.0,
        on_recovered: Callable[[], None] | None = None,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.duration_seconds = duration_seconds
        self.renew_interval = renew_interval if renew_interval is not None else duration_seconds * 0.25
        self.request_timeout = request_timeout
        self.on_recovered = on_recovered
        self._node_uid = node_uid
        self._clock = clock
        self._lease: Obj | None = None
        self._task: asyncio.Task[None] | None = None
        self.renewals = 0
        self.failures = 0  # consecutive failed renewals

    @property
    def lease(self) -> Obj | None:
        return self._lease

    async def _call(self, method: str, path: str, body: Obj | None = None) -> Obj:
        return await self.api.request(method, path, body=body, timeout=self.request_timeout)

    async def renew_once(self) -> Obj:
        """Create or update the lease once; raises ApiError on failure."""
        now = self._clock()
        if self._lease is None:
            try:
                self._lease = await self._call("GET", lease_path(self.node_name))
            except ApiError as e:
                if e.status != 404:
                    raise
                body = build_lease(self.node_name, self.duration_seconds, now, self._node_uid())
                self._lease = await self._call("POST", lease_path(), body)
                self.renewals += 1
                return self._lease
        body = build_lease(self.node_name, self.duration_seconds, now, self._node_uid(), self._lease)
        try:
            self._lease = await self._call("PUT", lease_path(self.node_name), body)
        except ApiError as e:
            self._lease = None  # re-read next time (409 Conflict, 404 deleted, timeout, ...)
            if e.status == 404:
                return await self.renew_once()
            raise
        self.renewals += 1
        return self._lease

    async def run(self) -> None:
        backoff = 0.2
        while True:
            try:
                await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let the heartbeat die
                self._lease = None
                self.failures += 1
                log.warning("failed to renew lease %s/%s: %s (retrying in %.1fs)",
                            LEASE_NAMESPACE, self.node_name, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, max(self.renew_interval, 0.2), 7.0)
                continue
            backoff = 0.2
            if self.failures:
                log.info("lease %s/%s renewed again after %d failed attempt(s)",
                         LEASE_NAMESPACE, self.node_name, self.failures)
                self.failures = 0
                if self.on_recovered is not None:
                    self.on_recovered()
            loop = asyncio.get_running_loop()
            now = loop.time()
            await asyncio.sleep(due_on_sync_tick(now, self.renew_interval) - now)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"lease-{self.node_name}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
