"""The StatefulSet controller (upstream ``pkg/controller/statefulset``).

Pods with stable identities: ``<set>-<ordinal>`` for ordinals ``start .. start+replicas-1``
(``spec.ordinals.start``, default 0), ``hostname`` = pod name and ``subdomain`` = ``serviceName``,
labels ``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index`` and
``controller-revision-hash`` (the name of the ControllerRevision the pod was made from,
:mod:`.history`).  Each ``volumeClaimTemplates`` entry becomes a PersistentVolumeClaim
``<claim>-<set>-<ordinal>`` (labels: the set's ``matchLabels``), created before the pod and never
deleted by this controller (upstream's default Retain policy; ``Delete`` policies are reported with
a warning event since this controller does not implement them), and the pod mounts it in place of
the template volume of that name; the local-path provisioner then binds it when the pod is
scheduled.

``reconcile`` follows ``StatefulSetControl.UpdateStatefulSet``:

- ``OrderedReady``: walk ordinals upwards; create the first missing pod and stop; stop at a pod that
  is not Running and Ready or is terminating; failed pods are deleted (and re-created next pass);
  scale down removes the highest ordinal first, one at a time, and only while all others are
  healthy.  ``Parallel``: create and delete without waiting;
- ``RollingUpdate``: pods with ordinal >= ``partition`` whose revision is not the update revision are
  deleted from the highest ordinal down, one at a time, each only once all pods are healthy; pods
  below the partition are (re)created from the current revision;
- status: replicas, readyReplicas, availableReplicas, currentReplicas, updatedReplicas,
  currentRevision / updateRevision (the current revision becomes the update revision once every pod
  runs it), observedGeneration.  Events ``SuccessfulCreate`` ("create Pod web-0 in StatefulSet web
  successful") and ``SuccessfulDelete`` as upstream.
"""

from __future__ import annotations

import copy
import logging
import re
from datetime import UTC, datetime

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import history
from pykubelet.server.controllers import podcontrol as pc
from pykubelet.server.controllers.kit import Api, Controller, Obj, key_of

log = logging.getLogger(__name__)

KIND = "StatefulSet"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def ordinal_of(set_name: str, pod: Obj) -> int | None:
    m = re.fullmatch(re.escape(set_name) + r"-(\d+)", str(pc.meta(pod).get("name", "")))
    return int(m.group(1)) if m else None


def healthy(pod: Obj) -> bool:
    return pc.status(pod).get("phase") == "Running" and pc.is_pod_ready(pod) and not pc.meta(pod).get(
        "deletionTimestamp")


def claim_name(claim: Obj, set_name: str, ordinal: int) -> str:
    return f"{pc.meta(claim).get('name', '')}-{set_name}-{ordinal}"


def pod_for(sts: Obj, template: Obj, revision_name: str, ordinal: int) -> Obj:
    name = f"{pc.meta(sts)['name']}-{ordinal}"
    pod = pc.pod_from_template(template, pc.meta(sts).get("namespace", ""), pc.owner_ref(sts, "apps/v1", KIND),
                               name=name, extra_labels={history.REVISION_HASH: revision_name, POD_NAME_LABEL: name,
                                                        POD_INDEX_LABEL: str(ordinal)})
    spec = pod["spec"]
    spec["hostname"] = name
    if pc.spec(sts).get("serviceName"):
        spec["subdomain"] = pc.spec(sts)["serviceName"]
    claims = pc.spec(sts).get("volumeClaimTemplates") or []
    if claims:
        vols = {v.get("name"): v for v in spec.get("volumes") or []}
        for c in claims:
            cname = pc.meta(c).get("name", "")
            vols[cname] = {"name": cname, "persistentVolumeClaim": {
                "claimName": claim_name(c, pc.meta(sts)["name"], ordinal)}}
        spec["volumes"] = list(vols.values())
    return pod


def claim_for(sts: Obj, claim: Obj, ordinal: int) -> Obj:
    labels = {**(pc.meta(claim).get("labels") or {}), **((pc.spec(sts).get("selector") or {}).get("matchLabels") or {})}
    m: Obj = {"name": claim_name(claim, pc.meta(sts)["name"], ordinal), "namespace": pc.meta(sts).get("namespace", ""),
              "labels": labels}
    if pc.meta(claim).get("annotations"):
        m["annotations"] = dict(pc.meta(claim)["annotations"])
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": m,
            "spec": copy.deepcopy(claim.get("spec") or {})}


class StatefulSetController(Controller):
    name = "statefulset-controller"
    workers = 2

    def __init__(self, api: Api, *, workers: int | None = None) -> None:
        super().__init__(api, workers=workers)
        self.sets = self.informer("/apis/apps/v1/statefulsets")
        self.pods = self.informer("/api/v1/pods")
        self.revisions = self.informer("/apis/apps/v1/controllerrevisions")
        self.sets.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue)
        self.pods.add_handlers(on_add=self._pod_changed, on_update=lambda o, n: self._pod_changed(n),
                               on_delete=self._pod_changed)
        self._warned: set[str] = set()

    def _pod_changed(self, pod: Obj) -> None:
        ref = pc.controller_ref(pod)
        if ref is not None and ref.get("kind") == KIND:
            self.queue.add(f"{pc.meta(pod).get('namespace', '')}/{ref.get('name', '')}")
        elif ref is None:
            for sts in self.sets.items(pc.meta(pod).get("namespace", "")):
                if pc.selector_matches(pc.spec(sts).get("selector"), pod):
                    self.enqueue(sts)

    async def _claim(self, sts: Obj) -> list[Obj]:
        ns = pc.meta(sts).get("namespace", "")
        set_name = pc.meta(sts)["name"]
        owned = []
        for pod in self.pods.items(ns):
            if ordinal_of(set_name, pod) is None:  # isMemberOf: only <set>-<n> pods belong to a set
                continue
            d = pc.claim(sts, pod, pc.spec(sts).get("selector"))
            path = f"/api/v1/namespaces/{ns}/pods/{pc.meta(pod)['name']}"
            try:
                if d is pc.Claim.KEEP:
                    owned.append(pod)
                elif d is pc.Claim.ADOPT and pc.is_pod_active(pod):
                    owned.append(await self.api.patch(path, pc.adopt_patch(pod, pc.owner_ref(sts, "apps/v1", KIND)),
                                                      "strategic"))
                elif d is pc.Claim.RELEASE:
                    await self.api.patch(path, pc.release_patch(pod, str(pc.meta(sts).get("uid"))), "strategic")
            except ApiError as e:
                if e.status not in (404, 409, 422):
                    raise
        return owned

    async def _create(self, sts: Obj, pod: Obj, ordinal: int) -> None:
        ns = pc.meta(sts).get("namespace", "")
        for c in pc.spec(sts).get("volumeClaimTemplates") or []:
            try:
                await self.api.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim_for(sts, c, ordinal))
            except ApiError as e:
                if e.status != 409:
                    await self.recorder.event(sts, "Warning", "FailedCreate",
                                              f"create Claim {claim_name(c, pc.meta(sts)['name'], ordinal)} for Pod "
                                              f"{pc.meta(pod)['name']} in StatefulSet {pc.meta(sts)['name']} "
                                              f"failed error: {e.message}")
                    raise
        try:
            created = await self.api.create(f"/api/v1/namespaces/{ns}/pods", pod)
        except ApiError as e:
            if e.status == 409:
                return
            await self.recorder.event(sts, "Warning", "FailedCreate",
                                      f"create Pod {pc.meta(pod)['name']} in StatefulSet {pc.meta(sts)['name']} "
                                      f"failed error: {e.message}")
            raise
        self.pods.apply("ADDED", created)
        await self.recorder.event(sts, "Normal", "SuccessfulCreate",
                                  f"create Pod {pc.meta(pod)['name']} in StatefulSet {pc.meta(sts)['name']} successful")

    async def _delete(self, sts: Obj, pod: Obj) -> None:
        m = pc.meta(pod)
        try:
            await self.api.delete(f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                                  {"preconditions": {"uid": m.get("uid")}})
        except ApiError as e:
            if e.status in (404, 409):
                return
            raise
        await self.recorder.event(sts, "Normal", "SuccessfulDelete",
                                  f"delete Pod {m['name']} in StatefulSet {pc.meta(sts)['name']} successful")

    def _warn_unsupported(self, sts: Obj) -> list[str]:
        pol = pc.spec(sts).get("persistentVolumeClaimRetentionPolicy") or {}
        return [f"{k}={v}" for k, v in sorted(pol.items()) if v == "Delete"]

    async def reconcile(self, key: str) -> float | None:
        sts = self.sets.get(key)
        if sts is None:
            self._warned.discard(key)
            return None
        if pc.meta(sts).get("deletionTimestamp"):
            return None
        if (bad := self._warn_unsupported(sts)) and key not in self._warned:
            self._warned.add(key)
            await self.recorder.event(sts, "Warning", "UnsupportedPolicy",
                                      f"persistentVolumeClaimRetentionPolicy {', '.join(bad)} is not supported by "
                                      "this control plane: claims are retained")
        update_rev, _h = await history.ensure_revision(self.api, self.revisions, sts, KIND)
        revs = {pc.meta(r)["name"]: r for r in history.owned_revisions(self.revisions, sts)}
        update_name = pc.meta(update_rev)["name"]
        current_name = pc.status(sts).get("currentRevision") or update_name
        if current_name not in revs:
            current_name = update_name
        current_tmpl = history.template_of(revs[current_name]) if current_name != update_name \
            else pc.spec(sts).get("template") or {}
        update_tmpl = pc.spec(sts).get("template") or {}
        set_name = pc.meta(sts)["name"]
        pods = await self._claim(sts)
        by_ord: dict[int, Obj] = {}
        for p in pods:
            o = ordinal_of(set_name, p)
            if o is not None:
                by_ord[o] = p
        start = int((pc.spec(sts).get("ordinals") or {}).get("start") or 0)
        n = pc.replicas(sts)
        wanted = range(start, start + n)
        monotonic = pc.spec(sts).get("podManagementPolicy", "OrderedReady") != "Parallel"
        strategy = pc.spec(sts).get("updateStrategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        await self._act(sts, by_ord, wanted, monotonic, rolling, partition, current_name, current_tmpl,
                        update_name, update_tmpl)
        await self._status(sts, [self.pods.get(key_of(p)) or p for p in by_ord.values()], current_name, update_name)
        live = {(pc.meta(p).get("labels") or {}).get(history.REVISION_HASH) for p in pods}
        await history.truncate(self.api, self.revisions, sts, {current_name, update_name} | {x for x in live if x})
        return None

    async def _act(self, sts: Obj, by_ord: dict[int, Obj], wanted: range, monotonic: bool, rolling: bool,
                   partition: int, current_name: str, current_tmpl: Obj, update_name: str, update_tmpl: Obj) -> None:
        set_name = pc.meta(sts)["name"]
        for o in wanted:
            pod = by_ord.get(o)
            if pod is not None and pc.status(pod).get("phase") in ("Failed", "Succeeded") and \
                    not pc.meta(pod).get("deletionTimestamp"):
                await self._delete(sts, pod)
                if monotonic:
                    return
                continue
            if pod is None:
                use_current = rolling and o < partition
                tmpl, rev = (current_tmpl, current_name) if use_current else (update_tmpl, update_name)
                await self._create(sts, pod_for(sts, tmpl, rev, o), o)
                if monotonic:
                    return
                continue
            if monotonic and not healthy(pod):
                return
        # scale down: highest ordinal first
        condemned = sorted((o for o in by_ord if o not in wanted), reverse=True)
        for o in condemned:
            pod = by_ord[o]
            if pc.meta(pod).get("deletionTimestamp"):
                if monotonic:
                    return
                continue
            if monotonic and any(not healthy(by_ord[x]) for x in by_ord if x != o):
                return
            await self._delete(sts, pod)
            if monotonic:
                return
        if not rolling:
            return
        # rolling update: from the highest ordinal down to the partition, one pod at a time
        if any(not healthy(by_ord[o]) for o in wanted if o in by_ord):
            return
        for o in sorted((x for x in wanted if x >= partition), reverse=True):
            pod = by_ord.get(o)
            if pod is None:
                return
            if (pc.meta(pod).get("labels") or {}).get(history.REVISION_HASH) != update_name:
                log.debug("statefulset %s: replacing %s", set_name, pc.meta(pod)["name"])
                await self._delete(sts, pod)
                return

    async def _status(self, sts: Obj, pods: list[Obj], current_name: str, update_name: str) -> None:
        active = [p for p in pods if not pc.meta(p).get("deletionTimestamp")]
        min_ready = int(pc.spec(sts).get("minReadySeconds") or 0)
        now = datetime.now(UTC)

        def rev(p: Obj) -> str:
            return str((pc.meta(p).get("labels") or {}).get(history.REVISION_HASH) or "")
        n = pc.replicas(sts)
        updated = sum(1 for p in active if rev(p) == update_name)
        current = sum(1 for p in active if rev(p) == current_name)
        if updated == n and len(active) == n:  # completeRollingUpdate
            current_name, current = update_name, updated
        st: Obj = {"replicas": len(active), "observedGeneration": int(pc.meta(sts).get("generation") or 0),
                   "currentRevision": current_name, "updateRevision": update_name,
                   "collisionCount": int(pc.status(sts).get("collisionCount") or 0)}
        for k, v in (("readyReplicas", sum(1 for p in active if pc.is_pod_ready(p))),
                     ("currentReplicas", current), ("updatedReplicas", updated),
                     ("availableReplicas", sum(1 for p in active if pc.is_pod_available(p, min_ready, now)))):
            if v:
                st[k] = v
        if st == pc.status(sts):
            return
        m = pc.meta(sts)
        try:
            await self.api.replace(f"/apis/apps/v1/namespaces/{m['namespace']}/statefulsets/{m['name']}/status",
                                   {**sts, "status": st})
        except ApiError as e:
            if e.status != 404:
                raise
