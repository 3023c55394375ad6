"""Conversion between core/v1 Event and events.k8s.io/v1 Event.

Upstream stores one Event type and converts per request version
(``pkg/apis/events/v1/conversion.go``): regarding <-> involvedObject, note <-> message,
reportingController <-> reportingComponent, deprecatedSource/FirstTimestamp/LastTimestamp/Count
<-> source/firstTimestamp/lastTimestamp/count.  We store the core form.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

_PAIRS = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("related", "related"),
]
_SAME = ["metadata", "eventTime", "series", "reportingInstance", "action", "reason", "type"]


def to_core(ev: Obj) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": "v1"}
    for k in _SAME:
        if k in ev:
            out[k] = copy.deepcopy(ev[k])
    for new, old in _PAIRS:
        if new in ev:
            out[old] = copy.deepcopy(ev[new])
    if "involvedObject" not in out:
        out["involvedObject"] = {}
    return out


def from_core(ev: Obj) -> Obj:
    out: Obj = {"kind": "Event", "apiVersion": "events.k8s.io/v1"}
    for k in _SAME:
        if k in ev:
            out[k] = copy.deepcopy(ev[k])
    for new, old in _PAIRS:
        if old in ev:
            out[new] = copy.deepcopy(ev[old])
    if not out.get("reportingController") and isinstance(ev.get("source"), dict):
        out["reportingController"] = ev["source"].get("component", "")
    return out
