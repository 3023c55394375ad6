"""managedFields bookkeeping answers byte for byte as the tree-rebuilding version did.

``record`` now keeps an entry's FieldsV1 tree when a write leaves that entry's set as it was (and
the tree is already in canonical form), and ``to_fields_v1`` / ``from_fields_v1`` build and read
trees without re-walking from the root.  The reference below is the previous code, kept verbatim:
every output is compared as encoded JSON, so key order counts too."""

from __future__ import annotations

import json
import random
from typing import Any

from pykubelet.server import managedfields as mf

Path = tuple[str, ...]


def ref_to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for p in sorted(paths):
        node = tree
        for el in p:
            node = node.setdefault(el, {})
    return tree


def ref_from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if isinstance(tree, dict):
        for k, v in tree.items():
            p = (*prefix, str(k))
            out.add(p)
            out |= ref_from_fields_v1(v, p)
    return out


def ref_record(managed: list[Any], *, manager: str, operation: str, api_version: str, time: str,
               paths: set[Path], sub: str = "") -> list[Any]:
    out: list[Any] = []
    prior: set[Path] = set()
    for e in managed:
        if not isinstance(e, dict):
            continue
        if e.get("manager") == manager and e.get("operation") == operation and e.get("subresource", "") == sub:
            prior = ref_from_fields_v1(e.get("fieldsV1") or {})
            continue
        if operation == "Update" and paths:
            kept = ref_from_fields_v1(e.get("fieldsV1") or {}) - paths
            if not kept:
                continue
            e = {**e, "fieldsV1": ref_to_fields_v1(kept)}
        out.append(e)
    mine = paths if operation == "Apply" else prior | paths
    if not mine and operation == "Update":
        return out
    entry: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": time,
                             "fieldsType": "FieldsV1", "fieldsV1": ref_to_fields_v1(mine)}
    if sub:
        entry["subresource"] = sub
    out.append(entry)
    return out


ELEMENTS = ["f:status", "f:spec", "f:metadata", "f:phase", "f:conditions", 'k:{"type":"Ready"}',
            'k:{"type":"Initialized"}', ".", "f:labels", "f:app", 'v:"a"', "f:containers", 'k:{"name":"c"}',
            "f:image", "f:podIP"]


def random_paths(rng: random.Random, n: int, *, with_prefixes: bool = True) -> set[Path]:
    out: set[Path] = set()
    for _ in range(n):
        p = tuple(rng.choice(ELEMENTS) for _ in range(rng.randint(1, 4)))
        out.add(p)
        if with_prefixes:
            out.update(p[:i] for i in range(1, len(p)))
    return out


def random_tree(rng: random.Random) -> Any:
    kind = rng.random()
    tree = ref_to_fields_v1(random_paths(rng, rng.randint(0, 12)))
    if kind < 0.5:
        return tree  # canonical, as the server writes them
    if kind < 0.7:  # keys out of order, as a client may send them
        return dict(reversed(list(tree.items())))
    if kind < 0.8 and tree:  # a leaf that is not a map
        k = next(iter(tree))
        return {**tree, k: rng.choice([1, None, "x", [1]])}
    return rng.choice([None, {}, [], {"f:a": {"f:b": {}}, "f:0": {}}])


def entry(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return "not an entry"
    e: dict[str, Any] = {"manager": rng.choice(["kubectl", "pykubelet", "kube-scheduler"]),
                         "operation": rng.choice(["Update", "Apply"]), "apiVersion": "v1",
                         "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1"}
    tree = random_tree(rng)
    if tree is not None or rng.random() < 0.5:
        e["fieldsV1"] = tree
    if rng.random() < 0.3:
        e["subresource"] = "status"
    return e


def test_record_answers_exactly_as_the_rebuilding_version() -> None:
    rng = random.Random(17)
    for _ in range(4000):
        managed = [entry(rng) for _ in range(rng.randint(0, 4))]
        base = json.dumps(managed)
        kw: dict[str, Any] = {"manager": rng.choice(["kubectl", "pykubelet"]),
                              "operation": rng.choice(["Update", "Update", "Apply"]), "api_version": "v1",
                              "time": "2026-12-01T00:00:01Z",
                              "paths": random_paths(rng, rng.randint(0, 5)),
                              "sub": rng.choice(["", "status"])}
        got = mf.record(list(managed), **kw)
        assert json.dumps(got) == json.dumps(ref_record(list(managed), **kw))
        assert json.dumps(managed) == base  # the old entries are not changed


def test_status_writer_keeps_trees_it_does_not_change() -> None:
    creator = {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "t0",
               "fieldsType": "FieldsV1", "fieldsV1": ref_to_fields_v1({("f:spec",), ("f:spec", "f:image")})}
    own_paths = {("f:status",), ("f:status", "f:phase")}
    kubelet = {"manager": "pykubelet", "operation": "Update", "apiVersion": "v1", "time": "t1",
               "fieldsType": "FieldsV1", "fieldsV1": ref_to_fields_v1(own_paths), "subresource": "status"}
    out = mf.record([creator, kubelet], manager="pykubelet", operation="Update", api_version="v1", time="t2",
                    paths={("f:status", "f:phase")}, sub="status")
    assert out[0] is creator
    assert out[1]["fieldsV1"] is kubelet["fieldsV1"] and out[1]["time"] == "t2"


def test_field_trees_build_and_read_as_before() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        paths = random_paths(rng, rng.randint(0, 10), with_prefixes=rng.random() < 0.7)
        assert json.dumps(mf.to_fields_v1(paths)) == json.dumps(ref_to_fields_v1(paths))
        tree = random_tree(rng)
        assert mf.from_fields_v1(tree) == ref_from_fields_v1(tree)
        assert mf.from_fields_v1(tree, ("f:x",)) == ref_from_fields_v1(tree, ("f:x",))
