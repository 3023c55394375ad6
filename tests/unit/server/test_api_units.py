"""Unit tests: storage, selectors, strategic merge patch, watch history, request parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubelet.server.app import parse_request_info
from pykubelet.server.errors import StatusError
from pykubelet.server.patch import apply_patch, strategic_merge
from pykubelet.server.protobuf import decode_delete_options
from pykubelet.server.selectors import parse_field_selector, parse_label_selector
from pykubelet.server.storage import Storage


def _obj(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "labels": labels}}


async def test_storage_crud_revision_and_persistence(tmp_path: Path) -> None:
    s = Storage(tmp_path / "s.db")
    s.open()
    a = s.create("pods", "default", "a", _obj("a"))
    assert a["metadata"]["resourceVersion"] == "1"
    with pytest.raises(StatusError) as e:
        s.create("pods", "default", "a", _obj("a"))
    assert e.value.code == 409 and e.value.reason == "AlreadyExists"
    b = s.update("pods", "default", "a", _obj("a", x="y"), expected_rv="1")
    assert b["metadata"]["resourceVersion"] == "2"
    with pytest.raises(StatusError) as e:
        s.update("pods", "default", "a", _obj("a"), expected_rv="1")
    assert e.value.reason == "Conflict"
    s.create("pods", "other", "z", _obj("z"))
    assert [o["metadata"]["name"] for o in s.list_objects("pods", "default")] == ["a"]
    s.close()
    s2 = Storage(tmp_path / "s.db")
    s2.open()
    assert s2.revision == 3
    assert s2.get("pods", "default", "a")["metadata"]["labels"] == {"x": "y"}
    s2.delete("pods", "default", "a")
    assert s2.get("pods", "default", "a") is None
    with pytest.raises(StatusError) as e:
        s2.delete("pods", "default", "a")
    assert e.value.code == 404
    s2.close()


async def test_watch_history_resume_and_expiry(tmp_path: Path) -> None:
    s = Storage(tmp_path / "w.db", history=5)
    s.open()
    for i in range(3):
        s.create("pods", "default", f"p{i}", _obj(f"p{i}"))
    w = s.watch("pods", "default", 1)
    got = [w.queue.get_nowait() for _ in range(w.queue.qsize())]
    assert [(e.type, e.name) for e in got] == [("ADDED", "p1"), ("ADDED", "p2")]
    s.delete("pods", "default", "p0")
    ev = w.queue.get_nowait()
    assert ev is not None and ev.type == "DELETED" and ev.name == "p0"
    s.unwatch(w)
    for i in range(10):
        s.create("configmaps", "default", f"c{i}", _obj(f"c{i}"))
    with pytest.raises(StatusError) as e:
        s.watch("pods", "default", 1)
    assert e.value.code == 410 and e.value.reason == "Expired"
    w2 = s.watch("pods", None, None)
    assert sorted(w2.queue.get_nowait().name for _ in range(w2.queue.qsize())) == ["p1", "p2"]
    s.close()


@pytest.mark.parametrize(("sel", "expect"), [
    ("app=web", {"a"}), ("app==web", {"a"}), ("app!=web", {"b", "c"}), ("app in (web,db)", {"a", "b"}),
    ("app notin (web)", {"b", "c"}), ("app", {"a", "b"}), ("!app", {"c"}), ("app,tier=front", {"a"}),
    ("", {"a", "b", "c"}),
])
def test_label_selectors(sel: str, expect: set[str]) -> None:
    objs = [_obj("a", app="web", tier="front"), _obj("b", app="db"), _obj("c")]
    m = parse_label_selector(sel)
    assert {o["metadata"]["name"] for o in objs if m(o)} == expect


def test_label_selector_errors() -> None:
    for bad in ("app in (web", "a b c", "-x=y"):
        with pytest.raises(StatusError):
            parse_label_selector(bad)


def test_field_selectors() -> None:
    pods = [{"metadata": {"name": "a", "namespace": "d"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "b", "namespace": "d"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}},
            {"metadata": {"name": "c", "namespace": "d"}, "spec": {}, "status": {"phase": "Pending"}}]
    m, eq = parse_field_selector("spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed", "pods")
    assert [p["metadata"]["name"] for p in pods if m(p)] == ["a"]
    assert eq == {"spec.nodeName": "n1"}
    m, _ = parse_field_selector("spec.nodeName=", "pods")
    assert [p["metadata"]["name"] for p in pods if m(p)] == ["c"]
    ev = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Node", "name": "n1", "namespace": ""}}
    m, _ = parse_field_selector("involvedObject.name=n1,involvedObject.namespace=,involvedObject.kind=Node", "events")
    assert m(ev)
    m, _ = parse_field_selector("spec.unschedulable=true", "nodes")
    assert m({"spec": {"unschedulable": True}}) and not m({"spec": {}})
    with pytest.raises(StatusError):
        parse_field_selector("spec.foo=x", "pods")


def test_strategic_merge_containers_env_ports() -> None:
    live = {"spec": {"containers": [
        {"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         "ports": [{"containerPort": 80}]},
        {"name": "b", "image": "y:1"}]}}
    patch = {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                      "containers": [{"name": "a", "image": "x:2", "env": [{"name": "B", "value": "3"}],
                                      "ports": [{"containerPort": 8080}]}]}}
    out = strategic_merge(live, patch)
    assert [c["name"] for c in out["spec"]["containers"]] == ["b", "a"]
    a = out["spec"]["containers"][1]
    assert a["image"] == "x:2"
    assert a["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert [p["containerPort"] for p in a["ports"]] == [80, 8080]
    assert live["spec"]["containers"][0]["image"] == "x:1"  # not mutated


def test_strategic_merge_directives() -> None:
    live = {"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"unschedulable": True, "volumes": [{"name": "v1"}, {"name": "v2"}],
                     "tolerations": [{"key": "k"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Disk", "status": "False"}]}}
    out = strategic_merge(live, {
        "metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"y": None}},
        "spec": {"unschedulable": None, "volumes": [{"name": "v1", "$patch": "delete"}],
                 "tolerations": [{"key": "new"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert out["metadata"]["finalizers"] == ["b", "c"]
    assert out["metadata"]["labels"] == {"x": "1"}
    assert "unschedulable" not in out["spec"]
    assert out["spec"]["volumes"] == [{"name": "v2"}]
    assert out["spec"]["tolerations"] == [{"key": "new"}]  # atomic list: replaced
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"}, {"type": "Disk", "status": "False"}]
    rep = strategic_merge({"spec": {"a": 1, "b": 2}}, {"spec": {"$patch": "replace", "c": 3}})
    assert rep == {"spec": {"c": 3}}
    ret = strategic_merge({"spec": {"a": 1, "b": 2}}, {"spec": {"$retainKeys": ["b"], "b": 5}})
    assert ret == {"spec": {"b": 5}}


def test_service_ports_merge_by_port() -> None:
    live = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    out = strategic_merge(live, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert out["spec"]["ports"][1] == {"port": 443, "name": "https", "targetPort": 8443}


def test_json_and_merge_patch() -> None:
    obj = {"metadata": {"labels": {"a": "1"}}, "spec": {"x": [1, 2]}}
    assert apply_patch(obj, [{"op": "add", "path": "/metadata/labels/b", "value": "2"}], "json")["metadata"][
        "labels"] == {"a": "1", "b": "2"}
    assert apply_patch(obj, {"spec": {"x": [3]}, "metadata": {"labels": None}}, "merge") == {
        "metadata": {}, "spec": {"x": [3]}}
    with pytest.raises(StatusError) as e:
        apply_patch(obj, [{"op": "remove", "path": "/nope"}], "json")
    assert e.value.code == 422


def test_request_info_parsing() -> None:
    i = parse_request_info("GET", "/api/v1/namespaces/default/pods/x/log", {})
    assert (i.namespace, i.resource, i.name, i.subresource, i.verb) == ("default", "pods", "x", "log", "get")
    i = parse_request_info("GET", "/api/v1/namespaces/kube-system", {})
    assert (i.resource, i.name, i.namespace) == ("namespaces", "kube-system", "")
    i = parse_request_info("PUT", "/api/v1/namespaces/ns1/finalize", {})
    assert (i.resource, i.name, i.subresource) == ("namespaces", "ns1", "finalize")
    i = parse_request_info("GET", "/apis/coordination.k8s.io/v1/watch/namespaces/kube-node-lease/leases", {})
    assert (i.group, i.resource, i.verb) == ("coordination.k8s.io", "leases", "watch")
    i = parse_request_info("GET", "/api/v1/nodes/n1/proxy/stats/summary", {})
    assert (i.resource, i.subresource, i.rest) == ("nodes", "proxy", "stats/summary")
    i = parse_request_info("DELETE", "/api/v1/namespaces/d/pods", {})
    assert i.verb == "deletecollection"
    assert not parse_request_info("GET", "/version", {}).resource_request


def test_protobuf_delete_options() -> None:
    # k8s\0 + Unknown{typeMeta{apiVersion:"v1",kind:"DeleteOptions"}, raw{gracePeriodSeconds: 5}}
    tm = b"\x0a\x02v1\x12\x0dDeleteOptions"
    raw = b"\x08\x05" + b"\x22\x0aBackground"
    env = b"\x0a" + bytes([len(tm)]) + tm + b"\x12" + bytes([len(raw)]) + raw
    assert decode_delete_options(b"k8s\x00" + env) == {"gracePeriodSeconds": 5, "propagationPolicy": "Background"}
    with pytest.raises(ValueError):
        decode_delete_options(b"k8s\x00\xff\xff")
