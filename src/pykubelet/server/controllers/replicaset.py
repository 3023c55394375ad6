"""The ReplicaSet controller (upstream ``pkg/controller/replicaset``).

Level-triggered: any change to a ReplicaSet or to a pod that is (or could be) one of its pods
queues the ReplicaSet's key; ``reconcile`` then

1. claims pods (``podcontrol.claim``): pods of the namespace whose controllerRef is this set are
   kept while the selector still matches them and released (ownerReference removed) otherwise;
   orphans the selector matches are adopted (ownerReference with ``controller: true`` and
   ``blockOwnerDeletion: true`` added), so a set created over existing pods owns them;
2. unless creations/deletions it issued are still unobserved (``Expectations``, so a slow watch
   never causes double creation), creates the missing pods (in slow-start batches 1, 2, 4, ...
   as upstream, at most 500 per sync) or deletes the surplus, least valuable first
   (``podcontrol.deletion_order``: unscheduled, pending, not ready, low deletion cost, crowded
   nodes, recently ready, restarted, newest);
3. writes ``status``: replicas (active pods), fullyLabeledReplicas (pods carrying all template
   labels), readyReplicas, availableReplicas (ready for minReadySeconds), observedGeneration, and
   the ``ReplicaFailure`` condition when creating pods failed (reason FailedCreate), with events
   ``SuccessfulCreate`` / ``SuccessfulDelete`` / ``FailedCreate`` as upstream.

A set being deleted is left alone (the garbage collector removes its pods); pods are deleted
through the API (graceful, the kubelet finishes them).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import podcontrol as pc
from pykubelet.server.controllers.kit import (
    Api,
    Controller,
    Expectations,
    Obj,
    key_of,
    now_rfc3339,
    split_key,
)

log = logging.getLogger(__name__)

BURST_REPLICAS = 500
SLOW_START_INITIAL_BATCH = 1
API_VERSION = "apps/v1"
KIND = "ReplicaSet"


async def slow_start(count: int, fn: Any) -> tuple[int, BaseException | None]:
    """Run ``fn()`` ``count`` times in batches 1, 2, 4, ...; stop after a batch with a failure
    (``slowStartBatch``).  Returns (calls made, first error or None)."""
    attempted = 0
    batch = min(count, SLOW_START_INITIAL_BATCH)
    remaining = count
    while remaining > 0 and batch > 0:
        results = await asyncio.gather(*(fn() for _ in range(batch)), return_exceptions=True)
        attempted += batch
        for r in results:
            if isinstance(r, asyncio.CancelledError):
                raise r
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            return attempted, errors[0]
        remaining -= batch
        batch = min(2 * batch, remaining)
    return attempted, None


def compute_status(rs: Obj, pods: list[Obj], now: datetime, failure: str | None) -> Obj:
    tmpl_labels = ((pc.spec(rs).get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(pc.spec(rs).get("minReadySeconds") or 0)
    fully = sum(1 for p in pods if all((pc.meta(p).get("labels") or {}).get(k) == v for k, v in tmpl_labels.items()))
    ready = sum(1 for p in pods if pc.is_pod_ready(p))
    available = sum(1 for p in pods if pc.is_pod_available(p, min_ready, now))
    st: Obj = {"replicas": len(pods)}
    if fully:
        st["fullyLabeledReplicas"] = fully
    if ready:
        st["readyReplicas"] = ready
    if available:
        st["availableReplicas"] = available
    st["observedGeneration"] = int(pc.meta(rs).get("generation") or 0)
    conds = [c for c in pc.status(rs).get("conditions") or [] if c.get("type") != "ReplicaFailure"]
    if failure:
        old = next((c for c in pc.status(rs).get("conditions") or [] if c.get("type") == "ReplicaFailure"), None)
        conds.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": failure,
                      "lastTransitionTime": (old or {}).get("lastTransitionTime") or now_rfc3339()})
    if conds:
        st["conditions"] = conds
    return st


class ReplicaSetController(Controller):
    name = "replicaset-controller"
    workers = 4

    def __init__(self, api: Api, *, workers: int | None = None) -> None:
        super().__init__(api, workers=workers)
        self.sets = self.informer("/apis/apps/v1/replicasets")
        self.pods = self.informer("/api/v1/pods")
        self.expectations = Expectations()
        self._failures: dict[str, str] = {}
        self.sets.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n),
                               on_delete=self._set_deleted)
        self.pods.add_handlers(on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted)

    def _set_deleted(self, rs: Obj) -> None:
        self.expectations.delete(key_of(rs))
        self.enqueue(rs)

    # pod events -> owning (or matching) sets
    def _owner_key(self, pod: Obj) -> str | None:
        ref = pc.controller_ref(pod)
        if ref is None or ref.get("kind") != KIND:
            return None
        key = f"{pc.meta(pod).get('namespace', '')}/{ref.get('name', '')}"
        rs = self.sets.get(key)
        if rs is None or pc.meta(rs).get("uid") != ref.get("uid"):
            return None
        return key

    def _enqueue_matching(self, pod: Obj) -> None:
        for rs in self.sets.items(pc.meta(pod).get("namespace", "")):
            if pc.selector_matches(pc.spec(rs).get("selector"), pod):
                self.enqueue(rs)

    def _pod_added(self, pod: Obj) -> None:
        if pc.meta(pod).get("deletionTimestamp"):
            self._pod_deleted(pod)
            return
        key = self._owner_key(pod)
        if key:
            self.expectations.creation_observed(key)
            self.queue.add(key)
        elif pc.controller_ref(pod) is None:
            self._enqueue_matching(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if pc.meta(new).get("deletionTimestamp") and not pc.meta(old).get("deletionTimestamp"):
            key = self._owner_key(new)
            if key:
                self.expectations.deletion_observed(key)
        for pod in (old, new):
            key = self._owner_key(pod)
            if key:
                self.queue.add(key)
        if pc.controller_ref(new) is None:
            self._enqueue_matching(new)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key:
            if not pc.meta(pod).get("deletionTimestamp"):
                self.expectations.deletion_observed(key)
            self.queue.add(key)

    # reconcile ---------------------------------------------------------------------------------

    async def _claim_pods(self, rs: Obj) -> list[Obj]:
        ns = pc.meta(rs).get("namespace", "")
        sel = pc.spec(rs).get("selector")
        uid = str(pc.meta(rs).get("uid", ""))
        owned: list[Obj] = []
        for pod in self.pods.items(ns):
            decision = pc.claim(rs, pod, sel)
            path = f"/api/v1/namespaces/{ns}/pods/{pc.meta(pod).get('name')}"
            if decision is pc.Claim.KEEP:
                owned.append(pod)
            elif decision is pc.Claim.ADOPT and pc.is_pod_active(pod):
                try:
                    owned.append(await self.api.patch(path, pc.adopt_patch(pod, pc.owner_ref(rs, API_VERSION, KIND)),
                                                      "strategic"))
                except ApiError as e:
                    if e.status not in (404, 409, 422):
                        raise
            elif decision is pc.Claim.RELEASE:
                try:
                    await self.api.patch(path, pc.release_patch(pod, uid), "strategic")
                except ApiError as e:
                    if e.status not in (404, 409, 422):
                        raise
        return owned

    async def _create_pod(self, rs: Obj) -> None:
        ns = pc.meta(rs).get("namespace", "")
        pod = pc.pod_from_template(pc.spec(rs).get("template") or {}, ns, pc.owner_ref(rs, API_VERSION, KIND),
                                   generate_name=f"{pc.meta(rs).get('name')}-")
        try:
            created = await self.api.create(f"/api/v1/namespaces/{ns}/pods", pod)
        except ApiError:
            self.expectations.creation_observed(key_of(rs))
            raise
        await self.recorder.event(rs, "Normal", "SuccessfulCreate",
                                  f"Created pod: {pc.meta(created).get('name', '')}")

    async def _delete_pod(self, rs: Obj, pod: Obj) -> None:
        ns = pc.meta(pod).get("namespace", "")
        name = pc.meta(pod).get("name", "")
        try:
            await self.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}",
                                  {"preconditions": {"uid": pc.meta(pod).get("uid")}})
        except ApiError as e:
            self.expectations.deletion_observed(key_of(rs))
            if e.status in (404, 409):
                return
            raise
        await self.recorder.event(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {name}")

    async def _manage(self, rs: Obj, pods: list[Obj]) -> None:
        key = key_of(rs)
        want = pc.spec(rs).get("replicas")
        diff = len(pods) - (int(want) if want is not None else 1)
        if diff < 0:
            n = min(-diff, BURST_REPLICAS)
            self.expectations.expect(key, adds=n)
            attempted, err = await slow_start(n, lambda: self._create_pod(rs))
            # creations never attempted will not be observed (failed ones lowered it already)
            for _ in range(n - attempted):
                self.expectations.creation_observed(key)
            if err is None:
                self._failures.pop(key, None)
            elif not isinstance(err, ApiError):
                raise err
            else:
                e = err
                self._failures[key] = e.message
                if e.status == 403 and "being terminated" in e.message:
                    return
                await self.recorder.event(rs, "Warning", "FailedCreate", f"Error creating: {e.message}")
                raise e
        elif diff > 0:
            n = min(diff, BURST_REPLICAS)
            victims = pc.deletion_order(pods)[:n]
            self.expectations.expect(key, dels=n)
            results = await asyncio.gather(*(self._delete_pod(rs, p) for p in victims), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r

    async def reconcile(self, key: str) -> float | None:
        rs = self.sets.get(key)
        if rs is None:
            self.expectations.delete(key)
            self._failures.pop(key, None)
            return None
        needs_sync = self.expectations.satisfied(key)
        pods = [p for p in await self._claim_pods(rs) if pc.is_pod_active(p)]
        err: BaseException | None = None
        if needs_sync and not pc.meta(rs).get("deletionTimestamp"):
            try:
                await self._manage(rs, pods)
            except ApiError as e:
                err = e
        now = datetime.now(UTC)
        new_status = compute_status(rs, pods, now, self._failures.get(key))
        if new_status != pc.status(rs):
            ns, name = split_key(key)
            body = {**rs, "status": new_status}
            try:
                await self.api.replace(f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}/status", body)
            except ApiError as e:
                if e.status != 404:
                    raise
        if err is not None:
            raise err
        min_ready = int(pc.spec(rs).get("minReadySeconds") or 0)
        waits = [w for p in pods if (w := pc.available_in(p, min_ready, now)) is not None]
        return min(waits) + 0.05 if waits else None
