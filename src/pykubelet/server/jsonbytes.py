"""Compact JSON for the server's stored revisions and answers: msgspec's C codec, with the stdlib's
as the fallback for what msgspec refuses.

Why.  Each write encodes its new revision once (the bytes the store keeps, the write's answer, lists
and watch events send), and the in-process informers decode each revision again.  ``json.dumps``
took ~35 µs for a 2.5 kB pod on this VM and was 6-10 % of the server's CPU in the 1,000-pod start;
``msgspec.json`` encodes the same object in ~4 µs and decodes ~2-3x faster than ``json.loads``
(docs/benchmarks-scale.md, "Server CPU per pod: msgspec for stored revisions", eighth session).

What stays the same.  The JSON *value* of every answer: keys in insertion order, the same numbers
(integers of any size; floats as their shortest round-trip form, which both write, e.g. msgspec's
``1e16`` where the stdlib writes ``1e+16``), ``null``/``true``/``false``.  What differs is
spelling only: non-ASCII characters are written as UTF-8 instead of ``\\uXXXX`` escapes, as
upstream's Go encoder writes them (``encoding/json`` escapes only ``<``, ``>``, ``&`` and U+2028/9;
JSON is UTF-8, RFC 8259).  Fallbacks, so nothing fails that did not fail before:

- :func:`encode` falls back to ``json.dumps(obj, separators=(",", ":"))`` when msgspec refuses the
  object: a string holding a lone surrogate (``"\\ud800"`` in a body decodes to one; UTF-8 cannot
  hold it, the stdlib escapes it), a ``str`` or ``int`` subclass, a non-string key it does not
  take.  Non-finite floats, which msgspec would write as ``null`` and the stdlib as ``NaN``, never
  reach here: bodies refuse them (``parse_json``, the YAML loader, as Go's decoders do) and the
  server computes none.
- msgspec also writes some values the stdlib refuses with ``TypeError`` (``bytes`` as base64,
  ``datetime``, ``uuid.UUID``, dataclasses): stored objects are decoded JSON and never hold them.
- :func:`decode` falls back to ``json.loads`` for what msgspec refuses (an escaped lone surrogate,
  a number beyond a float's range), so a revision decodes to what ``json.loads`` gives.

Only for bytes this server produced (stored revisions) and answers it builds; request bodies keep
``parse_json`` (duplicate keys, Go's error messages).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from pykubelet.common.jsoncodec import loads as decode  # "what json.loads gives", shared with the API client

_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes (see the module docstring for the fallback)."""
    try:
        return _encoder.encode(obj)
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return json.dumps(obj, separators=(",", ":")).encode()


__all__ = ["decode", "encode"]
