"""Stored revisions and answers are encoded with msgspec (``server/jsonbytes.py``): the JSON value
is what ``json.dumps`` wrote (keys in order, numbers, strings), only the spelling of non-ASCII
characters differs; what msgspec refuses falls back to the stdlib, and decoding gives what
``json.loads`` gives."""

from __future__ import annotations

import enum
import json
import math
import random
from pathlib import Path
from typing import Any

from pykubelet.server import jsonbytes
from pykubelet.server.storage import Storage


def _stdlib(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**31, 2**63, -(2**63) - 1, 10**30, rng.randrange(-10**6, 10**6)])
    if kind == 2:
        return rng.choice([0.0, -0.0, 0.1, 1.5e-7, 1e16, 1e22, 1e300, 5e-324, 123.456, float(rng.random())])
    if kind in (3, 4, 5):
        alphabet = "abcXYZ09 \"\\/\n\t\x00\x1fé漢字😀\u2028<>&"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))
    if kind in (6, 7):
        return {_random_key(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def _random_key(rng: random.Random) -> str:
    return "".join(rng.choice("ab\"é😀\\:{}") for _ in range(rng.randrange(1, 5)))


def test_encoded_revisions_are_the_same_json_values_as_the_stdlib_writes() -> None:
    rng = random.Random(17)
    for _ in range(1000):
        obj = {"metadata": {"name": "x"}, "v": _random_value(rng)}
        got = jsonbytes.encode(obj)
        assert json.loads(got) == json.loads(_stdlib(obj))
        assert list(json.loads(got)) == list(obj)  # key order kept
        if got.isascii() and not _has_float(obj):  # only non-ASCII characters and floats are spelled differently
            assert got == _stdlib(obj)
        assert jsonbytes.decode(got) == obj
        assert jsonbytes.decode(_stdlib(obj)) == json.loads(_stdlib(obj))


def _has_float(v: Any) -> bool:
    if isinstance(v, float):
        return True
    if isinstance(v, dict):
        return any(_has_float(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_float(x) for x in v)
    return False


def test_non_ascii_is_written_as_utf8_like_upstream() -> None:
    assert jsonbytes.encode({"a": "é漢😀"}) == '{"a":"é漢😀"}'.encode()


def test_what_msgspec_refuses_is_written_by_the_stdlib() -> None:
    class Name(str):
        pass

    class Phase(enum.StrEnum):
        RUNNING = "Running"

    lone = json.loads('"\\ud800x"')  # a body may decode to a lone surrogate; UTF-8 cannot hold it
    for obj in ({"s": lone}, {Name("k"): Name("v")}, {"p": Phase.RUNNING}, {1: 2, None: True}):
        assert json.loads(jsonbytes.encode(obj)) == json.loads(_stdlib(obj))
    assert jsonbytes.encode({"s": lone}) == _stdlib({"s": lone})
    assert jsonbytes.decode(_stdlib({"s": lone})) == {"s": lone}


def test_decoding_gives_what_json_loads_gives_even_where_msgspec_refuses() -> None:
    for raw in (b'"\\ud800"', b"1E400", b"-1E400", b'{"a":1,"a":2}', b"[1.0,-0,-0.0,18446744073709551616]",
                b'"\\u00e9\\ud83d\\ude00"', "\"é\"".encode()):
        got, want = jsonbytes.decode(raw), json.loads(raw)
        assert got == want or (isinstance(want, float) and math.isinf(want) and got == want)
        assert type(got) is type(want)


def test_bad_json_fails_as_json_loads_fails() -> None:
    for raw in (b"[1,2", b"NaN", b"\xff", b""):
        try:
            json.loads(raw)
        except ValueError as e:
            want: type[BaseException] = type(e)
        else:  # NaN: json.loads takes it, and so must decode
            assert math.isnan(jsonbytes.decode(raw))
            continue
        try:
            jsonbytes.decode(raw)
        except ValueError as e:
            assert type(e) is want
        else:
            raise AssertionError(f"{raw!r} decoded")


def test_a_stored_object_with_non_ascii_reads_back_after_a_restart(tmp_path: Path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                                                        "annotations": {"note": "café 漢字 😀", "n": "1e16"}},
           "spec": {"priority": 2**40, "weight": 1e16}}
    s = Storage(tmp_path / "db")
    s.open()
    s.create("pods", "ns", "p", pod)
    data = s.encoded("pods", "ns", "p")
    assert data is not None and "café 漢字 😀".encode() in data
    s.close()
    s2 = Storage(tmp_path / "db")
    s2.open()
    got = s2.get("pods", "ns", "p")
    assert got is not None and got["metadata"]["annotations"] == pod["metadata"]["annotations"]  # type: ignore[index]
    assert got["spec"] == pod["spec"]
    assert s2.encoded("pods", "ns", "p") == data
    s2.close()
