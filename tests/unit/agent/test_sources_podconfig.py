"""PodConfig diffing and the API server source (list/watch/relist/mirror filtering)."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykubelet.agent.podmanager import PodManager
from pykubelet.agent.sources.apiserver import ApiServerSource, shared_copy
from pykubelet.agent.sources.podconfig import PodConfig, diff_pods
from pykubelet.agent.status.manager import StatusManager
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


def test_podconfig_marks_source_ready_once_and_annotates_only_its_own_copy() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    ready: list[str] = []
    cfg = PodConfig(q, on_source_ready=ready.append)
    cfg.set("api", [])
    given = api_pod("a")
    before = copy.deepcopy(given)
    cfg.set("api", [given])
    assert ready == ["api"]
    handed = q.get_nowait().pods[0]
    assert handed["metadata"]["annotations"]["kubernetes.io/config.source"] == "api"
    assert given == before  # the source's object is left as it was
    readers_copy = cfg.pods("api")[0]
    readers_copy["spec"]["nodeName"] = "mutated"  # a reader's copy is its own
    assert handed["spec"]["nodeName"] == "n1"


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


def test_the_engine_is_handed_the_sources_objects_without_a_copy() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    src = ApiServerSource(None, "n1", PodConfig(q))  # type: ignore[arg-type]
    raw = api_pod("a")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    src.apply_event("ADDED", raw)
    handed = q.get_nowait().pods[0]
    stored = src.store["uid-a"]
    assert handed == {**stored, "metadata": handed["metadata"]}
    assert handed["spec"] is stored["spec"] and handed["status"] is stored["status"]
    assert handed["metadata"]["managedFields"] == raw["metadata"]["managedFields"]  # /pods shows them
    assert "annotations" not in stored["metadata"]  # PodConfig annotated its own copy only


def test_the_engines_view_of_a_pod_follows_each_update_from_the_api() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    src = ApiServerSource(None, "n1", PodConfig(q))  # type: ignore[arg-type]
    src.apply_event("ADDED", api_pod("a"))
    first = q.get_nowait().pods[0]
    changed = with_rv(api_pod("a"), "2")
    changed["spec"]["containers"][0]["image"] = "busybox:2"
    src.apply_event("MODIFIED", changed)
    u = q.get_nowait()
    assert u.op is PodOp.UPDATE and u.pods[0]["spec"]["containers"][0]["image"] == "busybox:2"
    assert first["spec"]["containers"][0]["image"] == "busybox"  # what the engine held stays as it was
    running = with_rv(changed, "3")
    running["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    src.apply_event("MODIFIED", running)
    u = q.get_nowait()
    assert u.op is PodOp.RECONCILE and u.pods[0]["status"] == {"phase": "Running", "podIP": "10.0.0.1"}
    assert u.pods[0]["spec"]["containers"][0]["image"] == "busybox:2"


def test_a_watch_event_shares_what_did_not_change_with_the_pods_previous_version() -> None:
    src = ApiServerSource(None, "n1", PodConfig(asyncio.Queue()))  # type: ignore[arg-type]
    src.apply_event("ADDED", api_pod("a", tolerations=[{"key": "k", "operator": "Exists"}]))
    old = src.store["uid-a"]
    event = copy.deepcopy(old)  # what json.loads gives: equal values, new objects
    event["metadata"]["resourceVersion"] = "2"
    event["status"] = {"phase": "Running"}
    src.apply_event("MODIFIED", event)
    new = src.store["uid-a"]
    assert new == event
    assert new["spec"] is old["spec"] and new["status"] is not old["status"]
    assert new["metadata"] is not old["metadata"] and new["metadata"]["name"] is old["metadata"]["name"]


def test_a_new_pod_shares_the_parts_equal_to_the_pod_before_it() -> None:
    src = ApiServerSource(None, "n1", PodConfig(asyncio.Queue()))  # type: ignore[arg-type]
    tolerations = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300}]
    src.apply_event("ADDED", api_pod("a", tolerations=copy.deepcopy(tolerations)))
    src.apply_event("ADDED", api_pod("b", tolerations=copy.deepcopy(tolerations)))
    a, b = src.store["uid-a"], src.store["uid-b"]
    assert a["spec"]["tolerations"] is b["spec"]["tolerations"] and b["spec"]["tolerations"] == tolerations
    assert b["metadata"]["name"] == "b" and a["metadata"]["name"] == "a"


@pytest.mark.parametrize(("obj", "model"), [
    ({"a": 1, "b": [1, 2]}, {"a": True, "b": [1.0, 2]}),  # equal in Python, not in JSON: never mixed up
    ({"a": 1.0}, {"a": 1}),
    ({"a": {"x": "1"}, "b": 2}, {"b": 2, "a": {"x": "1"}}),  # the same keys in another order
    ({"a": [1, 2, 3]}, {"a": [1, 2]}),
    ({"a": [1, 2]}, {"a": [1, 2, 3]}),
    ({"a": {}}, {"a": {"k": 1}}),
    ({"a": {"k": None}}, {"a": {}}),
    ([{"n": "x"}, "s"], {"n": "x"}),
    ("s", None),
    ({"x": {"a": 1, "b": [1]}}, {"x": {"a": True, "b": [1]}}),  # equal below the top, not in JSON
    ({"x": [{"a": 1.0}]}, {"x": [{"a": 1}]}),
    ({"x": {"a": 0}, "y": [[False]]}, {"x": {"a": -0.0}, "y": [[0]]}),
    ({"x": {"a": "1", "b": {"c": 2}}}, {"x": {"b": {"c": 2}, "a": "1"}}),  # same keys, another order, nested
    ({"x": [], "y": {}}, {}),
    ({"x": {"a": 0.0}, "y": [0.0]}, {"x": {"a": -0.0}, "y": [-0.0]}),  # equal floats, written differently
    ({"x": {"a": float("inf"), "b": None}}, {"x": {"a": float("inf"), "b": None}}),
    ({"x": {"a": "\ud800", "b": 1}}, {"x": {"a": "\ud800", "b": True}}),  # a lone surrogate (json takes it)
])
def test_a_shared_copy_is_exactly_the_decoded_object(obj: Any, model: Any) -> None:
    obj_before, model_before = copy.deepcopy(obj), copy.deepcopy(model)
    got = shared_copy(obj, model)
    assert json.dumps(got) == json.dumps(obj_before)  # same values, types and key order
    assert obj == obj_before and json.dumps(model) == json.dumps(model_before)  # neither changed


@pytest.mark.parametrize(("obj", "model", "second"), [
    # a one-key dict whose key changed, the new part equal to the second model's: not the old dict
    ({"state": {"running": {"startedAt": "t"}}}, {"state": {"waiting": {"reason": "ContainerCreating"}}},
     {"state": {"running": {"startedAt": "t"}}}),
    ({"s": {"r": [1]}}, {"s": {"w": 2}}, {"s": {"r": [1]}}),
    ([1, {"a": 1}], [1, "x"], [0, {"a": 1}]),  # a list item of another type, equal to the second's
    ([[1]], ["x"], [[1]]),
    ({"a": {"x": 1}, "b": {"y": 2}}, {"b": {"y": 2}, "c": {"x": 1}}, {"a": {"x": 1}}),
])
def test_a_shared_copy_is_exactly_the_decoded_object_whatever_its_second_model(
        obj: Any, model: Any, second: Any) -> None:
    before = copy.deepcopy(obj), copy.deepcopy(model), copy.deepcopy(second)
    got = shared_copy(obj, model, second)
    assert json.dumps(got) == json.dumps(before[0])
    assert [json.dumps(x) for x in (obj, model, second)] == [json.dumps(x) for x in before]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, -0.0, 1.0]) | st.sampled_from("ab"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=12,
)


@given(json_values, json_values, json_values)
def test_a_shared_copy_of_any_document_equals_it_exactly(obj: Any, model: Any, second: Any) -> None:
    model, second = shared_copy(model), shared_copy(second)  # models are what the store holds
    assert json.dumps(shared_copy(obj, model, second)) == json.dumps(obj)
    assert json.dumps(shared_copy(obj, second, model)) == json.dumps(obj)


def test_a_part_that_changed_since_the_pods_last_version_is_shared_with_the_pod_stored_before_it() -> None:
    """The second status write of a burst: each pod's status managedFields entry differs from its own
    previous one but equals the one of the pod written just before (memory: one tree for all)."""
    src = ApiServerSource(None, "n1", PodConfig(asyncio.Queue()))  # type: ignore[arg-type]

    def written(name: str, fields: list[str], rv: str) -> dict[str, Any]:
        p = api_pod(name, status={"phase": "Running"})
        p["metadata"]["resourceVersion"] = rv
        p["metadata"]["managedFields"] = [{"manager": "kubelet", "subresource": "status",
                                           "fieldsV1": {"f:status": {f: {} for f in fields}}}]
        return p

    for name in ("a", "b"):
        src.apply_event("ADDED", written(name, ["f:conditions"], "1"))
    src.apply_event("MODIFIED", written("a", ["f:conditions", "f:phase", "f:podIP"], "2"))
    src.apply_event("MODIFIED", written("b", ["f:conditions", "f:phase", "f:podIP"], "3"))
    a, b = src.store["uid-a"], src.store["uid-b"]
    assert b["metadata"]["managedFields"][0]["fieldsV1"]["f:status"] == {"f:conditions": {}, "f:phase": {},
                                                                       "f:podIP": {}}
    assert b["metadata"]["managedFields"][0] is a["metadata"]["managedFields"][0]


def test_a_container_seen_running_stays_running_when_the_pod_before_it_runs_the_same_way() -> None:
    """A status write's echo that turns a container's state from waiting to running, with the pod stored
    just before it already running since the same second: the store shows the pod running."""
    src = ApiServerSource(None, "n1", PodConfig(asyncio.Queue()))  # type: ignore[arg-type]
    running = {"phase": "Running", "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t1"}}}]}
    waiting = {"phase": "Pending", "containerStatuses": [
        {"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    src.apply_event("ADDED", api_pod("a", status=copy.deepcopy(waiting)))
    src.apply_event("ADDED", api_pod("b", status=copy.deepcopy(running)))
    echo = api_pod("a", status=copy.deepcopy(running))
    echo["metadata"]["resourceVersion"] = "2"
    src.apply_event("MODIFIED", echo)
    assert src.store["uid-a"]["status"] == running


def test_a_shared_copy_reuses_the_models_equal_parts() -> None:
    model = shared_copy({"spec": {"c": [{"name": "a", "ports": [80]}], "t": {}}, "status": {"phase": "P"}})
    got = shared_copy({"spec": {"c": [{"name": "a", "ports": [80]}], "t": {}}, "status": {"phase": "R"}}, model)
    assert got["spec"] is model["spec"] and got["status"] is not model["status"]
    assert shared_copy(copy.deepcopy(model), model) is model


def test_a_shared_copy_without_a_model_makes_its_own_empty_lists() -> None:
    a, b = shared_copy({"x": [], "y": [[]]}), shared_copy({"x": [], "y": [[]]})
    a["x"].append(1)
    a["y"][0].append(1)
    assert b == {"x": [], "y": [[]]} and shared_copy({"x": []}) == {"x": []}


def test_pods_shows_the_api_pod_as_received_with_the_agents_status() -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    src = ApiServerSource(None, "n1", PodConfig(q, clock=lambda: 0.0))  # type: ignore[arg-type]
    raw = api_pod("a")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update",
                                         "fieldsV1": {"f:spec": {"f:containers": {}}}}]
    src.apply_event("ADDED", copy.deepcopy(raw))
    statuses = StatusManager(None)
    pods = PodManager(statuses)
    handed = q.get_nowait().pods[0]
    pods.add_pod(handed)
    statuses.set_pod_status(handed, {"phase": "Running"})
    shown = pods.pods()[0]
    annotations = {"kubernetes.io/config.source": "api",
                   "kubernetes.io/config.seen": "1970-01-01T00:00:00.000000000Z"}
    assert shown == {**raw, "metadata": {**raw["metadata"], "annotations": annotations},
                     "status": {"phase": "Running"}}
    shown["spec"]["containers"].append({"name": "x"})  # the endpoint's copy is its own
    assert src.store["uid-a"]["spec"] == raw["spec"] == handed["spec"]
