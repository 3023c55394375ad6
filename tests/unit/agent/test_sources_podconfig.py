"""PodConfig diffing and the API server source (list/watch/relist/mirror filtering)."""

from __future__ import annotations

import asyncio
import copy
import functools
from typing import Any

from pykubelet.agent.sources.apiserver import ApiServerSource
from pykubelet.agent.sources.podconfig import PodConfig, diff_pods
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.common.apiclient import ApiError
from tests.builders import pod, pod_path
from tests.fakes import FakeApi

# Pods as the API server lists them for node n1.
api_pod = functools.partial(pod, node_name="n1", metadata={"resourceVersion": "1"}, status={"phase": "Pending"})


def ops(updates: list[PodUpdate]) -> list[tuple[PodOp, list[str]]]:
    return [(u.op, [p["metadata"]["name"] for p in u.pods]) for u in updates]


def test_diff_classifies_changes() -> None:
    a, b, c, d = api_pod("a"), api_pod("b"), api_pod("c"), api_pod("d")
    first = diff_pods({}, [a, b, c, d], "api", 1.0)
    assert ops(first.updates_in_order("api")) == [(PodOp.ADD, ["a", "b", "c", "d"])]
    assert first.state["uid-a"]["metadata"]["annotations"]["kubernetes.io/config.source"] == "api"
    seen = first.state["uid-a"]["metadata"]["annotations"]["kubernetes.io/config.seen"]

    a2 = copy.deepcopy(a)
    a2["spec"]["containers"][0]["image"] = "i2"
    b2 = copy.deepcopy(b)
    b2["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    b2["metadata"]["deletionGracePeriodSeconds"] = 30
    c2 = copy.deepcopy(c)
    c2["status"] = {"phase": "Running"}
    e = api_pod("e")
    second = diff_pods(first.state, [a2, b2, c2, e], "api", 2.0)
    assert ops(second.updates_in_order("api")) == [
        (PodOp.REMOVE, ["d"]),
        (PodOp.ADD, ["e"]),
        (PodOp.UPDATE, ["a"]),
        (PodOp.DELETE, ["b"]),
        (PodOp.RECONCILE, ["c"]),
    ]
    # first-seen time survives updates
    assert second.state["uid-a"]["metadata"]["annotations"]["kubernetes.io/config.seen"] == seen

    # a resourceVersion bump alone is not a change
    a3 = copy.deepcopy(a2)
    a3["metadata"]["resourceVersion"] = "99"
    assert diff_pods(second.state, [a3, b2, c2, e], "api", 3.0).updates_in_order("api") == []


def test_podconfig_marks_source_ready_once_and_copies() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    ready: list[str] = []
    cfg = PodConfig(q, on_source_ready=ready.append)
    cfg.set("api", [])
    cfg.set("api", [api_pod("a")])
    assert ready == ["api"]
    u = q.get_nowait()
    u.pods[0]["spec"]["nodeName"] = "mutated"  # the engine may mutate its copy
    assert cfg.pods("api")[0]["spec"]["nodeName"] == "n1"


def with_rv(p: dict[str, Any], rv: str) -> dict[str, Any]:
    p = copy.deepcopy(p)
    p["metadata"]["resourceVersion"] = rv
    return p


async def test_apiserver_source_watch_resume_and_relist() -> None:
    api = FakeApi()
    a, m = api_pod("a"), api_pod("m", annotations={"kubernetes.io/config.mirror": "abc"})
    for p in (a, m):
        api.put(pod_path(p), p)
    api.resource_version = "10"
    b = api_pod("b")
    api.watch_scripts = [
        # watch 1: add b, a bookmark, then the stream ends (server timeout) → resume from rv 12
        ([("ADDED", with_rv(b, "11")), ("BOOKMARK", {"metadata": {"resourceVersion": "12"}})], None),
        # watch 2: connection error → backoff, resume from rv 12
        ([], ApiError(0, "ConnectionError", "boom")),
        # watch 3: 410 → relist (a is gone meanwhile, c appeared)
        ([], ApiError(410, "Expired", "too old")),
    ]
    relist = {"kind": "PodList", "metadata": {"resourceVersion": "20"}, "items": [api_pod("c"), with_rv(b, "11")]}
    api.react("list", "/api/v1/pods", lambda _verb, _path, _params: relist if len(api.lists) > 1 else None)
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    ready: list[str] = []
    src = ApiServerSource(api, "n1", PodConfig(q, on_source_ready=ready.append), backoff_max=0.01)  # type: ignore[arg-type]

    src.start()
    await asyncio.wait_for(api.watch_scripts_done.wait(), 10)
    await src.stop()

    assert api.lists[0][1] == {"fieldSelector": "spec.nodeName=n1"}
    assert [rv for _path, rv in api.watches] == ["10", "12", "12", "20"]
    assert src.lists == 2
    got = []
    while not q.empty():
        got.append(q.get_nowait())
    assert ops(got) == [
        (PodOp.ADD, ["a"]),  # mirror pod m filtered out
        (PodOp.ADD, ["b"]),
        (PodOp.REMOVE, ["a"]),
        (PodOp.ADD, ["c"]),
    ]
    assert ready == ["api"]


def test_apply_event_ignores_other_nodes_and_deletes() -> None:
    api = FakeApi()
    src = ApiServerSource(api, "n1", PodConfig(asyncio.Queue()))  # type: ignore[arg-type]
    assert src.apply_event("ADDED", api_pod("x"))
    assert not src.apply_event("ADDED", api_pod("y", node_name="n2"))
    assert src.apply_event("MODIFIED", api_pod("x", node_name="n2"))  # moved away = gone
    assert src.store == {}
    assert src.apply_event("ADDED", api_pod("z"))
    assert src.apply_event("DELETED", api_pod("z"))
    assert src.store == {}


def test_one_watch_event_hands_over_only_that_pod() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    cfg = PodConfig(q)
    src = ApiServerSource(None, "n1", cfg)  # type: ignore[arg-type]
    for name in ("a", "b", "c"):
        src.apply_event("ADDED", api_pod(name))
    drained = [q.get_nowait() for _ in range(q.qsize())]
    assert [(u.op, len(u.pods)) for u in drained] == [(PodOp.ADD, 1)] * 3
    changed = api_pod("b")
    changed["status"] = {"phase": "Running"}
    src.apply_event("MODIFIED", changed)
    u = q.get_nowait()
    assert u.op is PodOp.RECONCILE and [p["metadata"]["name"] for p in u.pods] == ["b"]
    assert q.empty()
    src.apply_event("DELETED", api_pod("a"))
    u = q.get_nowait()
    assert u.op is PodOp.REMOVE and [p["metadata"]["name"] for p in u.pods] == ["a"]


def test_pods_from_the_api_share_their_repeated_strings() -> None:
    src = ApiServerSource(None, "n1", PodConfig(asyncio.Queue()))  # type: ignore[arg-type]
    first, second = api_pod("a"), api_pod("b")
    for p in (first, second):  # what json.loads gives: equal strings, distinct objects
        p["spec"]["containers"] = [{"name": "".join(["c", "1"]), "image": "".join(["busy", "box"])}]
    src.apply_event("ADDED", first)
    src.apply_event("ADDED", second)
    a, b = (p["spec"]["containers"][0] for p in src.store.values())
    assert a == b == {"name": "c1", "image": "busybox"}
    assert a["image"] is b["image"] and a["name"] is b["name"]


def test_engine_pods_are_private_copies_sharing_only_managed_fields() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    src = ApiServerSource(None, "n1", PodConfig(q))  # type: ignore[arg-type]
    raw = api_pod("a")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    src.apply_event("ADDED", raw)
    handed = q.get_nowait().pods[0]
    stored = src.store["uid-a"]
    assert handed == {**stored, "metadata": handed["metadata"]}
    assert handed["spec"] is not stored["spec"] and handed["status"] is not stored["status"]
    assert handed["metadata"]["managedFields"] is stored["metadata"]["managedFields"]
