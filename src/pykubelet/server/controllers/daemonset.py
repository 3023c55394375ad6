"""The DaemonSet controller (upstream ``pkg/controller/daemon``).

One pod per eligible node.  A node is eligible when the daemon pod would fit it by the same rules
the scheduler applies to the pod's own constraints (``nodeSelector``, required node affinity) and
the node's NoSchedule/NoExecute taints are tolerated by the pod's tolerations plus those upstream
adds to every daemon pod (``AddOrUpdateDaemonPodTolerations``): not-ready and unreachable
(NoExecute, no tolerationSeconds), disk-/memory-/pid-pressure and unschedulable (NoSchedule), and
network-unavailable for hostNetwork pods — so daemon pods also run on cordoned nodes.

Pods are not bound by the controller: as upstream since 1.12 they carry a required node affinity
``matchFields metadata.name In [<node>]`` (replacing any ``matchFields`` of the template's terms)
and go through the default scheduler.  Labels: the template's, ``controller-revision-hash`` (the
hash of the current ControllerRevision, :mod:`.history`) and ``pod-template-generation``.

``reconcile``: claim pods by selector; per node create the missing pod, delete extra pods (keep
the oldest), failed pods (re-created on the next pass, as upstream) and pods on nodes that are no
longer eligible or gone; ``RollingUpdate`` deletes pods of old revisions while at most
``maxUnavailable`` (of the desired number, rounded up) daemon pods are unavailable, unavailable old
pods first, or with ``maxSurge`` starts the new pod beside the old one and deletes the old one
once the new is available (``OnDelete`` waits for the user to delete them); the decisions are the
pure function :func:`plan`; then writes status
(desired/current/misscheduled/ready/available/unavailable/updated numbers, observedGeneration).
Events ``SuccessfulCreate`` / ``SuccessfulDelete`` / ``FailedCreate`` as upstream.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from datetime import UTC, datetime
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.common.tolerations import first_untolerated_taint
from pykubelet.server.apps import int_or_percent
from pykubelet.server.controllers import history
from pykubelet.server.controllers import podcontrol as pc
from pykubelet.server.controllers.kit import Api, Controller, Expectations, Obj, key_of
from pykubelet.server.scheduler import matches_node_affinity

log = logging.getLogger(__name__)

KIND = "DaemonSet"
TEMPLATE_GENERATION = "pod-template-generation"


def daemon_tolerations(spec: Obj) -> list[Obj]:
    tols = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    add = [("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
           ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
           ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule")]
    if spec.get("hostNetwork"):
        add.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    for key, effect in add:
        if not any(t.get("key") == key and t.get("effect") == effect and t.get("operator") == "Exists" for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": effect})
    return tols


def with_node_affinity(spec: Obj, node: str) -> Obj:
    """``ReplaceDaemonSetPodNodeNameNodeAffinity``."""
    spec = copy.deepcopy(spec)
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    aff = spec.setdefault("affinity", {}) or {}
    spec["affinity"] = aff
    na = aff.setdefault("nodeAffinity", {})
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [t for t in req.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    if not terms:
        terms = [{"matchFields": [field]}]
    else:
        terms = [{**t, "matchFields": [field]} for t in terms]
    na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return spec


def daemon_pod_spec(ds: Obj, node: str) -> Obj:
    spec = copy.deepcopy((pc.spec(ds).get("template") or {}).get("spec") or {})
    spec["tolerations"] = daemon_tolerations(spec)
    return with_node_affinity(spec, node)


def should_run(ds: Obj, node: Obj) -> bool:
    """``NodeShouldRunDaemonPod``: the pod's node selector/affinity fit and taints are tolerated."""
    name = pc.meta(node).get("name", "")
    pod = {"metadata": {}, "spec": daemon_pod_spec(ds, name)}
    if not matches_node_affinity(pod, node):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    return first_untolerated_taint(taints, pod["spec"]["tolerations"], ("NoSchedule", "NoExecute")) is None


def node_of(pod: Obj) -> str:
    """The node a daemon pod is for: its nodeName, or its node-affinity target before scheduling."""
    if pc.spec(pod).get("nodeName"):
        return str(pc.spec(pod)["nodeName"])
    terms = ((((pc.spec(pod).get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(f.get("values") or []) == 1:
                return str(f["values"][0])
    return ""


def _hash(pod: Obj) -> str:
    return str((pc.meta(pod).get("labels") or {}).get(history.REVISION_HASH) or "")


def plan(ds: Obj, by_node: dict[str, list[Obj]], eligible: set[str], h: str,
         now: datetime) -> tuple[list[str], list[Obj]]:
    """Nodes to create a daemon pod on and pods to delete (``manage`` + ``rollingUpdate``).

    Per eligible node: failed pods go (a new one comes next pass); no pod: create; more than one
    pod of a revision: keep the oldest.  Nodes no longer eligible lose their pods.  RollingUpdate
    with ``maxSurge`` 0 deletes old-revision pods while at most ``maxUnavailable`` nodes lack an
    available daemon pod (unavailable old pods first, those cost nothing); with ``maxSurge`` > 0
    it starts the new pod next to an available old one on up to ``maxSurge`` nodes at a time and
    deletes the old pod once the new one is available (upstream's surge path).
    """
    min_ready = int(pc.spec(ds).get("minReadySeconds") or 0)
    creates: list[str] = []
    deletes: list[Obj] = []
    live: dict[str, tuple[list[Obj], list[Obj]]] = {}  # node -> (new pods, old pods), oldest first
    for name in sorted(eligible):
        mine = sorted(by_node.get(name, []), key=lambda p: str(pc.meta(p).get("creationTimestamp") or ""))
        failed = [p for p in mine if pc.status(p).get("phase") == "Failed"]
        deletes += failed
        mine = [p for p in mine if p not in failed]
        new = [p for p in mine if _hash(p) == h]
        old = [p for p in mine if _hash(p) != h]
        deletes += new[1:] + old[1:]
        live[name] = (new[:1], old[:1])
        if not mine and not failed:
            creates.append(name)
    for name, ps in by_node.items():
        if name not in eligible:
            deletes += ps
    st = pc.spec(ds).get("updateStrategy") or {}
    if st.get("type", "RollingUpdate") != "RollingUpdate":
        return creates, deletes
    ru = st.get("rollingUpdate") or {}
    n = len(eligible)
    surge = int_or_percent(ru.get("maxSurge", 0), n, True)
    max_unavailable = int_or_percent(ru.get("maxUnavailable", 1), n, True)

    def available(p: Obj) -> bool:
        return pc.is_pod_available(p, min_ready, now)

    if surge > 0:
        surging = sum(1 for new, old in live.values() if new and old)
        for name, (new, old) in live.items():
            if not old:
                continue
            if new:
                if available(new[0]):
                    deletes += old
            elif not available(old[0]):
                deletes += old
            elif surging < surge:
                creates.append(name)
                surging += 1
        return creates, deletes
    if creates:
        return creates, deletes
    unavailable = sum(1 for new, old in live.values() if not any(available(p) for p in new + old))
    budget = max(max_unavailable, 1) if eligible else 0
    candidates = sorted(((name, old[0]) for name, (new, old) in live.items() if old and not new),
                        key=lambda np: available(np[1]))  # unavailable first
    for _, p in candidates:
        if not available(p):
            deletes.append(p)
        elif unavailable < budget:
            deletes.append(p)
            unavailable += 1
    return creates, deletes


class DaemonSetController(Controller):
    name = "daemonset-controller"
    workers = 2

    def __init__(self, api: Api, *, workers: int | None = None) -> None:
        super().__init__(api, workers=workers)
        self.sets = self.informer("/apis/apps/v1/daemonsets")
        self.pods = self.informer("/api/v1/pods")
        self.nodes = self.informer("/api/v1/nodes")
        self.revisions = self.informer("/apis/apps/v1/controllerrevisions")
        self.expectations = Expectations()
        self.sets.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue)
        self.pods.add_handlers(on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted)
        self.nodes.add_handlers(on_add=self._all, on_update=self._node_updated, on_delete=self._all)

    def _all(self, _obj: Obj) -> None:
        for ds in self.sets.items():
            self.enqueue(ds)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        def shape(n: Obj) -> Any:
            return (pc.meta(n).get("labels"), (n.get("spec") or {}).get("taints"),
                    (n.get("spec") or {}).get("unschedulable"))
        if shape(old) != shape(new):
            self._all(new)

    def _owner_key(self, pod: Obj) -> str | None:
        ref = pc.controller_ref(pod)
        if ref is None or ref.get("kind") != KIND:
            return None
        key = f"{pc.meta(pod).get('namespace', '')}/{ref.get('name', '')}"
        ds = self.sets.get(key)
        return key if ds is not None and pc.meta(ds).get("uid") == ref.get("uid") else None

    def _pod_added(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key:
            self.expectations.creation_observed(key)
            self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        key = self._owner_key(new) or self._owner_key(old)
        if key:
            if pc.meta(new).get("deletionTimestamp") and not pc.meta(old).get("deletionTimestamp"):
                self.expectations.deletion_observed(key)
            self.queue.add(key)
        elif pc.controller_ref(new) is None:
            for ds in self.sets.items(pc.meta(new).get("namespace", "")):
                if pc.selector_matches(pc.spec(ds).get("selector"), new):
                    self.enqueue(ds)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key:
            if not pc.meta(pod).get("deletionTimestamp"):
                self.expectations.deletion_observed(key)
            self.queue.add(key)

    async def _claim(self, ds: Obj) -> list[Obj]:
        ns = pc.meta(ds).get("namespace", "")
        owned = []
        for pod in self.pods.items(ns):
            d = pc.claim(ds, pod, pc.spec(ds).get("selector"))
            path = f"/api/v1/namespaces/{ns}/pods/{pc.meta(pod)['name']}"
            try:
                if d is pc.Claim.KEEP:
                    owned.append(pod)
                elif d is pc.Claim.ADOPT and pc.is_pod_active(pod):
                    owned.append(await self.api.patch(path, pc.adopt_patch(pod, pc.owner_ref(ds, "apps/v1", KIND)),
                                                      "strategic"))
                elif d is pc.Claim.RELEASE:
                    await self.api.patch(path, pc.release_patch(pod, str(pc.meta(ds).get("uid"))), "strategic")
            except ApiError as e:
                if e.status not in (404, 409, 422):
                    raise
        return owned

    async def _create(self, ds: Obj, node: str, h: str) -> None:
        ns = pc.meta(ds).get("namespace", "")
        tmpl = copy.deepcopy(pc.spec(ds).get("template") or {})
        tmpl["spec"] = daemon_pod_spec(ds, node)
        pod = pc.pod_from_template(tmpl, ns, pc.owner_ref(ds, "apps/v1", KIND),
                                   generate_name=f"{pc.meta(ds)['name']}-",
                                   extra_labels={history.REVISION_HASH: h,
                                                 TEMPLATE_GENERATION: str(pc.meta(ds).get("generation") or 1)})
        try:
            created = await self.api.create(f"/api/v1/namespaces/{ns}/pods", pod)
        except ApiError as e:
            self.expectations.creation_observed(key_of(ds))
            if not (e.status == 403 and "being terminated" in e.message):
                await self.recorder.event(ds, "Warning", "FailedCreate", f"Error creating: {e.message}")
            raise
        await self.recorder.event(ds, "Normal", "SuccessfulCreate", f"Created pod: {pc.meta(created)['name']}")

    async def _delete(self, ds: Obj, pod: Obj) -> None:
        m = pc.meta(pod)
        try:
            await self.api.delete(f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                                  {"preconditions": {"uid": m.get("uid")}})
        except ApiError as e:
            self.expectations.deletion_observed(key_of(ds))
            if e.status in (404, 409):
                return
            raise
        await self.recorder.event(ds, "Normal", "SuccessfulDelete", f"Deleted pod: {m['name']}")

    async def reconcile(self, key: str) -> float | None:
        ds = self.sets.get(key)
        if ds is None:
            self.expectations.delete(key)
            return None
        if pc.meta(ds).get("deletionTimestamp"):
            return None
        rev, h = await history.ensure_revision(self.api, self.revisions, ds, KIND)
        pods = await self._claim(ds)
        by_node: dict[str, list[Obj]] = {}
        for p in pods:
            if not pc.meta(p).get("deletionTimestamp"):
                by_node.setdefault(node_of(p), []).append(p)
        nodes = {pc.meta(n)["name"]: n for n in self.nodes.items()}
        eligible = {name for name, n in nodes.items() if should_run(ds, n)}
        now = datetime.now(UTC)
        min_ready = int(pc.spec(ds).get("minReadySeconds") or 0)
        creates, deletes = plan(ds, by_node, eligible, h, now)
        if self.expectations.satisfied(key) and (creates or deletes):
            self.expectations.expect(key, adds=len(creates), dels=len(deletes))
            results = await asyncio.gather(*(self._create(ds, n, h) for n in creates),
                                           *(self._delete(ds, p) for p in deletes), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        await self._status(ds, by_node, eligible, h, now, min_ready)
        live = {(pc.meta(p).get("labels") or {}).get(history.REVISION_HASH) for p in pods}
        await history.truncate(self.api, self.revisions, ds,
                               {pc.meta(rev)["name"]} | {f"{pc.meta(ds)['name']}-{x}" for x in live if x})
        waits = [w for ps in by_node.values() for p in ps if (w := pc.available_in(p, min_ready, now)) is not None]
        return min(waits) + 0.05 if waits else None

    async def _status(self, ds: Obj, by_node: dict[str, list[Obj]], eligible: set[str], h: str, now: datetime,
                      min_ready: int) -> None:
        current = sum(1 for n in eligible if by_node.get(n))
        mis = sum(1 for n, ps in by_node.items() if n not in eligible and ps)
        ready = sum(1 for n in eligible if any(pc.is_pod_ready(p) for p in by_node.get(n, [])))
        available = sum(1 for n in eligible if any(pc.is_pod_available(p, min_ready, now) for p in by_node.get(n, [])))
        updated = sum(1 for n in eligible if any((pc.meta(p).get("labels") or {}).get(history.REVISION_HASH) == h
                                                 for p in by_node.get(n, [])))
        st: Obj = {"currentNumberScheduled": current, "numberMisscheduled": mis,
                   "desiredNumberScheduled": len(eligible), "numberReady": ready,
                   "observedGeneration": int(pc.meta(ds).get("generation") or 0)}
        if updated:
            st["updatedNumberScheduled"] = updated
        if available:
            st["numberAvailable"] = available
        if len(eligible) - available:
            st["numberUnavailable"] = len(eligible) - available
        if pc.status(ds).get("collisionCount"):
            st["collisionCount"] = pc.status(ds)["collisionCount"]
        if st == pc.status(ds):
            return
        m = pc.meta(ds)
        try:
            await self.api.replace(f"/apis/apps/v1/namespaces/{m['namespace']}/daemonsets/{m['name']}/status",
                                   {**ds, "status": st})
        except ApiError as e:
            if e.status != 404:
                raise
