"""The write path's copy-free helpers give what their copying counterparts give.

``merge_patch_shared`` (the status PATCH without a deep copy of the pod) against
``json_merge_patch``; ``changed_paths`` (one step per path from its parent's value) against the
walk from the root it replaced; ``Storage(owned=True)`` against a deep copy."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server import managedfields as mf
from pykubelet.server.patch import merge_patch, merge_patch_shared
from pykubelet.server.storage import Storage

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "uid": "u", "labels": {"a": "1", "b": "2"}},
    "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}],
             "tolerations": [{"key": "k", "operator": "Exists"}], "nodeName": "n"},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
               "podIPs": [{"ip": "10.0.0.1"}]},
}

PATCHES: list[Any] = [
    {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"labels": {"a": None, "c": "3"}, "uid": "u"}, "status": {"podIP": "10.0.0.2"}},
    {"spec": None},
    {"spec": {"nodeName": {"nested": {"x": None, "y": 1}}}},  # a dict over a string
    {"status": {"phase": None, "new": {"a": [1, 2]}}},
    {"metadata": {"labels": None}},
    {},
    [1, 2],
    "text",
]


@pytest.mark.parametrize("patch", PATCHES)
def test_shared_merge_patch_gives_the_copying_merge_patch_result_and_changes_neither_input(patch: Any) -> None:
    original, patch_before = copy.deepcopy(POD), copy.deepcopy(patch)
    got = merge_patch_shared(original, patch)
    want = merge_patch(POD, patch)
    assert json.dumps(got) == json.dumps(want)  # same keys in the same order
    assert original == POD and patch == patch_before


def _changed_by_walk(old: dict[str, Any], new: dict[str, Any], **kw: Any) -> set[mf.Path]:
    """``changed_paths`` as it was: every path looked up from the root."""
    out: set[mf.Path] = set()
    for p in mf.field_paths(new, **kw):
        if p[-1] == ".":
            continue
        found, oldv = mf._lookup(old, p)
        _f, newv = mf._lookup(new, p)
        if not found or oldv != newv:
            out.update(p[:i] for i in range(1, len(p) + 1))
            if p[-1].startswith("k:"):
                out.add((*p, "."))
    return out


@pytest.mark.parametrize("sub", ["", "status"])
def test_changed_paths_match_the_walk_from_the_root(sub: str) -> None:
    new = copy.deepcopy(POD)
    new["metadata"]["labels"]["a"] = "9"
    new["metadata"]["finalizers"] = ["f1", "f2"]
    new["spec"]["containers"].append({"name": "d", "image": "j"})
    new["spec"]["containers"][0]["ports"].append({"containerPort": 81})
    new["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"},
                                   {"type": "Ready", "status": "True", "reason": "dup"}]  # a duplicate key
    new["status"]["podIPs"] = [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]
    new["status"]["phase"] = "Running"
    old = copy.deepcopy(POD)
    old["metadata"]["finalizers"] = ["f2"]
    for a, b in ((old, new), (new, old), (POD, POD)):
        got = mf.changed_paths(a, b, sub=sub, has_status=True)
        assert got == _changed_by_walk(a, b, sub=sub, has_status=True)
    assert ("f:status", "f:phase") in mf.changed_paths(old, new, sub="status")


def test_an_owned_write_shares_the_untouched_parts_and_leaves_the_callers_metadata(tmp_path: Path) -> None:
    s = Storage(tmp_path / "s.db")
    s.open()
    try:
        first = s.create("pods", "default", "p", copy.deepcopy(POD), decoded=False, owned=True)
        second_in = {**first, "metadata": dict(first["metadata"]), "status": {"phase": "Running"}}
        second = s.update("pods", "default", "p", second_in, decoded=False, owned=True)
        assert second["spec"] is first["spec"]  # shared between revisions, not copied
        assert "resourceVersion" not in POD["metadata"]
        assert second_in["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        assert int(second["metadata"]["resourceVersion"]) == int(first["metadata"]["resourceVersion"]) + 1
        assert first["status"] == {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                                   "podIPs": [{"ip": "10.0.0.1"}]}
        assert json.loads(s.encoded("pods", "default", "p") or b"") == second
        copied = s.update("pods", "default", "p", second_in)  # not owned: a copy the caller may change
        copied["spec"]["nodeName"] = "other"
        assert s.peek("pods", "default", "p")["spec"]["nodeName"] == "n"  # type: ignore[index]
    finally:
        s.close()
