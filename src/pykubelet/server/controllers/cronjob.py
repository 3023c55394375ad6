"""The CronJob controller (``pkg/controller/cronjob/cronjob_controllerv2.go``).

Level-triggered on the kit: a CronJob's key is looked at when it or one of its Jobs changes, and
again at its next scheduled time (``reconcile`` returns the seconds until then).  Looking at it:

1. ``status.active`` is made to list exactly its unfinished Jobs (found by controller
   ownerReference); ``lastSuccessfulTime`` follows the newest Complete Job.
2. Unless suspended (or being deleted), the most recent scheduled time since ``lastScheduleTime``
   (or creation) is found with :func:`pykubelet.server.batchvalidation.next_schedule_times` in
   ``spec.timeZone`` (UTC without one); more than 100 missed times is reported as upstream
   (TooManyMissedTimes) and only the latest is considered.  A time older than
   ``startingDeadlineSeconds`` is missed (MissSchedule event), never started late.
3. ``concurrencyPolicy``: Allow starts alongside running Jobs, Forbid skips the run while one is
   active (JobAlreadyActive), Replace deletes the active ones (background propagation) first.
4. The Job is named ``<cronjob>-<scheduled time in minutes since the epoch>`` (so a restart never
   starts the same run twice), carries the template's labels and annotations plus
   ``batch.kubernetes.io/cronjob-scheduled-timestamp``, and a controller ownerReference;
   ``lastScheduleTime`` and ``active`` are written after it is created.
5. Finished Jobs beyond ``successfulJobsHistoryLimit`` / ``failedJobsHistoryLimit`` are deleted,
   oldest first (SawCompletedJob / SuccessfulDelete events).

:func:`decide` is the pure part (which scheduled time is due, what to do about concurrency) and
takes the clock as an argument; the controller's clock is injectable (``cronjob_clock`` controller
option) so tests can move time instead of waiting a minute.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server import batchvalidation
from pykubelet.server.controllers import kit

log = logging.getLogger(__name__)
Obj = dict[str, Any]

SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
MAX_MISSED = 100


def _t(s: Any) -> dt.datetime | None:
    if not s:
        return None
    try:
        return dt.datetime.strptime(str(s)[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _ts(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_finished(job: Obj) -> str | None:
    """"Complete"/"Failed" once the Job has that condition."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def job_name(cronjob_name: str, scheduled: dt.datetime) -> str:
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


class Verdict(Enum):
    WAIT = "wait"  # nothing due
    MISSED = "missed"  # due but past startingDeadlineSeconds
    SKIP_FORBID = "skip-forbid"
    START = "start"


@dataclass
class Decision:
    verdict: Verdict
    scheduled: dt.datetime | None = None
    next_run: dt.datetime | None = None
    too_many_missed: bool = False
    replace: bool = False  # delete the active Jobs first (Replace)


def decide(cj: Obj, active: int, now: dt.datetime) -> Decision:
    """What the CronJob should do at ``now`` with ``active`` unfinished Jobs (pure)."""
    spec = cj.get("spec") or {}
    st = cj.get("status") or {}
    schedule, tz = str(spec.get("schedule", "")), spec.get("timeZone")
    earliest = _t(st.get("lastScheduleTime")) or _t((cj.get("metadata") or {}).get("creationTimestamp")) or now
    sds = spec.get("startingDeadlineSeconds")
    if sds is not None:
        earliest = max(earliest, now - dt.timedelta(seconds=int(sds)))
    times = batchvalidation.next_schedule_times(schedule, tz, earliest, now, limit=MAX_MISSED + 1)
    next_run = batchvalidation.next_schedule_after(schedule, tz, now)
    if not times:
        return Decision(Verdict.WAIT, next_run=next_run)
    scheduled = times[-1]
    too_many = len(times) > MAX_MISSED
    if too_many:
        # more than 100 missed: only the most recent one matters
        scheduled = batchvalidation.last_schedule_at_or_before(schedule, tz, now)
    if sds is not None and scheduled < now - dt.timedelta(seconds=int(sds)):
        return Decision(Verdict.MISSED, scheduled, next_run, too_many)
    policy = spec.get("concurrencyPolicy") or "Allow"
    if policy == "Forbid" and active > 0:
        return Decision(Verdict.SKIP_FORBID, scheduled, next_run, too_many)
    return Decision(Verdict.START, scheduled, next_run, too_many, replace=policy == "Replace" and active > 0)


def job_from_template(cj: Obj, scheduled: dt.datetime) -> Obj:
    meta = cj["metadata"]
    tmpl = copy.deepcopy((cj.get("spec") or {}).get("jobTemplate") or {})
    tmeta = tmpl.get("metadata") or {}
    zone = batchvalidation.load_zone((cj.get("spec") or {}).get("timeZone"))
    annotations = dict(tmeta.get("annotations") or {})
    annotations[SCHEDULED_TIMESTAMP_ANNOTATION] = scheduled.astimezone(zone).isoformat().replace("+00:00", "Z")
    job_meta: Obj = {"name": job_name(str(meta["name"]), scheduled), "namespace": meta.get("namespace"),
                     "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]}
    if tmeta.get("labels"):
        job_meta["labels"] = dict(tmeta["labels"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": tmpl.get("spec") or {}}


def history_to_delete(jobs: list[Obj], successful_limit: int | None, failed_limit: int | None) -> list[Obj]:
    """Finished Jobs beyond the history limits, oldest first."""
    out: list[Obj] = []
    for kind, limit in (("Complete", successful_limit), ("Failed", failed_limit)):
        if limit is None:
            continue
        done = [j for j in jobs if job_finished(j) == kind]
        done.sort(key=lambda j: ((j.get("status") or {}).get("startTime") or j["metadata"].get("creationTimestamp")
                                 or "", j["metadata"]["name"]))
        out += done[: max(len(done) - int(limit), 0)]
    return out


def _ref(job: Obj) -> Obj:
    m = job["metadata"]
    return {"kind": "Job", "namespace": m.get("namespace"), "name": m["name"], "uid": m.get("uid"),
            "apiVersion": "batch/v1", "resourceVersion": m.get("resourceVersion")}


def _controller_cronjob(job: Obj) -> str | None:
    meta = job.get("metadata") or {}
    for r in meta.get("ownerReferences") or []:
        if r.get("controller") and r.get("kind") == "CronJob":
            return f"{meta.get('namespace')}/{r.get('name')}"
    return None


class CronJobController(kit.Controller):
    name = "cronjob-controller"

    def __init__(self, api: kit.Api, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(api)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.cronjobs = self.informer("/apis/batch/v1/cronjobs")
        self.jobs = self.informer("/apis/batch/v1/jobs")
        self.cronjobs.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n),
                                   on_delete=self.enqueue)

        def job_changed(job: Obj) -> None:
            key = _controller_cronjob(job)
            if key:
                self.queue.add(key)

        self.jobs.add_handlers(on_add=job_changed, on_update=lambda _o, n: job_changed(n), on_delete=job_changed)

    @classmethod
    def from_options(cls, api: kit.Api, options: dict[str, Any]) -> CronJobController:
        return cls(api, clock=options.get("cronjob_clock"))

    def _jobs_of(self, cj: Obj) -> list[Obj]:
        uid = cj["metadata"].get("uid")
        return [j for j in self.jobs.items(cj["metadata"].get("namespace"))
                if any(r.get("controller") and r.get("uid") == uid
                       for r in (j.get("metadata") or {}).get("ownerReferences") or [])]

    async def reconcile(self, key: str) -> float | None:
        cj = self.cronjobs.get(key)
        if cj is None:
            return None
        ns, name = kit.split_key(key)
        now = self.clock()
        jobs = self._jobs_of(cj)
        st = copy.deepcopy(cj.get("status") or {})
        running = [j for j in jobs if not job_finished(j) and not j["metadata"].get("deletionTimestamp")]
        st["active"] = [_ref(j) for j in sorted(running, key=lambda j: j["metadata"]["name"])] or None
        succeeded = [t for j in jobs if job_finished(j) == "Complete"
                     and (t := _t((j.get("status") or {}).get("completionTime"))) is not None]
        if succeeded:
            newest = max(succeeded)
            old = _t(st.get("lastSuccessfulTime"))
            if old is None or newest > old:
                st["lastSuccessfulTime"] = _ts(newest)
        for j in jobs:
            if job_finished(j) and any(r.get("uid") == j["metadata"].get("uid")
                                       for r in (cj.get("status") or {}).get("active") or []):
                await self.recorder.event(cj, "Normal", "SawCompletedJob",
                                          f"Saw completed job: {j['metadata']['name']}, condition: {job_finished(j)}")
        spec = cj.get("spec") or {}
        again: float | None = None
        if not cj["metadata"].get("deletionTimestamp") and not spec.get("suspend"):
            try:
                d = decide(cj, len(running), now)
            except (ValueError, KeyError) as e:  # an unparsable schedule stored before validation existed
                await self.recorder.event(cj, "Warning", "UnparseableSchedule",
                                          f"unparseable schedule: {spec.get('schedule')!r} : {e}")
                return None
            if d.too_many_missed:
                await self.recorder.event(cj, "Warning", "TooManyMissedTimes",
                                          "too many missed start times. Set or decrease .spec.startingDeadlineSeconds "
                                          "or check clock skew")
            if d.scheduled is not None and d.verdict in (Verdict.START, Verdict.SKIP_FORBID) and any(
                    j["metadata"]["name"] == job_name(name, d.scheduled) for j in jobs):
                # this run exists already (our status write was lost): only record it
                last = _t(st.get("lastScheduleTime"))
                if last is None or d.scheduled > last:
                    st["lastScheduleTime"] = _ts(d.scheduled)
            elif d.verdict is Verdict.MISSED and d.scheduled is not None:
                await self.recorder.event(cj, "Warning", "MissSchedule",
                                          f"Missed scheduled time to start a job: {_ts(d.scheduled)}")
            elif d.verdict is Verdict.SKIP_FORBID:
                await self.recorder.event(cj, "Normal", "JobAlreadyActive",
                                          "Not starting job because prior execution is running and concurrency "
                                          "policy is Forbid")
            elif d.verdict is Verdict.START and d.scheduled is not None:
                started = await self._start(cj, d, running, jobs)
                if started is not None:
                    st["active"] = [*(st.get("active") or []), _ref(started)]
                    st["lastScheduleTime"] = _ts(d.scheduled)
                    if d.replace:
                        st["active"] = [_ref(started)]
            if d.next_run is not None:
                again = max((d.next_run - now).total_seconds(), 0.0) + 0.1
        if st.get("active") is None:
            st.pop("active", None)
        if st != (cj.get("status") or {}):
            body = copy.deepcopy(cj)
            body["status"] = st
            out = await self.api.replace(f"/apis/batch/v1/namespaces/{ns}/cronjobs/{name}/status", body)
            self.cronjobs.cache[key] = out
        for j in history_to_delete(jobs, spec.get("successfulJobsHistoryLimit"), spec.get("failedJobsHistoryLimit")):
            await self._delete_job(cj, j)
        return again

    async def _start(self, cj: Obj, d: Decision, running: list[Obj], jobs: list[Obj]) -> Obj | None:
        assert d.scheduled is not None
        ns = cj["metadata"]["namespace"]
        want = job_name(cj["metadata"]["name"], d.scheduled)
        if any(j["metadata"]["name"] == want for j in jobs):
            return None  # this run was started already (the status write may have been lost)
        if d.replace:
            for j in running:
                await self._delete_job(cj, j)
        try:
            created: Obj = await self.api.create(f"/apis/batch/v1/namespaces/{ns}/jobs",
                                                 job_from_template(cj, d.scheduled))
        except ApiError as e:
            if e.status == 409:
                return None
            await self.recorder.event(cj, "Warning", "FailedCreate", f"Error creating job: {e}")
            raise
        await self.recorder.event(cj, "Normal", "SuccessfulCreate", f"Created job {want}")
        return created

    async def _delete_job(self, cj: Obj, job: Obj) -> None:
        m = job["metadata"]
        try:
            await self.api.delete(f"/apis/batch/v1/namespaces/{m['namespace']}/jobs/{m['name']}",
                                  {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
                                   "preconditions": {"uid": m.get("uid")}})
        except ApiError as e:
            if e.status not in (404, 409):
                raise
            return
        await self.recorder.event(cj, "Normal", "SuccessfulDelete", f"Deleted job {m['name']}")
