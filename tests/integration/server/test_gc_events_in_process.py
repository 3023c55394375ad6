"""The garbage collector's metadata reads of events.k8s.io Events come from the store in-process
(``localwatch.metadata_collection``) and carry what its HTTP list and watch carried: the same
objects, apiVersion, kind, metadata (but managedFields) and resourceVersions."""

from __future__ import annotations

import asyncio
from typing import Any

from pykubelet.common.apiclient import ApiClient
from pykubelet.server.localwatch import InProcessReads
from pykubelet.server.main import ServerHandle

V1 = "/apis/events.k8s.io/v1"


def _metadata_view(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta}


async def test_gc_events_k8s_io_reads_match_the_http_presentation(server33: ServerHandle) -> None:
    api = ApiClient(server33.url, token=server33.admin_token, ca_file=str(server33.ca_file))
    reads = InProcessReads(api, server33.store, metadata_only=True)
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}]
    try:
        await api.create("/api/v1/namespaces/default/events", {
            "metadata": {"name": "core", "ownerReferences": owner, "labels": {"a": "b"}},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Started", "type": "Normal", "source": {"component": "kubelet"}})
        await api.create(f"{V1}/namespaces/kube-system/events", {
            "metadata": {"name": "new"}, "eventTime": "2026-12-01T10:00:00.000000Z",
            "reportingController": "x", "reportingInstance": "y", "action": "Do", "reason": "R",
            "type": "Normal", "regarding": {"kind": "Pod", "name": "p", "namespace": "kube-system"}})
        over_http = await api.list(f"{V1}/events")
        here = await reads.list(f"{V1}/events")

        def by_name(items: list[dict[str, Any]]) -> dict[str, Any]:
            return {o["metadata"]["name"]: o for o in items}
        assert by_name(here["items"]) == {n: _metadata_view(o) for n, o in by_name(over_http["items"]).items()}
        assert set(by_name(here["items"])) == {"core", "new"}
        assert [o["metadata"]["name"] for o in (await reads.list(f"{V1}/namespaces/kube-system/events"))["items"]] \
            == ["new"]

        rv = here["metadata"]["resourceVersion"]
        http_watch = api.watch(f"{V1}/events", resource_version=rv, timeout_seconds=30)
        local_watch = reads.watch(f"{V1}/events", resource_version=rv, timeout_seconds=30)
        patched = asyncio.create_task(api.patch("/api/v1/namespaces/default/events/core", {"count": 2}))
        [(t1, o1), (t2, o2)] = await asyncio.gather(anext(http_watch), anext(local_watch))  # type: ignore[arg-type]
        await patched
        assert (t2, o2) == (t1, _metadata_view(o1)) and t1 == "MODIFIED"
        await api.delete(f"{V1}/namespaces/kube-system/events/new")
        [(t1, o1), (t2, o2)] = await asyncio.gather(anext(http_watch), anext(local_watch))  # type: ignore[arg-type]
        assert (t2, o2) == (t1, _metadata_view(o1)) and t1 == "DELETED"
        await http_watch.aclose()  # type: ignore[attr-defined]
        await local_watch.aclose()  # type: ignore[attr-defined]
    finally:
        await api.close()
