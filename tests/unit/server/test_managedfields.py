"""managedFields bookkeeping: FieldsV1 shape, Update ownership transfer, stale applied fields."""

from __future__ import annotations

from pykubelet.server import managedfields as mf

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u", "labels": {"a": "1"}},
       "spec": {"containers": [{"name": "c1", "image": "i", "env": [{"name": "X", "value": "1"}]},
                               {"name": "c2", "image": "j"}],
                "nodeSelector": {"disk": "ssd"}},
       "status": {"phase": "Pending"}}


def test_fields_v1_shape_uses_keys_for_merge_lists_and_skips_server_fields() -> None:
    tree = mf.to_fields_v1(mf.field_paths(POD))
    assert tree["f:metadata"] == {"f:labels": {"f:a": {}}}
    c1 = tree["f:spec"]["f:containers"]['k:{"name":"c1"}']
    assert c1["."] == {} and c1["f:image"] == {}
    assert c1["f:env"]['k:{"name":"X"}'] == {".": {}, "f:name": {}, "f:value": {}}
    assert "f:status" not in tree and "f:kind" not in tree
    assert mf.from_fields_v1(tree) == mf.field_paths(POD)


def test_stale_applied_fields_removed_unless_owned_by_another_manager() -> None:
    applied1 = mf.field_paths(POD)
    managed = mf.record([], manager="m", operation="Apply", api_version="v1", time="t", paths=applied1)
    other = {("f:spec",), ("f:spec", "f:nodeSelector"), ("f:spec", "f:nodeSelector", "f:disk")}
    managed = mf.record(managed, manager="o", operation="Update", api_version="v1", time="t", paths=other)
    second = {"metadata": {"name": "p"},
              "spec": {"containers": [{"name": "c1", "image": "i"}]}}
    stale = mf.stale_applied_paths(managed, "m", mf.field_paths(second))
    obj = {"metadata": {"labels": {"a": "1"}}, "spec": {**POD["spec"]}}  # type: ignore[dict-item]
    obj["spec"]["containers"] = [dict(c) for c in POD["spec"]["containers"]]  # type: ignore[index]
    mf.remove_paths(obj, stale, mf.field_paths(second))
    assert obj["metadata"] == {}  # the label went, the map left empty by it too; metadata stays
    assert [c["name"] for c in obj["spec"]["containers"]] == ["c1"]
    assert "env" not in obj["spec"]["containers"][0]
    assert obj["spec"]["nodeSelector"] == {"disk": "ssd"}  # owned by "o"


def test_update_takes_ownership_of_changed_fields() -> None:
    managed = mf.record([], manager="m", operation="Apply", api_version="v1", time="t",
                        paths=mf.field_paths({"metadata": {"labels": {"a": "1", "b": "2"}}}))
    new = {"metadata": {"labels": {"a": "9", "b": "2"}}}
    changed = mf.changed_paths({"metadata": {"labels": {"a": "1", "b": "2"}}}, new)
    managed = mf.record(managed, manager="u", operation="Update", api_version="v1", time="t", paths=changed)
    by = {e["manager"]: e["fieldsV1"] for e in managed}
    assert by["u"] == {"f:metadata": {"f:labels": {"f:a": {}}}}
    assert by["m"] == {"f:metadata": {"f:labels": {"f:b": {}}}}
