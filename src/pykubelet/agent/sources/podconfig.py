"""Merge pod sources into the kubelet's PodUpdate queue (upstream ``pkg/kubelet/config/config.go``).

Design: a source hands ``PodConfig.set(source, pods)`` its *complete* current list (upstream's SET
operation: the file source after each scan, the API source after each (re)list), or the change of
one pod (``update``/``remove``: the API source for each watch event, so an event costs O(1), not
O(pods) as diffing the whole store did). PodConfig keeps the last state per source and diffs into
incremental ``PodUpdate`` values, which is what the sync loop consumes. Diffing one pod lives in one
pure function (``_diff_one``, used by ``diff_pods``) so the semantics are unit-tested without queues.

Upstream behaviour followed (``PodConfig.merge`` / ``checkAndUpdatePod``):
- every pod is annotated ``kubernetes.io/config.source=<source>``; new pods get
  ``kubernetes.io/config.seen`` (first-seen time, kept across updates);
- a pod is *semantically* different when its spec, labels, deletionTimestamp,
  deletionGracePeriodSeconds or non-local annotations differ: then DELETE if it now has a
  deletionTimestamp, else UPDATE; if only the status differs it is a RECONCILE;
- pods gone from the list are REMOVE; emission order is REMOVE, ADD, UPDATE, DELETE, RECONCILE;
- the first SET from a source marks the source "seen" (``mark_source_ready``), so the kubelet does
  not clean up pods of a source it has not heard from yet.
Pods are shared, never copied whole: on the way in only what PodConfig writes is copied (the
top-level dict, ``metadata`` and ``annotations``: ``_annotatable_copy``); spec, status and the rest
stay the source's objects, and the engine is handed PodConfig's very objects. Nobody writes a pod
after handing it over: sources replace whole pods (the API source's store per watch event, the file
source's fresh copies per scan), PodConfig writes only its own copies before it hands them out, and
the engine never changes a pod it is given (the integration test ``test_engine_never_changes_pods``
runs the engine over frozen pods; readers that need a pod to change, like ``/pods`` adding the
agent's status, deep-copy it first). Upstream's kubelet shares the
informer's objects the same way (its pod manager holds the pointers ``PodConfig`` hands over). The
engine's deep copy of each pod was the agent's largest per-pod cost after the store (~13 kB for a
bench pod) and ~60 % of the CPU of a watch event.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pykubelet.common.labels import CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION

from ..types import PodOp, PodUpdate

log = logging.getLogger(__name__)

Pod = dict[str, Any]

LOCAL_ANNOTATIONS = frozenset({CONFIG_SOURCE_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_MIRROR_ANNOTATION})


def pod_uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _semantic(pod: Pod) -> tuple[Any, ...]:
    meta = pod.get("metadata") or {}
    ann = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in LOCAL_ANNOTATIONS}
    return (
        pod.get("spec"),
        meta.get("labels") or {},
        meta.get("deletionTimestamp"),
        meta.get("deletionGracePeriodSeconds"),
        ann,
    )


def format_seen(ts: float) -> str:
    """RFC 3339 with nanoseconds, as upstream writes config.seen."""
    dt = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


@dataclass
class Diff:
    removes: list[Pod] = field(default_factory=list)
    adds: list[Pod] = field(default_factory=list)
    updates: list[Pod] = field(default_factory=list)
    deletes: list[Pod] = field(default_factory=list)
    reconciles: list[Pod] = field(default_factory=list)
    state: dict[str, Pod] = field(default_factory=dict)

    def updates_in_order(self, source: str) -> list[PodUpdate]:
        out = []
        for op, pods in (
            (PodOp.REMOVE, self.removes),
            (PodOp.ADD, self.adds),
            (PodOp.UPDATE, self.updates),
            (PodOp.DELETE, self.deletes),
            (PodOp.RECONCILE, self.reconciles),
        ):
            if pods:
                out.append(PodUpdate(op=op, source=source, pods=list(pods)))  # shared: module docstring
        return out


def _annotatable_copy(raw: Pod) -> Pod:
    """Copy of ``raw`` whose top level, ``metadata`` and ``annotations`` are new dicts (the only
    parts PodConfig writes); everything else is shared with ``raw`` (see the module docstring)."""
    ref = dict(raw)
    md = raw.get("metadata")
    meta = dict(md) if isinstance(md, dict) else {}
    ref["metadata"] = meta
    ann = meta.get("annotations")
    meta["annotations"] = dict(ann) if isinstance(ann, dict) else {}
    return ref


def _diff_one(d: Diff, old: dict[str, Pod], raw: Pod, source: str, now: float) -> None:
    """Add to ``d`` what one pod from ``source`` means against the source's previous state."""
    uid = pod_uid(raw)
    if not uid:
        log.warning("ignoring pod without uid from source %s: %s", source,
                    (raw.get("metadata") or {}).get("name"))
        return
    if uid in d.state:
        return  # duplicate in one list: first wins (upstream filterInvalidPods)
    ref = _annotatable_copy(raw)
    meta = ref["metadata"]
    ann = meta["annotations"]
    ann[CONFIG_SOURCE_ANNOTATION] = source
    existing = old.get(uid)
    if existing is None:
        ann.setdefault(CONFIG_SEEN_ANNOTATION, format_seen(now))
        d.adds.append(ref)
        d.state[uid] = ref
        return
    seen = ((existing.get("metadata") or {}).get("annotations") or {}).get(CONFIG_SEEN_ANNOTATION)
    if seen is not None:
        ann[CONFIG_SEEN_ANNOTATION] = seen
    d.state[uid] = ref
    if _semantic(existing) == _semantic(ref):
        if existing.get("status") != ref.get("status"):
            d.reconciles.append(ref)
        return
    if meta.get("deletionTimestamp"):
        d.deletes.append(ref)
    else:
        d.updates.append(ref)


def diff_pods(old: dict[str, Pod], new: list[Pod], source: str, now: float) -> Diff:
    """Pure: compare a source's previous state (uid → pod) with its new full list."""
    d = Diff()
    for raw in new:
        _diff_one(d, old, raw, source, now)
    for uid, pod in old.items():
        if uid not in d.state:
            d.removes.append(pod)
    return d


class PodConfig:
    """Per-source state + the shared PodUpdate queue."""

    def __init__(
        self,
        updates: asyncio.Queue[PodUpdate],
        *,
        on_source_ready: Callable[[str], Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.updates = updates
        self.on_source_ready = on_source_ready
        self.clock = clock
        self._state: dict[str, dict[str, Pod]] = {}
        self._seen: set[str] = set()

    def set(self, source: str, pods: list[Pod]) -> list[PodUpdate]:
        """Replace ``source``'s pods with ``pods``; queue and return the resulting updates."""
        diff = diff_pods(self._state.get(source, {}), pods, source, self.clock())
        self._state[source] = diff.state
        return self._emit(source, diff)

    def update(self, source: str, pod: Pod) -> list[PodUpdate]:
        """One pod of ``source`` was added or changed (a watch event): O(1), not O(pods)."""
        state = self._state.setdefault(source, {})
        diff = Diff()
        _diff_one(diff, state, pod, source, self.clock())
        state.update(diff.state)
        return self._emit(source, diff)

    def remove(self, source: str, uid: str) -> list[PodUpdate]:
        """One pod left ``source`` (deleted, moved to another node)."""
        pod = self._state.setdefault(source, {}).pop(uid, None)
        return self._emit(source, Diff(removes=[pod] if pod is not None else []))

    def _emit(self, source: str, diff: Diff) -> list[PodUpdate]:
        out = diff.updates_in_order(source)
        for u in out:
            self.updates.put_nowait(u)
        if source not in self._seen:
            self._seen.add(source)
            if self.on_source_ready is not None:
                try:
                    self.on_source_ready(source)
                except Exception:
                    log.exception("mark_source_ready(%s) failed", source)
        return out

    def seen(self, source: str) -> bool:
        return source in self._seen

    def pods(self, source: str | None = None) -> list[Pod]:
        if source is not None:
            return [copy.deepcopy(p) for p in self._state.get(source, {}).values()]
        return [copy.deepcopy(p) for s in self._state.values() for p in s.values()]
