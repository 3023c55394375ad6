"""PodConfig diffing and the API server source (list/watch/relist/mirror filtering)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

from pykubelet.agent.sources.apiserver import ApiServerSource
from pykubelet.agent.sources.podconfig import PodConfig, diff_pods
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.common.apiclient import ApiError


def pod(name: str, uid: str | None = None, node: str = "n1", **extra: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": "1"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }
    for k, v in extra.items():
        p[k] = v
    return p


def ops(updates: list[PodUpdate]) -> list[tuple[PodOp, list[str]]]:
    return [(u.op, [p["metadata"]["name"] for p in u.pods]) for u in updates]


def test_diff_classifies_changes() -> None:
    a, b, c, d = pod("a"), pod("b"), pod("c"), pod("d")
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
    e = pod("e")
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
    cfg.set("api", [pod("a")])
    assert ready == ["api"]
    u = q.get_nowait()
    u.pods[0]["spec"]["nodeName"] = "mutated"  # the engine may mutate its copy
    assert cfg.pods("api")[0]["spec"]["nodeName"] == "n1"


class FakeApi:
    """Scripted list/watch: each watch() call pops one script (events, then an optional error)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.rv = "10"
        self.next_lists: list[tuple[list[dict[str, Any]], str]] = []  # later LIST answers
        self.scripts: list[tuple[list[tuple[str, dict[str, Any]]], Exception | None]] = []
        self.watch_rvs: list[str | None] = []
        self.params: list[dict[str, Any]] = []
        self.done = asyncio.Event()

    async def list(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.params.append(dict(params or {}))
        if len(self.params) > 1 and self.next_lists:
            self.items, self.rv = self.next_lists.pop(0)
        return {"kind": "PodList", "metadata": {"resourceVersion": self.rv}, "items": copy.deepcopy(self.items)}

    async def watch(self, path: str, *, resource_version: str | None = None,
                    params: dict[str, Any] | None = None, timeout_seconds: int | None = None
                    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watch_rvs.append(resource_version)
        if not self.scripts:
            self.done.set()
            await asyncio.Event().wait()
        events, err = self.scripts.pop(0)
        for ev in events:
            yield ev
        if err is not None:
            raise err


def with_rv(p: dict[str, Any], rv: str) -> dict[str, Any]:
    p = copy.deepcopy(p)
    p["metadata"]["resourceVersion"] = rv
    return p


async def test_apiserver_source_watch_resume_and_relist() -> None:
    api = FakeApi()
    api.items = [pod("a"), pod("m", metadata_extra=None)]
    api.items[1]["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    b = pod("b")
    api.scripts = [
        # watch 1: add b, a bookmark, then the stream ends (server timeout) → resume from rv 12
        ([("ADDED", with_rv(b, "11")), ("BOOKMARK", {"metadata": {"resourceVersion": "12"}})], None),
        # watch 2: connection error → backoff, resume from rv 12
        ([], ApiError(0, "ConnectionError", "boom")),
        # watch 3: 410 → relist (a is gone meanwhile, c appeared)
        ([], ApiError(410, "Expired", "too old")),
    ]
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    ready: list[str] = []
    src = ApiServerSource(api, "n1", PodConfig(q, on_source_ready=ready.append), backoff_max=0.01)  # type: ignore[arg-type]
    api.next_lists = [([pod("c"), with_rv(b, "11")], "20")]

    src.start()
    await asyncio.wait_for(api.done.wait(), 10)
    await src.stop()

    assert api.params[0] == {"fieldSelector": "spec.nodeName=n1"}
    assert api.watch_rvs == ["10", "12", "12", "20"]
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
    assert src.apply_event("ADDED", pod("x"))
    assert not src.apply_event("ADDED", pod("y", node="n2"))
    assert src.apply_event("MODIFIED", pod("x", node="n2"))  # moved away = gone
    assert src.store == {}
    assert src.apply_event("ADDED", pod("z"))
    assert src.apply_event("DELETED", pod("z"))
    assert src.store == {}
