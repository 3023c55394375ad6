"""batch/v1 Job and CronJob: defaulting, selector generation, validation, and cron schedules.

What the API server does to a Job before storing it, as upstream (``pkg/apis/batch/v1/defaults.go``,
``pkg/registry/batch/job/strategy.go``, ``pkg/apis/batch/validation``):

- defaults: ``parallelism`` 1 (and ``completions`` 1 when neither is set), ``backoffLimit`` 6
  (``MaxInt32`` with ``backoffLimitPerIndex``), ``completionMode`` NonIndexed, ``suspend`` false,
  ``podReplacementPolicy`` TerminatingOrFailed (Failed with a ``podFailurePolicy``), and the Job's
  labels from its template's when it has none;
- ``PrepareForCreate`` generates the selector unless ``manualSelector: true``: the pod template
  gets ``batch.kubernetes.io/controller-uid``/``batch.kubernetes.io/job-name`` (and the legacy
  ``controller-uid``/``job-name``) and ``spec.selector`` matches the uid label, so two Jobs can
  never select each other's pods;
- validation with upstream's field paths and messages (restartPolicy OnFailure/Never, the
  selector must match the template labels, non-negative counts, Indexed needs completions...).

CronJob: defaults (``concurrencyPolicy`` Allow, ``suspend`` false, history limits 3 and 1) and
validation of ``schedule`` and ``timeZone``.  Schedules are the 5-field standard cron format plus
the ``@hourly``-style descriptors that upstream's ``robfig/cron`` ``ParseStandard`` accepts; they are
evaluated with ``croniter`` (a well-kept library: the same vixie-cron day-of-month/day-of-week OR
rule, time-zone aware with DST handled) in the CronJob's ``timeZone`` (``zoneinfo``), or in UTC as the
controller manager of a cluster runs.  ``@every`` is refused with a message naming it (this server
does not support it) rather than being misread.

Pure functions only: the registry calls them; the cronjob controller uses :func:`next_schedule_times`.
"""

from __future__ import annotations

import copy
import datetime as dt
import zoneinfo
from typing import Any

from croniter import croniter

from pykubelet.server.selectors import label_selector_matches

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]

MAX_INT32 = 2**31 - 1
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
CRONJOB_NAME_MAX = 52  # 63 - len("-") - 10 digits of the scheduled time in minutes

_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
                "@hourly": "0 * * * *"}


# ------------------------------------------------------------------ Job
def default_job(job: Obj) -> None:
    """``SetDefaults_Job`` (runs on every write, as upstream's decoding defaults)."""
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    pfp = spec.get("podFailurePolicy")
    if isinstance(pfp, dict):
        for rule in pfp.get("rules") or []:
            for p in (rule or {}).get("onPodConditions") or []:
                if isinstance(p, dict):
                    p.setdefault("status", "True")
    tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    meta = job.setdefault("metadata", {})
    if tmpl_labels and not meta.get("labels"):
        meta["labels"] = dict(tmpl_labels)


def generate_selector(job: Obj) -> None:
    """Job strategy ``generateSelector`` (create only; ``manualSelector: true`` keeps the user's)."""
    spec = job.setdefault("spec", {})
    if spec.get("manualSelector") is True:
        return
    meta = job.get("metadata") or {}
    uid, name = str(meta.get("uid", "")), str(meta.get("name", ""))
    tmpl = spec.setdefault("template", {})
    tmeta = tmpl.setdefault("metadata", {})
    labels = tmeta.get("labels") or {}
    labels.update({CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name,
                   LEGACY_CONTROLLER_UID_LABEL: uid, LEGACY_JOB_NAME_LABEL: name})
    tmeta["labels"] = labels
    spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}


def prepare_job_create(job: Obj) -> None:
    default_job(job)
    generate_selector(job)
    job["status"] = {}


def _nonneg(spec: Obj, key: str, path: str) -> FieldErrors:
    v = spec.get(key)
    if isinstance(v, int) and v < 0:
        return [(f"{path}.{key}", f"Invalid value: {v}: must be greater than or equal to 0")]
    return []


def _go_map(labels: dict[str, Any]) -> str:
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"


def validate_job_spec(spec: Any, path: str, *, generated_selector: bool = True) -> FieldErrors:
    """``ValidateJobSpec`` (+ the template checks of ``validateJobTemplateSpec``)."""
    errs: FieldErrors = []
    if not isinstance(spec, dict):
        return [(path, "Required value")]
    for k in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        errs += _nonneg(spec, k, path)
    ads = spec.get("activeDeadlineSeconds")
    if isinstance(ads, int) and ads == 0:
        errs.append((f"{path}.activeDeadlineSeconds", "Invalid value: 0: must be greater than 0"))
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        errs.append((f"{path}.completionMode", f'Unsupported value: "{mode}": supported values: "NonIndexed", '
                     '"Indexed"'))
    if mode == "Indexed":
        if spec.get("completions") is None:
            errs.append((f"{path}.completions", "Required value: when completion mode is Indexed"))
        elif isinstance(spec.get("completions"), int) and spec["completions"] > 100000:
            errs.append((f"{path}.completions", f"Invalid value: {spec['completions']}: must be less than or "
                         "equal to 100000 when completion mode is Indexed"))
    prp = spec.get("podReplacementPolicy")
    if prp is not None and prp not in ("TerminatingOrFailed", "Failed"):
        errs.append((f"{path}.podReplacementPolicy", f'Unsupported value: "{prp}": supported values: "Failed", '
                     '"TerminatingOrFailed"'))
    if spec.get("podFailurePolicy") and prp == "TerminatingOrFailed":
        errs.append((f"{path}.podReplacementPolicy", 'Not supported: "TerminatingOrFailed": supported values: '
                     '"Failed"'))
    errs += _validate_pod_failure_policy(spec.get("podFailurePolicy"), f"{path}.podFailurePolicy", spec)
    sel = spec.get("selector")
    tmpl = spec.get("template") or {}
    tlabels = (tmpl.get("metadata") or {}).get("labels") or {}
    if generated_selector:
        if sel is None:
            errs.append((f"{path}.selector", "Required value"))
        elif not label_selector_matches(sel, tlabels):
            errs.append((f"{path}.template.metadata.labels", f"Invalid value: {_go_map(tlabels)}: `selector` does "
                         "not match template `labels`"))
    tspec = tmpl.get("spec")
    if not isinstance(tspec, dict) or not tspec.get("containers"):
        errs.append((f"{path}.template.spec.containers", "Required value"))
    else:
        rp = tspec.get("restartPolicy")
        if rp not in ("OnFailure", "Never"):
            if rp in (None, ""):
                errs.append((f"{path}.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", '
                             '"Never"'))
            else:
                errs.append((f"{path}.template.spec.restartPolicy", f'Unsupported value: "{rp}": supported values: '
                             '"OnFailure", "Never"'))
        if spec.get("podFailurePolicy") and rp == "OnFailure":
            errs.append((f"{path}.template.spec.restartPolicy", 'Invalid value: "OnFailure": only "Never" is '
                         "supported when podFailurePolicy is specified"))
    return errs


_PFP_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


def _validate_pod_failure_policy(pfp: Any, path: str, spec: Obj) -> FieldErrors:
    if pfp is None:
        return []
    errs: FieldErrors = []
    for i, rule in enumerate((pfp or {}).get("rules") or []):
        rp = f"{path}.rules[{i}]"
        action = (rule or {}).get("action")
        if action not in _PFP_ACTIONS:
            errs.append((f"{rp}.action", f'Unsupported value: "{action}": supported values: "Count", "FailIndex", '
                         '"FailJob", "Ignore"'))
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            errs.append((f"{rp}.action", 'Forbidden: requires the backoffLimitPerIndex to be set'))
        has_codes = bool((rule or {}).get("onExitCodes"))
        has_conds = bool((rule or {}).get("onPodConditions"))
        if has_codes == has_conds:
            errs.append((rp, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"))
        codes = (rule or {}).get("onExitCodes") or {}
        if has_codes:
            op = codes.get("operator")
            if op not in ("In", "NotIn"):
                errs.append((f"{rp}.onExitCodes.operator", f'Unsupported value: "{op}": supported values: "In", '
                             '"NotIn"'))
            values = codes.get("values") or []
            if not values:
                errs.append((f"{rp}.onExitCodes.values", "Invalid value: []int32{}: at least one value is "
                             "required"))
            if op == "In" and 0 in values:
                errs.append((f"{rp}.onExitCodes.values[{values.index(0)}]", "Invalid value: 0: must not be 0 for "
                             "the In operator"))
    return errs


def validate_job(job: Obj, old: Obj | None) -> FieldErrors:
    spec = job.get("spec")
    errs = validate_job_spec(spec, "spec")
    if old is not None and isinstance(spec, dict):
        ospec = old.get("spec") or {}
        if spec.get("selector") != ospec.get("selector"):
            errs.append(("spec.selector", "Invalid value: field is immutable"))
        if spec.get("completionMode") != ospec.get("completionMode"):
            errs.append(("spec.completionMode", "Invalid value: field is immutable"))
        if spec.get("template") != ospec.get("template") and not (ospec.get("suspend") and
                                                                   not (old.get("status") or {}).get("startTime")):
            errs.append(("spec.template", "Invalid value: field is immutable"))
        if spec.get("completions") != ospec.get("completions") and spec.get("completionMode") != "Indexed":
            errs.append(("spec.completions", "Invalid value: field is immutable"))
    return errs


def carry_over_job(new: Obj, old: Obj) -> None:
    """An update that omits the generated selector/labels keeps them (they are the server's)."""
    spec, ospec = new.setdefault("spec", {}), old.get("spec") or {}
    if isinstance(spec, dict) and spec.get("selector") is None and ospec.get("selector") is not None:
        spec["selector"] = copy.deepcopy(ospec["selector"])
        if ospec.get("manualSelector") is not None:
            spec.setdefault("manualSelector", ospec["manualSelector"])
        olabels = ((ospec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        tmeta = spec.setdefault("template", {}).setdefault("metadata", {})
        labels = tmeta.get("labels") or {}
        for k in (CONTROLLER_UID_LABEL, JOB_NAME_LABEL, LEGACY_CONTROLLER_UID_LABEL, LEGACY_JOB_NAME_LABEL):
            if k in olabels and k not in labels:
                labels[k] = olabels[k]
        tmeta["labels"] = labels


# ------------------------------------------------------------------ CronJob
def default_cronjob(cj: Obj) -> None:
    spec = cj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    jt = spec.get("jobTemplate")
    if isinstance(jt, dict) and isinstance(jt.get("spec"), dict):
        default_job({"metadata": {}, "spec": jt["spec"]})


class ScheduleError(ValueError):
    pass


def parse_schedule(schedule: str) -> str:
    """The 5-field expression croniter should evaluate (descriptors expanded), or ScheduleError
    with robfig/cron's wording."""
    s = schedule.strip()
    if s.startswith("@"):
        if s.startswith("@every"):
            raise ScheduleError("@every schedules are not supported by this server; use a 5-field cron expression")
        if s not in _DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {s}")
        return _DESCRIPTORS[s]
    fields = s.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    expr = " ".join(fields)
    try:
        croniter(expr)
    except (ValueError, KeyError) as e:  # croniter's CroniterBadCronError is a ValueError
        raise ScheduleError(str(e) or f"invalid schedule {expr}") from e
    return expr


def load_zone(name: str | None) -> dt.tzinfo:
    if not name:
        return dt.UTC
    return zoneinfo.ZoneInfo(name)


def validate_cronjob(cj: Obj, old: Obj | None) -> FieldErrors:
    errs: FieldErrors = []
    name = str((cj.get("metadata") or {}).get("name") or "")
    if len(name) > CRONJOB_NAME_MAX:
        errs.append(("metadata.name", f'Invalid value: "{name}": must be no more than {CRONJOB_NAME_MAX} '
                     "characters"))
    spec = cj.get("spec")
    if not isinstance(spec, dict):
        return [*errs, ("spec", "Required value")]
    schedule = spec.get("schedule")
    tz = spec.get("timeZone")
    if not schedule:
        errs.append(("spec.schedule", "Required value"))
    elif "TZ" in schedule:
        msg = "cannot use both timeZone field and TZ or CRON_TZ in schedule" if tz is not None else \
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
        errs.append(("spec.schedule", f'Invalid value: "{schedule}": {msg}'))
    else:
        try:
            parse_schedule(schedule)
        except ScheduleError as e:
            errs.append(("spec.schedule", f'Invalid value: "{schedule}": {e}'))
    if tz is not None:
        if tz == "":
            errs.append(("spec.timeZone", 'Invalid value: "": timeZone must be nil or non-empty string'))
        elif tz.lower() == "local":
            errs.append(("spec.timeZone", f'Invalid value: "{tz}": timeZone must be an explicit time zone as '
                         "defined in https://www.iana.org/time-zones"))
        else:
            try:
                zoneinfo.ZoneInfo(tz)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                errs.append(("spec.timeZone", f'Invalid value: "{tz}": unknown time zone {tz}'))
    cp = spec.get("concurrencyPolicy")
    if cp not in ("Allow", "Forbid", "Replace"):
        errs.append(("spec.concurrencyPolicy", f'Unsupported value: "{cp}": supported values: "Allow", "Forbid", '
                     '"Replace"'))
    for k in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        errs += _nonneg(spec, k, "spec")
    jt = spec.get("jobTemplate")
    if not isinstance(jt, dict):
        errs.append(("spec.jobTemplate", "Required value"))
    else:
        jspec = jt.get("spec")
        manual = isinstance(jspec, dict) and jspec.get("manualSelector") is True
        errs += validate_job_spec(jspec, "spec.jobTemplate.spec", generated_selector=manual)
    return errs


def next_schedule_times(schedule: str, tz: str | None, after: dt.datetime, until: dt.datetime,
                        limit: int = 101) -> list[dt.datetime]:
    """Scheduled times in ``(after, until]`` (aware UTC datetimes), at most ``limit``; the
    cronjob controller's ``mostRecentScheduleTime`` walks these."""
    zone = load_zone(tz)
    it = croniter(parse_schedule(schedule), after.astimezone(zone))
    out: list[dt.datetime] = []
    while len(out) < limit:
        t = it.get_next(dt.datetime).astimezone(dt.UTC)
        if t > until:
            break
        out.append(t)
    return out


def next_schedule_after(schedule: str, tz: str | None, after: dt.datetime) -> dt.datetime:
    zone = load_zone(tz)
    t: dt.datetime = croniter(parse_schedule(schedule), after.astimezone(zone)).get_next(dt.datetime)
    return t.astimezone(dt.UTC)


def last_schedule_at_or_before(schedule: str, tz: str | None, when: dt.datetime) -> dt.datetime:
    """The most recent scheduled time not after ``when`` (aware UTC)."""
    zone = load_zone(tz)
    start = (when + dt.timedelta(microseconds=1)).astimezone(zone)
    t: dt.datetime = croniter(parse_schedule(schedule), start).get_prev(dt.datetime)
    return t.astimezone(dt.UTC)
