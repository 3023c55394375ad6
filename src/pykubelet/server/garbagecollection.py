"""The API server's half of garbage collection: which finalizers a DELETE puts on the object.

Upstream's generic registry (``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``
``deletionFinalizersForGarbageCollection``) turns the propagation policy of a delete into
finalizers that the garbage collector (:mod:`pykubelet.server.controllers.garbagecollector`)
acts on and then removes:

- ``Orphan`` (or the legacy ``orphanDependents: true``): ``orphan`` — the collector removes the
  object's ownerReferences from its dependents, then the finalizer;
- ``Foreground``: ``foregroundDeletion`` — the object stays (with its deletionTimestamp) until the
  collector has deleted every dependent that has ``blockOwnerDeletion``;
- ``Background`` (or ``orphanDependents: false``): neither; the object goes at once and the
  collector deletes its dependents afterwards.

An explicit option overrides a finalizer the object already has; with no option the object's own
GC finalizer decides, then the resource's default policy: ``OrphanDependents`` for batch/v1 Jobs
(upstream keeps it for compatibility; kubectl always sends Background), ``DeleteDependents``
(background) for everything else.  Both GC finalizers are removed first and at most one added back.
"""

from __future__ import annotations

from typing import Any

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"

# (group, resource) whose DefaultGarbageCollectionPolicy is OrphanDependents
_DEFAULT_ORPHAN = {("batch", "jobs")}
# never given GC finalizers (their own lifecycle: namespace finalization)
_UNSUPPORTED = {("", "namespaces")}


def _policy(group: str, resource: str, finalizers: list[str], opts: dict[str, Any]) -> str:
    od = opts.get("orphanDependents")
    if od is not None:
        return "Orphan" if od else "Background"
    pp = opts.get("propagationPolicy")
    if pp in ("Orphan", "Background", "Foreground"):
        return str(pp)
    if ORPHAN in finalizers:
        return "Orphan"
    if FOREGROUND in finalizers:
        return "Foreground"
    return "Orphan" if (group, resource) in _DEFAULT_ORPHAN else "Background"


def deletion_finalizers(group: str, resource: str, finalizers: list[str], opts: dict[str, Any]) -> list[str]:
    """The object's finalizers after a DELETE with ``opts`` (DeleteOptions)."""
    if (group, resource) in _UNSUPPORTED:
        return list(finalizers)
    policy = _policy(group, resource, finalizers, opts)
    out = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
    if policy == "Orphan":
        out.append(ORPHAN)
    elif policy == "Foreground":
        out.append(FOREGROUND)
    return out
