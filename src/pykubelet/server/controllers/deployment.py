"""The Deployment controller (upstream ``pkg/controller/deployment``).

A Deployment owns ReplicaSets, one per pod template it has had; the ReplicaSet controller owns the
pods.  ``reconcile`` follows upstream's ``syncDeployment``:

- claim ReplicaSets by selector (adopt orphans, release those no longer selected), as for pods;
- the *new* ReplicaSet is the one whose template equals the Deployment's ignoring the
  ``pod-template-hash`` label; if there is none (and a rollout may start) it is created as
  ``<deployment>-<hash>`` with the hash added to its selector, template labels and name;
  revisions: the new set gets ``deployment.kubernetes.io/revision`` = max(old) + 1 (an old set
  brought back by ``rollout undo`` is re-numbered and its previous numbers kept in
  ``revision-history``), and the Deployment carries its new set's revision; each set also carries
  ``desired-replicas`` and ``max-replicas`` annotations;
- paused, or only ``replicas`` changed (a *scaling event*: some active set's desired-replicas
  annotation differs): scale without rolling (``sync``): one active set takes all replicas;
  several share them proportionally to their sizes (upstream's proportional scaling);
- ``RollingUpdate``: scale the new set up to ``replicas + maxSurge`` pods in total, then scale old
  sets down while at least ``replicas - maxUnavailable`` pods stay available (first old sets'
  unhealthy pods, then oldest-first), with maxSurge rounded up and maxUnavailable down
  (``ResolveFenceposts``; both 0 means maxUnavailable 1);
- ``Recreate``: scale every old set to 0, wait until none of their pods runs, then scale the new
  set up;
- once complete, old sets with 0 replicas beyond ``revisionHistoryLimit`` are deleted (oldest
  first);
- status: replicas/updatedReplicas/readyReplicas/availableReplicas/unavailableReplicas,
  observedGeneration, collisionCount and the conditions kubectl reads: ``Available``
  (MinimumReplicasAvailable / MinimumReplicasUnavailable) and ``Progressing`` (NewReplicaSetCreated,
  FoundNewReplicaSet, ReplicaSetUpdated, NewReplicaSetAvailable, ProgressDeadlineExceeded,
  DeploymentPaused, DeploymentResumed) with upstream's messages; a rollout that makes no progress
  for ``progressDeadlineSeconds`` is marked ProgressDeadlineExceeded (the key is re-queued at the
  deadline).  Events ``ScalingReplicaSet`` "Scaled up replica set X from A to B".
"""

from __future__ import annotations

import copy
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.apps import int_or_percent
from pykubelet.server.controllers import podcontrol as pc
from pykubelet.server.controllers.kit import Api, Controller, Obj, key_of, now_rfc3339

log = logging.getLogger(__name__)

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
_NOT_COPIED = {REVISION, REVISION_HISTORY, DESIRED, MAX_REPLICAS, "kubectl.kubernetes.io/last-applied-configuration",
               "deprecated.deployment.rollback.to"}
API = "/apis/apps/v1"


# --- pure helpers -------------------------------------------------------------------------


def replicas(o: Obj) -> int:
    r = pc.spec(o).get("replicas")
    return int(r) if r is not None else 1


def revision(rs: Obj) -> int:
    try:
        return int((pc.meta(rs).get("annotations") or {}).get(REVISION, 0))
    except (TypeError, ValueError):
        return 0


def template_without_hash(tmpl: Any) -> Obj:
    t = copy.deepcopy(tmpl or {})
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return t


def equal_ignore_hash(a: Any, b: Any) -> bool:
    return template_without_hash(a) == template_without_hash(b)


def created(o: Obj) -> tuple[str, str]:
    return (str(pc.meta(o).get("creationTimestamp") or ""), str(pc.meta(o).get("name") or ""))


def fenceposts(d: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved against replicas (``ResolveFenceposts``)."""
    st = pc.spec(d).get("strategy") or {}
    if st.get("type") != "RollingUpdate":
        return 0, 0
    ru = st.get("rollingUpdate") or {}
    n = replicas(d)
    surge = int_or_percent(ru.get("maxSurge", "25%"), n, True)
    unavailable = int_or_percent(ru.get("maxUnavailable", "25%"), n, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable(d: Obj) -> int:
    if (pc.spec(d).get("strategy") or {}).get("type") != "RollingUpdate" or replicas(d) == 0:
        return 0
    return min(fenceposts(d)[1], replicas(d))


def new_rs_replicas(d: Obj, all_rs: list[Obj], new_rs: Obj) -> int:
    """``NewRSNewReplicas``."""
    if (pc.spec(d).get("strategy") or {}).get("type") == "Recreate":
        return replicas(d)
    surge = fenceposts(d)[0]
    current = sum(replicas(r) for r in all_rs)
    max_total = replicas(d) + surge
    if current >= max_total:
        return replicas(new_rs)
    up = min(max_total - current, replicas(d) - replicas(new_rs))
    return replicas(new_rs) + max(up, 0)


def get_condition(status: Obj, ctype: str) -> Obj | None:
    for c in status.get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def set_condition(status: Obj, ctype: str, cstatus: str, reason: str, message: str, now: str) -> None:
    """``SetDeploymentCondition``: keep lastTransitionTime when the status does not change."""
    conds = [c for c in status.get("conditions") or [] if c.get("type") != ctype]
    old = get_condition(status, ctype)
    if old and old.get("status") == cstatus and old.get("reason") == reason and old.get("message") == message:
        conds.append(old)
    else:
        ltt = old.get("lastTransitionTime") if old and old.get("status") == cstatus else now
        conds.append({"type": ctype, "status": cstatus, "lastUpdateTime": now, "lastTransitionTime": ltt or now,
                      "reason": reason, "message": message})
    order = {"Available": 0, "Progressing": 1, "ReplicaFailure": 2}
    status["conditions"] = sorted(conds, key=lambda c: order.get(str(c.get("type")), 9))


def calculate_status(d: Obj, all_rs: list[Obj], new_rs: Obj | None) -> Obj:
    st = copy.deepcopy(pc.status(d))
    for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
        st.pop(k, None)
    total = sum(int(pc.status(r).get("replicas") or 0) for r in all_rs)
    updated = int(pc.status(new_rs).get("replicas") or 0) if new_rs else 0
    ready = sum(int(pc.status(r).get("readyReplicas") or 0) for r in all_rs)
    available = sum(int(pc.status(r).get("availableReplicas") or 0) for r in all_rs)
    unavailable = max(replicas(d) - available, 0)
    for k, v in (("replicas", total), ("updatedReplicas", updated), ("readyReplicas", ready),
                 ("availableReplicas", available), ("unavailableReplicas", unavailable)):
        if v:
            st[k] = v
    st["observedGeneration"] = int(pc.meta(d).get("generation") or 0)
    now = now_rfc3339()
    if available >= replicas(d) - max_unavailable(d):
        set_condition(st, "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.",
                      now)
    else:
        set_condition(st, "Available", "False", "MinimumReplicasUnavailable",
                      "Deployment does not have minimum availability.", now)
    return st


def complete(d: Obj, st: Obj) -> bool:
    n = replicas(d)
    return (int(st.get("updatedReplicas") or 0) == n and int(st.get("replicas") or 0) == n
            and int(st.get("availableReplicas") or 0) == n
            and int(st.get("observedGeneration") or 0) >= int(pc.meta(d).get("generation") or 0))


def progressing(old: Obj, new: Obj) -> bool:
    """``DeploymentProgressing``: more updated/ready/available pods, or fewer old ones."""
    def g(s: Obj, k: str) -> int:
        return int(s.get(k) or 0)
    old_old = g(old, "replicas") - g(old, "updatedReplicas")
    new_old = g(new, "replicas") - g(new, "updatedReplicas")
    return (g(new, "updatedReplicas") > g(old, "updatedReplicas") or new_old < old_old
            or g(new, "readyReplicas") > g(old, "readyReplicas")
            or g(new, "availableReplicas") > g(old, "availableReplicas"))


def proportional(d: Obj, active: list[Obj], new_rs: Obj | None) -> dict[str, int]:
    """Target sizes when several sets are active and ``replicas`` changed (``scale``)."""
    surge = fenceposts(d)[0]
    allowed = replicas(d) + surge
    current = sum(replicas(r) for r in active)
    to_add = allowed - current
    sizes = {pc.meta(r)["name"]: replicas(r) for r in active}
    if to_add == 0 or current == 0:
        return sizes
    # scale up: biggest/newest first; scale down: oldest first (upstream sorts by size then age)
    order = sorted(active, key=lambda r: (replicas(r), created(r)), reverse=to_add > 0)
    added = 0
    for r in order:
        share = (replicas(r) * to_add) // current if to_add > 0 else -((replicas(r) * -to_add) // current)
        sizes[pc.meta(r)["name"]] += share
        added += share
    leftover = to_add - added
    target = order[0]
    if leftover:
        if to_add > 0 and new_rs is not None:
            target = new_rs
        sizes[pc.meta(target)["name"]] = max(sizes[pc.meta(target)["name"]] + leftover, 0)
    return {k: max(v, 0) for k, v in sizes.items()}


# --- controller ---------------------------------------------------------------------------


class DeploymentController(Controller):
    name = "deployment-controller"
    workers = 4

    def __init__(self, api: Api, *, workers: int | None = None) -> None:
        super().__init__(api, workers=workers)
        self.deployments = self.informer(f"{API}/deployments")
        self.sets = self.informer(f"{API}/replicasets")
        self.pods = self.informer("/api/v1/pods")
        self.deployments.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n),
                                      on_delete=self.enqueue)
        self.sets.add_handlers(on_add=self._rs_changed, on_update=self._rs_updated, on_delete=self._rs_changed)
        self.pods.add_handlers(on_delete=self._pod_deleted)
        self._created: set[str] = set()  # deployments whose new ReplicaSet this sync created

    def _owner(self, obj: Obj, kind: str, informer: Any) -> str | None:
        ref = pc.controller_ref(obj)
        if ref is None or ref.get("kind") != kind:
            return None
        key = f"{pc.meta(obj).get('namespace', '')}/{ref.get('name', '')}"
        owner = informer.get(key)
        return key if owner is not None and pc.meta(owner).get("uid") == ref.get("uid") else None

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        self._rs_changed(old)
        self._rs_changed(new)

    def _rs_changed(self, rs: Obj) -> None:
        key = self._owner(rs, "Deployment", self.deployments)
        if key:
            self.queue.add(key)
        elif pc.controller_ref(rs) is None:
            for d in self.deployments.items(pc.meta(rs).get("namespace", "")):
                if pc.selector_matches(pc.spec(d).get("selector"), rs):
                    self.enqueue(d)

    def _pod_deleted(self, pod: Obj) -> None:
        # Recreate waits for old pods to be gone
        rs_key = self._owner(pod, "ReplicaSet", self.sets)
        if rs_key:
            rs = self.sets.get(rs_key)
            d_key = self._owner(rs, "Deployment", self.deployments) if rs else None
            if d_key:
                self.queue.add(d_key)

    # --- API writes -------------------------------------------------------------------------

    def _rs_path(self, ns: str, name: str = "") -> str:
        return f"{API}/namespaces/{ns}/replicasets" + (f"/{name}" if name else "")

    async def _replace_rs(self, rs: Obj) -> Obj:
        m = pc.meta(rs)
        updated = await self.api.replace(self._rs_path(m["namespace"], m["name"]), rs)
        self.sets.apply("MODIFIED", updated)  # read-your-writes for the next decision
        return updated

    async def _scale_rs(self, d: Obj, rs: Obj, size: int) -> Obj:
        old = replicas(rs)
        surge = fenceposts(d)[0]
        annotations = dict(pc.meta(rs).get("annotations") or {})
        want = {DESIRED: str(replicas(d)), MAX_REPLICAS: str(replicas(d) + surge)}
        if old == size and all(annotations.get(k) == v for k, v in want.items()):
            return rs
        new = copy.deepcopy(rs)
        new["spec"]["replicas"] = size
        new["metadata"]["annotations"] = {**annotations, **want}
        updated = await self._replace_rs(new)
        if old != size:
            verb = "up" if size > old else "down"
            await self.recorder.event(d, "Normal", "ScalingReplicaSet",
                                      f"Scaled {verb} replica set {pc.meta(rs)['name']} from {old} to {size}")
        return updated

    async def _update_status(self, d: Obj, st: Obj) -> None:
        if st == pc.status(d):
            return
        m = pc.meta(d)
        try:
            await self.api.replace(f"{API}/namespaces/{m['namespace']}/deployments/{m['name']}/status",
                                   {**d, "status": st})
        except ApiError as e:
            if e.status != 404:
                raise

    async def _set_revision(self, d: Obj, rev: int) -> Obj:
        ann = pc.meta(d).get("annotations") or {}
        if ann.get(REVISION) == str(rev):
            return d
        m = pc.meta(d)
        updated = await self.api.patch(f"{API}/namespaces/{m['namespace']}/deployments/{m['name']}",
                                       {"metadata": {"annotations": {REVISION: str(rev)},
                                                     "resourceVersion": m.get("resourceVersion")}})
        self.deployments.apply("MODIFIED", updated)
        return updated

    # --- reconcile --------------------------------------------------------------------------

    async def _claim_sets(self, d: Obj) -> list[Obj]:
        ns = pc.meta(d).get("namespace", "")
        sel = pc.spec(d).get("selector")
        out = []
        for rs in self.sets.items(ns):
            decision = pc.claim(d, rs, sel)
            path = self._rs_path(ns, pc.meta(rs)["name"])
            try:
                if decision is pc.Claim.KEEP:
                    out.append(rs)
                elif decision is pc.Claim.ADOPT:
                    out.append(await self.api.patch(
                        path, pc.adopt_patch(rs, pc.owner_ref(d, "apps/v1", "Deployment")), "strategic"))
                elif decision is pc.Claim.RELEASE:
                    await self.api.patch(path, pc.release_patch(rs, str(pc.meta(d).get("uid"))), "strategic")
            except ApiError as e:
                if e.status not in (404, 409, 422):
                    raise
        return out

    async def _new_and_old(self, d: Obj, sets: list[Obj], create: bool) -> tuple[Obj | None, list[Obj], Obj]:
        """(new set or None, old sets, deployment with the revision annotation synced)."""
        tmpl = pc.spec(d).get("template") or {}
        matching = sorted((r for r in sets if equal_ignore_hash(pc.spec(r).get("template"), tmpl)), key=created)
        new_rs = matching[0] if matching else None
        old = [r for r in sets if r is not new_rs]
        max_old = max((revision(r) for r in old), default=0)
        new_revision = max_old + 1
        if new_rs is not None:
            ann = dict(pc.meta(new_rs).get("annotations") or {})
            cur = revision(new_rs)
            if cur < new_revision and cur != 0 and cur <= max_old:
                hist = [h for h in ann.get(REVISION_HISTORY, "").split(",") if h]
                ann[REVISION_HISTORY] = ",".join([*hist, str(cur)])
            if cur < new_revision and (cur == 0 or cur <= max_old):
                ann[REVISION] = str(new_revision)
                upd = copy.deepcopy(new_rs)
                upd["metadata"]["annotations"] = ann
                if int(pc.spec(upd).get("minReadySeconds") or 0) != int(pc.spec(d).get("minReadySeconds") or 0):
                    upd["spec"]["minReadySeconds"] = pc.spec(d).get("minReadySeconds") or 0
                new_rs = await self._replace_rs(upd)
            elif int(pc.spec(new_rs).get("minReadySeconds") or 0) != int(pc.spec(d).get("minReadySeconds") or 0):
                upd = copy.deepcopy(new_rs)
                upd["spec"]["minReadySeconds"] = pc.spec(d).get("minReadySeconds") or 0
                new_rs = await self._replace_rs(upd)
            d = await self._set_revision(d, revision(new_rs))
            return new_rs, old, d
        if not create:
            return None, old, d
        ns, name = pc.meta(d)["namespace"], pc.meta(d)["name"]
        collisions = int(pc.status(d).get("collisionCount") or 0)
        h = pc.template_hash(template_without_hash(tmpl), collisions)
        new_tmpl = template_without_hash(tmpl)
        new_tmpl.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
        sel = copy.deepcopy(pc.spec(d).get("selector") or {})
        sel.setdefault("matchLabels", {})[HASH_LABEL] = h
        ann = {k: v for k, v in (pc.meta(d).get("annotations") or {}).items() if k not in _NOT_COPIED}
        surge = fenceposts(d)[0]
        ann.update({REVISION: str(new_revision), DESIRED: str(replicas(d)), MAX_REPLICAS: str(replicas(d) + surge)})
        body: Obj = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{name}-{h}", "namespace": ns, "labels": dict(new_tmpl["metadata"]["labels"]),
                         "annotations": ann, "ownerReferences": [pc.owner_ref(d, "apps/v1", "Deployment")]},
            "spec": {"replicas": 0, "minReadySeconds": int(pc.spec(d).get("minReadySeconds") or 0),
                     "selector": sel, "template": new_tmpl},
        }
        body["spec"]["replicas"] = new_rs_replicas(d, old, body)
        try:
            new_rs = await self.api.create(self._rs_path(ns), body)
        except ApiError as e:
            if e.status != 409:
                raise
            existing = await self.api.get(self._rs_path(ns, f"{name}-{h}"))
            ref = pc.controller_ref(existing)
            if ref and ref.get("uid") == pc.meta(d).get("uid") and \
                    equal_ignore_hash(pc.spec(existing).get("template"), tmpl):
                return existing, old, await self._set_revision(d, revision(existing))
            # a hash collision: bump collisionCount so the next try gets another name
            await self._update_status(d, {**pc.status(d), "collisionCount": collisions + 1})
            raise
        self.sets.apply("ADDED", new_rs)
        if replicas(new_rs) > 0:
            await self.recorder.event(d, "Normal", "ScalingReplicaSet",
                                      f"Scaled up replica set {pc.meta(new_rs)['name']} from 0 to "
                                      f"{replicas(new_rs)}")
        d = await self._set_revision(d, new_revision)
        self._created.add(key_of(d))
        return new_rs, old, d

    async def reconcile(self, key: str) -> float | None:
        d = self.deployments.get(key)
        if d is None:
            return None
        d = copy.deepcopy(d)
        sets = await self._claim_sets(d)
        if not pc.spec(d).get("selector") or (not (pc.spec(d).get("selector") or {}).get("matchLabels")
                                              and not (pc.spec(d).get("selector") or {}).get("matchExpressions")):
            await self.recorder.event(d, "Warning", "SelectingAll",
                                      "This deployment is selecting all pods. A non-empty selector is required.")
            return None
        if pc.meta(d).get("deletionTimestamp"):
            new_rs, _old, d = await self._new_and_old(d, sets, create=False)
            await self._update_status(d, calculate_status(d, sets, new_rs))
            return None
        paused = bool(pc.spec(d).get("paused"))
        if paused or self._scaling_event(d, sets):
            return await self._sync(d, sets, paused)
        if (pc.spec(d).get("strategy") or {}).get("type") == "Recreate":
            return await self._recreate(d, sets)
        return await self._rolling(d, sets)

    def _scaling_event(self, d: Obj, sets: list[Obj]) -> bool:
        for rs in sets:
            if replicas(rs) > 0:
                desired = (pc.meta(rs).get("annotations") or {}).get(DESIRED)
                if desired is not None and desired != str(replicas(d)):
                    return True
        return False

    async def _sync(self, d: Obj, sets: list[Obj], paused: bool) -> float | None:
        new_rs, old, d = await self._new_and_old(d, sets, create=False)
        active = [r for r in sets if replicas(r) > 0]
        if len(active) <= 1:
            target = active[0] if active else (new_rs or (max(sets, key=created) if sets else None))
            if target is not None:
                await self._scale_rs(d, target, replicas(d))
        elif new_rs is not None and replicas(new_rs) == replicas(d) and \
                int(pc.status(new_rs).get("availableReplicas") or 0) == replicas(d):
            for r in old:
                if replicas(r):
                    await self._scale_rs(d, r, 0)
        else:
            sizes = proportional(d, active, new_rs)
            for r in active:
                await self._scale_rs(d, r, sizes[pc.meta(r)["name"]])
        sets = [self.sets.get(key_of(r)) or r for r in sets]
        if paused:
            await self._cleanup(d, [r for r in sets if r is not new_rs and pc.meta(r).get("name") !=
                                    pc.meta(new_rs or {}).get("name")])
        return await self._status(d, sets, self._find(sets, new_rs))

    @staticmethod
    def _find(sets: list[Obj], rs: Obj | None) -> Obj | None:
        if rs is None:
            return None
        name = pc.meta(rs).get("name")
        return next((r for r in sets if pc.meta(r).get("name") == name), rs)

    async def _rolling(self, d: Obj, sets: list[Obj]) -> float | None:
        new_rs, old, d = await self._new_and_old(d, sets, create=True)
        assert new_rs is not None
        all_rs = [*old, new_rs]
        # scale up the new set
        want = new_rs_replicas(d, all_rs, new_rs) if replicas(new_rs) < replicas(d) else replicas(d)
        if want != replicas(new_rs):
            await self._scale_rs(d, new_rs, want)
            return await self._status(d, self._fresh(all_rs), self._fresh([new_rs])[0])
        if await self._scale_down_old(d, old, new_rs):
            return await self._status(d, self._fresh(all_rs), self._fresh([new_rs])[0])
        fresh = self._fresh(all_rs)
        st = calculate_status(d, fresh, self._fresh([new_rs])[0])
        if complete(d, st):
            await self._cleanup(d, self._fresh(old))
        return await self._status(d, fresh, self._fresh([new_rs])[0])

    def _fresh(self, sets: list[Obj]) -> list[Obj]:
        return [self.sets.get(key_of(r)) or r for r in sets]

    async def _scale_down_old(self, d: Obj, old: list[Obj], new_rs: Obj) -> bool:
        """``reconcileOldReplicaSets``: returns True if some old set was scaled down."""
        old_pods = sum(replicas(r) for r in old)
        if old_pods == 0:
            return False
        all_pods = old_pods + replicas(new_rs)
        min_available = replicas(d) - max_unavailable(d)
        new_unavailable = replicas(new_rs) - int(pc.status(new_rs).get("availableReplicas") or 0)
        max_scaled_down = all_pods - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        scaled = 0
        # 1. unhealthy pods of old sets first
        for rs in sorted(old, key=created):
            if scaled >= max_scaled_down:
                break
            unhealthy = replicas(rs) - int(pc.status(rs).get("availableReplicas") or 0)
            if replicas(rs) == 0 or unhealthy <= 0:
                continue
            n = min(max_scaled_down - scaled, unhealthy)
            await self._scale_rs(d, rs, replicas(rs) - n)
            scaled += n
        old = self._fresh(old)
        # 2. then available ones while the minimum stays available
        available = sum(int(pc.status(r).get("availableReplicas") or 0) for r in [*old, new_rs])
        total_down = min(available - min_available, max_scaled_down - scaled)
        for rs in sorted(old, key=created):
            if total_down <= 0:
                break
            if replicas(rs) == 0:
                continue
            n = min(replicas(rs), total_down)
            await self._scale_rs(d, rs, replicas(rs) - n)
            total_down -= n
            scaled += n
        return scaled > 0

    async def _recreate(self, d: Obj, sets: list[Obj]) -> float | None:
        new_rs, old, d = await self._new_and_old(d, sets, create=False)
        scaled = False
        for rs in old:
            if replicas(rs) != 0:
                await self._scale_rs(d, rs, 0)
                scaled = True
        if scaled:
            return await self._status(d, self._fresh(sets), self._find(self._fresh(sets), new_rs))
        old_uids = {pc.meta(r).get("uid") for r in old}
        running = [p for p in self.pods.items(pc.meta(d).get("namespace", ""))
                   if (pc.controller_ref(p) or {}).get("uid") in old_uids
                   and pc.status(p).get("phase") not in ("Succeeded", "Failed")]
        if running:
            return await self._status(d, self._fresh(sets), self._find(self._fresh(sets), new_rs))
        if new_rs is None:
            new_rs, old, d = await self._new_and_old(d, self._fresh(sets), create=True)
        assert new_rs is not None
        if replicas(new_rs) != replicas(d):
            await self._scale_rs(d, new_rs, replicas(d))
        all_rs = self._fresh([*old, new_rs])
        st = calculate_status(d, all_rs, self._fresh([new_rs])[0])
        if complete(d, st):
            await self._cleanup(d, self._fresh(old))
        return await self._status(d, all_rs, self._fresh([new_rs])[0])

    async def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        limit = pc.spec(d).get("revisionHistoryLimit")
        if limit is None:
            return
        alive = [r for r in old if not pc.meta(r).get("deletionTimestamp")]
        diff = len(alive) - int(limit)
        if diff <= 0:
            return
        for rs in sorted(alive, key=lambda r: (revision(r), created(r))):
            if diff <= 0:
                break
            if replicas(rs) != 0 or int(pc.status(rs).get("replicas") or 0) != 0 or \
                    int(pc.status(rs).get("observedGeneration") or 0) < int(pc.meta(rs).get("generation") or 0):
                continue
            m = pc.meta(rs)
            try:
                await self.api.delete(self._rs_path(m["namespace"], m["name"]),
                                      {"preconditions": {"uid": m.get("uid")}})
            except ApiError as e:
                if e.status not in (404, 409):
                    raise
            diff -= 1

    async def _status(self, d: Obj, all_rs: list[Obj], new_rs: Obj | None) -> float | None:
        """``syncRolloutStatus``: status, Available and Progressing conditions, deadline requeue."""
        st = calculate_status(d, all_rs, new_rs)
        now_s = now_rfc3339()
        deadline = pc.spec(d).get("progressDeadlineSeconds")
        requeue: float | None = None
        rs_name = pc.meta(new_rs).get("name", "") if new_rs else ""
        cur = get_condition(st, "Progressing")
        if pc.spec(d).get("paused"):
            if not cur or cur.get("reason") != "DeploymentPaused":
                set_condition(st, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", now_s)
        elif cur and cur.get("reason") == "DeploymentPaused":
            set_condition(st, "Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed", now_s)
        elif deadline is not None:
            if complete(d, st):
                set_condition(st, "Progressing", "True", "NewReplicaSetAvailable",
                              f'ReplicaSet "{rs_name}" has successfully progressed.', now_s)
            elif key_of(d) in self._created:
                self._created.discard(key_of(d))
                set_condition(st, "Progressing", "True", "NewReplicaSetCreated",
                              f'Created new replica set "{rs_name}"', now_s)
            elif progressing(pc.status(d), st) or cur is None or (
                    cur.get("reason") == "NewReplicaSetAvailable" and new_rs is not None):
                reason = "ReplicaSetUpdated" if cur is not None and cur.get("reason") != "NewReplicaSetAvailable" \
                    else "FoundNewReplicaSet"
                msg = (f'ReplicaSet "{rs_name}" is progressing.' if reason == "ReplicaSetUpdated"
                       else f'Found new replica set "{rs_name}"')
                conds = [c for c in st.get("conditions") or [] if c.get("type") != "Progressing"]
                ltt = cur.get("lastTransitionTime") if cur and cur.get("status") == "True" else now_s
                conds.append({"type": "Progressing", "status": "True", "lastUpdateTime": now_s,
                              "lastTransitionTime": ltt or now_s, "reason": reason, "message": msg})
                st["conditions"] = conds
            elif cur is not None and cur.get("reason") != "ProgressDeadlineExceeded":
                last = pc.parse_time(cur.get("lastUpdateTime"))
                if last is not None:
                    left = (last + timedelta(seconds=int(deadline)) - datetime.now(UTC)).total_seconds()
                    if left <= 0:
                        set_condition(st, "Progressing", "False", "ProgressDeadlineExceeded",
                                      f'ReplicaSet "{rs_name}" has timed out progressing.', now_s)
                    else:
                        requeue = left + 0.1
            if not complete(d, st) and requeue is None and deadline is not None and \
                    (get_condition(st, "Progressing") or {}).get("reason") != "ProgressDeadlineExceeded":
                requeue = float(deadline) + 0.1
        await self._update_status(d, st)
        min_ready = int(pc.spec(d).get("minReadySeconds") or 0)
        if min_ready and not complete(d, st):
            requeue = min(requeue or min_ready + 0.1, min_ready + 0.1)
        return requeue

    @classmethod
    def from_options(cls, api: Api, options: dict[str, Any]) -> DeploymentController:
        return cls(api)

