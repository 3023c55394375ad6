"""The per-request shortcuts of issue 17 answer as the long way did.

* a client certificate is parsed once per certificate: every request still gets a user of its own,
  and a certificate that does not parse is refused every time;
* the static node rules are answered once per request shape: the same answer as asking every rule,
  for every verb, group, resource, subresource, name and non-resource path a kubelet may send;
* a JSON body is walked for its depth only when it has more brackets than the depth limit: bodies
  nested too deep are still refused, brackets inside strings still do not count;
* the node authorizer looks for a node's pods without sorting all pods first."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pykubelet.server import nodeauthorizer
from pykubelet.server.app import MAX_DEPTH, decode_body, parse_json
from pykubelet.server.auth import user_from_peercert
from pykubelet.server.errors import StatusError
from pykubelet.server.rbac import NODE_RULES, Request, rule_allows
from pykubelet.server.storage import Storage


def client_cert(cn: str, orgs: list[str]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
    from cryptography.hazmat.primitives.serialization import Encoding
    return cert.public_bytes(Encoding.DER)


def test_a_client_certificate_names_its_user_on_every_request() -> None:
    der = client_cert("system:node:n1", ["system:nodes"])
    first = user_from_peercert(der)
    assert first is not None and first.name == "system:node:n1"
    assert first.groups == ["system:nodes", "system:authenticated"]
    first.groups.append("system:masters")  # a caller changing its user changes nobody else's
    again = user_from_peercert(bytes(der))
    assert again is not None and again is not first
    assert again.groups == ["system:nodes", "system:authenticated"]
    other = user_from_peercert(client_cert("alice", []))
    assert other is not None and other.name == "alice" and other.groups == ["system:authenticated"]
    assert user_from_peercert(None) is None and user_from_peercert(b"") is None


def test_a_certificate_that_does_not_parse_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            user_from_peercert(b"\x30\x03not a certificate")


def test_node_rules_answer_as_asking_every_rule() -> None:
    verbs = sorted({v for r in NODE_RULES for v in r.get("verbs") or []} | {"get", "list", "watch", "create",
                                                                          "update", "patch", "delete", "escalate"})
    groups = sorted({g for r in NODE_RULES for g in r.get("apiGroups") or []} | {"", "apps", "example.com"})
    resources = sorted({res.split("/")[0] for r in NODE_RULES for res in r.get("resources") or []}
                       | {"pods", "nodes", "secrets", "widgets"})
    subs = ["", "status", "token", "binding", "eviction", "proxy"]
    for verb, group, res, sub, name in itertools.product(verbs, groups, resources, subs, ["", "p-1", "n1"]):
        req = Request("system:node:n1", ["system:nodes"], verb, "default", group, res, sub, name, "/x", True)
        want = any(rule_allows(r, req) for r in NODE_RULES)
        got = nodeauthorizer._node_rules_allow(verb, True, group, res, sub,
                                               name if nodeauthorizer._NODE_RULES_NAME_RESOURCES else "", "")
        assert got == want, (verb, group, res, sub, name)
    for verb, path in itertools.product(verbs, ["/healthz", "/version", "/api", "/metrics", "/logs/x"]):
        req = Request("system:node:n1", ["system:nodes"], verb, "", "", "", "", "", path, False)
        assert nodeauthorizer._node_rules_allow(verb, False, "", "", "", "", path) == \
            any(rule_allows(r, req) for r in NODE_RULES)


def test_bodies_nested_too_deep_are_still_refused() -> None:
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    with pytest.raises(ValueError, match="exceeded max depth"):
        parse_json(deep)
    with pytest.raises(StatusError) as e:
        decode_body(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "application/json")
    assert e.value.code == 400 and "exceeded max depth" in e.value.message
    at_limit = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert parse_json(at_limit).obj is not None
    # many brackets, shallow nesting: walked, and accepted
    wide = json.dumps({"items": [[{"a": [1]}] for _ in range(200)]}).encode()
    assert len(parse_json(wide).obj["items"]) == 200
    # brackets in strings count for the shortcut only, never as nesting
    stringy = json.dumps({"s": "{[" * 500}).encode()
    assert parse_json(stringy).obj == {"s": "{[" * 500}


def test_duplicate_keys_are_still_remembered() -> None:
    body = parse_json(b'{"metadata":{"name":"a","name":"b"},"spec":{}}')
    assert body.obj == {"metadata": {"name": "b"}, "spec": {}}
    assert list(body.duplicates.values()) == [["name"]]


def test_the_node_authorizer_reads_the_same_pods_without_sorting_them(tmp_path: Path) -> None:
    """``Storage.iter_unordered`` gives what ``iter_raw`` gives, in any order, and does not sort
    the keys a create left unsorted (a kubelet's TokenRequest follows its pod's create)."""
    s = Storage(tmp_path / "s.db")
    s.open()
    try:
        for i, pns in enumerate(["b", "a", "c", "a", "b"] * 3):
            s.create("pods", pns, f"p{i}", {"metadata": {"name": f"p{i}", "namespace": pns}, "spec": {}})
        s.delete("pods", "a", "p1")
        for ns in (None, "a", "b", "c", "missing"):
            assert "pods" not in s._order
            got = sorted(k for k, _ in s.iter_unordered("pods", ns))
            assert "pods" not in s._order  # not sorted for it
            assert got == [k for k, _ in s.iter_raw("pods", ns)]  # the same pairs (iter_raw sorts)
            assert sorted(k for k, _ in s.iter_unordered("pods", ns)) == got  # and with the order known
            s.create("pods", "z", f"n{ns}", {"metadata": {"name": f"n{ns}", "namespace": "z"}, "spec": {}})
        assert [k for k, _ in s.iter_unordered("nodes")] == []
    finally:
        s.close()
