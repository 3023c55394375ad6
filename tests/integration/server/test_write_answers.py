"""The write path answers with the stored revision and never changes an earlier one.

A create, an update or a patch of a kind shown as stored answers with the bytes the store encoded
for the new revision (``registry.Written``), and the store keeps the parts a write did not touch
shared with the previous revision (``Storage._with_rv(owned=True)``, the status PATCH without a
copy of the pod). These tests pin what clients see: the answer is the object a GET and the watch
event show, and every revision in the watch history still reads as it was written."""

from __future__ import annotations

import json
from typing import Any

from pykubelet.server.main import ServerHandle
from tests.builders import pod

from .conftest import Http

PODS = "/api/v1/namespaces/default/pods"


def _history(server: ServerHandle, name: str) -> list[tuple[str, Any, Any]]:
    """(type, object, decoded bytes) of every event of pod ``name`` still in the watch history."""
    return [(ev.type, ev.obj, json.loads(ev.encoded())) for ev in server.store._history
            if ev.resource == "pods" and ev.name == name]


async def test_each_write_answers_with_the_revision_get_and_watch_show(http33: Http, server33: ServerHandle) -> None:
    h = http33
    st, created = await h.req("POST", PODS, pod("w"))
    assert st == 201 and created["kind"] == "Pod" and created["apiVersion"] == "v1"
    _st, got = await h.req("GET", f"{PODS}/w")
    assert got == created
    st, _ = await h.req("POST", f"{PODS}/w/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "w"},
                                                      "target": {"kind": "Node", "name": "n1"}})
    assert st == 201
    st, patched = await h.req("PATCH", f"{PODS}/w/status",
                              {"metadata": {"uid": created["metadata"]["uid"]},
                               "status": {"phase": "Running", "podIP": "10.0.0.7",
                                          "conditions": [{"type": "Ready", "status": "True"}]}},
                              content_type="application/merge-patch+json", params={"fieldManager": "kubelet"})
    assert st == 200
    _st, got = await h.req("GET", f"{PODS}/w")
    assert got == patched
    assert patched["spec"]["nodeName"] == "n1" and patched["status"]["phase"] == "Running"
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Ready"]  # a merge patch replaces lists
    kubelet = [e for e in patched["metadata"]["managedFields"] if e["manager"] == "kubelet"]
    assert kubelet and kubelet[0]["subresource"] == "status"
    assert "f:podIP" in kubelet[0]["fieldsV1"]["f:status"]
    events = _history(server33, "w")
    assert [t for t, _o, _d in events] == ["ADDED", "MODIFIED", "MODIFIED"]
    assert events[-1][2] == patched


async def test_later_writes_leave_earlier_revisions_as_they_were(http33: Http, server33: ServerHandle) -> None:
    h = http33
    _st, created = await h.req("POST", PODS, pod("r", labels={"a": "1"}))
    await h.req("POST", f"{PODS}/r/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "r"},
                                             "target": {"kind": "Node", "name": "n1"}})
    for phase in ("Pending", "Running"):
        await h.req("PATCH", f"{PODS}/r/status", {"status": {"phase": phase, "hostIP": "10.0.0.1"}},
                    content_type="application/merge-patch+json")
    await h.req("PATCH", f"{PODS}/r", {"metadata": {"labels": {"a": "2"}}}, content_type="application/merge-patch+json")
    events = _history(server33, "r")
    assert len(events) == 5
    for _t, obj, decoded in events:  # the object each event holds is still what its bytes say
        assert obj == decoded
    first = events[0][2]
    assert first == created and "nodeName" not in first["spec"] and first["metadata"]["labels"] == {"a": "1"}
    assert [e[2]["status"].get("phase") for e in events] == ["Pending", "Pending", "Pending", "Running", "Running"]
    assert [e[2]["metadata"]["labels"]["a"] for e in events] == ["1", "1", "1", "1", "2"]
    assert len({e[2]["metadata"]["resourceVersion"] for e in events}) == 5
