"""Structural-schema pruning, defaulting and validation messages of custom resources (pure logic)."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.server import crd, openapiv2

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "name": {"type": "string", "nullable": True, "pattern": "^[a-z]+$"},
            "port": {"x-kubernetes-int-or-string": True},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        }, "required": ["mode"]},
    },
}


def served() -> crd.ServedVersion:
    crds = crd.CustomResources()
    obj = {"metadata": {"name": "foos.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "foos", "kind": "Foo"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": SCHEMA}}]}}
    obj["status"] = crds.status_for(obj, None)
    crds.register(obj)
    try:
        sv = crds.served_kind("example.com", "v1", "Foo")
        assert sv is not None
        return sv
    finally:
        crds.close()


def test_pruning_drops_unknown_fields_but_keeps_preserved_and_map_values() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "x"}, "junk": 1,
           "spec": {"mode": "a", "nope": 2, "labels": {"a": "b"}, "free": {"x": {"y": 1}},
                    "items": [{"k": "v", "drop": 1}]}}
    dropped = crd.prune(obj, SCHEMA, root=True)
    assert sorted(dropped) == ["junk", "spec.items[0].drop", "spec.nope"]
    assert obj["spec"] == {"mode": "a", "labels": {"a": "b"}, "free": {"x": {"y": 1}}, "items": [{"k": "v"}]}
    assert obj["metadata"] == {"name": "x"}


def test_defaults_fill_absent_properties() -> None:
    obj: dict[str, Any] = {"spec": {"mode": "a"}}
    crd.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["size"] == 1


@pytest.mark.parametrize(("spec", "message"), [
    ({"mode": "a", "size": "big"},
     ("spec.size", 'Invalid value: "string": spec.size in body must be of type integer: "string"')),
    ({"mode": "a", "size": 9}, ("spec.size", "Invalid value: 9: spec.size in body should be less than or equal to 5")),
    ({"mode": "c"}, ("spec.mode", 'Unsupported value: "c": supported values: "a", "b"')),
    ({}, ("spec.mode", "Required value")),
    ({"mode": "a", "name": "A1"}, ("spec.name", "Invalid value: \"A1\": spec.name in body should match '^[a-z]+$'")),
])
def test_validation_errors_read_as_upstream(spec: dict[str, Any], message: tuple[str, str]) -> None:
    sv = served()
    with pytest.raises(crd.SchemaInvalid) as e:
        sv_obj = {"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "x"}, "spec": spec}
        crd.CustomResources().admit(sv, sv_obj, creating=True)
    assert message in e.value.errors


def test_nullable_and_int_or_string_accept_their_values() -> None:
    sv = served()
    obj: dict[str, Any] = {"metadata": {"name": "x"}, "spec": {"mode": "a", "name": None, "port": "http"}}
    crd.CustomResources().admit(sv, obj, creating=True)
    obj["spec"]["port"] = 80
    crd.CustomResources().admit(sv, obj, creating=False)


def test_crd_without_type_in_a_property_is_not_structural() -> None:
    bad = {"metadata": {"name": "foos.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "foos", "kind": "Foo"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"spec": {"properties": {}}}}}}]}}
    assert ("spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
            "Required value: must not be empty for specified object fields") in crd.validate_crd(bad, None)


def test_versions_sort_as_kubernetes_does() -> None:
    assert sorted(["v1alpha1", "v2", "v1beta1", "v1", "foo"], key=crd.version_priority) == \
        ["v2", "v1", "v1beta1", "v1alpha1", "foo"]


def test_openapi_v2_lists_patch_operations_with_field_validation() -> None:
    doc = openapiv2.document()
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    raw = openapiv2.to_protobuf(doc)
    assert raw.startswith(b"\n\x032.0") and b"x-kubernetes-group-version-kind" in raw


def test_unsupported_crd_features_are_warned_about() -> None:
    obj = {"spec": {"conversion": {"strategy": "Webhook"}, "versions": [
        {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-validations": [{"rule": "1"}]}}}]}}
    warnings = crd.crd_warnings(obj)
    assert any("Webhook conversion is not supported" in w for w in warnings)
    assert any("x-kubernetes-validations (CEL) rules are not evaluated" in w for w in warnings)
