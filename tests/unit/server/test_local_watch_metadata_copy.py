"""The garbage collector's metadata informers get a copy of each stored object's metadata that is
equal to a deep copy of it (managedFields left out) and shares no map or list with the store,
while strings and numbers, which nothing can change, are not copied one by one."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from pykubelet.server.localwatch import _metadata

METAS: list[dict[str, Any]] = [
    {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "7", "generation": 1,
     "creationTimestamp": "2026-12-02T00:00:00Z", "labels": {"app": "a", "tier": ""},
     "annotations": {"k": "v"}, "managedFields": [{"manager": "m"}]},
    {"name": "rs-x", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1",
                                          "controller": True, "blockOwnerDeletion": True}],
     "finalizers": ["a", "b"], "deletionTimestamp": "2026-12-02T00:00:01Z", "deletionGracePeriodSeconds": 30},
    {"name": "odd", "labels": {"a": {"nested": ["x"]}}, "annotations": {}, "generation": 2.5, "x": None,
     "y": True, "z": [1, {"a": "b"}]},
    {},
]


@pytest.mark.parametrize("meta", METAS)
def test_a_metadata_copy_equals_a_deep_copy_and_shares_no_container(meta: dict[str, Any]) -> None:
    stored = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "n"}}
    before = copy.deepcopy(stored)
    got = _metadata(stored, "events.k8s.io/v1")
    want = {"apiVersion": "events.k8s.io/v1", "kind": "Pod",
            "metadata": {k: copy.deepcopy(v) for k, v in meta.items() if k != "managedFields"}}
    assert json.dumps(got) == json.dumps(want)  # same keys in the same order, same values and types
    for k, v in got["metadata"].items():
        if isinstance(v, dict | list):
            assert v is not meta[k]
            v.clear()  # the informer's to change: the stored object keeps its own
    assert stored == before
