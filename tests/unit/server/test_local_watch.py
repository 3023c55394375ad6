"""The in-process controllers list and watch the store directly (no HTTP round per event): they
see every change once it is written, get objects of their own, and relist after 410 as over HTTP."""

import asyncio
from pathlib import Path

import pytest

from pykubelet.common.apiclient import ApiError
from pykubelet.server import events_conv
from pykubelet.server.controllers import kit
from pykubelet.server.localwatch import InProcessReads, collection
from pykubelet.server.storage import Storage
from tests.builders import pod
from tests.fakes import FakeApi, eventually


def _pod(name: str, ns: str = "default") -> dict:
    p = pod(name, namespace=ns)
    p["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    return p


def test_only_built_in_collections_without_selectors_are_read_in_process() -> None:
    assert collection("/api/v1/pods") == ("pods", None)
    assert collection("/api/v1/namespaces/kube-system/pods") == ("pods", "kube-system")
    assert collection("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases") == \
        ("leases.coordination.k8s.io", "kube-node-lease")
    assert collection("/api/v1/nodes") == ("nodes", None)
    for other in ("/api/v1/namespaces/default/pods/web", "/apis/events.k8s.io/v1/events",
                  "/apis/example.com/v1/widgets", "/api/v1/namespaces/default/nodes", "/healthz"):
        assert collection(other) is None, other


async def test_lists_and_watches_come_from_the_store_and_other_calls_go_to_the_api(tmp_path: Path) -> None:
    store = Storage(tmp_path / "s.db")
    store.open()
    api = FakeApi()
    api.put("/api/v1/namespaces/default/pods/remote", pod("remote"))
    reads = InProcessReads(api, store)  # type: ignore[arg-type]
    try:
        store.create("pods", "default", "a", _pod("a"))
        store.create("pods", "other", "b", _pod("b", "other"))
        lst = await reads.list("/api/v1/namespaces/default/pods")
        assert [p["metadata"]["name"] for p in lst["items"]] == ["a"]
        assert "managedFields" not in lst["items"][0]["metadata"]  # as upstream's informers strip them
        lst["items"][0]["spec"]["nodeName"] = "mine"  # the caller's own copy
        assert "nodeName" not in (store.peek("pods", "default", "a") or {})["spec"]
        rv = lst["metadata"]["resourceVersion"]
        assert rv == str(store.revision)

        events: list[tuple[str, str]] = []

        async def follow() -> None:
            async for etype, obj in reads.watch("/api/v1/pods", resource_version=rv):
                events.append((etype, obj["metadata"]["name"]))

        task = asyncio.create_task(follow())
        await asyncio.sleep(0)
        store.create("pods", "default", "c", _pod("c"))
        store.delete("pods", "default", "a")
        await eventually(lambda: events == [("ADDED", "c"), ("DELETED", "a")], timeout=5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert store.watchers("pods") == []  # a stopped watch leaves nothing subscribed

        # selectors, single objects and writes are the API's
        assert (await reads.get("/api/v1/namespaces/default/pods/remote"))["metadata"]["name"] == "remote"
        await reads.list("/api/v1/pods", {"labelSelector": "app=x"})
        assert api.lists == [("/api/v1/pods", {"labelSelector": "app=x"})]
    finally:
        store.close()


async def test_a_watch_behind_the_history_is_410_and_a_timed_out_watch_just_ends(tmp_path: Path) -> None:
    store = Storage(tmp_path / "s.db", history=2)
    store.open()
    reads = InProcessReads(FakeApi(), store)  # type: ignore[arg-type]
    try:
        for i in range(4):
            store.create("pods", "default", f"p{i}", _pod(f"p{i}"))
        with pytest.raises(ApiError) as e:
            async for _ in reads.watch("/api/v1/pods", resource_version="1"):
                pass
        assert e.value.status == 410
        got = [ev async for ev in reads.watch("/api/v1/pods", resource_version=str(store.revision), timeout_seconds=0)]
        assert got == []
    finally:
        store.close()


async def test_a_shared_informer_over_the_store_sees_each_write_once(tmp_path: Path) -> None:
    store = Storage(tmp_path / "s.db")
    store.open()
    shared = kit.SharedInformers(InProcessReads(FakeApi(), store))  # type: ignore[arg-type]
    seen: list[tuple[str, str, str]] = []
    task = asyncio.create_task(kit.follow(shared, "/api/v1/pods", lambda e, o: seen.append(
        (e, o["metadata"]["name"], o["metadata"]["resourceVersion"]))))
    try:
        store.create("pods", "default", "a", _pod("a"))
        await eventually(lambda: seen, timeout=5)
        updated = store.update("pods", "default", "a", {**_pod("a"), "status": {"phase": "Running"}})
        await eventually(lambda: len(seen) == 2, timeout=5)
        assert seen == [("ADDED", "a", "1"), ("MODIFIED", "a", updated["metadata"]["resourceVersion"])]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await shared.close()
        store.close()


async def test_the_garbage_collectors_reads_carry_metadata_only_as_upstreams_metadata_informers(tmp_path: Path) -> None:
    store = Storage(tmp_path / "s.db")
    store.open()
    reads = InProcessReads(FakeApi(), store, metadata_only=True)  # type: ignore[arg-type]
    try:
        owned = _pod("a")
        owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                                  "uid": "u1"}]
        store.create("pods", "default", "a", owned)
        [item] = (await reads.list("/api/v1/pods"))["items"]
        assert set(item) == {"apiVersion", "kind", "metadata"} and "managedFields" not in item["metadata"]
        assert item["metadata"]["ownerReferences"][0]["uid"] == "u1"
        item["metadata"]["ownerReferences"].clear()  # a copy: the store's object keeps its references
        assert (store.peek("pods", "default", "a") or {})["metadata"]["ownerReferences"]
        watch = reads.watch("/api/v1/pods", resource_version=str(store.revision))
        store.delete("pods", "default", "a")
        etype, obj = await anext(watch)
        assert (etype, set(obj), obj["metadata"]["name"]) == ("DELETED", {"apiVersion", "kind", "metadata"}, "a")
        await watch.aclose()  # type: ignore[attr-defined]
    finally:
        store.close()


async def test_the_garbage_collector_reads_events_k8s_io_events_in_process_as_their_http_presentation(
        tmp_path: Path) -> None:
    """events.k8s.io Events are the stored core Events presented converted: the metadata-only reads
    serve them from the store with the metadata the HTTP presentation has (managedFields dropped, as
    for every metadata-only read) and apiVersion events.k8s.io/v1; full reads still go to the API."""
    store = Storage(tmp_path / "s.db")
    store.open()
    api = FakeApi()
    reads = InProcessReads(api, store, metadata_only=True)  # type: ignore[arg-type]
    full = InProcessReads(api, store)  # type: ignore[arg-type]

    def core_event(name: str, ns: str = "default") -> dict:
        return {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}],
                             "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
                "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Started", "type": "Normal",
                "source": {"component": "kubelet"}}

    def http_view(stored: dict) -> dict:  # what the HTTP list and watch of events.k8s.io give
        shown = events_conv.from_core(stored)
        meta = {k: v for k, v in shown["metadata"].items() if k != "managedFields"}
        return {"apiVersion": shown["apiVersion"], "kind": shown["kind"], "metadata": meta}

    try:
        store.create("events", "default", "e1", core_event("e1"))
        store.create("events", "other", "e2", core_event("e2", "other"))
        lst = await reads.list("/apis/events.k8s.io/v1/events")
        assert sorted(lst["items"], key=lambda o: o["metadata"]["name"]) == [
            http_view(store.peek("events", "default", "e1") or {}), http_view(store.peek("events", "other", "e2") or {})]
        assert lst["metadata"]["resourceVersion"] == str(store.revision)
        assert [o["metadata"]["name"] for o in (await reads.list("/apis/events.k8s.io/v1/namespaces/other/events"))[
            "items"]] == ["e2"]
        assert {o["apiVersion"] for o in (await reads.list("/api/v1/events"))["items"]} == {"v1"}

        watch = reads.watch("/apis/events.k8s.io/v1/events", resource_version=lst["metadata"]["resourceVersion"])
        store.create("events", "default", "e3", core_event("e3"))
        etype, obj = await anext(watch)
        assert (etype, obj) == ("ADDED", http_view(store.peek("events", "default", "e3") or {}))
        store.delete("events", "default", "e1")
        etype, obj = await anext(watch)
        assert (etype, obj["apiVersion"], obj["metadata"]["name"]) == ("DELETED", "events.k8s.io/v1", "e1")
        await watch.aclose()  # type: ignore[attr-defined]
        assert store.watchers("events") == []

        # full objects, selectors and other paths of the group are the API's, as before
        await full.list("/apis/events.k8s.io/v1/events")
        await reads.list("/apis/events.k8s.io/v1/events", {"fieldSelector": "type=Normal"})
        await reads.list("/apis/events.k8s.io/v1/namespaces/default/events/e3")
        await reads.list("/apis/events.k8s.io/v1beta1/events")
        assert [p for p, _ in api.lists] == ["/apis/events.k8s.io/v1/events"] * 2 + [
            "/apis/events.k8s.io/v1/namespaces/default/events/e3", "/apis/events.k8s.io/v1beta1/events"]
    finally:
        store.close()
