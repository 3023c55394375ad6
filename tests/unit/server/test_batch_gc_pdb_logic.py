"""Pure decisions behind Jobs, CronJobs, garbage collection, disruption budgets, pod GC and metrics."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from pykubelet.server import batchvalidation as bv
from pykubelet.server import garbagecollection, metricsapi, pdb
from pykubelet.server.controllers import cronjob, garbagecollector, job, podgc
from tests.builders import pod

T0 = dt.datetime(2026, 3, 1, 12, 0, 30, tzinfo=dt.UTC)


def _job(**spec: Any) -> dict[str, Any]:
    j: dict[str, Any] = {"metadata": {"name": "j", "namespace": "default", "uid": "ju"}, "spec": {
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}, **spec}}
    bv.prepare_job_create(j)
    return j


def _job_pod(name: str, phase: str = "Running", *, index: int | None = None, exit_code: int | None = None,
             finalizer: bool = True, **meta: Any) -> dict[str, Any]:
    annotations = {job.INDEX_ANNOTATION: str(index)} if index is not None else None
    p = pod(name, uid=f"uid-{name}", annotations=annotations, metadata={
        "ownerReferences": [{"kind": "Job", "name": "j", "uid": "ju", "controller": True}],
        "finalizers": [job.TRACKING_FINALIZER] if finalizer else [], **meta}, status={"phase": phase})
    if exit_code is not None:
        p["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": exit_code}}}]
    return p


# ------------------------------------------------------------------ Job defaulting and validation
def test_a_job_gets_upstream_defaults_and_a_generated_selector() -> None:
    j = _job()
    assert (j["spec"]["completions"], j["spec"]["parallelism"], j["spec"]["backoffLimit"]) == (1, 1, 6)
    assert j["spec"]["selector"] == {"matchLabels": {bv.CONTROLLER_UID_LABEL: "ju"}}
    labels = j["spec"]["template"]["metadata"]["labels"]
    assert labels[bv.JOB_NAME_LABEL] == "j" and labels["controller-uid"] == "ju"
    assert bv.validate_job(j, None) == []


def test_job_validation_messages_follow_upstream() -> None:
    j = _job(completionMode="Indexed", completions=None, parallelism=-1)
    j["spec"]["completions"] = None
    j["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    errs = dict(bv.validate_job(j, None))
    assert errs["spec.parallelism"] == "Invalid value: -1: must be greater than or equal to 0"
    assert errs["spec.completions"] == "Required value: when completion mode is Indexed"
    assert errs["spec.template.spec.restartPolicy"].startswith('Unsupported value: "Always"')
    manual = _job(manualSelector=True, selector={"matchLabels": {"x": "y"}})
    assert ("spec.template.metadata.labels",
            "Invalid value: map[string]string{}: `selector` does not match template `labels`") in \
        bv.validate_job(manual, None)


def test_cronjob_schedule_and_time_zone_are_validated() -> None:
    def errs(**spec: Any) -> dict[str, str]:
        cj: dict[str, Any] = {"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {
            "spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c"}]}}}}, **spec}}
        bv.default_cronjob(cj)
        return dict(bv.validate_cronjob(cj, None))

    assert errs() == {}
    assert errs(schedule="@hourly") == {}
    assert errs(schedule="nope")["spec.schedule"] == 'Invalid value: "nope": expected exactly 5 fields, found 1: [nope]'
    assert "use timeZone field instead" in errs(schedule="TZ=UTC 0 * * * *")["spec.schedule"]
    assert errs(timeZone="Mars/Base")["spec.timeZone"] == 'Invalid value: "Mars/Base": unknown time zone Mars/Base'
    assert errs(timeZone="Europe/Paris") == {}


def test_schedules_are_evaluated_in_the_cronjob_time_zone() -> None:
    times = bv.next_schedule_times("0 9 * * *", "America/New_York", T0, T0 + dt.timedelta(days=1))
    assert times == [dt.datetime(2026, 3, 1, 14, 0, tzinfo=dt.UTC)]  # 09:00 EST


# ------------------------------------------------------------------ Job controller plan
def test_a_new_job_creates_parallelism_pods_up_to_the_remaining_completions() -> None:
    p = job.plan(_job(completions=3, parallelism=2), [], T0)
    assert p.create_indexes == [None, None]
    p = job.plan(_job(completions=3, parallelism=2), [_job_pod("a", "Succeeded"), _job_pod("b", "Succeeded")], T0)
    assert p.create_indexes == [None] and p.status["succeeded"] == 2
    assert p.record_succeeded == ["uid-a", "uid-b"] and len(p.remove_finalizers) == 2


def test_a_job_completes_with_success_criteria_met_then_complete() -> None:
    j = _job(completions=1)
    p = job.plan(j, [_job_pod("a", "Succeeded")], T0)
    types = [(c["type"], c["reason"]) for c in p.status["conditions"]]
    assert types == [("SuccessCriteriaMet", "CompletionsReached"), ("Complete", "CompletionsReached")]
    assert p.status["completionTime"] and p.status["uncountedTerminatedPods"] == {}


def test_failures_beyond_the_backoff_limit_fail_the_job_after_its_pods_are_gone() -> None:
    j = _job(backoffLimit=1)
    j["status"] = {"failed": 1}
    p = job.plan(j, [_job_pod("a", "Failed", exit_code=1), _job_pod("b")], T0)
    cond = {c["type"]: c for c in p.status["conditions"]}
    assert cond["FailureTarget"]["reason"] == "BackoffLimitExceeded"
    assert cond["FailureTarget"]["message"] == "Job has reached the specified backoff limit"
    assert "Failed" not in cond, "the running pod must be gone first"
    assert [x["metadata"]["name"] for x in p.delete] == ["b"]
    j["status"] = p.status
    p = job.plan(j, [], T0)
    assert any(c["type"] == "Failed" and c["reason"] == "BackoffLimitExceeded" for c in p.status["conditions"])


def test_a_replacement_pod_waits_the_pod_failure_backoff() -> None:
    j = _job()
    j["status"] = {"failed": 2}
    p = job.plan(j, [], T0, last_failure=T0 - dt.timedelta(seconds=5))
    assert p.create_indexes == [None] and p.create_after == 15.0  # 10 s * 2 since the last failure
    assert job.backoff_delay(10) == job.BACKOFF_MAX


def test_pod_failure_policy_fail_job_and_ignore() -> None:
    pfp = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                     {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}
    j = _job(podFailurePolicy=pfp, backoffLimit=0)
    p = job.plan(j, [_job_pod("a", "Failed", exit_code=7)], T0)
    assert p.status.get("failed") is None and p.create_indexes == [None]
    p = job.plan(j, [_job_pod("b", "Failed", exit_code=42)], T0)
    cond = next(c for c in p.status["conditions"] if c["type"] == "FailureTarget")
    assert cond["reason"] == "PodFailurePolicy"
    assert cond["message"] == "Container c for pod default/b failed with exit code 42 matching FailJob rule at index 0"


def test_an_indexed_job_creates_the_lowest_pending_indexes() -> None:
    j = _job(completionMode="Indexed", completions=4, parallelism=2)
    p = job.plan(j, [_job_pod("a", "Succeeded", index=0)], T0)
    assert p.create_indexes == [1, 2] and p.status["completedIndexes"] == "0"
    made = job.pod_from_template(j, 3)
    assert made["metadata"]["generateName"] == "j-3-" and made["spec"]["hostname"] == "j-3"
    assert made["metadata"]["annotations"][job.INDEX_ANNOTATION] == "3"
    assert job.format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert job.parse_indexes("0-2,5") == {0, 1, 2, 5}


def test_a_job_past_its_active_deadline_fails() -> None:
    j = _job(activeDeadlineSeconds=60)
    j["status"] = {"startTime": "2026-03-01T12:00:00Z"}
    p = job.plan(j, [_job_pod("a")], T0)
    assert not any(c["type"] == "FailureTarget" for c in p.status.get("conditions") or [])
    assert p.requeue is not None and 0 < p.requeue <= 30.5
    p = job.plan(j, [_job_pod("a")], T0 + dt.timedelta(seconds=30))
    cond = next(c for c in p.status["conditions"] if c["type"] == "FailureTarget")
    assert (cond["reason"], cond["message"]) == ("DeadlineExceeded", "Job was active longer than specified deadline")


def test_ttl_after_finished_counts_from_completion() -> None:
    j = _job(ttlSecondsAfterFinished=60)
    assert job.ttl_expiry(j) is None
    j["status"] = {"completionTime": "2026-03-01T12:00:00Z",
                   "conditions": [{"type": "Complete", "status": "True"}]}
    assert job.ttl_expiry(j) == dt.datetime(2026, 3, 1, 12, 1, tzinfo=dt.UTC)


# ------------------------------------------------------------------ CronJob decisions
def _cj(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "default", "uid": "cu", "creationTimestamp": "2026-03-01T11:58:10Z"},
            "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Allow", **spec}, "status": {}}


def test_a_cronjob_starts_the_most_recent_due_time_named_in_minutes() -> None:
    d = cronjob.decide(_cj(), 0, T0)
    assert d.verdict is cronjob.Verdict.START and d.scheduled == dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    assert cronjob.job_name("c", d.scheduled) == f"c-{int(d.scheduled.timestamp()) // 60}"
    made = cronjob.job_from_template(_cj(), d.scheduled)
    assert made["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert made["metadata"]["annotations"][cronjob.SCHEDULED_TIMESTAMP_ANNOTATION] == "2026-03-01T12:00:00Z"


def test_cronjob_concurrency_and_starting_deadline() -> None:
    assert cronjob.decide(_cj(concurrencyPolicy="Forbid"), 1, T0).verdict is cronjob.Verdict.SKIP_FORBID
    assert cronjob.decide(_cj(concurrencyPolicy="Replace"), 1, T0).replace
    # a run older than startingDeadlineSeconds is never started late
    assert cronjob.decide(_cj(startingDeadlineSeconds=10), 0, T0).verdict is cronjob.Verdict.WAIT
    assert cronjob.decide(_cj(startingDeadlineSeconds=60), 0, T0).verdict is cronjob.Verdict.START
    cj = _cj()
    cj["status"]["lastScheduleTime"] = "2026-03-01T12:00:00Z"
    d = cronjob.decide(cj, 0, T0)
    assert d.verdict is cronjob.Verdict.WAIT and d.next_run == dt.datetime(2026, 3, 1, 12, 1, tzinfo=dt.UTC)


def test_cronjob_history_keeps_the_newest_finished_jobs() -> None:
    def done(name: str, kind: str, start: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"startTime": start,
                                                       "conditions": [{"type": kind, "status": "True"}]}}

    jobs = [done("a", "Complete", "1"), done("b", "Complete", "2"), done("c", "Failed", "3"), done("d", "Failed", "4")]
    assert [j["metadata"]["name"] for j in cronjob.history_to_delete(jobs, 1, 1)] == ["a", "c"]


# ------------------------------------------------------------------ garbage collection
def test_delete_options_become_gc_finalizers() -> None:
    fins = garbagecollection.deletion_finalizers
    assert fins("", "configmaps", [], {"propagationPolicy": "Foreground"}) == ["foregroundDeletion"]
    assert fins("", "configmaps", ["x"], {"orphanDependents": True}) == ["x", "orphan"]
    assert fins("", "configmaps", ["orphan"], {"propagationPolicy": "Background"}) == []
    assert fins("", "configmaps", ["orphan"], {}) == ["orphan"], "an existing GC finalizer decides"
    assert fins("batch", "jobs", [], {}) == ["orphan"], "batch/v1 Jobs orphan by default, as upstream"
    assert fins("apps", "deployments", [], {}) == []


def test_dependents_are_classified_by_their_owners() -> None:
    dep = {"metadata": {"name": "d", "ownerReferences": [{"uid": "a"}, {"uid": "b"}]}}
    S, D, W = garbagecollector.OwnerState.SOLID, garbagecollector.OwnerState.DANGLING, garbagecollector.OwnerState.WAITING
    classify = garbagecollector.classify
    assert classify(dep, {"a": S, "b": S}, False).action is garbagecollector.Action.KEEP
    assert classify(dep, {"a": S, "b": D}, False) == garbagecollector.Decision(
        garbagecollector.Action.REMOVE_REFS, remove=("b",))
    assert classify(dep, {"a": D, "b": D}, False) == garbagecollector.Decision(garbagecollector.Action.DELETE,
                                                                              "Background")
    assert classify(dep, {"a": W, "b": D}, True).policy == "Foreground"
    going = copy.deepcopy(dep)
    going["metadata"]["deletionTimestamp"] = "x"
    assert classify(going, {"a": D, "b": D}, False).action is garbagecollector.Action.KEEP


# ------------------------------------------------------------------ disruption budgets
def _ready(name: str, **meta: Any) -> dict[str, Any]:
    return pod(name, labels={"app": "web"}, metadata=meta,
               status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})


def _pdb(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


def test_pdb_status_from_min_available_and_max_unavailable() -> None:
    pods = [_ready("a"), _ready("b"), _ready("c")]
    st = pdb.compute_status(_pdb(minAvailable=2), pods, {}, T0)
    assert (st["currentHealthy"], st["desiredHealthy"], st["expectedPods"], st["disruptionsAllowed"]) == (3, 2, 3, 1)
    owned = [_ready(n, ownerReferences=[{"uid": "rs", "controller": True}]) for n in "ab"]
    st = pdb.compute_status(_pdb(maxUnavailable="50%"), owned, {"rs": 4}, T0)
    assert (st["expectedPods"], st["desiredHealthy"], st["disruptionsAllowed"]) == (4, 2, 0)
    assert st["conditions"][0]["reason"] == "InsufficientPods"
    st = pdb.compute_status(_pdb(maxUnavailable=1), [_ready("bare")], {}, T0)
    assert st["conditions"][0]["reason"] == "SyncFailed" and st["disruptionsAllowed"] == 0


def test_eviction_charges_the_budget_or_refuses() -> None:
    budget = _pdb(minAvailable=1)
    budget["status"] = {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1}
    d = pdb.check_eviction(_ready("a"), [budget], T0)
    assert d.verdict is pdb.Verdict.CHARGE and d.pdb is not None
    assert d.pdb["status"]["disruptionsAllowed"] == 0 and "a" in d.pdb["status"]["disruptedPods"]
    d = pdb.check_eviction(_ready("b"), [d.pdb], T0)
    assert d.verdict is pdb.Verdict.TOO_MANY and d.cause == "The disruption budget web needs 1 healthy pods and has 2 currently"
    stale = copy.deepcopy(budget)
    stale["metadata"]["generation"] = 2
    assert pdb.check_eviction(_ready("a"), [stale], T0).verdict is pdb.Verdict.TOO_MANY
    assert pdb.check_eviction(_ready("a"), [budget, budget], T0).verdict is pdb.Verdict.MULTIPLE
    pending = pod("p", labels={"app": "web"}, status={"phase": "Pending"})
    assert pdb.check_eviction(pending, [budget], T0).verdict is pdb.Verdict.DELETE


# ------------------------------------------------------------------ pod GC and metrics
def test_pod_gc_selects_terminated_pods_over_the_threshold_and_orphans() -> None:
    pods = [pod(f"t{i}", metadata={"creationTimestamp": f"2026-03-01T00:00:0{i}Z"}, status={"phase": "Succeeded"})
            for i in range(3)]
    pods.append(pod("orphan", node_name="gone", status={"phase": "Running"}))
    pods.append(pod("stuck", metadata={"deletionTimestamp": "2026-03-01T00:00:00Z"}, status={"phase": "Pending"}))
    sel = podgc.select(pods, {"n1"}, {"gone": 0.0}, 100.0, threshold=2, quarantine=40.0)
    assert [p["metadata"]["name"] for p in sel.terminated] == ["t0"]
    assert [p["metadata"]["name"] for p in sel.orphaned] == ["orphan"]
    assert [p["metadata"]["name"] for p in sel.unscheduled_terminating] == ["stuck"]
    assert not podgc.select(pods, {"n1"}, {"gone": 90.0}, 100.0, threshold=2, quarantine=40.0).orphaned


def test_metrics_rates_come_from_two_scrapes_of_the_cumulative_counters() -> None:
    text = ('container_cpu_usage_seconds_total{container="c",namespace="default",pod="p"} 10 1000000\n'
            "node_cpu_usage_seconds_total 100 1000000\nnode_memory_working_set_bytes 1048576 1000000\n")
    later = text.replace(" 10 1000000", " 10.5 1002000").replace("100 1000000", "101 1002000")
    s1, s2 = metricsapi.parse_resource_metrics(text, 0), metricsapi.parse_resource_metrics(later, 0)
    assert metricsapi.cpu_rate(s1.node_cpu, s2.node_cpu) == (500_000_000, 2.0)
    assert metricsapi.cpu_rate(s2.node_cpu, s1.node_cpu) is None, "a counter reset gives no rate"
    nm = metricsapi.node_metrics({"metadata": {"name": "n"}}, s1, s2)
    assert nm is not None and nm["usage"] == {"cpu": "500m", "memory": "1Mi"} and nm["window"] == "2s"
    pm = metricsapi.pod_metrics(pod("p", status={"phase": "Running"}), s1, s2)
    assert pm is not None and pm["containers"][0]["usage"]["cpu"] == "250m"
