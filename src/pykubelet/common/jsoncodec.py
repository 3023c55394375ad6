"""JSON decoding for API answers and watch events: ``json.loads``'s result, at about half its CPU.

Why: decoding the API's answers and watch events was ~8 % of the agent's CPU at a 1,000-pod start
(each pod's watch events, ~2.9 kB each, and its status PATCH answer). msgspec (already a dependency
for the configuration) decodes JSON in C straight into the same Python objects.

What stays exactly as ``json.loads`` (``tests/unit/common/test_jsoncodec.py`` compares the two):
the same types (``dict``, ``list``, ``str``, ``int`` of any size, ``float``, ``bool``, ``None``), key
order, the last of duplicate keys, floats rounded the same. Whatever msgspec refuses is handed to
``json.loads``, which gives its own answer or its own error: what JSON does not allow but Python's
decoder takes (``NaN``, ``Infinity``, numbers beyond a float's range, lone surrogate escapes, the
UTF-16/32 and BOM detection of bytes), and every malformed document, so callers see
``json.JSONDecodeError`` (a ``ValueError``) and ``UnicodeDecodeError`` as before.

Encoding stays on ``json.dumps``: msgspec writes NaN as ``null`` and accepts types ``json`` refuses
(sets, bytes, datetimes), so a caller's mistake would be sent instead of raised.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``: the same value, or the same error."""
    try:
        return _decode(data)
    except msgspec.DecodeError:  # also msgspec.ValidationError (a number beyond float's range)
        return json.loads(data)
