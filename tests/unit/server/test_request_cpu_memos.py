"""The server's per-request memos and fast paths (issue 17, seventh session) answer exactly what
the code they replace answered.

- managedFields trees: the same field set gives the same (shared) tree, equal, key order
  included, to the one built by sorting the paths; two pods from one template get equal
  managedFields, and neither write changes the other's tree;
- ``k:`` elements of keyed list items: the string fast path writes what ``json.dumps`` writes;
- quantities: a remembered string parses to what parsing it anew gives; bad strings fail every
  time; long strings are not remembered;
- request bodies: one decoder per thread gives what ``json.loads`` with the duplicate-key hook
  gave, errors included, from several threads at once;
- the service-account key: read again when the file is replaced (a token signed with the old
  key no longer verifies), and a missing key fails as before;
- pod status IPs: the dotted-quad fast path accepts exactly what ``ipaddress`` accepts;
- the server process raises the collector's young threshold and keeps the other two.
"""

from __future__ import annotations

import gc
import ipaddress
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from pykubelet.common import podspec
from pykubelet.common.quantity import QuantityError, _parse_text, parse_quantity
from pykubelet.server import managedfields as mf
from pykubelet.server.app import parse_json
from pykubelet.server.auth import PKI, TokenAuth
from pykubelet.server.main import GC_YOUNG_THRESHOLD, tune_gc

Path_ = tuple[str, ...]


def ref_tree(paths: set[Path_]) -> dict[str, Any]:
    """The tree as ``to_fields_v1`` built it before the memo."""
    tree: dict[str, Any] = {}
    for p in sorted(paths):
        node = tree
        for el in p:
            node = node.setdefault(el, {})
    return tree


def random_paths(rng: random.Random, n: int) -> set[Path_]:
    els = ["f:a", "f:b", "f:metadata", "f:spec", ".", 'k:{"name":"c"}', 'k:{"name":"d"}', "v:1", "f:z"]
    out: set[Path_] = set()
    for _ in range(n):
        out.add(tuple(rng.choice(els) for _ in range(rng.randint(1, 4))))
    return out


def test_a_field_set_gives_the_tree_sorting_its_paths_gives() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        paths = random_paths(rng, rng.randint(0, 15))
        tree = mf.to_fields_v1(paths)
        assert json.dumps(tree) == json.dumps(ref_tree(paths))
        assert type(tree) is mf.FieldsTree
        assert mf.to_fields_v1(set(paths)) is tree  # the same set: the same tree
        assert mf.to_fields_v1(frozenset(paths)) is tree


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a"}},
       "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}]}]}}


def test_two_pods_from_one_template_get_equal_managed_fields_and_writes_do_not_touch_each_other() -> None:
    first = mf.record([], manager="kubectl", operation="Update", api_version="v1", time="t1",
                      paths=mf.field_paths(POD))
    second = mf.record([], manager="kubectl", operation="Update", api_version="v1", time="t2",
                       paths=mf.field_paths(json.loads(json.dumps(POD))))
    assert first[0]["fieldsV1"] == second[0]["fieldsV1"] == ref_tree(mf.field_paths(POD))
    before = json.dumps(first)
    # a later Update by another manager of one pod's image leaves the other pod's entry alone
    changed = {("f:spec",), ("f:spec", "f:containers"), ("f:spec", "f:containers", 'k:{"name":"c"}'),
               ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image")}
    after = mf.record(second, manager="other", operation="Update", api_version="v1", time="t3", paths=changed)
    assert json.dumps(first) == before
    assert after[0]["fieldsV1"] == ref_tree(mf.field_paths(POD) - changed)
    assert after[1]["fieldsV1"] == ref_tree(changed)


@pytest.mark.parametrize("value", ["c", "", 'quo"te', "back\\slash", "é", "\u2028", "\ud800", "tab\t", "x" * 300])
def test_a_keyed_item_with_a_string_key_is_named_as_json_dumps_names_it(value: str) -> None:
    for key in ("name", "na\"me", "ключ"):
        want = "k:" + json.dumps({key: value}, separators=(",", ":"), sort_keys=True)
        assert mf._item_key({key: value, "other": 1}, key) == want
    assert mf._item_key({"containerPort": 80}, "containerPort") == 'k:{"containerPort":80}'
    assert mf._item_key({"name": None}, "name") == 'k:{"name":null}'


@pytest.mark.parametrize("text", ["100m", "64Mi", "1", "0.5", "1e3", "1E-3", " 2Gi ", "+1k", "-1", "1.5Gi", ".5"])
def test_a_remembered_quantity_is_the_quantity_parsing_gives(text: str) -> None:
    fresh = _parse_text.__wrapped__(text)
    for _ in range(3):
        q = parse_quantity(text)
        assert q == fresh
        assert q.canonical() == fresh.canonical()
        assert q.milli_value() == fresh.milli_value()


@pytest.mark.parametrize("text", ["", "abc", "1Zi", "--1", "1..2", "1e", "Mi"])
def test_a_bad_quantity_fails_every_time(text: str) -> None:
    for _ in range(3):
        with pytest.raises(QuantityError, match="quantities must match"):
            parse_quantity(text)


def test_a_long_quantity_string_parses_without_being_remembered() -> None:
    text = "1" + "0" * 100 + "m"
    before = _parse_text.cache_info().currsize
    assert parse_quantity(text) == _parse_text.__wrapped__(text)
    assert _parse_text.cache_info().currsize == before


def old_parse_json(raw: bytes) -> tuple[Any, list[list[str]]]:
    dups: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(items)
        if len(d) != len(items):
            seen: set[str] = set()
            dups[id(d)] = [k for k, _ in items if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        return d

    def reject(name: str) -> Any:
        raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")

    obj = json.loads(raw, object_pairs_hook=pairs, parse_constant=reject)
    return obj, sorted(dups.values())


BODIES: list[bytes] = [
    b'{"a":1,"a":2,"b":{"c":1,"c":3,"c":4}}', b'{"metadata":{"name":"x"},"spec":{}}', b"[1,2,{}]",
    b'"s"', b"null", b'\xef\xbb\xbf{"a":1}', '{"a":"\u00e9"}'.encode(), b'{"a":NaN}', b'{"a":-Infinity}',
    b'{"a":1', b"", b"\xff\xfe{\x00}\x00", b'{"a":"\\ud800"}', b'{"a":1}  ', b'{"a":1} x', b"\xc3(",
    '{"a":"x"}'.encode("utf-16"), '{"a":"x"}'.encode("utf-32-be"),
]


@pytest.mark.parametrize("raw", BODIES)
def test_a_request_body_decodes_as_json_loads_with_the_duplicate_hook_decoded_it(raw: bytes) -> None:
    try:
        want: Any = old_parse_json(raw)
    except ValueError as e:
        want = (type(e), str(e))
    try:
        body = parse_json(raw)
        got: Any = (body.obj, sorted(body.duplicates.values()))
    except ValueError as e:
        got = (type(e), str(e))
    assert got == want


def test_request_bodies_decode_the_same_from_several_threads() -> None:
    raws = [json.dumps({"i": i, "d": {"k": i}}).replace('"k"', '"k":0,"k"').encode() for i in range(300)]
    errors: list[str] = []

    def work() -> None:
        for i, raw in enumerate(raws):
            body = parse_json(raw)
            if body.obj != {"i": i, "d": {"k": i}} or list(body.duplicates.values()) != [["k"]]:
                errors.append(f"{i}: {body}")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_replaced_service_account_key_signs_the_next_token_and_old_tokens_stop_verifying(tmp_path: Path) -> None:
    pki = PKI(tmp_path)
    pki.ensure()
    tokens = TokenAuth(tmp_path, pki)
    old, _ = tokens.issue_sa_token("default", "sa", "uid-1", [], 600)
    assert tokens.verify_sa_token(old) is not None
    pki.sa_key.write_bytes(b"k" * 32)  # another key, same size
    new, _ = tokens.issue_sa_token("default", "sa", "uid-1", [], 600)
    assert tokens.verify_sa_token(old) is None
    assert tokens.verify_sa_token(new) is not None
    pki.sa_key.unlink()
    assert tokens.verify_sa_token(new) is None
    with pytest.raises(OSError):
        tokens.issue_sa_token("default", "sa", "uid-1", [], 600)


def test_pod_status_ips_are_accepted_exactly_when_ipaddress_accepts_them() -> None:
    rng = random.Random(3)
    octets = ["0", "00", "01", "1", "9", "10", "99", "100", "199", "200", "249", "250", "255", "256", "300", "", "٣"]
    values: list[Any] = ["1.2.3.4", "::1", "fe80::1", "1.2.3.4\n", " 1.2.3.4", "1.2.3.4 ", "", "a.b.c.d", 5]
    values += [".".join(rng.choice(octets) for _ in range(rng.choice([3, 4, 4, 5]))) for _ in range(20000)]
    for v in values:
        try:
            ipaddress.ip_address(v)
            ok = True
        except ValueError:
            ok = False
        errs = podspec._ip_errors(v, "status.podIP")
        assert (errs == []) is ok, v
        if not ok:
            assert errs == [("status.podIP", podspec.invalid(v, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))]


def test_the_server_process_collects_young_objects_less_often() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
        assert GC_YOUNG_THRESHOLD > before[0]
    finally:
        gc.set_threshold(*before)
