"""ControllerRevisions for DaemonSets and StatefulSets (upstream ``pkg/controller/history``).

Both controllers snapshot their pod template into an ``apps/v1`` ControllerRevision so that pods
can say which template they were made from (label ``controller-revision-hash``) and a rollout can
tell updated pods from old ones.  As upstream, the snapshot's ``data`` is the patch
``{"spec": {"template": {..., "$patch": "replace"}}}``, the name is ``<owner>-<hash>`` with the
hash of that data (plus the owner's ``collisionCount``), ``revision`` is one more than the highest
existing one, and an existing revision whose data equals the current template is reused (bumped to
the newest revision number when a rollback brings it back).  Old revisions beyond
``revisionHistoryLimit`` that no live pod uses are deleted.
"""

from __future__ import annotations

import copy
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import podcontrol as pc
from pykubelet.server.controllers.kit import Api, Informer, Obj

REVISION_HASH = "controller-revision-hash"
PATH = "/apis/apps/v1/namespaces/{ns}/controllerrevisions"


def revision_data(template: Any) -> Obj:
    return {"spec": {"template": {**copy.deepcopy(template or {}), "$patch": "replace"}}}


def template_of(rev: Obj) -> Obj:
    t = copy.deepcopy(((rev.get("data") or {}).get("spec") or {}).get("template") or {})
    t.pop("$patch", None)
    return t


def owned_revisions(revs: Informer, owner: Obj) -> list[Obj]:
    uid = pc.meta(owner).get("uid")
    return sorted((r for r in revs.items(pc.meta(owner).get("namespace", ""))
                   if (pc.controller_ref(r) or {}).get("uid") == uid),
                  key=lambda r: int(r.get("revision") or 0))


async def ensure_revision(api: Api, revs: Informer, owner: Obj, kind: str, *,
                          extra_labels: dict[str, str] | None = None) -> tuple[Obj, str]:
    """The revision of the owner's current template (created if needed) and its hash."""
    ns = pc.meta(owner).get("namespace", "")
    tmpl = pc.spec(owner).get("template") or {}
    data = revision_data(tmpl)
    owned = owned_revisions(revs, owner)
    top = max((int(r.get("revision") or 0) for r in owned), default=0)
    collisions = int(pc.status(owner).get("collisionCount") or 0)
    h = pc.template_hash(data, collisions)
    for r in owned:
        if r.get("data") == data:
            if int(r.get("revision") or 0) < top:  # a rollback to an older template
                bumped = await api.patch(f"{PATH.format(ns=ns)}/{pc.meta(r)['name']}", {"revision": top + 1})
                revs.apply("MODIFIED", bumped)
                r = bumped
            return r, (pc.meta(r).get("labels") or {}).get(REVISION_HASH, h)
    labels = {**((tmpl.get("metadata") or {}).get("labels") or {}), REVISION_HASH: h, **(extra_labels or {})}
    body: Obj = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": f"{pc.meta(owner)['name']}-{h}", "namespace": ns, "labels": labels,
                         "ownerReferences": [pc.owner_ref(owner, "apps/v1", kind)]},
            "data": data, "revision": top + 1}
    try:
        created = await api.create(PATH.format(ns=ns), body)
    except ApiError as e:
        if e.status != 409:
            raise
        created = await api.get(f"{PATH.format(ns=ns)}/{body['metadata']['name']}")
        if created.get("data") != data:
            raise  # a hash collision: the caller bumps collisionCount
    revs.apply("ADDED", created)
    return created, h


async def truncate(api: Api, revs: Informer, owner: Obj, keep: set[str]) -> None:
    """Delete the oldest revisions beyond revisionHistoryLimit whose names are not in ``keep``."""
    raw = pc.spec(owner).get("revisionHistoryLimit")
    limit = int(raw) if raw is not None else 10
    old = [r for r in owned_revisions(revs, owner) if pc.meta(r)["name"] not in keep]
    ns = pc.meta(owner).get("namespace", "")
    for r in old[:max(len(old) - limit, 0)]:
        try:
            await api.delete(f"{PATH.format(ns=ns)}/{pc.meta(r)['name']}")
        except ApiError as e:
            if e.status != 404:
                raise
