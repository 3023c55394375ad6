"""What the runtime manager does next for a pod: upstream computePodActions, as one table of cases.

Each case is a pod spec, the runtime's view of the pod and what must follow (sandbox to create,
containers to start or kill, back-off); its id names the behaviour. Below the table: the crash-loop
back-off over time (flowcontrol.Backoff), restart decisions, and the termination order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pykubelet.agent.container.runtime import ContainerRuntimeStatus, RuntimePodStatus, hash_container
from pykubelet.agent.kuberuntime.actions import (
    ProbeKill,
    ProbeKillFunc,
    StartedFunc,
    backoff_key,
    compute_pod_actions,
    format_duration,
    should_container_be_restarted,
    termination_dependencies,
)
from pykubelet.common.backoff import Backoff
from tests.builders import NOW, container, exited, pod, running, runtime_status, sandbox

JSON = dict[str, Any]


def plan(p: JSON, st: RuntimePodStatus, backoff: Backoff | None = None, **kw: Any) -> Any:
    return compute_pod_actions(p, st, now=NOW, backoff=backoff or Backoff(clock=lambda: NOW), **kw)


def liveness_failed(*names: str, grace: int | None = None) -> ProbeKillFunc:
    def f(name: str, cid: str) -> ProbeKill | None:
        if name in names:
            return ProbeKill("LivenessProbe", f"Container {name} failed liveness probe", grace)
        return None
    return f


@dataclass
class Case:
    """A pod, the runtime's view of it, and the expected PodActions fields.

    ``expect`` maps PodActions attributes to their expected value; ``containers_to_kill`` maps
    runtime ids to the expected ContainerToKill fields; ``noop`` checks PodActions.is_noop()."""

    pod: JSON
    status: RuntimePodStatus
    expect: dict[str, Any]
    probe_kill: ProbeKillFunc | None = None
    started: StartedFunc | None = None


a, b = container("a"), container("b")
i1, i2 = container("i1"), container("i2")
app, other = container("app"), container("other")
sc = container("sc", restartPolicy="Always")  # a sidecar: an init container that keeps running
init = container("init")


def restart_case(policy: str, code: int, restart: bool) -> Case:
    return Case(pod(containers=[a, b], restart_policy=policy), runtime_status(exited(a, code), running(b)),
                {"containers_to_start": ["a"] if restart else [], "kill_pod": False})


CASES: dict[str, Case] = {
    # ---------------------------------------------------------------- sandbox
    "new-pod-creates-sandbox-and-all-containers": Case(
        pod(containers=[a, b]), runtime_status(sandboxes=[]),
        {"create_sandbox": True, "kill_pod": True, "attempt": 0, "containers_to_start": ["a", "b"]}),
    "new-pod-with-init-containers-starts-only-the-first-init": Case(
        pod(containers=[a], init_containers=[i1, i2]), runtime_status(sandboxes=[]),
        {"create_sandbox": True, "init_containers_to_start": ["i1"], "containers_to_start": []}),
    "dead-sandbox-is-recreated-with-the-next-attempt": Case(
        pod(containers=[a]), runtime_status(exited(a, 137), sandboxes=[sandbox(ready=False, attempt=2)]),
        {"create_sandbox": True, "kill_pod": True, "attempt": 3}),
    "sandbox-without-ip-is-recreated": Case(
        pod(containers=[a]), runtime_status(running(a), sandboxes=[sandbox(ips=[])]),
        {"create_sandbox": True}),
    "host-network-sandbox-without-ip-is-kept": Case(
        pod(containers=[a], hostNetwork=True),
        runtime_status(running(a), sandboxes=[sandbox("s", ips=[], host_network=True)]),
        {"create_sandbox": False}),
    "network-mode-change-recreates-sandbox": Case(
        pod(containers=[a], hostNetwork=True), runtime_status(running(a)),
        {"create_sandbox": True}),
    "two-ready-sandboxes-are-replaced": Case(
        pod(containers=[a]), runtime_status(running(a), sandboxes=[sandbox("x"), sandbox("y")]),
        {"create_sandbox": True}),
    "restart-never-pod-is-not-restarted-after-sandbox-death": Case(
        pod(containers=[a], restart_policy="Never"),
        runtime_status(exited(a, 0), sandboxes=[sandbox(ready=False)]),
        {"kill_pod": True, "create_sandbox": False, "containers_to_start": []}),
    "restart-onfailure-new-sandbox-skips-succeeded-containers": Case(
        pod(containers=[a, b], restart_policy="OnFailure"),
        runtime_status(exited(a, 0), exited(b, 1), sandboxes=[sandbox(ready=False)]),
        {"create_sandbox": True, "containers_to_start": ["b"]}),
    "restart-onfailure-all-succeeded-gets-no-new-sandbox": Case(
        pod(containers=[a], restart_policy="OnFailure"),
        runtime_status(exited(a, 0), sandboxes=[sandbox(ready=False)]),
        {"create_sandbox": False}),
    # ---------------------------------------------------------------- steady state / restarts
    "running-pod-needs-nothing": Case(
        pod(containers=[a, b]), runtime_status(running(a), running(b)),
        {"noop": True, "backoff": {}}),
    "restart-always-restarts-exit-0": restart_case("Always", 0, True),
    "restart-always-restarts-exit-1": restart_case("Always", 1, True),
    "restart-onfailure-keeps-exit-0": restart_case("OnFailure", 0, False),
    "restart-onfailure-restarts-exit-1": restart_case("OnFailure", 1, True),
    "restart-never-keeps-exit-0": restart_case("Never", 0, False),
    "restart-never-keeps-exit-1": restart_case("Never", 1, False),
    "all-containers-done-kills-pod": Case(
        pod(containers=[a], restart_policy="Never"), runtime_status(exited(a, 1)),
        {"kill_pod": True, "create_sandbox": False, "containers_to_start": []}),
    "changed-spec-restarts-container": Case(
        pod(containers=[a]), runtime_status(running(container("a", command=["old"]), cid="c1")),
        {"containers_to_kill": {"c1": {"message": "Container a definition changed"}},
         "containers_to_start": ["a"]}),
    "changed-resources-do-not-restart": Case(
        pod(containers=[container("a", resources={"limits": {"cpu": "1"}})]), runtime_status(running(a)),
        {"noop": True}),
    "unknown-state-is-killed-then-restarted": Case(
        pod(containers=[a]),
        runtime_status(ContainerRuntimeStatus(id="u", name="a", state="unknown", hash=hash_container(a))),
        {"containers_to_kill": {"u": {}}, "containers_to_start": ["a"]}),
    # ---------------------------------------------------------------- init containers / sidecars
    "init-containers-run-one-at-a-time-first": Case(
        pod(containers=[a], init_containers=[i1, i2]), runtime_status(),
        {"init_containers_to_start": ["i1"]}),
    "init-containers-run-one-at-a-time-wait-for-running": Case(
        pod(containers=[a], init_containers=[i1, i2]), runtime_status(running(i1)),
        {"noop": True}),
    "init-containers-run-one-at-a-time-next": Case(
        pod(containers=[a], init_containers=[i1, i2]), runtime_status(exited(i1, 0)),
        {"init_containers_to_start": ["i2"], "containers_to_start": []}),
    "init-containers-done-app-containers-start": Case(
        pod(containers=[a], init_containers=[i1, i2]), runtime_status(exited(i1, 0), exited(i2, 0)),
        {"containers_to_start": ["a"], "init_containers_to_start": []}),
    "failed-init-container-is-restarted": Case(
        pod(containers=[a], init_containers=[i1]), runtime_status(exited(i1, 1)),
        {"init_containers_to_start": ["i1"], "containers_to_start": []}),
    "failed-init-container-with-restart-never-fails-pod": Case(
        pod(containers=[a], restart_policy="Never", init_containers=[i1]), runtime_status(exited(i1, 1)),
        {"kill_pod": True, "init_failed": True, "init_containers_to_start": []}),
    "init-not-rerun-once-app-containers-exist": Case(  # the init container was garbage-collected
        pod(containers=[a], init_containers=[i1]), runtime_status(running(a)),
        {"noop": True}),
    "sidecar-starts-first": Case(
        pod(containers=[a], init_containers=[sc, i2]), runtime_status(),
        {"init_containers_to_start": ["sc"]}),
    "running-sidecar-lets-next-init-start": Case(
        pod(containers=[a], init_containers=[sc, i2]), runtime_status(running(sc)),
        {"init_containers_to_start": ["i2"]}),
    "running-sidecar-and-done-inits-let-app-start": Case(
        pod(containers=[a], init_containers=[sc, i2]), runtime_status(running(sc), exited(i2, 0)),
        {"containers_to_start": ["a"]}),
    "dead-sidecar-restarts-and-app-is-left-alone": Case(
        pod(containers=[a], init_containers=[sc, i2]), runtime_status(exited(sc, 1), exited(i2, 0), running(a)),
        {"init_containers_to_start": ["sc"], "containers_to_start": [], "kill_pod": False}),
    "sidecar-does-not-keep-finished-pod-alive": Case(
        pod(containers=[a], restart_policy="Never", init_containers=[sc]), runtime_status(running(sc), exited(a, 0)),
        {"kill_pod": True}),
    "sidecar-waits-for-startup-probe-before-next-init": Case(
        pod(containers=[app], init_containers=[sc, init]), runtime_status(running(sc)),
        {"init_containers_to_start": [], "containers_to_start": []}, started=lambda n: False),
    "started-sidecar-lets-next-init-start": Case(
        pod(containers=[app], init_containers=[sc, init]), runtime_status(running(sc)),
        {"init_containers_to_start": ["init"]}, started=lambda n: True),
    # ---------------------------------------------------------------- probe-driven kills
    "liveness-failure-kills-and-restarts-with-probe-grace": Case(
        pod(containers=[app]), runtime_status(running(app)),
        {"containers_to_kill": {"id-app": {"message": "Container app failed liveness probe, will be restarted",
                                           "reason": "LivenessProbe", "grace": 7}},
         "containers_to_start": ["app"], "kill_pod": False},
        probe_kill=liveness_failed("app", grace=7)),
    "liveness-failure-with-restart-never-kills-without-restart": Case(
        pod(containers=[app, other], restart_policy="Never"), runtime_status(running(app), running(other)),
        {"containers_to_kill": {"id-app": {"message": "Container app failed liveness probe"}},
         "containers_to_start": [], "kill_pod": False},  # "other" still runs
        probe_kill=liveness_failed("app")),
    "healthy-containers-are-kept": Case(
        pod(containers=[app]), runtime_status(running(app)), {"noop": True}, probe_kill=liveness_failed()),
    "dead-container-is-not-probe-killed": Case(
        pod(containers=[app]), runtime_status(exited(app, 1)), {"containers_to_kill": {}},
        probe_kill=liveness_failed("app")),
    "sidecar-liveness-failure-restarts-it-even-with-restart-never": Case(
        pod(containers=[app], restart_policy="Never", init_containers=[sc]), runtime_status(running(sc), running(app)),
        {"containers_to_kill": {"id-sc": {"message": "Init container sc failed liveness probe"}},
         "init_containers_to_start": ["sc"]},
        probe_kill=liveness_failed("sc")),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_compute_pod_actions(case: Case) -> None:
    kw: dict[str, Any] = {}
    if case.probe_kill is not None:
        kw["probe_kill"] = case.probe_kill
    if case.started is not None:
        kw["started"] = case.started
    acts = plan(case.pod, case.status, backoff=Backoff(10, 300), **kw)
    for attr, want in case.expect.items():
        if attr == "noop":
            assert acts.is_noop() is want, acts
        elif attr == "containers_to_kill":
            assert set(acts.containers_to_kill) == set(want), acts.containers_to_kill
            for cid, fields in want.items():
                for name, value in fields.items():
                    assert getattr(acts.containers_to_kill[cid], name) == value, (cid, name)
        else:
            assert getattr(acts, attr) == want, (attr, acts)


# ---------------------------------------------------------------- crash loop back-off over time
def test_crashloop_backoff_sequence() -> None:
    clock = [NOW]
    bo = Backoff(10, 300, clock=lambda: clock[0])
    p = pod(containers=[a], namespace="ns", uid="u1")
    key = backoff_key(p, a)
    # first crash: restart at once (and the executor records the back-off)
    acts = compute_pod_actions(p, runtime_status(exited(a, 1, finished_at=NOW), uid="u1"), now=NOW, backoff=bo)
    assert acts.containers_to_start == ["a"]
    bo.next(key, NOW)
    # second crash right after: held back 10s
    second = runtime_status(exited(a, 1, finished_at=NOW + 1, restarts=1), uid="u1")
    acts = compute_pod_actions(p, second, now=NOW + 2, backoff=bo)
    assert not acts.containers_to_start and "back-off 10s restarting failed container=a pod=p_ns(u1)" == acts.backoff["a"]
    assert not acts.kill_pod
    acts = compute_pod_actions(p, second, now=NOW + 11.5, backoff=bo)
    assert acts.containers_to_start == ["a"]
    assert bo.next(key, NOW + 1) == 20
    assert [bo.next(key, NOW + 2) for _ in range(5)] == [40, 80, 160, 300, 300]


def test_backoff_key_changes_with_spec() -> None:
    p = pod(containers=[a])
    assert backoff_key(p, container("a")) != backoff_key(p, container("a", command=["x"]))


def test_backoff_resets_after_long_run() -> None:
    bo = Backoff(10, 300, clock=lambda: 0.0)
    bo.next("k", 0)
    bo.next("k", 1)
    assert bo.get("k") == 20
    assert bo.next("k", 1 + 601) == 10  # ran more than 2*max: back to initial


def test_backoff_in_backoff_since_and_gc() -> None:
    t = [100.0]
    bo = Backoff(10, 300, clock=lambda: t[0])
    assert not bo.is_in_backoff_since("k", 100)
    bo.next("k", 100)
    assert bo.is_in_backoff_since("k", 100)
    t[0] = 111
    assert not bo.is_in_backoff_since("k", 100)
    t[0] = 100 + 601
    bo.gc()
    assert bo.get("k") == 0


def test_format_duration_like_go() -> None:
    assert [format_duration(s) for s in (10, 80, 160, 300)] == ["10s", "1m20s", "2m40s", "5m0s"]


def test_deleted_pod_does_not_restart() -> None:
    p = pod(containers=[a], metadata={"deletionTimestamp": "x"})
    assert not should_container_be_restarted(a, p, runtime_status(exited(a, 1)))


# ---------------------------------------------------------------- termination order
def test_termination_order_apps_first_then_sidecars_in_reverse() -> None:
    p = pod(containers=["a", "b"], init_containers=[container("s1", restartPolicy="Always"), "i",
                                                    container("s2", restartPolicy="Always")])
    deps = termination_dependencies(p, ["a", "b", "s1", "s2"])
    assert deps["a"] == set() and deps["b"] == set()
    assert deps["s2"] == {"a", "b"}
    assert deps["s1"] == {"a", "b", "s2"}
    assert termination_dependencies(None, ["a", "s1"]) == {"a": set(), "s1": set()}
    # only containers actually being stopped count
    assert termination_dependencies(p, ["s1"]) == {"s1": set()}
