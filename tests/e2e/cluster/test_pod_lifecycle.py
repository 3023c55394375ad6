"""End to end: the pod lifecycle in full, observed the way a user does with kubectl.

Probes, hooks, termination (grace periods, preStop before SIGTERM, SIGKILL at the deadline),
init containers and sidecars (the STATUS column sequence), crash-loop back-off spacing, aggregated
events in ``kubectl describe`` and activeDeadlineSeconds. Every test runs its own pod and deletes it.
Bounds are generous: these check behaviour, not latency.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import time
from calendar import timegm
from typing import Any

import pytest


def apply(cluster, manifest: str) -> None:  # type: ignore[no-untyped-def]
    """Create the pod already bound to the node (these tests are about the kubelet, not scheduling)."""
    text = textwrap.dedent(manifest).replace("\nspec:\n", f"\nspec:\n  nodeName: {cluster.node_name}\n", 1)
    cluster.kubectl("apply", "-f", "-", input=text)


def delete(cluster, name: str, *extra: str) -> float:  # type: ignore[no-untyped-def]
    """Delete and wait until the pod object is gone; returns how long that took."""
    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true", *extra, timeout=120)
    return time.monotonic() - t0


def pod_json(cluster, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    res = cluster.kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def cstatus(pod: dict[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next((s for s in (pod.get("status") or {}).get(key) or [] if s["name"] == name), {})


def events(cluster, name: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    items = json.loads(cluster.kubectl("get", "events", "-o", "json").stdout).get("items") or []
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


def ts(s: str) -> float:
    return float(timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")))


class Sampler:
    """Polls `kubectl get pod NAME --no-headers` and keeps each distinct (READY, STATUS) in order."""

    def __init__(self, cluster, name: str) -> None:  # type: ignore[no-untyped-def]
        self.cluster, self.name = cluster, name
        self.seen: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                res = self.cluster.kubectl("get", "pod", self.name, "--no-headers", check=False, timeout=20)
            except subprocess.TimeoutExpired:
                continue
            cols = res.stdout.split()
            if res.returncode == 0 and len(cols) >= 3:
                cur = (cols[1], cols[2])
                if not self.seen or self.seen[-1] != cur:
                    self.seen.append(cur)
            self._stop.wait(0.3)

    def statuses(self) -> list[str]:
        out: list[str] = []
        for _ready, st in self.seen:
            if not out or out[-1] != st:
                out.append(st)
        return out


def is_subsequence(want: list[str], got: list[str]) -> bool:
    it = iter(got)
    return all(any(w == g for g in it) for w in want)


# ----------------------------------------------------------------------------------- init + sidecar
def test_init_containers_and_sidecar_status_sequence(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-init-seq"
    manifest = f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: 2
      initContainers:
      - name: sidecar
        image: "busybox:1.36"
        restartPolicy: Always
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
      - {{name: init1, image: "busybox:1.36", command: ["sleep", "4"]}}
      - {{name: init2, image: "busybox:1.36", command: ["sleep", "4"]}}
      containers:
      - name: app
        image: "busybox:1.36"
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
        lifecycle:
          postStart: {{exec: {{command: ["sleep", "3"]}}}}
    """
    try:
        with Sampler(cluster, name) as s:
            apply(cluster, manifest)
            cluster.wait_for(f"{name} Running",
                             lambda: s.seen and s.seen[-1] == ("2/2", "Running"), 120)
        got = s.statuses()
        # kubectl counts the sidecar among the init containers (3); a started sidecar is skipped
        assert is_subsequence(["Init:1/3", "Init:2/3", "PodInitializing", "Running"], got), got
        pod = pod_json(cluster, name)
        sc, i1 = cstatus(pod, "sidecar", init=True), cstatus(pod, "init1", init=True)
        assert sc["started"] is True and "running" in sc["state"]
        assert ts(sc["state"]["running"]["startedAt"]) <= ts(i1["state"]["terminated"]["startedAt"])
        assert i1["state"]["terminated"]["reason"] == "Completed"
    finally:
        delete(cluster, name)


def test_job_style_pod_with_sidecar_succeeds(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-job-sidecar"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 3
      initContainers:
      - name: proxy
        image: "busybox:1.36"
        restartPolicy: Always
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
      containers:
      - {{name: job, image: "busybox:1.36", command: ["sh", "-c", "sleep 2; echo done"]}}
    """)
    try:
        cluster.wait_for(f"{name} Succeeded", lambda: pod_json(cluster, name)["status"]["phase"] == "Succeeded", 90)
        cluster.wait_for("sidecar stopped", lambda: "terminated" in cstatus(
            pod_json(cluster, name), "proxy", init=True).get("state", {}), 30)
        assert "Completed" in cluster.kubectl("get", "pod", name, "--no-headers").stdout
    finally:
        delete(cluster, name)


def test_failing_init_container_never_fails_pod(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-init-never"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      restartPolicy: Never
      initContainers:
      - {{name: broken, image: "busybox:1.36", command: ["sh", "-c", "exit 3"]}}
      containers:
      - {{name: app, image: "busybox:1.36", command: ["sleep", "3600"]}}
    """)
    try:
        cluster.wait_for(f"{name} Failed", lambda: pod_json(cluster, name)["status"]["phase"] == "Failed", 60)
        assert "Init:Error" in cluster.kubectl("get", "pod", name, "--no-headers").stdout
        assert cstatus(pod_json(cluster, name), "broken", init=True)["state"]["terminated"]["exitCode"] == 3
    finally:
        delete(cluster, name)


def test_failing_init_container_crash_loops(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-init-crash"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      initContainers:
      - {{name: broken, image: "busybox:1.36", command: ["sh", "-c", "exit 1"]}}
      containers:
      - {{name: app, image: "busybox:1.36", command: ["sleep", "3600"]}}
    """)
    try:
        with Sampler(cluster, name) as s:
            cluster.wait_for("Init:CrashLoopBackOff", lambda: "Init:CrashLoopBackOff" in s.statuses(), 60)
        # Init:Error shows between an exit and the restart; the first restart is immediate (as
        # upstream), so sampling may miss it: the init container's last state tells the same story.
        last = cstatus(pod_json(cluster, name), "broken", init=True).get("lastState", {}).get("terminated", {})
        assert "Init:Error" in s.statuses() or (last.get("reason"), last.get("exitCode")) == ("Error", 1)
        assert pod_json(cluster, name)["status"]["phase"] == "Pending"
    finally:
        delete(cluster, name, "--grace-period=1")


# ----------------------------------------------------------------------------------- crash loop
def test_crash_loop_backoff_spacing_and_aggregated_event(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-crash"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      containers:
      - {{name: crash, image: "busybox:1.36", command: ["sh", "-c", "echo boom; exit 1"]}}
    """)
    starts: set[float] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            cs = cstatus(pod_json(cluster, name), "crash")
            for st in (cs.get("state") or {}, cs.get("lastState") or {}):
                for v in st.values():
                    if v.get("startedAt"):
                        starts.add(ts(v["startedAt"]))
            if cs.get("restartCount", 0) >= 4 and len(starts) >= 4:
                break
            time.sleep(0.5)
        # upstream: the first restart is immediate, then back-off 10 s, 20 s, 40 s (+ sync/relist
        # latency; timestamps have 1 s resolution, so the immediate restart may share a second)
        gaps = [b - a for a, b in zip(sorted(starts), sorted(starts)[1:], strict=False)]
        gaps = [g for g in gaps if g >= 5]
        assert len(gaps) >= 3, (starts, cluster.logs())
        assert 8 <= gaps[0] <= 17, gaps
        assert 17 <= gaps[1] <= 29, gaps
        assert 36 <= gaps[2] <= 53, gaps
        backoffs = [e for e in events(cluster, name) if e["reason"] == "BackOff"]
        assert len(backoffs) == 1, backoffs  # aggregated: one Event, growing count
        assert backoffs[0]["count"] >= 2 and backoffs[0]["type"] == "Warning"
        assert backoffs[0]["message"].startswith("Back-off restarting failed container crash in pod")
        describe = cluster.kubectl("describe", "pod", name).stdout
        for reason in ("Pulled", "Created", "Started", "BackOff"):
            assert reason in describe, describe
        # Between restarts (the container runs for an instant each time) kubectl shows the back-off.
        cluster.wait_for("STATUS CrashLoopBackOff", lambda: "CrashLoopBackOff" in
                         cluster.kubectl("get", "pod", name, "--no-headers").stdout, 60)
    finally:
        delete(cluster, name, "--grace-period=1")


# ----------------------------------------------------------------------------------- probes
def test_http_liveness_failure_restarts_container(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-liveness"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: "busybox:1.36"
        command: ["sh", "-c", "mkdir -p /www; echo ok > /www/healthz; (sleep 6; rm /www/healthz) & exec httpd -f -p 8080 -h /www"]
        livenessProbe:
          httpGet: {{path: /healthz, port: 8080}}
          periodSeconds: 1
          failureThreshold: 2
    """)
    try:
        cluster.wait_for("a liveness restart",
                         lambda: cstatus(pod_json(cluster, name), "web").get("restartCount", 0) >= 1, 90)
        # Events are written in the background, so they may land just after the status.
        cluster.wait_for("the Killing event", lambda: "Container web failed liveness probe, will be restarted" in
                         [e["message"] for e in events(cluster, name) if e["reason"] == "Killing"], 30)
        evs = events(cluster, name)
        unhealthy = [e["message"] for e in evs if e["reason"] == "Unhealthy"]
        assert any(m.startswith("Liveness probe failed: HTTP probe failed with statuscode: 404") for m in unhealthy)
        cluster.wait_for("running again", lambda: "running" in cstatus(pod_json(cluster, name), "web")["state"], 30)
        assert "Unhealthy" in cluster.kubectl("describe", "pod", name).stdout
    finally:
        delete(cluster, name)


def test_readiness_flips_ready_both_ways(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-readiness"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: "busybox:1.36"
        command: ["sh", "-c", "while true; do touch /tmp/ready; sleep 8; rm -f /tmp/ready; sleep 8; done"]
        readinessProbe:
          exec: {{command: ["cat", "/tmp/ready"]}}
          periodSeconds: 1
          timeoutSeconds: 5  # an exec that takes over 1 s on a loaded machine is a failure
    """)
    try:
        with Sampler(cluster, name) as s:
            cluster.wait_for("READY 1/1 -> 0/1 -> 1/1", lambda: is_subsequence(
                ["1/1", "0/1", "1/1"], [r for r, st in s.seen if st == "Running"]), 90)
        pod = pod_json(cluster, name)
        conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert set(conds) >= {"Ready", "ContainersReady"}
        assert cstatus(pod, "app")["restartCount"] == 0
    finally:
        delete(cluster, name)


def test_startup_probe_protects_slow_starter(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-startup"
    # timeoutSeconds 5: an exec slower than 1 s on a loaded machine must not count as a failure (the
    # liveness probe's one failure would restart the container); 20 s of start-up: the test must see
    # the container running before the startup probe passes, also when the machine is loaded
    probe = '{exec: {command: ["cat", "/tmp/started"]}, periodSeconds: 1, timeoutSeconds: 5'
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: slow
        image: "busybox:1.36"
        command: ["sh", "-c", "sleep 20; touch /tmp/started; sleep 3600"]
        startupProbe: {probe}, failureThreshold: 60}}
        livenessProbe: {probe}, failureThreshold: 1}}
    """)
    try:
        cluster.wait_for("running", lambda: "running" in cstatus(pod_json(cluster, name), "slow").get("state", {}), 60)
        cs = cstatus(pod_json(cluster, name), "slow")
        assert cs["started"] is False  # startup probe not passed yet
        cluster.wait_for("started", lambda: cstatus(pod_json(cluster, name), "slow").get("started") is True, 60)
        time.sleep(4)
        cs = cstatus(pod_json(cluster, name), "slow")
        assert cs["restartCount"] == 0 and cs["ready"] is True
        assert not [e for e in events(cluster, name) if e["reason"] == "Killing"]
    finally:
        delete(cluster, name)


# ----------------------------------------------------------------------------------- termination
def test_prestop_runs_before_sigterm(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-prestop"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: app
        image: "busybox:1.36"
        command: ["sh", "-c", "trap 'echo got-TERM; exit 0' TERM; echo started; while true; do sleep 1; done"]
        lifecycle:
          preStop: {{exec: {{command: ["sh", "-c", "echo in-preStop > /proc/1/fd/1; sleep 2"]}}}}
    """)
    follower: subprocess.Popen[str] | None = None
    try:
        cluster.wait_for("running", lambda: "running" in cstatus(pod_json(cluster, name), "app").get("state", {}), 60)
        follower = subprocess.Popen(
            ["kubectl", f"--kubeconfig={cluster.kubeconfig}", "logs", "-f", name],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        took = delete(cluster, name)
        out, _ = follower.communicate(timeout=30)
        lines = out.splitlines()
        assert "in-preStop" in lines and "got-TERM" in lines, out
        assert lines.index("in-preStop") < lines.index("got-TERM"), out
        assert took >= 2  # the preStop's sleep ran before the container was signalled
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait()
        delete(cluster, name)


@pytest.mark.parametrize("spec_grace,flag,low", [(5, None, 4.0), (60, "--grace-period=4", 3.0)])
def test_sigterm_ignored_killed_at_grace(cluster, spec_grace: int, flag: str | None, low: float) -> None:  # type: ignore[no-untyped-def]
    name = f"lc-ignore-term-{spec_grace}"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: {spec_grace}
      containers:
      - {{name: stubborn, image: "busybox:1.36", command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]}}
    """)
    try:
        cluster.wait_for("running", lambda: "running" in cstatus(pod_json(cluster, name), "stubborn").get("state", {}), 60)
        took = delete(cluster, name, *([flag] if flag else []))
        assert low <= took < 15, took  # SIGKILL at the end of the grace period, not before
    finally:
        delete(cluster, name, "--grace-period=1")


def test_hook_failures_are_reported(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-hooks"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      terminationGracePeriodSeconds: 3
      containers:
      - name: post
        image: "busybox:1.36"
        command: ["sleep", "3600"]
        lifecycle:
          postStart: {{exec: {{command: ["sh", "-c", "exit 3"]}}}}
      - name: pre
        image: "busybox:1.36"
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
        lifecycle:
          preStop: {{exec: {{command: ["sh", "-c", "exit 4"]}}}}
    """)
    try:
        cluster.wait_for("FailedPostStartHook", lambda: any(
            e["reason"] == "FailedPostStartHook" for e in events(cluster, name)), 60)
        ev = next(e for e in events(cluster, name) if e["reason"] == "FailedPostStartHook")
        assert ev["type"] == "Warning" and "exited with 3" in ev["message"]
        cluster.wait_for("post killed", lambda: cstatus(pod_json(cluster, name), "post").get("restartCount", 0) >= 1
                         or "terminated" in (cstatus(pod_json(cluster, name), "post").get("lastState") or {}), 60)
        cluster.wait_for("pre running", lambda: "running" in cstatus(pod_json(cluster, name), "pre").get("state", {}), 30)
        # FailedPreStopHook is emitted while the pod terminates; the pod object is gone after that
        cluster.kubectl("delete", "pod", name, "--wait=false")
        cluster.wait_for("FailedPreStopHook", lambda: any(
            e["reason"] == "FailedPreStopHook" for e in events(cluster, name)), 30)
    finally:
        delete(cluster, name)


def test_termination_messages(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-termmsg"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      restartPolicy: Never
      containers:
      - {{name: file, image: "busybox:1.36", command: ["sh", "-c", "echo -n bye-file > /dev/termination-log; exit 3"]}}
      - name: logs
        image: "busybox:1.36"
        terminationMessagePolicy: FallbackToLogsOnError
        command: ["sh", "-c", "echo bye-from-logs; exit 2"]
    """)
    try:
        cluster.wait_for(f"{name} Failed", lambda: pod_json(cluster, name)["status"]["phase"] == "Failed", 60)
        pod = pod_json(cluster, name)
        assert cstatus(pod, "file")["state"]["terminated"]["message"] == "bye-file"
        assert "bye-from-logs" in cstatus(pod, "logs")["state"]["terminated"]["message"]
    finally:
        delete(cluster, name)


def test_active_deadline_seconds(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "lc-deadline"
    apply(cluster, f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}}}
    spec:
      activeDeadlineSeconds: 5
      terminationGracePeriodSeconds: 1
      containers:
      - {{name: app, image: "busybox:1.36", command: ["sleep", "3600"]}}
    """)
    try:
        cluster.wait_for(f"{name} Failed", lambda: pod_json(cluster, name)["status"]["phase"] == "Failed", 60)
        st = pod_json(cluster, name)["status"]
        assert st["reason"] == "DeadlineExceeded"
        assert any(e["reason"] == "DeadlineExceeded" for e in events(cluster, name))
        cluster.wait_for("container stopped", lambda: "terminated" in cstatus(pod_json(cluster, name), "app")["state"], 30)
        # as on a real cluster, kubectl's STATUS column then shows the killed container's reason
        assert cluster.kubectl("get", "pod", name, "--no-headers").stdout.split()[2] == "Error"
    finally:
        delete(cluster, name)
