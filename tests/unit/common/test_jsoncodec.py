"""``jsoncodec.loads`` gives what ``json.loads`` gives: the same value (types and key order) or the same error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykubelet.common import jsoncodec


def outcome(decode: Any, data: bytes | str) -> tuple[str, str]:
    """A decode's answer, exactly: the value with its types and key order, or the error's type and text."""
    try:
        value = decode(data)
    except RecursionError:
        return "error", "RecursionError"
    except Exception as e:  # the error itself is what is compared
        return "error", f"{type(e).__name__}: {e}"
    return "value", typed(value)


def typed(v: Any) -> str:
    """``v`` with every type spelled out (``1``, ``1.0`` and ``True`` differ) and dict keys in order."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k!r}:{typed(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(typed(x) for x in v) + "]"
    return f"{type(v).__name__}({v!r})"


@pytest.mark.parametrize("data", [
    b'{"a":1,"a":2}',  # duplicate keys: the last one
    b'{"b":1,"a":{"d":[1,2.5,true,null],"c":"x"}}',  # key order
    b"123456789012345678901234567890", b"-18446744073709551617", b"18446744073709551615",  # big integers
    b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity",  # beyond JSON: Python's decoder takes them
    b"-0.0", b"0.1", b"1E5", b"5e-324", b"1.7976931348623157e308", b"1." + b"1" * 400,  # floats
    b"1" * 5000,  # more digits than int() takes
    '"\u00e9\u65e5"'.encode(), b'"\\u00e9\\ud83d\\ude00"', b'"\\ud800"', b'"\xed\xa0\x80"',  # non-ASCII, surrogates
    b'"\xc0\xaf"', b"\xff",  # invalid UTF-8
    b'\xef\xbb\xbf{"a":1}', '\ufeff{"a":1}', '{"a":"\u00e9"}',  # BOM, str input
    '{"a":1}'.encode("utf-16"), '{"a":1}'.encode("utf-32-le"),  # the other encodings json.loads detects
    b"", b"  ", b"01", b"1.", b".5", b"-", b"[1,]", b'{"a":1,}', b'{"a":1} x', b'"a\x01"', b'"\\x"',  # malformed
    b"[" * 3000 + b"]" * 3000,  # too deep
    b'\t{"a":[]}\r\n',
])
def test_loads_answers_as_json_loads_does(data: bytes | str) -> None:
    assert outcome(jsoncodec.loads, data) == outcome(json.loads, data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values, st.booleans())
def test_loads_answers_any_document_as_json_loads_does(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    for data in (text, text.encode("utf-8", "surrogatepass")):
        assert outcome(jsoncodec.loads, data) == outcome(json.loads, data)


@given(st.binary(max_size=40))
def test_loads_answers_arbitrary_bytes_as_json_loads_does(data: bytes) -> None:
    assert outcome(jsoncodec.loads, data) == outcome(json.loads, data)
