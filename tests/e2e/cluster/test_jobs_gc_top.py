"""End to end: Jobs, disruption budgets with kubectl drain, and kubectl top on `pykubelet up`.

The pods really run on containerd; the finer points (pod failure policy, indexes, TTL, CronJob
schedules with a movable clock, foreground/orphan cascades) are covered on the dev control plane
in tests/integration/server/test_jobs_gc_pdb.py.
"""

from __future__ import annotations

import json
import re
import textwrap


def _job(cluster, name: str) -> dict:  # type: ignore[no-untyped-def]
    return dict(json.loads(cluster.kubectl("get", "job", name, "-o", "json").stdout))


def _condition(job: dict, typ: str) -> dict | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c["type"] == typ and c["status"] == "True"), None)


def test_jobs_complete_or_stop_at_their_backoff_limit(cluster) -> None:  # type: ignore[no-untyped-def]
    k = cluster.kubectl
    manifest = textwrap.dedent("""\
        apiVersion: batch/v1
        kind: Job
        metadata: {name: three}
        spec:
          completions: 3
          parallelism: 2
          template:
            spec:
              restartPolicy: Never
              terminationGracePeriodSeconds: 1
              containers: [{name: main, image: "busybox:1.36", command: [sh, -c, "sleep 1"]}]
        ---
        apiVersion: batch/v1
        kind: Job
        metadata: {name: doomed}
        spec:
          backoffLimit: 1
          template:
            spec:
              restartPolicy: Never
              terminationGracePeriodSeconds: 1
              containers: [{name: main, image: "busybox:1.36", command: [sh, -c, "exit 3"]}]
        """)
    k("apply", "-f", "-", input=manifest)
    try:
        k("wait", "--for=condition=complete", "job/three", "--timeout=90s", timeout=100)
        three = _job(cluster, "three")
        assert three["status"]["succeeded"] == 3
        out = k("get", "job", "three").stdout.splitlines()
        assert out[0].split()[:3] == ["NAME", "STATUS", "COMPLETIONS"] and out[1].split()[1:3] == ["Complete", "3/3"]
        k("wait", "--for=condition=failed", "job/doomed", "--timeout=90s", timeout=100)
        doomed = _job(cluster, "doomed")
        failed = _condition(doomed, "Failed")
        assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
        assert failed["message"] == "Job has reached the specified backoff limit"
        assert doomed["status"]["failed"] == 2
    finally:
        k("delete", "job", "three", "doomed", "--ignore-not-found", "--cascade=foreground", "--wait=true", timeout=90)
    pods = json.loads(k("get", "pods", "-l", "batch.kubernetes.io/job-name in (three,doomed)", "-o", "json").stdout)
    assert not pods["items"], "foreground deletion removed the Jobs' pods first"


def test_kubectl_top_and_drain_respecting_a_disruption_budget(cluster) -> None:  # type: ignore[no-untyped-def]
    k = cluster.kubectl
    manifest = textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata: {name: guarded, labels: {app: guarded}}
        spec:
          terminationGracePeriodSeconds: 1
          containers: [{name: main, image: "busybox:1.36", command: [sleep, "3600"]}]
        ---
        apiVersion: policy/v1
        kind: PodDisruptionBudget
        metadata: {name: guarded}
        spec:
          minAvailable: 1
          selector: {matchLabels: {app: guarded}}
        """)
    k("apply", "-f", "-", input=manifest)
    try:
        k("wait", "--for=condition=Ready", "pod/guarded", "--timeout=60s", timeout=70)
        top = k("top", "pod", "guarded", timeout=30).stdout.splitlines()
        assert re.fullmatch(r"guarded\s+\d+m\s+\d+Mi", top[1].strip()), top
        top = k("top", "node", timeout=30).stdout.splitlines()
        assert top[1].split()[0] == cluster.node_name and re.fullmatch(r"\d+m", top[1].split()[1]), top
        cluster.wait_for("the budget to be observed", lambda: cluster.jsonpath(
            "get", "pdb", "guarded", "-o", "jsonpath={.status.currentHealthy}") == "1", 30)
        res = k("drain", cluster.node_name, "--pod-selector=app=guarded", "--force", "--timeout=8s", check=False,
                timeout=40)
        assert res.returncode != 0
        assert "Cannot evict pod as it would violate the pod's disruption budget." in res.stdout + res.stderr
        assert cluster.jsonpath("get", "pod", "guarded", "-o", "jsonpath={.status.phase}") == "Running"
        k("delete", "pdb", "guarded")
        k("drain", cluster.node_name, "--pod-selector=app=guarded", "--force", "--timeout=60s", timeout=70)
        assert "NotFound" in k("get", "pod", "guarded", check=False).stderr
    finally:
        k("uncordon", cluster.node_name, check=False)
        k("delete", "pod", "guarded", "--ignore-not-found", "--grace-period=1", check=False, timeout=60)
        k("delete", "pdb", "guarded", "--ignore-not-found", check=False)
