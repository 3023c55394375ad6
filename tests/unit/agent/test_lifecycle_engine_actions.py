"""Issue 5 decision logic: probe-driven kills, sidecar startup gating, termination ordering, the
status generator's use of probe results, and event aggregation (one Event, growing count)."""

from __future__ import annotations

import asyncio
from typing import Any

from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kuberuntime.actions import ProbeKill, compute_pod_actions, termination_dependencies
from pykubelet.agent.kuberuntime.backoff import Backoff
from pykubelet.agent.container.runtime import (
    ContainerRuntimeStatus,
    RuntimePodStatus,
    SandboxRuntimeStatus,
    hash_container,
)
from pykubelet.agent.status.generate import generate_api_status

NOW = 1_000_000.0


def ctr(name: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **kw}


def mkpod(containers: list[dict[str, Any]], *, policy: str = "Always",
          inits: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "restartPolicy": policy}
    if inits:
        spec["initContainers"] = inits
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec}


def running(spec: dict[str, Any], cid: str = "") -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(id=cid or f"id-{spec['name']}", name=spec["name"], state="running",
                                  hash=hash_container(spec), created_at=NOW - 50, started_at=NOW - 50)


def exited(spec: dict[str, Any], code: int) -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(id=f"id-{spec['name']}", name=spec["name"], state="exited", exit_code=code,
                                  hash=hash_container(spec), created_at=NOW - 90, finished_at=NOW - 60)


def rstatus(*cs: ContainerRuntimeStatus) -> RuntimePodStatus:
    st = RuntimePodStatus(uid="u1", sandboxes=[SandboxRuntimeStatus(id="sb", ready=True, ips=["198.18.0.9"])],
                          containers=list(cs))
    st.sort()
    return st


def liveness_failed(*names: str, grace: int | None = None) -> Any:
    def f(name: str, cid: str) -> ProbeKill | None:
        if name in names:
            return ProbeKill("LivenessProbe", f"Container {name} failed liveness probe", grace)
        return None
    return f


def plan(pod: dict[str, Any], st: RuntimePodStatus, **kw: Any) -> Any:
    return compute_pod_actions(pod, st, now=NOW, backoff=Backoff(10, 300), **kw)


# ------------------------------------------------------------------------------ probe-driven kills
def test_liveness_failure_kills_and_restarts_with_probe_grace() -> None:
    app = ctr("app")
    a = plan(mkpod([app]), rstatus(running(app)), probe_kill=liveness_failed("app", grace=7))
    kill = a.containers_to_kill["id-app"]
    assert kill.message == "Container app failed liveness probe, will be restarted"
    assert kill.reason == "LivenessProbe" and kill.grace == 7
    assert a.containers_to_start == ["app"] and not a.kill_pod


def test_liveness_failure_with_restart_never_kills_without_restart() -> None:
    app, other = ctr("app"), ctr("other")
    a = plan(mkpod([app, other], policy="Never"), rstatus(running(app), running(other)),
             probe_kill=liveness_failed("app"))
    assert a.containers_to_kill["id-app"].message == "Container app failed liveness probe"
    assert a.containers_to_start == [] and not a.kill_pod  # "other" still runs


def test_healthy_containers_are_kept() -> None:
    app = ctr("app")
    a = plan(mkpod([app]), rstatus(running(app)), probe_kill=liveness_failed())
    assert a.is_noop()


def test_dead_container_is_not_probe_killed() -> None:
    app = ctr("app")
    st = rstatus(exited(app, 1))
    a = plan(mkpod([app]), st, probe_kill=liveness_failed("app"))
    assert a.containers_to_kill == {}


def test_sidecar_liveness_failure_restarts_it_even_with_restart_never() -> None:
    sc, app = ctr("sc", restartPolicy="Always"), ctr("app")
    a = plan(mkpod([app], policy="Never", inits=[sc]), rstatus(running(sc), running(app)),
             probe_kill=liveness_failed("sc"))
    assert a.containers_to_kill["id-sc"].message == "Init container sc failed liveness probe"
    assert a.init_containers_to_start == ["sc"]


def test_sidecar_waits_for_startup_probe_before_next_init_container() -> None:
    sc, init, app = ctr("sc", restartPolicy="Always"), ctr("init"), ctr("app")
    pod = mkpod([app], inits=[sc, init])
    waiting = plan(pod, rstatus(running(sc)), started=lambda n: False)
    assert waiting.init_containers_to_start == [] and waiting.containers_to_start == []
    go = plan(pod, rstatus(running(sc)), started=lambda n: True)
    assert go.init_containers_to_start == ["init"]


# ------------------------------------------------------------------------------ termination order
def test_termination_order_apps_first_then_sidecars_in_reverse() -> None:
    pod = mkpod([ctr("a"), ctr("b")], inits=[ctr("s1", restartPolicy="Always"), ctr("i"),
                                             ctr("s2", restartPolicy="Always")])
    deps = termination_dependencies(pod, ["a", "b", "s1", "s2"])
    assert deps["a"] == set() and deps["b"] == set()
    assert deps["s2"] == {"a", "b"}
    assert deps["s1"] == {"a", "b", "s2"}
    assert termination_dependencies(None, ["a", "s1"]) == {"a": set(), "s1": set()}
    # only containers actually being stopped count
    assert termination_dependencies(pod, ["s1"]) == {"s1": set()}


# ------------------------------------------------------------------------------ status from probes
def test_generate_uses_probe_results_for_ready_and_started() -> None:
    app = ctr("app")
    pod = mkpod([app])
    st = rstatus(running(app))
    unready = generate_api_status(pod, st, probes={"app": (True, False)}, now=NOW)
    cs = unready["containerStatuses"][0]
    assert cs["started"] is True and cs["ready"] is False
    conds = {c["type"]: c for c in unready["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["ContainersReady"]["reason"] == "ContainersNotReady"
    ready = generate_api_status({**pod, "status": unready}, st, probes={"app": (True, True)}, now=NOW + 5)
    conds = {c["type"]: c for c in ready["conditions"]}
    assert conds["Ready"]["status"] == "True" and ready["containerStatuses"][0]["ready"] is True
    not_started = generate_api_status(pod, st, probes={"app": (False, False)}, now=NOW)
    assert not_started["containerStatuses"][0]["started"] is False


def test_app_containers_wait_in_pod_initializing_when_pod_has_init_containers() -> None:
    init, app = ctr("init"), ctr("app")
    st = rstatus(ContainerRuntimeStatus(id="i", name="init", state="exited", exit_code=0, hash=hash_container(init)))
    out = generate_api_status(mkpod([app], inits=[init]), st, now=NOW)
    assert out["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_unstarted_sidecar_keeps_pod_pending() -> None:
    sc, app = ctr("sc", restartPolicy="Always"), ctr("app")
    out = generate_api_status(mkpod([app], inits=[sc]), rstatus(running(sc)), probes={"sc": (False, False)}, now=NOW)
    assert out["phase"] == "Pending"
    assert out["initContainerStatuses"][0]["started"] is False


# ------------------------------------------------------------------------------ event aggregation
class FakeApi:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        return body

    async def patch(self, path: str, body: dict[str, Any], patch_type: str = "merge") -> dict[str, Any]:
        self.patched.append((path, body))
        return body


def test_repeated_event_is_one_event_with_growing_count() -> None:
    async def go() -> FakeApi:
        api = FakeApi()
        rec = EventRecorder(api, host="node1")
        pod = mkpod([ctr("c")])
        for _ in range(5):
            rec.event(pod, "Warning", "BackOff", "Back-off restarting failed container c in pod p_ns(u1)")
        rec.event(pod, "Normal", "Pulled", "other")
        await rec.flush()
        await rec.close()
        return api

    api = asyncio.run(go())
    assert [e["reason"] for e in api.created] == ["BackOff", "Pulled"]
    assert api.created[0]["count"] == 1 and api.created[0]["source"] == {"component": "kubelet", "host": "node1"}
    counts = [b["count"] for _p, b in api.patched]
    assert counts == [2, 3, 4, 5]
    assert all(p.endswith("/events/" + api.created[0]["metadata"]["name"]) for p, _b in api.patched)
