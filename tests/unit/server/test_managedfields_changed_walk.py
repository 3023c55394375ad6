"""An Update's managedFields set is the same whichever way its changed fields are found.

``changed_paths`` walks the new object beside the old one and leaves a subtree once its value is
the old one; the sets it gives must be the ones the path-by-path lookup from the root gave (the
oracle ``_changed_by_walk`` of ``test_write_path_copies.py``, as it stood before the walk): for the
kubelet's status PATCHes, for spec and metadata updates, for keyed lists with duplicate or
non-string keys, set-like lists, fields whose type changed, and for thousands of random pairs of
objects."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from pykubelet.server import managedfields as mf
from tests.unit.server.test_write_path_copies import _changed_by_walk


def _pod_status(phase: str, n: int) -> dict[str, Any]:
    running = phase == "Running"
    cond = "True" if running else "False"
    conds: list[dict[str, Any]] = [
        {"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": "2026-12-02T00:00:01Z"}
        for t, s in (("PodReadyToStartContainers", cond), ("Initialized", "True"), ("Ready", cond),
                     ("ContainersReady", cond), ("PodScheduled", "True"))]
    state = {"running": {"startedAt": "2026-12-02T00:00:01Z"}} if running else {"waiting": {"reason": "ContainerCreating"}}
    st: dict[str, Any] = {
        "phase": phase, "conditions": conds, "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
        "startTime": "2026-12-02T00:00:00Z", "qosClass": "BestEffort",
        "containerStatuses": [{"name": "c", "state": state, "lastState": {}, "ready": running, "restartCount": 0,
                               "image": "busybox", "imageID": "", "started": running}]}
    if running:
        st["podIP"] = f"10.244.0.{n}"
        st["podIPs"] = [{"ip": f"10.244.0.{n}"}]
    return st


POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "7", "generation": 1,
                 "labels": {"app": "a"}, "finalizers": ["f1"],
                 "ownerReferences": [{"uid": "o1", "kind": "ReplicaSet", "name": "rs"}],
                 "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]},
    "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}],
                                              "env": [{"name": "A", "value": "1"}]}],
             "volumes": [{"name": "v", "emptyDir": {}}], "readinessGates": [{"conditionType": "x"}],
             "tolerations": [{"key": "k", "operator": "Exists"}]},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}], "qosClass": "BestEffort"},
}


def _with_status(pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**pod, "metadata": dict(pod["metadata"]), "status": status}


@pytest.mark.parametrize("sub", ["", "status"])
def test_the_kubelets_status_writes_own_the_fields_the_lookup_from_the_root_finds(sub: str) -> None:
    pending, running = _with_status(POD, _pod_status("Pending", 3)), _with_status(POD, _pod_status("Running", 3))
    for old, new in ((POD, pending), (pending, running), (running, running), (running, pending),
                     (pending, copy.deepcopy(pending))):
        assert mf.changed_paths(old, new, sub=sub) == _changed_by_walk(old, new, sub=sub, has_status=True)
    got = mf.changed_paths(pending, running, sub="status")
    assert ("f:status", "f:podIP") in got and ("f:status", "f:phase") in got
    assert ("f:status", "f:conditions", 'k:{"type":"Initialized"}') not in got  # the same before and after
    assert ("f:status", "f:conditions", 'k:{"type":"Ready"}', ".") in got


def test_a_status_write_is_found_without_looking_up_each_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The saving: no lookup per path (each compared everything below it, twice per PATCH)."""
    calls = [0]
    real = mf._step

    def counting(at: tuple[bool, Any], el: str) -> tuple[bool, Any]:
        calls[0] += 1
        return real(at, el)

    monkeypatch.setattr(mf, "_step", counting)
    pending, running = _with_status(POD, _pod_status("Pending", 3)), _with_status(POD, _pod_status("Running", 3))
    assert mf.changed_paths(pending, running, sub="status")
    assert calls[0] == 0


def test_keyed_lists_the_walk_does_not_follow_give_the_lookups_answer() -> None:
    old = copy.deepcopy(POD)
    cases: list[dict[str, Any]] = []
    dup = copy.deepcopy(POD)  # the same condition type twice: the lookup finds the first
    dup["status"]["conditions"] = [{"type": "Ready", "status": "False"}, {"type": "Ready", "status": "True", "x": 1}]
    cases.append(dup)
    ports = copy.deepcopy(POD)  # an integer key (ports by containerPort), equal as a float
    ports["spec"]["containers"][0]["ports"] = [{"containerPort": 80.0}, {"containerPort": 81, "name": "b"}]
    cases.append(ports)
    mixed = copy.deepcopy(POD)  # a key of another type that equals a string nowhere
    mixed["metadata"]["ownerReferences"] = [{"uid": 1}, {"uid": "o1", "kind": "Job"}, {"kind": "no uid"}, "text"]
    cases.append(mixed)
    for new in cases:
        for sub in ("", "status"):
            assert mf.changed_paths(old, new, sub=sub) == _changed_by_walk(old, new, sub=sub, has_status=True)
            assert mf.changed_paths(new, old, sub=sub) == _changed_by_walk(new, old, sub=sub, has_status=True)


# --- random pairs ------------------------------------------------------------------------------
_NAMES = ["containers", "env", "volumes", "conditions", "finalizers", "ports", "addresses", "taints",
          "containerStatuses", "readinessGates", "spec", "status", "metadata", "labels", "name", "type",
          "key", "value", "x", "$patch"]


def _scalar(r: random.Random) -> Any:
    return r.choice([None, True, False, 0, 1, 1.0, 2, "a", "b", "", "10.0.0.1", 'q"\\u', "\u00e9"])


def _value(r: random.Random, depth: int) -> Any:
    roll = r.random()
    if depth <= 0 or roll < 0.35:
        return _scalar(r)
    if roll < 0.7:
        return {r.choice(_NAMES): _value(r, depth - 1) for _ in range(r.randint(0, 4))}
    return [_item(r, depth - 1) for _ in range(r.randint(0, 4))]


def _item(r: random.Random, depth: int) -> Any:
    roll = r.random()
    if roll < 0.6:  # a keyed-looking item
        item = {r.choice(["name", "type", "key", "uid", "containerPort", "port", "x"]):
                r.choice(["a", "b", "c", "a", 1, 80, 80.0, None]) for _ in range(r.randint(1, 2))}
        if depth > 0 and r.random() < 0.5:
            item[r.choice(_NAMES)] = _value(r, depth - 1)
        return item
    return _value(r, depth)


def _mutate(r: random.Random, v: Any, depth: int) -> Any:
    """A changed copy of ``v``: some parts kept (the same objects, as writes share them), some
    changed, added, removed or reordered."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            roll = r.random()
            if roll < 0.1:
                continue
            out[k] = x if roll < 0.5 else _mutate(r, x, depth - 1)
        if r.random() < 0.3:
            out[r.choice(_NAMES)] = _value(r, depth)
        return out
    if isinstance(v, list):
        out_l = [x if r.random() < 0.5 else _mutate(r, x, depth - 1) for x in v if r.random() > 0.1]
        if r.random() < 0.3:
            out_l.insert(r.randint(0, len(out_l)), _item(r, depth))
        if r.random() < 0.2:
            r.shuffle(out_l)
        return out_l
    return _value(r, depth) if r.random() < 0.5 else v


def _obj(r: random.Random) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"}
    for top in ("metadata", "spec", "status", "data"):
        if r.random() < 0.85:
            obj[top] = _value(r, 4) if r.random() < 0.2 else {
                r.choice([*_NAMES, "uid", "resourceVersion", "managedFields"]): _value(r, 3)
                for _ in range(r.randint(0, 5))}
    return obj


@pytest.mark.parametrize("seed", range(8))
def test_random_updates_own_the_fields_the_lookup_from_the_root_finds(seed: int) -> None:
    r = random.Random(seed)
    for _ in range(500):
        old = _obj(r)
        new = _mutate(r, old, 4) if r.random() < 0.8 else _obj(r)
        new.setdefault("apiVersion", "v1")
        for sub in ("", "status"):
            for has_status in (True, False):
                want = _changed_by_walk(old, new, sub=sub, has_status=has_status)
                assert mf.changed_paths(old, new, sub=sub, has_status=has_status) == want, (old, new, sub)


def _entry(manager: str, tree: dict[str, Any], sub: str = "") -> dict[str, Any]:
    e = {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "t", "fieldsType": "FieldsV1",
         "fieldsV1": tree}
    if sub:
        e["subresource"] = sub
    return e


def test_a_shared_field_tree_is_flattened_once_and_records_what_its_plain_copy_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet's Running PATCH adds the pod IP to the tree its Pending PATCH made, which every
    pod of one template shares: its paths are taken from the tree once, not per pod."""
    pending, running = _with_status(POD, _pod_status("Pending", 3)), _with_status(POD, _pod_status("Running", 3))
    kubelet_tree = mf.to_fields_v1(mf.changed_paths(POD, pending, sub="status"))
    creator_tree = mf.to_fields_v1(mf.field_paths(POD))
    status_paths = mf.changed_paths(pending, running, sub="status")
    spec_paths = {("f:spec",), ("f:spec", "f:nodeName")}
    walks = [0]
    real = mf.from_fields_v1

    def counting(tree: Any, prefix: mf.Path = ()) -> set[mf.Path]:
        walks[0] += 1
        return real(tree, prefix)

    monkeypatch.setattr(mf, "from_fields_v1", counting)
    for manager, paths, sub in (("kubelet", status_paths, "status"), ("other", spec_paths, "")):
        results = []
        for trees in ((kubelet_tree, creator_tree), (kubelet_tree, creator_tree),
                      (copy.deepcopy(dict(kubelet_tree)), copy.deepcopy(dict(creator_tree)))):
            managed = [_entry("bench", trees[1]), _entry("kubelet", trees[0], "status")]
            results.append(mf.record(managed, manager=manager, operation="Update", api_version="v1", time="t",
                                     paths=set(paths), sub=sub))
        assert json.dumps(results[0]) == json.dumps(results[1]) == json.dumps(results[2])
    walks[0] = 0
    for _ in range(5):  # five more pods: the shared trees are not walked again
        mf.record([_entry("bench", creator_tree), _entry("kubelet", kubelet_tree, "status")], manager="kubelet",
                  operation="Update", api_version="v1", time="t", paths=set(status_paths), sub="status")
    assert walks[0] == 0
