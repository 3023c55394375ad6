"""generate_api_status / get_phase (upstream generateAPIPodStatus, getPhase) and StatusManager."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from pykubelet.agent.container.runtime import ContainerRuntimeStatus, RuntimePodStatus, SandboxRuntimeStatus
from pykubelet.agent.status.generate import generate_api_status
from pykubelet.agent.status.manager import StatusManager, status_equal


def pod(names: list[str], policy: str = "Always", inits: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": policy,
                            "containers": [{"name": n, "image": "busybox"} for n in names]}
    if inits:
        spec["initContainers"] = inits
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": spec, "status": {}}


def c(name: str, state: str, code: int = 0, restarts: int = 0, created: float = 100.0, reason: str = "") -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(id=f"{name}{restarts}", name=name, state=state, exit_code=code,
                                  restart_count=restarts, created_at=created + restarts, started_at=created,
                                  finished_at=created + 1 if state == "exited" else 0, reason=reason,
                                  image_ref="sha256:abc", runtime_type="containerd")


def rt(*cs: ContainerRuntimeStatus, ready: bool = True) -> RuntimePodStatus:
    st = RuntimePodStatus(uid="u1", sandboxes=[SandboxRuntimeStatus(id="s", ready=ready, ips=["198.18.0.5"])],
                          containers=list(cs))
    st.sort()
    return st


def conds(status: dict[str, Any]) -> dict[str, str]:
    return {x["type"]: x["status"] for x in status["conditions"]}


def test_pending_while_creating() -> None:
    st = generate_api_status(pod(["a"]), rt(), host_ips=["10.0.0.1"], qos_class="BestEffort")
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert conds(st) == {"PodReadyToStartContainers": "True", "Initialized": "True", "ContainersReady": "False",
                         "Ready": "False", "PodScheduled": "True"}
    assert st["hostIP"] == "10.0.0.1" and st["hostIPs"] == [{"ip": "10.0.0.1"}]
    assert st["podIP"] == "198.18.0.5" and st["qosClass"] == "BestEffort" and st["startTime"]


def test_running_ready() -> None:
    st = generate_api_status(pod(["a", "b"]), rt(c("a", "running"), c("b", "running")))
    assert st["phase"] == "Running"
    assert conds(st)["Ready"] == "True"
    cs = st["containerStatuses"][0]
    assert cs["ready"] and cs["started"] and cs["imageID"] == "sha256:abc"
    assert cs["containerID"] == "containerd://a0"


@pytest.mark.parametrize(
    ("policy", "codes", "phase"),
    [("Never", [0, 0], "Succeeded"), ("Never", [0, 1], "Failed"), ("OnFailure", [0, 0], "Succeeded"),
     ("OnFailure", [1, 0], "Running"), ("Always", [0, 0], "Running")],
)
def test_phase_when_all_stopped(policy: str, codes: list[int], phase: str) -> None:
    st = generate_api_status(pod(["a", "b"], policy), rt(c("a", "exited", codes[0]), c("b", "exited", codes[1])))
    assert st["phase"] == phase
    if phase in ("Succeeded", "Failed"):
        assert conds(st)["Ready"] == "False"
        assert next(x for x in st["conditions"] if x["type"] == "Ready")["reason"] == "PodCompleted"


def test_terminated_reason_and_exit_code() -> None:
    st = generate_api_status(pod(["a"], "Never"), rt(c("a", "exited", 137, reason="OOMKilled")))
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137 and term["reason"] == "OOMKilled"
    st = generate_api_status(pod(["a"], "Never"), rt(c("a", "exited", 3)))
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"


def test_crashloop_waiting_with_last_state() -> None:
    runtime = rt(c("a", "exited", 2, restarts=1), c("a", "exited", 2, restarts=0))
    st = generate_api_status(pod(["a"]), runtime, reasons={"a": ("CrashLoopBackOff", "back-off 10s ...")})
    cs = st["containerStatuses"][0]
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s ..."}}
    assert cs["lastState"]["terminated"]["exitCode"] == 2
    assert cs["restartCount"] == 1
    assert st["phase"] == "Running"


def test_image_pull_errors_waiting() -> None:
    for reason in ("ErrImagePull", "ImagePullBackOff"):
        st = generate_api_status(pod(["a"]), rt(), reasons={"a": (reason, "boom")})
        assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == reason
        assert st["phase"] == "Pending"


def test_running_with_previous_termination() -> None:
    st = generate_api_status(pod(["a"]), rt(c("a", "running", restarts=1), c("a", "exited", 1, restarts=0)))
    cs = st["containerStatuses"][0]
    assert "running" in cs["state"] and cs["lastState"]["terminated"]["exitCode"] == 1


def test_init_pending_and_pod_initializing() -> None:
    p = pod(["app"], inits=[{"name": "i1", "image": "x"}])
    st = generate_api_status(p, rt(c("i1", "running")))
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert conds(st)["Initialized"] == "False"
    init_cond = next(x for x in st["conditions"] if x["type"] == "Initialized")
    assert init_cond["reason"] == "ContainersNotInitialized"
    assert init_cond["message"] == "containers with incomplete status: [i1]"
    st = generate_api_status(p, rt(c("i1", "exited", 0), c("app", "running")))
    assert st["phase"] == "Running" and conds(st)["Initialized"] == "True"


def test_init_failure_never_fails_pod() -> None:
    p = pod(["app"], "Never", inits=[{"name": "i1", "image": "x"}])
    assert generate_api_status(p, rt(c("i1", "exited", 1)))["phase"] == "Failed"
    p = pod(["app"], "Always", inits=[{"name": "i1", "image": "x"}])
    assert generate_api_status(p, rt(c("i1", "exited", 1)))["phase"] == "Pending"


def test_terminal_phase_sticks_and_transition_time_kept() -> None:
    p = pod(["a"], "Never")
    st = generate_api_status(p, rt(c("a", "exited", 0)), now=1000)
    assert st["phase"] == "Succeeded"
    p2 = copy.deepcopy(p)
    p2["status"] = st
    st2 = generate_api_status(p2, rt(c("a", "running")), now=2000)  # bogus runtime view
    assert st2["phase"] == "Succeeded"
    t1 = {x["type"]: x["lastTransitionTime"] for x in st["conditions"]}
    t2 = {x["type"]: x["lastTransitionTime"] for x in st2["conditions"]}
    assert t1["Initialized"] == t2["Initialized"]


def test_deleted_pod_terminal_phase() -> None:
    st = generate_api_status(pod(["a"]), rt(c("a", "exited", 143), ready=False), pod_is_terminal=True)
    assert st["phase"] == "Failed"
    st = generate_api_status(pod(["a"]), rt(c("a", "exited", 0), ready=False), pod_is_terminal=True)
    assert st["phase"] == "Succeeded"


def test_foreign_conditions_preserved() -> None:
    p = pod(["a"])
    p["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True"},
                                  {"type": "PodScheduled", "status": "True", "lastTransitionTime": "T0"}]}
    st = generate_api_status(p, rt(c("a", "running")))
    types = [x["type"] for x in st["conditions"]]
    assert "DisruptionTarget" in types
    assert next(x for x in st["conditions"] if x["type"] == "PodScheduled")["lastTransitionTime"] == "T0"


# ---------------------------------------------------------------- StatusManager
class Api:
    def __init__(self, pod: dict[str, Any]) -> None:
        self.pod = copy.deepcopy(pod)
        self.patches: list[dict[str, Any]] = []
        self.deletes: list[tuple[str, Any]] = []

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        return copy.deepcopy(self.pod)

    async def patch(self, path: str, body: dict[str, Any], patch_type: str = "merge", params: Any = None) -> dict[str, Any]:
        assert path.endswith("/status") and patch_type == "merge"
        self.patches.append(body)
        self.pod["status"] = body["status"]
        return self.pod

    async def delete(self, path: str, body: Any = None, params: Any = None) -> dict[str, Any]:
        self.deletes.append((path, body))
        return {}


async def test_status_manager_patches_only_on_change() -> None:
    p = pod(["a"])
    api = Api(p)
    sm = StatusManager(api)
    s1 = generate_api_status(p, rt(c("a", "running")), now=1)
    assert sm.set_pod_status(p, s1)
    await sm.sync_all()
    assert len(api.patches) == 1
    assert api.patches[0]["metadata"]["uid"] == "u1"
    # same status (only timestamps differ) → no change, no patch
    s2 = generate_api_status({**p, "status": s1}, rt(c("a", "running")), now=5)
    assert not sm.set_pod_status(p, s2)
    await sm.sync_all()
    assert len(api.patches) == 1
    # a real change → a patch with the newest view
    s3 = generate_api_status({**p, "status": s2}, rt(c("a", "exited", 1)), now=6)
    assert sm.set_pod_status(p, s3)
    v = sm.version("u1")
    await sm.sync_all()
    assert len(api.patches) == 2 and sm.version("u1") == v
    assert api.pod["status"]["containerStatuses"][0]["state"].get("terminated")


async def test_status_manager_never_regresses_terminal_phase() -> None:
    p = pod(["a"], "Never")
    sm = StatusManager(None)
    sm.set_pod_status(p, generate_api_status(p, rt(c("a", "exited", 0))))
    sm.set_pod_status(p, {**generate_api_status(p, rt(c("a", "running"))), "phase": "Running"})
    assert sm.get_pod_status("u1")["phase"] == "Succeeded"  # type: ignore[index]


async def test_status_manager_skips_recreated_pod_and_deletes_terminated() -> None:
    p = pod(["a"])
    api = Api(p)
    api.pod["metadata"]["uid"] = "other"
    sm = StatusManager(api)
    sm.set_pod_status(p, generate_api_status(p, rt(c("a", "running"))))
    await sm.sync_all()
    assert not api.patches and sm.get_pod_status("u1") is None
    api.pod["metadata"]["uid"] = "u1"
    api.pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    sm.set_pod_status(p, generate_api_status(p, rt(c("a", "exited", 143), ready=False), pod_is_terminal=True))
    sm.terminated("u1")
    await sm.sync_all()
    assert api.patches and api.deletes
    path, body = api.deletes[0]
    assert path == "/api/v1/namespaces/default/pods/p"
    assert body["gracePeriodSeconds"] == 0 and body["preconditions"] == {"uid": "u1"}


async def test_status_manager_never_reads_the_api_when_nothing_changed() -> None:
    p = pod(["a"])
    api = Api(p)
    gets = 0
    real_get = api.get

    async def counting_get(path: str, params: Any = None) -> dict[str, Any]:
        nonlocal gets
        gets += 1
        return await real_get(path, params)

    api.get = counting_get  # type: ignore[method-assign]
    sm = StatusManager(api, reconcile_period=0.05)
    sm.start()
    try:
        sm.set_pod_status(p, generate_api_status(p, rt(c("a", "running"))))
        async with asyncio.timeout(5):
            while not api.patches:  # noqa: ASYNC110 - polling the API under test
                await asyncio.sleep(0.01)
        before = gets
        await asyncio.sleep(0.5)  # ten reconcile periods
        assert gets == before and len(api.patches) == 1
    finally:
        await sm.stop()


async def test_status_manager_background_loop() -> None:
    p = pod(["a"])
    api = Api(p)
    sm = StatusManager(api, reconcile_period=0.1)
    sm.start()
    try:
        sm.set_pod_status(p, generate_api_status(p, rt(c("a", "running"))))
        async with asyncio.timeout(5):
            while not api.patches:  # noqa: ASYNC110 - polling the runtime/API under test
                await asyncio.sleep(0.01)
        # someone else overwrote the status and the pod watch shows it: ours is restored
        api.pod["status"] = {"phase": "Pending"}
        sm.reconcile(copy.deepcopy(api.pod))
        async with asyncio.timeout(5):
            while api.pod["status"].get("phase") != "Running":  # noqa: ASYNC110 - polling the runtime/API under test
                await asyncio.sleep(0.01)
    finally:
        await sm.stop()


def test_status_equal_ignores_timestamps() -> None:
    a = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "1"}]}
    b = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2"}]}
    assert status_equal(a, b)
    assert not status_equal(a, {**b, "phase": "Failed"})
