"""compute_pod_actions and Backoff: upstream computePodActions / flowcontrol.Backoff behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.agent.kuberuntime.actions import (
    backoff_key,
    compute_pod_actions,
    format_duration,
    should_container_be_restarted,
)
from pykubelet.agent.kuberuntime.backoff import Backoff
from pykubelet.agent.container.runtime import (
    ContainerRuntimeStatus,
    RuntimePodStatus,
    SandboxRuntimeStatus,
    hash_container,
)

NOW = 1_000_000.0


def ctr(name: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **kw}


def pod(containers: list[dict[str, Any]], *, policy: str = "Always", inits: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"containers": containers, "restartPolicy": policy, **spec}
    if inits:
        s["initContainers"] = inits
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": s}


def sandbox(ready: bool = True, attempt: int = 0, ips: list[str] | None = None, sid: str = "sb1") -> SandboxRuntimeStatus:
    return SandboxRuntimeStatus(id=sid, ready=ready, attempt=attempt, ips=["198.18.0.2"] if ips is None else ips)


def running(spec: dict[str, Any], cid: str | None = None, restarts: int = 0) -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(id=cid or f"id-{spec['name']}-{restarts}", name=spec["name"], state="running",
                                  hash=hash_container(spec), restart_count=restarts, created_at=NOW - 100 + restarts)


def exited(spec: dict[str, Any], code: int, *, finished: float = NOW - 1, restarts: int = 0,
           cid: str | None = None) -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(id=cid or f"id-{spec['name']}-{restarts}", name=spec["name"], state="exited",
                                  exit_code=code, finished_at=finished, hash=hash_container(spec),
                                  restart_count=restarts, created_at=NOW - 100 + restarts)


def status(*containers: ContainerRuntimeStatus, sandboxes: list[SandboxRuntimeStatus] | None = None) -> RuntimePodStatus:
    st = RuntimePodStatus(uid="u1", sandboxes=[sandbox()] if sandboxes is None else sandboxes,
                          containers=list(containers))
    st.sort()
    return st


def plan(p: dict[str, Any], st: RuntimePodStatus, backoff: Backoff | None = None) -> Any:
    return compute_pod_actions(p, st, now=NOW, backoff=backoff or Backoff(clock=lambda: NOW))


# ---------------------------------------------------------------- sandbox
def test_new_pod_creates_sandbox_and_all_containers() -> None:
    a, b = ctr("a"), ctr("b")
    acts = plan(pod([a, b]), status(sandboxes=[]))
    assert acts.create_sandbox and acts.kill_pod and acts.attempt == 0
    assert acts.containers_to_start == ["a", "b"]


def test_new_pod_with_init_starts_only_first_init() -> None:
    acts = plan(pod([ctr("a")], inits=[ctr("i1"), ctr("i2")]), status(sandboxes=[]))
    assert acts.create_sandbox and acts.init_containers_to_start == ["i1"] and not acts.containers_to_start


def test_dead_sandbox_recreated_with_next_attempt() -> None:
    a = ctr("a")
    acts = plan(pod([a]), status(exited(a, 137), sandboxes=[sandbox(ready=False, attempt=2)]))
    assert acts.create_sandbox and acts.kill_pod and acts.attempt == 3


def test_sandbox_without_ip_recreated_unless_host_network() -> None:
    a = ctr("a")
    assert plan(pod([a]), status(running(a), sandboxes=[sandbox(ips=[])])).create_sandbox
    st = status(running(a), sandboxes=[SandboxRuntimeStatus(id="s", ready=True, host_network=True)])
    assert not plan(pod([a], hostNetwork=True), st).create_sandbox


def test_network_mode_change_recreates_sandbox() -> None:
    a = ctr("a")
    assert plan(pod([a], hostNetwork=True), status(running(a))).create_sandbox


def test_two_ready_sandboxes_recreated() -> None:
    a = ctr("a")
    st = status(running(a), sandboxes=[sandbox(sid="x"), sandbox(sid="y")])
    assert plan(pod([a]), st).create_sandbox


def test_never_pod_not_restarted_after_sandbox_death() -> None:
    a = ctr("a")
    acts = plan(pod([a], policy="Never"), status(exited(a, 0), sandboxes=[sandbox(ready=False)]))
    assert acts.kill_pod and not acts.create_sandbox and not acts.containers_to_start


def test_onfailure_new_sandbox_skips_succeeded_containers() -> None:
    a, b = ctr("a"), ctr("b")
    acts = plan(pod([a, b], policy="OnFailure"),
                status(exited(a, 0), exited(b, 1), sandboxes=[sandbox(ready=False)]))
    assert acts.create_sandbox and acts.containers_to_start == ["b"]


def test_onfailure_all_succeeded_no_new_sandbox() -> None:
    a = ctr("a")
    acts = plan(pod([a], policy="OnFailure"), status(exited(a, 0), sandboxes=[sandbox(ready=False)]))
    assert not acts.create_sandbox


# ---------------------------------------------------------------- steady state / restarts
def test_running_pod_is_noop() -> None:
    a, b = ctr("a"), ctr("b")
    acts = plan(pod([a, b]), status(running(a), running(b)))
    assert acts.is_noop() and not acts.backoff


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 1, True),
     ("Never", 0, False), ("Never", 1, False)],
)
def test_restart_policy_per_exit(policy: str, code: int, restart: bool) -> None:
    a, b = ctr("a"), ctr("b")
    acts = plan(pod([a, b], policy=policy), status(exited(a, code), running(b)))
    assert (acts.containers_to_start == ["a"]) is restart
    assert not acts.kill_pod


def test_all_done_kills_pod() -> None:
    a = ctr("a")
    acts = plan(pod([a], policy="Never"), status(exited(a, 1)))
    assert acts.kill_pod and not acts.create_sandbox and not acts.containers_to_start


def test_spec_change_restarts_container() -> None:
    a = ctr("a")
    old = running(ctr("a", command=["old"]), cid="c1")
    acts = plan(pod([a]), status(old))
    assert "c1" in acts.containers_to_kill
    assert acts.containers_to_kill["c1"].message == "Container a definition changed"
    assert acts.containers_to_start == ["a"]


def test_resources_change_does_not_restart() -> None:
    a = ctr("a", resources={"limits": {"cpu": "1"}})
    acts = plan(pod([a]), status(running(ctr("a"))))
    assert acts.is_noop()


def test_unknown_state_killed_then_restarted() -> None:
    a = ctr("a")
    unk = ContainerRuntimeStatus(id="u", name="a", state="unknown", hash=hash_container(a))
    acts = plan(pod([a]), status(unk))
    assert "u" in acts.containers_to_kill and acts.containers_to_start == ["a"]


def test_deleted_pod_does_not_restart() -> None:
    a = ctr("a")
    p = pod([a])
    p["metadata"]["deletionTimestamp"] = "x"
    assert not should_container_be_restarted(a, p, status(exited(a, 1)))


# ---------------------------------------------------------------- init containers / sidecars
def test_init_containers_one_at_a_time() -> None:
    i1, i2, a = ctr("i1"), ctr("i2"), ctr("a")
    p = pod([a], inits=[i1, i2])
    assert plan(p, status()).init_containers_to_start == ["i1"]
    acts = plan(p, status(running(i1)))
    assert acts.is_noop()
    acts = plan(p, status(exited(i1, 0)))
    assert acts.init_containers_to_start == ["i2"] and not acts.containers_to_start
    acts = plan(p, status(exited(i1, 0), exited(i2, 0)))
    assert acts.containers_to_start == ["a"] and not acts.init_containers_to_start


def test_failed_init_restarted_unless_never() -> None:
    i1, a = ctr("i1"), ctr("a")
    acts = plan(pod([a], inits=[i1]), status(exited(i1, 1)))
    assert acts.init_containers_to_start == ["i1"] and not acts.containers_to_start
    acts = plan(pod([a], policy="Never", inits=[i1]), status(exited(i1, 1)))
    assert acts.kill_pod and acts.init_failed and not acts.init_containers_to_start


def test_init_not_rerun_once_app_containers_exist() -> None:
    i1, a = ctr("i1"), ctr("a")
    acts = plan(pod([a], inits=[i1]), status(running(a)))  # init container GC'd
    assert acts.is_noop()


def test_sidecar_started_before_app_and_kept_running() -> None:
    sc, i2, a = ctr("sc", restartPolicy="Always"), ctr("i2"), ctr("a")
    p = pod([a], inits=[sc, i2])
    assert plan(p, status()).init_containers_to_start == ["sc"]
    assert plan(p, status(running(sc))).init_containers_to_start == ["i2"]
    acts = plan(p, status(running(sc), exited(i2, 0)))
    assert acts.containers_to_start == ["a"]
    # sidecar died while the app runs: restart it, leave the app alone
    acts = plan(p, status(exited(sc, 1), exited(i2, 0), running(a)))
    assert acts.init_containers_to_start == ["sc"] and not acts.containers_to_start and not acts.kill_pod


def test_sidecar_does_not_keep_finished_pod_alive() -> None:
    sc, a = ctr("sc", restartPolicy="Always"), ctr("a")
    acts = plan(pod([a], policy="Never", inits=[sc]), status(running(sc), exited(a, 0)))
    assert acts.kill_pod


# ---------------------------------------------------------------- crash loop back-off
def test_crashloop_backoff_sequence() -> None:
    clock = [NOW]
    b = Backoff(10, 300, clock=lambda: clock[0])
    a = ctr("a")
    p = pod([a])
    key = backoff_key(p, a)
    # first crash: restart at once (and the executor records the back-off)
    acts = compute_pod_actions(p, status(exited(a, 1, finished=NOW)), now=NOW, backoff=b)
    assert acts.containers_to_start == ["a"]
    b.next(key, NOW)
    # second crash right after: held back 10s
    acts = compute_pod_actions(p, status(exited(a, 1, finished=NOW + 1, restarts=1)), now=NOW + 2, backoff=b)
    assert not acts.containers_to_start and "back-off 10s restarting failed container=a pod=p_ns(u1)" == acts.backoff["a"]
    assert not acts.kill_pod
    acts = compute_pod_actions(p, status(exited(a, 1, finished=NOW + 1, restarts=1)), now=NOW + 11.5, backoff=b)
    assert acts.containers_to_start == ["a"]
    assert b.next(key, NOW + 1) == 20
    assert [b.next(key, NOW + 2) for _ in range(5)] == [40, 80, 160, 300, 300]


def test_backoff_key_changes_with_spec() -> None:
    p = pod([ctr("a")])
    assert backoff_key(p, ctr("a")) != backoff_key(p, ctr("a", command=["x"]))


def test_backoff_resets_after_long_run() -> None:
    b = Backoff(10, 300, clock=lambda: 0.0)
    b.next("k", 0)
    b.next("k", 1)
    assert b.get("k") == 20
    assert b.next("k", 1 + 601) == 10  # ran more than 2*max: back to initial


def test_backoff_in_backoff_since_and_gc() -> None:
    t = [100.0]
    b = Backoff(10, 300, clock=lambda: t[0])
    assert not b.is_in_backoff_since("k", 100)
    b.next("k", 100)
    assert b.is_in_backoff_since("k", 100)
    t[0] = 111
    assert not b.is_in_backoff_since("k", 100)
    t[0] = 100 + 601
    b.gc()
    assert b.get("k") == 0


def test_format_duration_like_go() -> None:
    assert [format_duration(s) for s in (10, 80, 160, 300)] == ["10s", "1m20s", "2m40s", "5m0s"]
