"""The Job controller (``pkg/controller/job``), with the TTL-after-finished controller folded in.

Level-triggered on the kit: a Job's key is looked at when the Job or one of its pods (found by the
controller ownerReference) changes.  :func:`plan` is the pure decision, from the Job, its pods and
the clock; :class:`JobController` carries it out over the API.

What it follows from upstream:

- **Pods**: created from the template with ``generateName: <job>-`` (``<job>-<index>-`` and
  ``hostname <job>-<index>`` in Indexed mode), a controller ownerReference with
  ``blockOwnerDeletion``, and the ``batch.kubernetes.io/job-tracking`` finalizer; Indexed pods carry
  the index as the ``batch.kubernetes.io/job-completion-index`` annotation and label, and every
  container gets ``JOB_COMPLETION_INDEX`` from that annotation through the downward API.  Active pods
  are kept at ``min(parallelism, remaining completions)`` (lowest pending indexes first); creations
  are counted with expectations so a lagging watch never doubles them.
- **Tracking with finalizers**: a finished pod is first recorded in
  ``status.uncountedTerminatedPods``, then its finalizer removed, then it moves into
  ``succeeded``/``failed`` (and ``completedIndexes``), so no pod is counted twice or lost, even if it
  is deleted meanwhile.
- **Failures**: a failed pod is matched against ``podFailurePolicy`` rules in order (``FailJob`` ends
  the Job with reason PodFailurePolicy, ``Ignore`` does not count it, ``Count`` does); more counted
  failures than ``backoffLimit`` (with restartPolicy OnFailure: plus the active pods' container
  restarts) ends it with reason BackoffLimitExceeded, "Job has reached the specified backoff limit";
  a replacement pod waits the pod-failure back-off, 10 s doubling per failure up to 6 min.
  ``activeDeadlineSeconds`` past ``startTime`` ends it with DeadlineExceeded.
- **Conditions** as upstream since 1.31: first ``FailureTarget`` / ``SuccessCriteriaMet`` (same
  reason and message), active pods deleted, and once no pod is left terminating, ``Failed`` /
  ``Complete`` (reason CompletionsReached, "Reached expected number of succeeded pods") and
  ``completionTime``; ``Suspended`` (JobSuspended / JobResumed) with ``spec.suspend``.
- **TTL after finished**: ``ttlSecondsAfterFinished`` after the finish time the Job is deleted with
  foreground propagation (as the ttlafterfinished controller does), so its pods go first.

Not implemented, said by a Warning event on the Job: ``backoffLimitPerIndex``/``maxFailedIndexes``
and ``successPolicy`` (the Job otherwise runs with the plain rules).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit

log = logging.getLogger(__name__)
Obj = dict[str, Any]

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
BACKOFF_BASE = 10.0
BACKOFF_MAX = 360.0
MSG_BACKOFF = "Job has reached the specified backoff limit"
MSG_DEADLINE = "Job was active longer than specified deadline"
MSG_COMPLETE = "Reached expected number of succeeded pods"


def _t(s: Any) -> dt.datetime | None:
    if not s:
        return None
    try:
        return dt.datetime.strptime(str(s)[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def has_condition(job: Obj, typ: str) -> bool:
    return any(c.get("type") == typ and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def finished(job: Obj) -> bool:
    return has_condition(job, "Complete") or has_condition(job, "Failed")


def pod_index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    v = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) or (meta.get("labels") or {}).get(INDEX_LABEL)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def parse_indexes(s: str | None) -> set[int]:
    out: set[int] = set()
    for part in (s or "").split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        try:
            out.update(range(int(a), int(b or a) + 1))
        except ValueError:
            continue
    return out


def format_indexes(idx: set[int]) -> str:
    """Upstream's compressed interval list: ``1,3-5,7``."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(idx):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) and pod_phase(pod) not in ("Succeeded", "Failed")


def is_active(pod: Obj) -> bool:
    return pod_phase(pod) not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def has_finalizer(pod: Obj) -> bool:
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def _finish_time(pod: Obj) -> dt.datetime | None:
    best: dt.datetime | None = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        t = _t(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if t is not None and (best is None or t > best):
            best = t
    return best


# ------------------------------------------------------------------ pod failure policy
def match_pod_failure_policy(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """(action, message) of the first matching rule, or None (count the failure)."""
    pfp = (job.get("spec") or {}).get("podFailurePolicy")
    if not pfp:
        return None
    meta = pod.get("metadata") or {}
    statuses = [*((pod.get("status") or {}).get("initContainerStatuses") or []),
                *((pod.get("status") or {}).get("containerStatuses") or [])]
    for i, rule in enumerate(pfp.get("rules") or []):
        action = str(rule.get("action", ""))
        codes = rule.get("onExitCodes")
        if codes:
            want = {int(v) for v in codes.get("values") or []}
            for cs in statuses:
                if codes.get("containerName") and cs.get("name") != codes["containerName"]:
                    continue
                term = (cs.get("state") or {}).get("terminated") or {}
                code = term.get("exitCode")
                if code is None or code == 0:
                    continue
                hit = code in want if codes.get("operator") == "In" else code not in want
                if hit:
                    return action, (f"Container {cs.get('name')} for pod {meta.get('namespace')}/{meta.get('name')} "
                                    f"failed with exit code {code} matching {action} rule at index {i}")
        for pc in rule.get("onPodConditions") or []:
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c.get("type") == pc.get("type") and c.get("status") == pc.get("status", "True"):
                    return action, (f"Pod {meta.get('namespace')}/{meta.get('name')} has condition {c.get('type')} "
                                    f"matching {action} rule at index {i}")
    return None


# ------------------------------------------------------------------ plan
@dataclass
class Plan:
    status: Obj
    create_indexes: list[int | None] = field(default_factory=list)  # None: a NonIndexed pod
    create_after: float = 0.0  # seconds to wait before creating (pod failure back-off)
    record_succeeded: list[str] = field(default_factory=list)  # uids newly put in uncountedTerminatedPods
    record_failed: list[str] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)
    remove_finalizers: list[Obj] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    requeue: float | None = None


def _cond(typ: str, reason: str, message: str, now: dt.datetime, status: str = "True") -> Obj:
    return {"type": typ, "status": status, "lastProbeTime": _ts(now), "lastTransitionTime": _ts(now),
            "reason": reason, "message": message}


def _set_cond(st: Obj, cond: Obj) -> bool:
    conds = st.setdefault("conditions", [])
    for c in conds:
        if c.get("type") == cond["type"]:
            if c.get("status") == cond["status"] and c.get("reason") == cond["reason"]:
                return False
            c.update(cond)
            return True
    conds.append(cond)
    return True


def backoff_delay(failures: int) -> float:
    if failures <= 0:
        return 0.0
    return min(BACKOFF_BASE * 2 ** (failures - 1), BACKOFF_MAX)


def plan(job: Obj, pods: list[Obj], now: dt.datetime, *, last_failure: dt.datetime | None = None) -> Plan:
    """What to do for ``job`` with its ``pods`` at ``now`` (pure)."""
    spec = job.get("spec") or {}
    st = copy.deepcopy(job.get("status") or {})
    p = Plan(status=st)
    indexed = spec.get("completionMode") == "Indexed"
    completions = spec.get("completions")
    parallelism = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
    backoff_limit = int(spec["backoffLimit"]) if spec.get("backoffLimit") is not None else 6
    uncounted = st.setdefault("uncountedTerminatedPods", {})
    unc_s: list[str] = list(uncounted.get("succeeded") or [])
    unc_f: list[str] = list(uncounted.get("failed") or [])
    done_idx = parse_indexes(st.get("completedIndexes"))
    fail_reason: tuple[str, str] | None = None
    if has_condition(job, "FailureTarget"):
        c = next(c for c in st.get("conditions") or [] if c.get("type") == "FailureTarget")
        fail_reason = (str(c.get("reason", "")), str(c.get("message", "")))

    # 1. finished pods still carrying the finalizer: record them as uncounted, then release them
    by_uid = {str(pp["metadata"].get("uid")): pp for pp in pods}
    only_failed = spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))
    for pod in pods:
        uid = str(pod["metadata"].get("uid"))
        if not has_finalizer(pod) or uid in unc_s or uid in unc_f:
            continue
        phase = pod_phase(pod)
        if phase == "Succeeded":
            idx = pod_index(pod)
            if indexed and (idx is None or idx in done_idx or completions is None or idx >= int(completions)):
                p.remove_finalizers.append(pod)  # a duplicate or stray index: released, not counted
                continue
            unc_s.append(uid)
            p.record_succeeded.append(uid)
            continue
        # upstream isPodFailed: Failed, or (unless only failed pods are replaced) deleted before success
        if not (phase == "Failed" or (pod["metadata"].get("deletionTimestamp") and not only_failed)):
            continue
        verdict = match_pod_failure_policy(job, pod) if phase == "Failed" else None
        if verdict is not None and verdict[0] == "Ignore":
            p.remove_finalizers.append(pod)
            continue
        if verdict is not None and verdict[0] == "FailJob" and fail_reason is None:
            fail_reason = ("PodFailurePolicy", verdict[1])
        unc_f.append(uid)
        p.record_failed.append(uid)
    for uid in unc_s + unc_f:
        rec = by_uid.get(uid)
        if rec is not None and has_finalizer(rec) and rec not in p.remove_finalizers:
            p.remove_finalizers.append(rec)

    # counters as they will be once the finalizers are gone (upstream moves them in the same sync)
    succeeded = int(st.get("succeeded") or 0)
    failed = int(st.get("failed") or 0)
    for uid in list(unc_s):
        done_pod = by_uid.get(uid)
        succeeded += 1
        idx = pod_index(done_pod) if done_pod is not None else None
        if indexed and idx is not None:
            done_idx.add(idx)
    failed += len(unc_f)
    uncounted["succeeded"], uncounted["failed"] = [], []
    st["succeeded"], st["failed"] = succeeded, failed
    if indexed:
        st["completedIndexes"] = format_indexes(done_idx)
        if indexed and completions is not None:
            succeeded = len(done_idx)
            st["succeeded"] = succeeded

    active = [pp for pp in pods if is_active(pp)]
    terminating = [pp for pp in pods if is_terminating(pp)]
    st["active"] = len(active)
    st["ready"] = sum(1 for pp in active if is_ready(pp))
    st["terminating"] = len(terminating)

    # 2. suspended
    if spec.get("suspend"):
        if _set_cond(st, _cond("Suspended", "JobSuspended", "Job suspended", now)):
            p.events.append(("Normal", "Suspended", "Job suspended"))
        p.delete += active
        if not finished(job):
            st.pop("startTime", None)
        _finish_status(st)
        return p
    if has_condition(job, "Suspended"):
        _set_cond(st, _cond("Suspended", "JobResumed", "Job resumed", now, status="False"))
        st["startTime"] = _ts(now)
        p.events.append(("Normal", "Resumed", "Job resumed"))
    if not st.get("startTime"):
        st["startTime"] = _ts(now)
    start = _t(st.get("startTime")) or now

    # 3. failure: FailJob rule, backoff limit, active deadline
    if fail_reason is None:
        restarts = 0
        if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure":
            restarts = sum(int(cs.get("restartCount") or 0) for pp in active
                           for cs in (pp.get("status") or {}).get("containerStatuses") or [])
        if failed + restarts > backoff_limit:
            fail_reason = ("BackoffLimitExceeded", MSG_BACKOFF)
    ads = spec.get("activeDeadlineSeconds")
    if fail_reason is None and ads is not None and now >= start + dt.timedelta(seconds=int(ads)):
        fail_reason = ("DeadlineExceeded", MSG_DEADLINE)
    if fail_reason is not None:
        if _set_cond(st, _cond("FailureTarget", *fail_reason, now)):
            p.events.append(("Warning", fail_reason[0], fail_reason[1]))
        p.delete += active
        if not active and not terminating and not any(has_finalizer(pp) for pp in pods
                                                        if pp not in p.remove_finalizers):
            _set_cond(st, _cond("Failed", *fail_reason, now))
        _finish_status(st)
        return p
    if ads is not None:
        p.requeue = max((start + dt.timedelta(seconds=int(ads)) - now).total_seconds(), 0.0) + 0.5

    # 4. success
    if indexed:
        complete = completions is not None and len(done_idx) >= int(completions)
    elif completions is not None:
        complete = succeeded >= int(completions)
    else:
        complete = succeeded > 0 and not active
    if complete or has_condition(job, "SuccessCriteriaMet"):
        _set_cond(st, _cond("SuccessCriteriaMet", "CompletionsReached", MSG_COMPLETE, now))
        p.delete += active
        if not active and not terminating:
            _set_cond(st, _cond("Complete", "CompletionsReached", MSG_COMPLETE, now))
            st["completionTime"] = _ts(now)
            p.events.append(("Normal", "Completed", "Job completed"))
        _finish_status(st)
        return p

    # 5. keep the right number of active pods
    if indexed:
        active_idx = {pod_index(pp) for pp in active}
        pending = [i for i in range(int(completions or 0)) if i not in done_idx and i not in active_idx]
        want_new = max(min(parallelism - len(active), len(pending)), 0)
        p.create_indexes = list(pending[:want_new])
        dup: dict[int | None, list[Obj]] = {}
        for pp in active:
            dup.setdefault(pod_index(pp), []).append(pp)
        for idx, same in dup.items():
            if idx is None or idx in done_idx or len(same) > 1:
                p.delete += same if idx is None or idx in done_idx else same[1:]
    else:
        if completions is not None:
            want = min(parallelism, max(int(completions) - succeeded, 0))
        else:
            want = parallelism if succeeded == 0 else len(active)
        if want > len(active):
            p.create_indexes = [None] * (want - len(active))
        elif want < len(active):
            ranked = sorted(active, key=lambda pp: (pod_phase(pp) == "Running", is_ready(pp)))
            p.delete += ranked[: len(active) - want]
    if p.create_indexes and failed > 0 and last_failure is not None:
        wait = (last_failure + dt.timedelta(seconds=backoff_delay(failed)) - now).total_seconds()
        if wait > 0:
            p.create_after = wait
            p.requeue = min(p.requeue or wait, wait)
    _finish_status(st)
    return p


def _finish_status(st: Obj) -> None:
    unc = st.get("uncountedTerminatedPods") or {}
    if not unc.get("succeeded") and not unc.get("failed"):
        st["uncountedTerminatedPods"] = {}
    for k in ("active", "ready", "terminating", "succeeded", "failed"):
        if st.get(k) == 0 and k not in ("ready", "terminating"):
            st.pop(k, None)
    if not st.get("conditions"):
        st.pop("conditions", None)


def ttl_expiry(job: Obj) -> dt.datetime | None:
    """When a finished Job with ``ttlSecondsAfterFinished`` is due for deletion."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if ttl is None or not finished(job):
        return None
    st = job.get("status") or {}
    done = _t(st.get("completionTime"))
    if done is None:
        for c in st.get("conditions") or []:
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
                done = _t(c.get("lastTransitionTime"))
    if done is None:
        return None
    return done + dt.timedelta(seconds=int(ttl))


def pod_from_template(job: Obj, index: int | None) -> Obj:
    """A pod of ``job`` (``index`` in Indexed mode), as upstream's pod control builds it."""
    meta = job["metadata"]
    tmpl = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmeta = tmpl.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    spec = tmpl.get("spec") or {}
    name = str(meta["name"])
    generate = f"{name}-"
    if index is not None:
        annotations[INDEX_ANNOTATION] = str(index)
        labels[INDEX_LABEL] = str(index)
        generate = f"{name}-{index}-"
        spec["hostname"] = f"{name}-{index}"
        env = {"name": "JOB_COMPLETION_INDEX",
               "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}}
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
                    c.setdefault("env", []).append(dict(env))
    pod_meta: Obj = {"generateName": generate, "namespace": meta.get("namespace"), "labels": labels,
                     "finalizers": [TRACKING_FINALIZER],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]}
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _controller_job(pod: Obj) -> str | None:
    meta = pod.get("metadata") or {}
    for r in meta.get("ownerReferences") or []:
        if r.get("controller") and r.get("kind") == "Job" and str(r.get("apiVersion", "")).startswith("batch/"):
            return f"{meta.get('namespace')}/{r.get('name')}"
    return None


class JobController(kit.Controller):
    name = "job-controller"
    workers = 4

    def __init__(self, api: kit.Api, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(api)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.jobs = self.informer("/apis/batch/v1/jobs")
        self.pods = self.informer("/api/v1/pods")
        self.expectations = kit.Expectations()
        self._last_failure: dict[str, dt.datetime] = {}
        self._warned: set[str] = set()
        self.jobs.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue)
        self.pods.add_handlers(on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted)

    @classmethod
    def from_options(cls, api: kit.Api, options: dict[str, Any]) -> JobController:
        return cls(api, clock=options.get("job_clock"))

    def _pod_added(self, pod: Obj) -> None:
        key = _controller_job(pod)
        if key:
            self.expectations.creation_observed(key)
            self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        key = _controller_job(new) or _controller_job(old)
        if key:
            # as upstream's updatePod: a pod that starts terminating counts as an observed deletion
            if new["metadata"].get("deletionTimestamp") and not old["metadata"].get("deletionTimestamp"):
                self.expectations.deletion_observed(key)
            self.queue.add(key)

    def _pod_deleted(self, pod: Obj) -> None:
        key = _controller_job(pod)
        if key:
            if not pod["metadata"].get("deletionTimestamp"):
                self.expectations.deletion_observed(key)
            self.queue.add(key)

    def _pods_of(self, job: Obj) -> list[Obj]:
        uid = job["metadata"].get("uid")
        ns = job["metadata"].get("namespace")
        return [pp for pp in self.pods.items(ns)
                if any(r.get("controller") and r.get("uid") == uid
                       for r in (pp.get("metadata") or {}).get("ownerReferences") or [])]

    async def reconcile(self, key: str) -> float | None:
        job = self.jobs.get(key)
        if job is None:
            self.expectations.delete(key)
            return None
        ns, name = kit.split_key(key)
        pods = self._pods_of(job)
        now = self.clock()
        if job["metadata"].get("deletionTimestamp"):
            for pp in pods:
                await self._release(pp)
            return None
        if finished(job):
            for pp in pods:
                if has_finalizer(pp):
                    await self._release(pp)
            expiry = ttl_expiry(job)
            if expiry is None:
                return None
            if now < expiry:
                return (expiry - now).total_seconds()
            log.info("job %s: ttlSecondsAfterFinished passed; deleting it", key)
            try:
                await self.api.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}", {
                    "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground",
                    "preconditions": {"uid": job["metadata"]["uid"],
                                      "resourceVersion": job["metadata"].get("resourceVersion")}})
            except ApiError as e:
                if e.status not in (404, 409):
                    raise
            return None
        await self._warn_unsupported(job)
        if not self.expectations.satisfied(key):
            return None  # our creations/deletions are not all observed yet; their events requeue us
        # the pod failure back-off counts from the newest failure seen (its container's finish time)
        uid = str(job["metadata"]["uid"])
        for pp in pods:
            if pod_phase(pp) == "Failed" and has_finalizer(pp):
                t = _finish_time(pp) or now
                if uid not in self._last_failure or t > self._last_failure[uid]:
                    self._last_failure[uid] = t
        p = plan(job, pods, now, last_failure=self._last_failure.get(uid))
        # record, release, then count (the uncounted list is written before finalizers go)
        if p.record_succeeded or p.record_failed:
            recorded = copy.deepcopy(job.get("status") or {})
            unc = recorded.setdefault("uncountedTerminatedPods", {})
            unc["succeeded"] = [*(unc.get("succeeded") or []), *p.record_succeeded]
            unc["failed"] = [*(unc.get("failed") or []), *p.record_failed]
            job = await self._write_status(ns, name, job, recorded)
        for pp in p.remove_finalizers:
            await self._release(pp)
        if p.status != (job.get("status") or {}):
            job = await self._write_status(ns, name, job, p.status)
        for etype, reason, msg in p.events:
            await self.recorder.event(job, etype, reason, msg)
        for pp in p.delete:
            await self._delete_pod(key, pp)
        if p.create_indexes and p.create_after <= 0:
            await self._create_pods(key, job, p.create_indexes)
        return p.requeue

    async def _warn_unsupported(self, job: Obj) -> None:
        spec = job.get("spec") or {}
        uid = str(job["metadata"].get("uid"))
        unsupported = [f for f in ("backoffLimitPerIndex", "maxFailedIndexes", "successPolicy")
                       if spec.get(f) is not None]
        if unsupported and uid not in self._warned:
            self._warned.add(uid)
            await self.recorder.event(job, "Warning", "UnsupportedField",
                                      f"spec.{', spec.'.join(unsupported)} not supported by this job controller; "
                                      "the Job runs with backoffLimit and completions only")

    async def _write_status(self, ns: str, name: str, job: Obj, status: Obj) -> Obj:
        body = copy.deepcopy(job)
        body["status"] = status
        out: Obj = await self.api.replace(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status", body)
        self.jobs.cache[f"{ns}/{name}"] = out  # our own write is the newest state
        return out

    async def _release(self, pod: Obj) -> None:
        meta = pod["metadata"]
        fins = [f for f in meta.get("finalizers") or [] if f != TRACKING_FINALIZER]
        try:
            await self.api.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                 {"metadata": {"finalizers": fins or None}}, "merge")
        except ApiError as e:
            if e.status != 404:
                raise

    async def _delete_pod(self, key: str, pod: Obj) -> None:
        meta = pod["metadata"]
        self.expectations.raise_expectations(key, dels=1)
        try:
            await self.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                  {"kind": "DeleteOptions", "apiVersion": "v1",
                                   "preconditions": {"uid": meta.get("uid")}})
        except ApiError as e:
            self.expectations.deletion_observed(key)
            if e.status not in (404, 409):
                raise
            return
        job = self.jobs.get(key)
        if job is not None:
            await self.recorder.event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    async def _create_pods(self, key: str, job: Obj, indexes: list[int | None]) -> None:
        ns = job["metadata"]["namespace"]
        self.expectations.raise_expectations(key, adds=len(indexes))
        for idx in indexes:
            try:
                created = await self.api.create(f"/api/v1/namespaces/{ns}/pods", pod_from_template(job, idx))
            except ApiError as e:
                self.expectations.creation_observed(key)
                await self.recorder.event(job, "Warning", "FailedCreate", f"Error creating: {e}")
                raise
            await self.recorder.event(job, "Normal", "SuccessfulCreate",
                                      f"Created pod: {created['metadata']['name']}")
