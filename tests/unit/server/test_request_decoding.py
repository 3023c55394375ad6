"""Unit tests: typed body decoding, body parsing limits, request options, selectors, Table fallback."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from multidict import MultiDict

from pykubelet.server import apitypes, schema
from pykubelet.server.app import (
    DEFAULT_MIN_REQUEST_TIMEOUT,
    ApiHttp,
    check_resource_version,
    decode_body,
    negotiate_input,
    parse_int64,
    parse_json,
    parse_yaml,
    write_options,
)
from pykubelet.server.errors import StatusError
from pykubelet.server.selectors import SelectorError, parse_field_selector, parse_label_requirements
from pykubelet.server.tables import to_table
from pykubelet.server.validation import string_data_to_data
from tests.builders import container, pod


def test_type_table_matches_the_official_client_models() -> None:
    client_models = pytest.importorskip("kubernetes.client.models")
    assert schema.generate_types(client_models) == apitypes.TYPES, \
        "apitypes.py is stale: regenerate with python -m pykubelet.server.schema"


@pytest.mark.parametrize(("change", "message"), [
    ({"image": 5}, "json: cannot unmarshal number into Go struct field Container.spec.containers.image of type string"),
    ({"command": [1, 2]}, "json: cannot unmarshal number into Go struct field Container.spec.containers.command "
                          "of type string"),
    ({"securityContext": {"runAsUser": "root"}}, "json: cannot unmarshal string into Go struct field "
                                                 "SecurityContext.spec.containers.securityContext.runAsUser of type int64"),
    ({"securityContext": {"privileged": "yes"}}, "json: cannot unmarshal string into Go struct field "
                                                 "SecurityContext.spec.containers.securityContext.privileged of type bool"),
    ({"env": [{"name": "A", "value": 1}]}, "json: cannot unmarshal number into Go struct field "
                                           "EnvVar.spec.containers.env.value of type string"),
    ({"ports": [{"containerPort": 3000000000}]}, "json: cannot unmarshal number 3000000000 into Go struct field "
                                                 "ContainerPort.spec.containers.ports.containerPort of type int32"),
    ({"env": {"A": "1"}}, "json: cannot unmarshal object into Go struct field Container.spec.containers.env of "
                          "type []v1.EnvVar"),
    ({"resources": {"limits": {"cpu": "lots"}}}, "quantities must match the regular expression "
                                                 "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
])
def test_wrong_json_types_fail_with_go_decoder_messages(change: dict[str, Any], message: str) -> None:
    with pytest.raises(schema.DecodeError) as e:
        schema.decode(pod(containers=[container(**change)]), "V1Pod")
    assert str(e.value) == message


def test_status_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(schema.DecodeError, match=r"PodStatus\.status\.phase of type string"):
        schema.decode(pod(status={"phase": 5}), "V1Pod")
    with pytest.raises(schema.DecodeError, match=r"PodStatus.status.conditions of type \[\]v1.PodCondition"):
        schema.decode(pod(status={"conditions": "x"}), "V1Pod")


def test_decoding_prunes_unknown_fields_and_canonicalises_quantities() -> None:
    p = pod(containers=[container(limits={"cpu": 0.5, "memory": "1024Mi"}, bogus=1)], extra=True)
    p["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 0.5
    d = schema.decode(p, "V1Pod")
    assert d.unknown == ["spec.containers[0].bogus", "spec.extra"]
    c = d.obj["spec"]["containers"][0]
    assert "bogus" not in c and "extra" not in d.obj["spec"]
    assert c["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}


def test_int_or_string_bytes_and_times() -> None:
    svc = {"spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 8081}]}}
    assert schema.decode(svc, "V1Service").obj == svc
    with pytest.raises(schema.DecodeError, match=r"number 1\.5 into Go value of type int32"):
        schema.decode({"spec": {"ports": [{"port": 80, "targetPort": 1.5}]}}, "V1Service")
    with pytest.raises(schema.DecodeError, match="illegal base64 data at input byte 3"):
        schema.decode({"data": {"a": "YWJ!"}}, "V1Secret")
    with pytest.raises(schema.DecodeError, match='parsing time "soon"'):
        schema.decode({"spec": {"renewTime": "soon"}}, "V1Lease")
    ok = {"spec": {"renewTime": "2024-01-01T00:00:00.123456Z"}}
    assert schema.decode(ok, "V1Lease").obj == ok


def test_duplicate_keys_are_reported_with_their_paths() -> None:
    body = parse_json(b'{"metadata": {"name": "a", "name": "b"}, "spec": {"containers": [{"name": "c", "name": "d"}]}}')
    assert schema.duplicate_paths(body.obj, body.duplicates) == ["metadata.name", "spec.containers[0].name"]
    y = parse_yaml(b"metadata:\n  name: a\n  name: b\n")
    assert schema.duplicate_paths(y.obj, y.duplicates) == ["metadata.name"]


def test_deep_and_explosive_bodies_are_refused_not_crashed() -> None:
    for raw, ct in ((b"[" * 5000 + b"]" * 5000, "application/json"), (b"[" * 101 + b"]" * 101, "application/json"),
                    (b"a: " + b"[" * 5000 + b"]" * 5000, "application/yaml")):
        with pytest.raises(StatusError) as e:
            decode_body(raw, ct)
        assert e.value.code == 400
    bomb = b"a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode() for p, c in zip("abcdef", "bcdefg", strict=True))
    with pytest.raises(StatusError, match="excessive aliasing"):
        decode_body(bomb, "application/yaml")
    with pytest.raises(StatusError, match="invalid character 'N'"):
        decode_body(b'{"a": NaN}', "application/json")
    assert decode_body(b"[" * 99 + b"]" * 99, "application/json").obj is not None


def test_yaml_scalars_come_back_as_json_values() -> None:
    obj = parse_yaml(b"t: 2024-01-01\nb: !!binary aGk=\n1: one\nnull: x\n").obj
    assert obj == {"t": "2024-01-01", "b": "aGk=", "1": "one", "null": "x"}


def test_content_type_negotiation() -> None:
    assert negotiate_input("") == "application/json"
    assert negotiate_input("application/yaml; charset=utf-8") == "application/yaml"
    for bad in ("text/plain", "application/octet-stream", "application/merge-patch+json"):
        with pytest.raises(StatusError) as e:
            negotiate_input(bad)
        assert e.value.code == 415 and e.value.reason == "UnsupportedMediaType"


def test_write_options_are_validated_like_upstream() -> None:
    assert write_options(MultiDict(dryRun="All"), "CreateOptions") == (["All"], "Warn", "")
    with pytest.raises(StatusError) as e:
        write_options(MultiDict(dryRun="Bogus"), "CreateOptions")
    assert e.value.code == 422 and e.value.message == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"')
    with pytest.raises(StatusError) as e:
        write_options(MultiDict(), "PatchOptions", apply=True, patch=True)
    assert e.value.message == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                               "is required for apply patch")
    with pytest.raises(StatusError) as e:
        write_options(MultiDict(fieldValidation="Loose"), "UpdateOptions")
    assert e.value.code == 422 and "fieldValidation: Unsupported value" in e.value.message


def test_integer_and_resource_version_parameters() -> None:
    assert parse_int64("-5") == -5 and parse_int64(str(2**63 - 1)) == 2**63 - 1
    with pytest.raises(StatusError, match="value out of range"):
        parse_int64("99999999999999999999999")
    with pytest.raises(StatusError, match="invalid syntax"):
        parse_int64("1e3")
    assert check_resource_version("") is None and check_resource_version("42") == 42
    with pytest.raises(StatusError) as e:
        check_resource_version("abc")
    assert e.value.code == 400 and e.value.message == (
        'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax')


def test_watch_timeout_is_bounded_by_the_servers_own() -> None:
    http = ApiHttp.__new__(ApiHttp)
    http.min_request_timeout = DEFAULT_MIN_REQUEST_TIMEOUT
    defaults = [http.watch_timeout(None) for _ in range(200)]
    assert all(1800 <= t <= 3600 for t in defaults) and len(set(defaults)) > 1
    assert http.watch_timeout(30) == 30
    assert 1800 <= http.watch_timeout(2**63 - 1) <= 3600
    assert http.watch_timeout(-5) == 0


@pytest.mark.parametrize(("selector", "message"), [
    ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a>b", "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value "
            "must be an integer"),
    ("a,", "found '', expected: identifier after ','"),
])
def test_label_selector_errors_match_upstream(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as e:
        parse_label_requirements(selector)
    assert str(e.value) == message


def test_label_selector_grammar() -> None:
    reqs = {r.key: (r.op, r.values) for r in parse_label_requirements("x in (),in notin (in,),!z,n>3")}
    assert reqs == {"x": ("in", ("",)), "in": ("notin", ("", "in")), "z": ("!", ()), "n": ("gt", ("3",))}


def test_field_selector_escapes() -> None:
    match, eq = parse_field_selector(r"metadata.name=a\,b", "pods")
    assert eq == {"metadata.name": "a,b"} and match({"metadata": {"name": "a,b"}})
    for bad in (r"metadata.name=a\b", "metadata.name=a=b", "metadata.name", "metadata.name =x"):
        with pytest.raises(StatusError) as e:
            parse_field_selector(bad, "pods")
        assert e.value.code == 400


def test_secret_string_data_is_folded_into_data() -> None:
    s = {"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "hello", "c": "ü"}}
    string_data_to_data(s)
    assert s == {"data": {"a": "eA==", "b": "aGVsbG8=", "c": "w7w="}}


def test_a_pod_the_printer_cannot_read_still_gets_a_row() -> None:
    now = datetime(2024, 5, 1, tzinfo=UTC)
    good = pod("good", metadata={"creationTimestamp": "2024-04-30T23:59:00Z"}, status={"phase": "Running"})
    bad = pod("bad", metadata={"creationTimestamp": "2024-04-30T23:00:00Z"}, status={"conditions": "x",
                                                                                    "containerStatuses": 5})
    t = to_table("pods", [good, bad], now=now)
    assert [c["name"] for c in t["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert t["rows"][0]["cells"][:3] == ["good", "0/1", "Running"]
    assert t["rows"][1]["cells"] == ["bad", "<unknown>", "<unknown>", "<unknown>", "60m", "<unknown>", "<unknown>",
                                     "<unknown>", "<unknown>"]
