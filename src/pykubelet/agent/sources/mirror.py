"""Mirror pods: the API-server reflection of static pods (upstream ``pod/mirror_client.go``).

Design: the engine owns *when* (it calls ``ensure_mirror`` while syncing a static pod and
``delete_mirror`` when the static pod goes away); this module owns *how*.  The mirror is a copy of
the static pod's metadata and spec, created through the normal pods API so ``kubectl get pods``
shows static pods; it is never run from the API source (that source filters mirror pods out).

Upstream behaviour followed:
- annotation ``kubernetes.io/config.mirror`` = the static pod's ``kubernetes.io/config.hash``;
- an ownerReference to the Node (apiVersion v1, kind Node, name, uid, controller true) so the
  mirror is garbage-collected with the Node;
- the server assigns a fresh UID: uid/resourceVersion/creationTimestamp are not sent;
- an existing pod of that name whose mirror hash differs (the manifest was edited), that is not a
  mirror at all, or that is being deleted, is deleted with grace 0 and a UID precondition, then the
  mirror is re-created;
- API errors are logged and reported as ``None``/``False``; the engine syncs the static pod again
  within ``ERROR_RETRY`` while its mirror is missing (e.g. before the node is registered, the API
  refuses a mirror without the Node's owner reference), not only at its next resync.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.common.labels import CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION

log = logging.getLogger(__name__)

Pod = dict[str, Any]


def pod_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def static_pod_hash(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION) or meta.get("uid") or "")


def is_mirror_of(mirror: Pod, static_pod: Pod) -> bool:
    """True when ``mirror`` is a live mirror of exactly this version of ``static_pod``."""
    ann = (mirror.get("metadata") or {}).get("annotations") or {}
    h = ann.get(CONFIG_MIRROR_ANNOTATION)
    return h is not None and h == static_pod_hash(static_pod)


def build_mirror(static_pod: Pod, node_name: str, node_uid: str | None) -> Pod:
    """Pure: the Pod body to POST for a static pod."""
    src_meta = static_pod.get("metadata") or {}
    meta: dict[str, Any] = {
        "name": src_meta.get("name"),
        "namespace": src_meta.get("namespace") or "default",
    }
    for key in ("labels", "annotations"):
        if src_meta.get(key):
            meta[key] = copy.deepcopy(src_meta[key])
    ann = meta.setdefault("annotations", {})
    ann[CONFIG_MIRROR_ANNOTATION] = static_pod_hash(static_pod)
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        ]
    spec = copy.deepcopy(static_pod.get("spec") or {})
    spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class MirrorClient:
    """Create, replace and delete mirror pods through the API server."""

    def __init__(self, api: ApiClient | None, node_name: str | None = None) -> None:
        self.api = api
        self.node_name = node_name
        self._node_uid: str | None = None

    async def _get_node_uid(self, node_name: str) -> str | None:
        if self._node_uid is None and self.api is not None:
            try:
                node = await self.api.get(f"/api/v1/nodes/{node_name}")
                self._node_uid = (node.get("metadata") or {}).get("uid")
            except ApiError as e:
                log.warning("cannot get node %s for mirror pod owner reference: %s", node_name, e)
        return self._node_uid

    async def get_mirror(self, namespace: str, name: str) -> Pod | None:
        if self.api is None:
            return None
        try:
            return await self.api.get(pod_path(namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def ensure_mirror(self, static_pod: Pod) -> Pod | None:
        """Make sure the API server has an up-to-date mirror of ``static_pod``; return it."""
        if self.api is None:
            return None
        meta = static_pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name")
        if not name:
            return None
        node_name = self.node_name or (static_pod.get("spec") or {}).get("nodeName") or ""
        try:
            existing = await self.get_mirror(ns, name)
            if existing is not None:
                if is_mirror_of(existing, static_pod) and not (existing.get("metadata") or {}).get(
                    "deletionTimestamp"
                ):
                    return existing
                log.info("replacing mirror pod %s/%s (hash changed or not a mirror)", ns, name)
                await self._delete(ns, name, (existing.get("metadata") or {}).get("uid"))
            body = build_mirror(static_pod, node_name, await self._get_node_uid(node_name))
            return await self.api.create(pod_path(ns), body)
        except ApiError as e:
            log.warning("failed to ensure mirror pod %s/%s: %s", ns, name, e)
            return None

    async def _delete(self, namespace: str, name: str, uid: str | None) -> None:
        assert self.api is not None
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self.api.delete(pod_path(namespace, name), body=body)
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    async def delete_mirror(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete the mirror pod (grace 0); True if it is gone."""
        if self.api is None:
            return True
        try:
            await self._delete(namespace, name, uid)
            return True
        except ApiError as e:
            log.warning("failed to delete mirror pod %s/%s: %s", namespace, name, e)
            return False
