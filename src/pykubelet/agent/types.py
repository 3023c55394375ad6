"""Types shared across agent subsystems.

Pod sources (the API server watch and the static-pod folder) tell the kubelet what should run the same
way upstream's ``pkg/kubelet/config.PodConfig`` does: a stream of ``PodUpdate`` values consumed by the
sync loop. Keeping this the only coupling between sources and the sync loop lets each side be tested
on its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

# API objects are JSON as the API server sends them; this is the one place their type is spelled
# out (typed accessors live in pykubelet.common.podutil), so the agent's strictly typed modules never
# need to spell ``Any`` themselves.
JSONObj = dict[str, Any]
Pod = JSONObj


class PodOp(enum.Enum):
    ADD = "ADD"  # pods new to this source
    UPDATE = "UPDATE"  # spec or metadata changed
    REMOVE = "REMOVE"  # gone from the source: stop at once (no grace negotiation with the API)
    DELETE = "DELETE"  # deletionTimestamp set: terminate gracefully, then confirm with grace 0
    RECONCILE = "RECONCILE"  # only status changed in the API: let the status manager re-check


@dataclass
class PodUpdate:
    op: PodOp
    source: str  # "api" or "file"
    pods: list[Pod] = field(default_factory=list)
