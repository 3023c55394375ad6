"""Garbage collection, Jobs, CronJobs and disruption budgets on the dev control plane (HTTP + kubectl).

The garbage collector is checked generically, with ConfigMaps owning ConfigMaps, so these tests
do not depend on the workload controllers; Jobs run against pods whose status the test posts (a
"fake kubelet" made of API calls), so no container runtime is needed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from pykubelet.agent.server.logs import format_rfc3339_nano
from pykubelet.agent.server.stats import resource_metrics
from pykubelet.common.quantity import parse_quantity
from pykubelet.server.main import ServerHandle, build_parser, run_server, server_options
from tests.builders import node, pod

from .conftest import Http, Kubectl, eventually

DEADLINE = 30.0
CM = "/api/v1/namespaces/default/configmaps"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
CRONJOBS = "/apis/batch/v1/namespaces/default/cronjobs"
PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"


@pytest.fixture
async def gsrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args(["--secure-port", "0", "--scheduler-retry-interval", "1s"])
    async with run_server(tmp_path / "data", **server_options(args)) as srv:
        yield srv


@pytest.fixture
async def ghttp(gsrv: ServerHandle) -> AsyncIterator[Http]:
    h = Http(gsrv)
    yield h
    await h.close()


@pytest.fixture
def gkubectl(gsrv: ServerHandle, tmp_path: Path) -> Kubectl:
    d = tmp_path / "kcache"
    d.mkdir()
    return Kubectl(gsrv, d)


async def _cm(http: Http, name: str, owner: dict[str, Any] | None = None, *, block: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}]
    code, obj = await http.req("POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    assert code == 201, obj
    return dict(obj)


async def _gone(http: Http, path: str) -> bool:
    code, _ = await http.req("GET", path)
    return code == 404


# ------------------------------------------------------------------ garbage collection
async def test_background_deletion_removes_dependents_after_the_owner(ghttp: Http) -> None:
    owner = await _cm(ghttp, "owner")
    await _cm(ghttp, "child", owner)
    code, _ = await ghttp.req("DELETE", f"{CM}/owner", {"propagationPolicy": "Background"})
    assert code == 200
    assert await _gone(ghttp, f"{CM}/owner")
    await eventually(lambda: _gone(ghttp, f"{CM}/child"), "the dependent to be collected")


async def test_a_dependent_whose_owner_never_existed_is_collected(ghttp: Http) -> None:
    fake = {"metadata": {"name": "nobody", "uid": "00000000-0000-0000-0000-000000000001"}}
    await _cm(ghttp, "stray", fake)
    await eventually(lambda: _gone(ghttp, f"{CM}/stray"), "the dangling dependent to be collected")


async def test_kubectl_cascade_foreground_deletes_dependents_before_the_owner(ghttp: Http,
                                                                              gkubectl: Kubectl) -> None:
    owner = await _cm(ghttp, "fg")
    child = await _cm(ghttp, "fg-child", owner)
    await _cm(ghttp, "fg-grandchild", child)
    code, obj = await ghttp.req("DELETE", f"{CM}/fg", {"propagationPolicy": "Foreground"})
    assert code == 200
    # the owner is kept, marked, until its blocking dependents are gone
    assert obj["metadata"].get("deletionTimestamp") and "foregroundDeletion" in obj["metadata"]["finalizers"]
    await eventually(lambda: _gone(ghttp, f"{CM}/fg"), "the foreground owner to go")
    assert await _gone(ghttp, f"{CM}/fg-child")
    await eventually(lambda: _gone(ghttp, f"{CM}/fg-grandchild"), "the grandchild to go")
    # and through kubectl, which waits for the owner to disappear
    owner = await _cm(ghttp, "fg2")
    await _cm(ghttp, "fg2-child", owner)
    await gkubectl.ok("delete", "configmap", "fg2", "--cascade=foreground")
    assert await _gone(ghttp, f"{CM}/fg2")
    assert await _gone(ghttp, f"{CM}/fg2-child")


async def test_kubectl_cascade_orphan_keeps_dependents_and_drops_their_owner_reference(
        ghttp: Http, gkubectl: Kubectl) -> None:
    owner = await _cm(ghttp, "or")
    await _cm(ghttp, "or-child", owner)
    await gkubectl.ok("delete", "configmap", "or", "--cascade=orphan")
    await eventually(lambda: _gone(ghttp, f"{CM}/or"), "the orphaning owner to go")
    code, child = await ghttp.req("GET", f"{CM}/or-child")
    assert code == 200 and not child["metadata"].get("ownerReferences")
    # the legacy orphanDependents option means the same
    owner = await _cm(ghttp, "or2")
    await _cm(ghttp, "or2-child", owner)
    code, _ = await ghttp.req("DELETE", f"{CM}/or2", {"orphanDependents": True})
    assert code == 200
    await eventually(lambda: _gone(ghttp, f"{CM}/or2"), "the orphaning owner to go")
    code, child = await ghttp.req("GET", f"{CM}/or2-child")
    assert code == 200 and not child["metadata"].get("ownerReferences")


async def test_a_dependent_with_a_remaining_owner_only_loses_the_deleted_owner(ghttp: Http) -> None:
    a, b = await _cm(ghttp, "a"), await _cm(ghttp, "b")
    code, shared = await ghttp.req("POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "shared", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": a["metadata"]["uid"]},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": b["metadata"]["uid"]}]}})
    assert code == 201, shared
    await ghttp.req("DELETE", f"{CM}/a")

    async def one_owner() -> bool:
        _c, o = await ghttp.req("GET", f"{CM}/shared")
        return [r["name"] for r in o["metadata"].get("ownerReferences") or []] == ["b"]

    await eventually(one_owner, "the dangling reference to be removed")


# ------------------------------------------------------------------ Jobs (pods finished by the test)
def _job(name: str, *, completions: int | None = 3, parallelism: int = 2, backoff: int = 6,
         **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"parallelism": parallelism, "backoffLimit": backoff, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}, **spec}
    if completions is not None:
        s["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": s}


async def _job_pods(http: Http, job: str) -> list[dict[str, Any]]:
    _c, lst = await http.req("GET", PODS, params={"labelSelector": f"batch.kubernetes.io/job-name={job}"})
    return list(lst["items"])


async def _finish(http: Http, pod: dict[str, Any], phase: str, exit_code: int = 0) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    code, body = await http.req("PATCH", f"{PODS}/{pod['metadata']['name']}/status", {"status": {
        "phase": phase, "containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "startedAt": now, "finishedAt": now,
                                     "reason": "Completed" if exit_code == 0 else "Error"}}}]}},
        content_type="application/merge-patch+json")
    assert code == 200, body


async def _condition(http: Http, job: str, typ: str) -> dict[str, Any] | None:
    _c, obj = await http.req("GET", f"{JOBS}/{job}")
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == typ and c["status"] == "True"), None)


async def test_a_job_runs_parallelism_pods_at_a_time_until_completions_succeed(ghttp: Http,
                                                                              gkubectl: Kubectl) -> None:
    code, job = await ghttp.req("POST", JOBS, _job("work"))
    assert code == 201, job
    # the server generated the selector and the pod template labels, as upstream
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "work"
    finished: set[str] = set()
    for _round in range(3):
        async def running() -> list[dict[str, Any]]:
            pods = [p for p in await _job_pods(ghttp, "work") if p["metadata"]["name"] not in finished]
            return pods if pods else []

        pods = await eventually(running, "pods to run")
        assert len(pods) <= 2, "never more than parallelism pods at once"
        for p in pods[: 3 - len(finished)]:
            assert "batch.kubernetes.io/job-tracking" in p["metadata"]["finalizers"]
            await _finish(ghttp, p, "Succeeded")
            finished.add(p["metadata"]["name"])
        if len(finished) >= 3:
            break
    cond = await eventually(lambda: _condition(ghttp, "work", "Complete"), "the Job to complete")
    assert cond["reason"] == "CompletionsReached"
    _c, obj = await ghttp.req("GET", f"{JOBS}/work")
    assert obj["status"]["succeeded"] == 3 and obj["status"].get("completionTime")
    assert await _condition(ghttp, "work", "SuccessCriteriaMet")
    # finalizers were released once counted
    assert all(not p["metadata"].get("finalizers") for p in await _job_pods(ghttp, "work"))
    out = await gkubectl.ok("get", "jobs")
    assert out.split("\n")[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert out.split("\n")[1].split()[:3] == ["work", "Complete", "3/3"]


async def test_a_failing_job_stops_at_its_backoff_limit_with_the_upstream_reason(ghttp: Http) -> None:
    code, job = await ghttp.req("POST", JOBS, _job("fails", completions=1, parallelism=1, backoff=1))
    assert code == 201, job
    for attempt in range(2):
        async def fresh(n: int = attempt) -> list[dict[str, Any]]:
            pods = await _job_pods(ghttp, "fails")
            return [p for p in pods if (p.get("status") or {}).get("phase") != "Failed"] if len(pods) > n else []

        pods = await eventually(fresh, f"attempt {attempt + 1} (after the pod failure back-off)")
        await _finish(ghttp, pods[0], "Failed", exit_code=1)
    cond = await eventually(lambda: _condition(ghttp, "fails", "Failed"), "the Job to fail")
    assert cond["reason"] == "BackoffLimitExceeded"
    assert cond["message"] == "Job has reached the specified backoff limit"
    assert await _condition(ghttp, "fails", "FailureTarget")
    _c, obj = await ghttp.req("GET", f"{JOBS}/fails")
    assert obj["status"]["failed"] == 2 and len(await _job_pods(ghttp, "fails")) == 2


async def test_an_indexed_job_gives_each_pod_its_completion_index(ghttp: Http) -> None:
    code, job = await ghttp.req("POST", JOBS, _job("idx", completions=2, parallelism=2, completionMode="Indexed"))
    assert code == 201, job
    pods = await eventually(lambda: _two(_job_pods(ghttp, "idx")), "two indexed pods")
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1"]
    p0 = next(p for p in pods if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0")
    assert p0["metadata"]["name"].startswith("idx-0-") and p0["spec"]["hostname"] == "idx-0"
    env = p0["spec"]["containers"][0]["env"]
    assert {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}} in env
    for p in pods:
        await _finish(ghttp, p, "Succeeded")
    await eventually(lambda: _condition(ghttp, "idx", "Complete"), "the indexed Job to complete")
    _c, obj = await ghttp.req("GET", f"{JOBS}/idx")
    assert obj["status"]["completedIndexes"] == "0-1"


async def _two(coro: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    pods = await coro
    return pods if len(pods) == 2 else []


async def test_a_job_past_its_active_deadline_fails_with_deadline_exceeded(ghttp: Http) -> None:
    code, job = await ghttp.req("POST", JOBS, _job("late", completions=1, parallelism=1, activeDeadlineSeconds=1))
    assert code == 201, job
    cond = await eventually(lambda: _condition(ghttp, "late", "Failed"), "the Job to pass its deadline")
    assert cond["reason"] == "DeadlineExceeded" and cond["message"] == "Job was active longer than specified deadline"


async def test_a_finished_job_with_a_ttl_is_deleted_with_its_pods(ghttp: Http) -> None:
    code, job = await ghttp.req("POST", JOBS, _job("ttl", completions=1, parallelism=1, ttlSecondsAfterFinished=0))
    assert code == 201, job
    pods = await eventually(lambda: _job_pods(ghttp, "ttl"), "the pod")
    await _finish(ghttp, pods[0], "Succeeded")
    await eventually(lambda: _gone(ghttp, f"{JOBS}/ttl"), "the Job to be deleted after its TTL")
    await eventually(lambda: _none(_job_pods(ghttp, "ttl")), "its pods to be collected")


async def _none(coro: Awaitable[list[dict[str, Any]]]) -> bool:
    return not await coro


async def test_job_validation_reports_upstream_messages(ghttp: Http) -> None:
    bad = _job("bad")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    code, st = await ghttp.req("POST", JOBS, bad)
    assert code == 422
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"' \
        in st["message"]
    manual = _job("manual", manualSelector=True)
    code, st = await ghttp.req("POST", JOBS, manual)
    assert code == 422 and "spec.selector: Required value" in st["message"]


async def test_kubectl_create_job_and_cronjob(ghttp: Http, gkubectl: Kubectl) -> None:
    await gkubectl.ok("create", "job", "hello", "--image=busybox:1.36", "--", "echo", "hi")
    _c, job = await ghttp.req("GET", f"{JOBS}/hello")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    await gkubectl.ok("create", "cronjob", "tick", "--image=busybox:1.36", "--schedule=*/5 * * * *",
                      "--", "date")
    out = await gkubectl.ok("get", "cj")
    assert out.split("\n")[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE",
                                          "AGE"]
    assert out.split("\n")[1].split()[:6] == ["tick", "*/5", "*", "*", "*", "*"]
    await gkubectl.ok("create", "job", "manual-run", "--from=cronjob/tick")
    _c, run = await ghttp.req("GET", f"{JOBS}/manual-run")
    assert run["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    rc, _out, err = await gkubectl.run("create", "cronjob", "bad", "--image=busybox", "--schedule=nope")
    assert rc != 0 and "spec.schedule" in err


# ------------------------------------------------------------------ CronJobs with a movable clock
class MovableClock:
    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
async def csrv(tmp_path: Path, clock: MovableClock) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args(["--secure-port", "0"])
    opts = server_options(args)
    opts["controller_kwargs"] = {**opts["controller_kwargs"], "cronjob_clock": clock}
    async with run_server(tmp_path / "data", **opts) as srv:
        yield srv


async def test_a_cronjob_every_minute_starts_a_job_named_for_its_scheduled_minute(
        csrv: ServerHandle, clock: MovableClock) -> None:
    http = Http(csrv)
    try:
        cj = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "every"}, "spec": {
            "schedule": "* * * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}}
        code, obj = await http.req("POST", CRONJOBS, cj)
        assert code == 201, obj
        clock.offset = dt.timedelta(seconds=61)  # a minute later, without waiting for it
        await http.req("PATCH", f"{CRONJOBS}/every", {"metadata": {"labels": {"poke": "1"}}},
                       content_type="application/merge-patch+json")

        async def jobs() -> list[dict[str, Any]]:
            _c, lst = await http.req("GET", JOBS)
            return list(lst["items"])

        made = await eventually(jobs, "the first scheduled Job")
        assert len(made) == 1
        name = made[0]["metadata"]["name"]
        sched = made[0]["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        minutes = int(dt.datetime.fromisoformat(sched.replace("Z", "+00:00")).timestamp()) // 60
        assert name == f"every-{minutes}"

        async def status() -> dict[str, Any] | None:
            _c, o = await http.req("GET", f"{CRONJOBS}/every")
            st = o.get("status") or {}
            return st if st.get("active") and st.get("lastScheduleTime") else None

        st = await eventually(status, "the CronJob status")
        assert st["active"][0]["name"] == name
        # Forbid: the next minute does not start a second Job while the first runs
        clock.offset = dt.timedelta(seconds=122)
        await http.req("PATCH", f"{CRONJOBS}/every", {"metadata": {"labels": {"poke": "2"}}},
                       content_type="application/merge-patch+json")
        await asyncio.sleep(1.0)
        assert len(await jobs()) == 1
    finally:
        await http.close()


# ------------------------------------------------------------------ disruption budgets and eviction
async def _ready_pod(http: Http, name: str, node_name: str = "n1") -> None:
    body = pod(name, uid="", node_name=node_name, labels={"app": "web"})
    code, obj = await http.req("POST", PODS, body)
    assert code == 201, obj
    code, obj = await http.req("PATCH", f"{PODS}/{name}/status", {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
        content_type="application/merge-patch+json")
    assert code == 200, obj


async def _pdb_status(http: Http, name: str, **want: int) -> dict[str, Any] | None:
    _c, obj = await http.req("GET", f"{PDBS}/{name}")
    st = obj.get("status") or {}
    return st if all(st.get(k) == v for k, v in want.items()) else None


async def test_eviction_is_refused_with_429_while_the_budget_allows_no_disruption(ghttp: Http) -> None:
    code, n = await ghttp.req("POST", "/api/v1/nodes", node("n1"))
    assert code == 201, n
    await _ready_pod(ghttp, "web-1")
    await _ready_pod(ghttp, "web-2")
    code, obj = await ghttp.req("POST", PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                                "metadata": {"name": "web"},
                                                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    assert code == 201, obj
    st = await eventually(lambda: _pdb_status(ghttp, "web", disruptionsAllowed=1), "the budget's status")
    assert (st["currentHealthy"], st["desiredHealthy"], st["expectedPods"]) == (2, 1, 2)
    assert st["conditions"][0]["type"] == "DisruptionAllowed" and st["conditions"][0]["reason"] == "SufficientPods"
    eviction: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}}
    code, body = await ghttp.req("POST", f"{PODS}/web-1/eviction", eviction)
    assert code == 201, body
    # graceful deletion (the kubelet would finish it); the pod says why it is going
    _c, evicted = await ghttp.req("GET", f"{PODS}/web-1")
    assert evicted["metadata"].get("deletionTimestamp")
    target = next(c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "EvictionByEvictionAPI")
    # the budget is spent: the second eviction is a 429 with upstream's message and cause
    eviction["metadata"]["name"] = "web-2"
    code, body = await ghttp.req("POST", f"{PODS}/web-2/eviction", eviction)
    assert code == 429, body
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 1 healthy pods and has 1 currently" in body["details"]["causes"][0]["message"]


async def test_kubectl_drain_waits_for_the_disruption_budget(ghttp: Http, gkubectl: Kubectl) -> None:
    code, n = await ghttp.req("POST", "/api/v1/nodes", node("n1"))
    assert code == 201, n
    await _ready_pod(ghttp, "web-1")
    code, obj = await ghttp.req("POST", PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                                "metadata": {"name": "web"},
                                                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}})
    assert code == 201, obj
    # maxUnavailable needs the pods' controller's scale: a bare pod makes the budget fail to sync
    st = await eventually(lambda: _pdb_status(ghttp, "web", disruptionsAllowed=0), "the budget's status")
    assert st["conditions"][0]["reason"] == "SyncFailed"
    rc, out, err = await gkubectl.run("drain", "n1", "--force", "--grace-period=0", "--timeout=7s")
    assert rc != 0, out
    assert "Cannot evict pod as it would violate the pod's disruption budget." in err + out
    code, _ = await ghttp.req("GET", f"{PODS}/web-1")
    assert code == 200, "the budget kept the pod"
    await ghttp.req("PATCH", f"{PDBS}/web", {"spec": {"maxUnavailable": None, "minAvailable": 0}},
                    content_type="application/merge-patch+json")
    await eventually(lambda: _pdb_status(ghttp, "web", disruptionsAllowed=1), "the relaxed budget")
    await gkubectl.ok("drain", "n1", "--force", "--grace-period=0", "--timeout=20s")
    assert await _gone(ghttp, f"{PODS}/web-1")
    _c, nobj = await ghttp.req("GET", "/api/v1/nodes/n1")
    assert nobj["spec"]["unschedulable"] is True


# ------------------------------------------------------------------ metrics.k8s.io from a kubelet's /metrics/resource
_BOOT = time.time() - 1000.0


def _summary() -> dict[str, Any]:
    """A kubelet stats summary whose CPU counters grow at 250m (node) and 100m (the pod)."""
    now = time.time() - _BOOT  # counters since "boot", as a kubelet reports them
    stamp = format_rfc3339_nano(time.time_ns())
    cpu = {"time": stamp, "usageCoreNanoSeconds": int(now * 0.1e9)}
    mem = {"time": stamp, "workingSetBytes": 64 * 1024 * 1024}
    return {"node": {"cpu": {"time": stamp, "usageCoreNanoSeconds": int(now * 0.25e9)},
                     "memory": {"time": stamp, "workingSetBytes": 512 * 1024 * 1024}},
            "pods": [{"podRef": {"name": "web-1", "namespace": "default"}, "cpu": cpu, "memory": mem,
                      "containers": [{"name": "c", "cpu": cpu, "memory": mem}]}]}


@pytest.fixture
async def fake_kubelet(gsrv: ServerHandle) -> AsyncIterator[int]:
    """An HTTPS endpoint answering /metrics/resource like the agent (its own renderer)."""
    async def metrics(_req: web.Request) -> web.Response:
        return web.Response(text=resource_metrics(_summary()), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics/resource", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    pki = gsrv.registry.pki
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(pki.server_crt), str(pki.server_key))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield int(port)
    finally:
        await runner.cleanup()


async def test_kubectl_top_prints_usage_from_the_kubelets(ghttp: Http, gkubectl: Kubectl, fake_kubelet: int) -> None:
    n = node("n1", allocatable={"cpu": "2", "memory": "4Gi"}, capacity={"cpu": "2", "memory": "4Gi"})
    n["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": fake_kubelet}}
    code, obj = await ghttp.req("POST", "/api/v1/nodes", n)
    assert code == 201, obj
    await _ready_pod(ghttp, "web-1")
    code, nm = await ghttp.req("GET", "/apis/metrics.k8s.io/v1beta1/nodes/n1")
    assert code == 200, nm
    assert nm["kind"] == "NodeMetrics" and nm["usage"]["memory"] == "512Mi"
    cpu_m = parse_quantity(nm["usage"]["cpu"]).milli_value()
    assert 200 <= cpu_m <= 300, nm
    code, pm = await ghttp.req("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
    assert code == 200 and [p["metadata"]["name"] for p in pm["items"]] == ["web-1"], pm
    assert pm["items"][0]["containers"][0]["usage"]["memory"] == "64Mi"
    out = await gkubectl.ok("top", "node")
    row = out.split("\n")[1].split()
    assert row[0] == "n1" and row[1].endswith("m") and row[3] == "512Mi", out
    out = await gkubectl.ok("top", "pod")
    row = out.split("\n")[1].split()
    assert row[0] == "web-1" and row[1].endswith("m") and row[2] == "64Mi", out


# ------------------------------------------------------------------ pod GC
@pytest.fixture
async def pgsrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args(["--secure-port", "0", "--terminated-pod-gc-threshold", "1"])
    opts = server_options(args)
    opts["controller_kwargs"] = {**opts["controller_kwargs"], "podgc_period": 0.5, "podgc_quarantine": 0.5}
    async with run_server(tmp_path / "data", **opts) as srv:
        yield srv


async def test_pod_gc_keeps_terminated_pods_under_the_threshold_and_cleans_up_deleted_nodes(
        pgsrv: ServerHandle) -> None:
    http = Http(pgsrv)
    try:
        for i in range(3):
            code, obj = await http.req("POST", PODS, pod(f"done-{i}", uid=""))
            assert code == 201, obj
            await http.req("PATCH", f"{PODS}/done-{i}/status", {"status": {"phase": "Succeeded"}},
                           content_type="application/merge-patch+json")
            await asyncio.sleep(1.1)  # distinct creation timestamps (second resolution)

        async def left() -> list[str] | None:
            _c, lst = await http.req("GET", PODS)
            names = sorted(p["metadata"]["name"] for p in lst["items"])
            return names if len(names) == 1 else None

        assert await eventually(left, "terminated pods over the threshold to go") == ["done-2"]
        # a deleted node takes its pods and its Lease with it
        code, n = await http.req("POST", "/api/v1/nodes", node("n9"))
        assert code == 201, n
        code, obj = await http.req("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n9"},
            "spec": {"holderIdentity": "n9", "leaseDurationSeconds": 40}})
        assert code == 201, obj
        await _ready_pod(http, "on-n9", node_name="n9")
        code, _ = await http.req("DELETE", "/api/v1/nodes/n9")
        assert code == 200
        await eventually(lambda: _gone(http, f"{PODS}/on-n9"), "the pod of the deleted node to go")
        await eventually(lambda: _gone(http, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n9"),
                         "the deleted node's Lease to go")
    finally:
        await http.close()


# ------------------------------------------------------------------ cascades through the workload controllers
async def test_deleting_a_deployment_cascades_or_orphans_as_asked(ghttp: Http, gkubectl: Kubectl) -> None:
    await gkubectl.ok("create", "deployment", "web", "--image=busybox:1.36", "--replicas=2")

    async def owned(kind_path: str, n: int) -> list[dict[str, Any]]:
        _c, lst = await ghttp.req("GET", kind_path, params={"labelSelector": "app=web"})
        items = [o for o in lst["items"] if not o["metadata"].get("deletionTimestamp")]
        return items if len(items) == n else []

    rs_path = "/apis/apps/v1/namespaces/default/replicasets"
    await eventually(lambda: owned(PODS, 2), "the deployment's pods")
    # orphan: the ReplicaSet and its pods stay, without the reference to the Deployment
    await gkubectl.ok("delete", "deployment", "web", "--cascade=orphan")
    [rs] = await eventually(lambda: owned(rs_path, 1), "the orphaned ReplicaSet")
    await eventually(lambda: _gone(ghttp, "/apis/apps/v1/namespaces/default/deployments/web"), "the Deployment")

    async def released() -> bool:
        _c, o = await ghttp.req("GET", f"{rs_path}/{rs['metadata']['name']}")
        return not o["metadata"].get("ownerReferences")

    await eventually(released, "the ReplicaSet to lose its ownerReference")
    assert len(await owned(PODS, 2)) == 2
    # foreground: the pods go before the ReplicaSet
    await gkubectl.ok("delete", "rs", rs["metadata"]["name"], "--cascade=foreground")
    assert await _gone(ghttp, f"{rs_path}/{rs['metadata']['name']}")
    _c, left = await ghttp.req("GET", PODS, params={"labelSelector": "app=web"})
    assert left["items"] == [], "foreground deletion removed the pods before the ReplicaSet"
