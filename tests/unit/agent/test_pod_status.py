"""The pod status the agent reports: generate_api_status / get_phase (upstream generateAPIPodStatus,
getPhase), including what probe results make of it, and the StatusManager that writes it to the API."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pykubelet.agent.status.generate import generate_api_status, rfc3339
from pykubelet.agent.status.manager import StatusManager, status_equal
from pykubelet.common.apiclient import ApiError
from tests.builders import NOW, POD_IP, container, exited, pod, pod_path, running, runtime_status, sandbox
from tests.fakes import FakeApi, eventually


def conds(status: dict[str, Any]) -> dict[str, str]:
    return {x["type"]: x["status"] for x in status["conditions"]}


def test_pending_while_creating() -> None:
    st = generate_api_status(pod(containers=["a"]), runtime_status(), host_ips=["10.0.0.1"], qos_class="BestEffort")
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert conds(st) == {"PodReadyToStartContainers": "True", "Initialized": "True", "ContainersReady": "False",
                         "Ready": "False", "PodScheduled": "True"}
    assert st["hostIP"] == "10.0.0.1" and st["hostIPs"] == [{"ip": "10.0.0.1"}]
    assert st["podIP"] == POD_IP and st["qosClass"] == "BestEffort" and st["startTime"]


def test_running_ready() -> None:
    st = generate_api_status(pod(containers=["a", "b"]), runtime_status(running("a"), running("b")))
    assert st["phase"] == "Running"
    assert conds(st)["Ready"] == "True"
    cs = st["containerStatuses"][0]
    assert cs["ready"] and cs["started"] and cs["imageID"] == "sha256:abc"
    assert cs["containerID"] == "containerd://id-a"


@pytest.mark.parametrize(
    ("policy", "codes", "phase"),
    [("Never", [0, 0], "Succeeded"), ("Never", [0, 1], "Failed"), ("OnFailure", [0, 0], "Succeeded"),
     ("OnFailure", [1, 0], "Running"), ("Always", [0, 0], "Running")],
)
def test_phase_when_all_stopped(policy: str, codes: list[int], phase: str) -> None:
    st = generate_api_status(pod(containers=["a", "b"], restart_policy=policy), runtime_status(exited("a", codes[0]), exited("b", codes[1])))
    assert st["phase"] == phase
    if phase in ("Succeeded", "Failed"):
        assert conds(st)["Ready"] == "False"
        assert next(x for x in st["conditions"] if x["type"] == "Ready")["reason"] == "PodCompleted"


def test_terminated_reason_and_exit_code() -> None:
    st = generate_api_status(pod(containers=["a"], restart_policy="Never"), runtime_status(exited("a", 137, reason="OOMKilled")))
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 137 and term["reason"] == "OOMKilled"
    st = generate_api_status(pod(containers=["a"], restart_policy="Never"), runtime_status(exited("a", 3)))
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"


def test_crashloop_waiting_with_last_state() -> None:
    runtime = runtime_status(exited("a", 2, restarts=1), exited("a", 2, restarts=0))
    st = generate_api_status(pod(containers=["a"]), runtime, reasons={"a": ("CrashLoopBackOff", "back-off 10s ...")})
    cs = st["containerStatuses"][0]
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s ..."}}
    assert cs["lastState"]["terminated"]["exitCode"] == 2
    assert cs["restartCount"] == 1
    assert st["phase"] == "Running"


def test_image_pull_errors_waiting() -> None:
    for reason in ("ErrImagePull", "ImagePullBackOff"):
        st = generate_api_status(pod(containers=["a"]), runtime_status(), reasons={"a": (reason, "boom")})
        assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == reason
        assert st["phase"] == "Pending"


def test_running_with_previous_termination() -> None:
    st = generate_api_status(pod(containers=["a"]), runtime_status(running("a", restarts=1), exited("a", 1, restarts=0)))
    cs = st["containerStatuses"][0]
    assert "running" in cs["state"] and cs["lastState"]["terminated"]["exitCode"] == 1


def test_init_pending_and_pod_initializing() -> None:
    p = pod(containers=["app"], init_containers=[container("i1", "x")])
    st = generate_api_status(p, runtime_status(running("i1")))
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert conds(st)["Initialized"] == "False"
    init_cond = next(x for x in st["conditions"] if x["type"] == "Initialized")
    assert init_cond["reason"] == "ContainersNotInitialized"
    assert init_cond["message"] == "containers with incomplete status: [i1]"
    st = generate_api_status(p, runtime_status(exited("i1", 0), running("app")))
    assert st["phase"] == "Running" and conds(st)["Initialized"] == "True"


def test_init_failure_never_fails_pod() -> None:
    p = pod(containers=["app"], restart_policy="Never", init_containers=[container("i1", "x")])
    assert generate_api_status(p, runtime_status(exited("i1", 1)))["phase"] == "Failed"
    p = pod(containers=["app"], restart_policy="Always", init_containers=[container("i1", "x")])
    assert generate_api_status(p, runtime_status(exited("i1", 1)))["phase"] == "Pending"


def test_terminal_phase_sticks_and_transition_time_kept() -> None:
    p = pod(containers=["a"], restart_policy="Never")
    st = generate_api_status(p, runtime_status(exited("a", 0)), now=1000)
    assert st["phase"] == "Succeeded"
    p2 = copy.deepcopy(p)
    p2["status"] = st
    st2 = generate_api_status(p2, runtime_status(running("a")), now=2000)  # bogus runtime view
    assert st2["phase"] == "Succeeded"
    t1 = {x["type"]: x["lastTransitionTime"] for x in st["conditions"]}
    t2 = {x["type"]: x["lastTransitionTime"] for x in st2["conditions"]}
    assert t1["Initialized"] == t2["Initialized"]


def test_deleted_pod_terminal_phase() -> None:
    st = generate_api_status(pod(containers=["a"]), runtime_status(exited("a", 143), sandboxes=[sandbox(ready=False)]), pod_is_terminal=True)
    assert st["phase"] == "Failed"
    st = generate_api_status(pod(containers=["a"]), runtime_status(exited("a", 0), sandboxes=[sandbox(ready=False)]), pod_is_terminal=True)
    assert st["phase"] == "Succeeded"


def test_foreign_conditions_preserved() -> None:
    p = pod(containers=["a"])
    p["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True"},
                                  {"type": "PodScheduled", "status": "True", "lastTransitionTime": "T0"}]}
    st = generate_api_status(p, runtime_status(running("a")))
    types = [x["type"] for x in st["conditions"]]
    assert "DisruptionTarget" in types
    assert next(x for x in st["conditions"] if x["type"] == "PodScheduled")["lastTransitionTime"] == "T0"


# ---------------------------------------------------------------- probe results in the status
def test_generate_uses_probe_results_for_ready_and_started() -> None:
    p = pod(containers=["app"])
    st = runtime_status(running("app"))
    unready = generate_api_status(p, st, probes={"app": (True, False)}, now=NOW)
    cs = unready["containerStatuses"][0]
    assert cs["started"] is True and cs["ready"] is False
    conditions = {c["type"]: c for c in unready["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["ContainersReady"]["reason"] == "ContainersNotReady"
    ready = generate_api_status({**p, "status": unready}, st, probes={"app": (True, True)}, now=NOW + 5)
    conditions = {c["type"]: c for c in ready["conditions"]}
    assert conditions["Ready"]["status"] == "True" and ready["containerStatuses"][0]["ready"] is True
    not_started = generate_api_status(p, st, probes={"app": (False, False)}, now=NOW)
    assert not_started["containerStatuses"][0]["started"] is False


def test_app_containers_wait_in_pod_initializing_when_pod_has_init_containers() -> None:
    out = generate_api_status(pod(containers=["app"], init_containers=["init"]),
                              runtime_status(exited("init", 0)), now=NOW)
    assert out["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_unstarted_sidecar_keeps_pod_pending() -> None:
    sc = container("sc", restartPolicy="Always")
    out = generate_api_status(pod(containers=["app"], init_containers=[sc]), runtime_status(running(sc)),
                              probes={"sc": (False, False)}, now=NOW)
    assert out["phase"] == "Pending"
    assert out["initContainerStatuses"][0]["started"] is False


# ---------------------------------------------------------------- StatusManager
def api_with(p: dict[str, Any]) -> FakeApi:
    api = FakeApi()
    api.put(pod_path(p), p)
    return api


async def test_status_manager_patches_only_on_change() -> None:
    p = pod(containers=["a"])
    api = api_with(p)
    sm = StatusManager(api)
    s1 = generate_api_status(p, runtime_status(running("a")), now=1)
    assert sm.set_pod_status(p, s1)
    await sm.sync_all()
    assert len(api.patched) == 1
    assert api.patched[0][1]["metadata"]["uid"] == "uid-p"
    assert all(path.endswith("/status") for path, _ in api.patched) and set(api.patch_types) == {"merge"}
    # same status (only timestamps differ) → no change, no patch
    s2 = generate_api_status({**p, "status": s1}, runtime_status(running("a")), now=5)
    assert not sm.set_pod_status(p, s2)
    await sm.sync_all()
    assert len(api.patched) == 1
    # a real change → a patch with the newest view
    s3 = generate_api_status({**p, "status": s2}, runtime_status(exited("a", 1)), now=6)
    assert sm.set_pod_status(p, s3)
    v = sm.version("uid-p")
    await sm.sync_all()
    assert len(api.patched) == 2 and sm.version("uid-p") == v
    assert api.objects[pod_path(p)]["status"]["containerStatuses"][0]["state"].get("terminated")


async def test_status_manager_never_regresses_terminal_phase() -> None:
    p = pod(containers=["a"], restart_policy="Never")
    sm = StatusManager(None)
    sm.set_pod_status(p, generate_api_status(p, runtime_status(exited("a", 0))))
    sm.set_pod_status(p, {**generate_api_status(p, runtime_status(running("a"))), "phase": "Running"})
    assert sm.get_pod_status("uid-p")["phase"] == "Succeeded"  # type: ignore[index]


class _Reason(str):
    """A str subclass: a value the fast copy (marshal) does not take."""


@pytest.mark.parametrize("reason", ["Started", _Reason("Started")])
async def test_status_manager_keeps_its_own_copy_of_a_status(reason: str) -> None:
    p = pod(containers=["a"])
    sm = StatusManager(None)
    given = {**generate_api_status(p, runtime_status(running("a"))), "reason": reason}
    expected = copy.deepcopy(given)
    sm.set_pod_status(p, given)
    given["conditions"][0]["status"] = "changed"  # the caller's object is the caller's
    read = sm.get_pod_status("uid-p")
    assert read == expected and type(read["reason"]) is type(reason)  # type: ignore[index]
    read["conditions"].append({})  # type: ignore[index]
    assert sm.peek_pod_status("uid-p") == expected


async def test_a_status_handed_over_to_the_status_manager_is_kept_without_a_copy_and_still_read_as_a_copy() -> None:
    p = pod(containers=["a"])
    sm = StatusManager(None)
    given = generate_api_status(p, runtime_status(running("a")))
    expected = copy.deepcopy(given)
    assert sm.set_pod_status(p, given, handed_over=True)
    assert sm.peek_pod_status("uid-p") is given  # the pod syncer's fresh status, never changed after
    read = sm.get_pod_status("uid-p")
    read["conditions"].append({})  # type: ignore[index]
    assert sm.peek_pod_status("uid-p") == expected  # readers still get their own copy
    again = generate_api_status(p, runtime_status(running("a")))
    assert not sm.set_pod_status(p, again, handed_over=True)  # equal: no new version
    assert sm.peek_pod_status("uid-p") is given


async def test_status_manager_skips_recreated_pod_and_deletes_terminated() -> None:
    p = pod(containers=["a"])
    api = api_with(p)
    api.objects[pod_path(p)]["metadata"]["uid"] = "other"
    sm = StatusManager(api)
    sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
    await sm.sync_all()
    assert not api.patched and sm.get_pod_status("uid-p") is None
    api.objects[pod_path(p)]["metadata"]["uid"] = "uid-p"
    api.objects[pod_path(p)]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    sm.set_pod_status(p, generate_api_status(p, runtime_status(exited("a", 143), sandboxes=[sandbox(ready=False)]), pod_is_terminal=True))
    sm.terminated("uid-p")
    await sm.sync_all()
    assert api.patched and api.deleted
    path, body = api.deleted[0]
    assert path == "/api/v1/namespaces/default/pods/p"
    assert body["gracePeriodSeconds"] == 0 and body["preconditions"] == {"uid": "uid-p"}


async def test_status_manager_never_reads_the_api_when_nothing_changed() -> None:
    p = pod(containers=["a"])
    api = api_with(p)
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
        sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
        async with asyncio.timeout(5):
            while not api.patched:  # noqa: ASYNC110 - polling the API under test
                await asyncio.sleep(0.01)
        before = gets
        await asyncio.sleep(0.5)  # ten reconcile periods
        assert gets == before and len(api.patched) == 1
    finally:
        await sm.stop()


class SlowPatches:
    """``api.patch`` taking ``delay`` seconds, counting the PATCHes in flight and the most at once."""

    def __init__(self, api: FakeApi, delay: float) -> None:
        self.in_flight = self.most = 0
        real_patch = api.patch

        async def slow_patch(path: str, body: Any, patch_type: str = "merge", params: Any = None) -> dict[str, Any]:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await asyncio.sleep(delay)
            self.in_flight -= 1
            return await real_patch(path, body, patch_type, params)

        api.patch = slow_patch  # type: ignore[method-assign]


async def test_status_manager_writes_a_watched_pod_with_one_patch_and_many_pods_at_once() -> None:
    pods = []
    api = FakeApi()
    for i in range(40):
        p = pod(name=f"p{i}", uid=f"uid-{i}", containers=["a"])
        p["metadata"]["resourceVersion"] = "7"  # as the agent's pod watch delivers it
        api.put(pod_path(p), p)
        pods.append(p)
    gets = 0
    real_get = api.get
    patches = SlowPatches(api, 0.01)

    async def counting_get(path: str, params: Any = None) -> dict[str, Any]:
        nonlocal gets
        gets += 1
        return await real_get(path, params)

    api.get = counting_get  # type: ignore[method-assign]
    sm = StatusManager(api)
    for p in pods:
        sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
    await sm.sync_all()
    assert len(api.patched) == 40 and gets == 0
    assert 1 < patches.most <= 32


async def test_pods_queued_while_a_status_write_is_in_flight_are_written_concurrently() -> None:
    pods = [pod(name=f"p{i}", uid=f"uid-{i}", containers=["a"]) for i in range(40)]
    api = FakeApi()
    for p in pods:
        api.put(pod_path(p), p)
    patches = SlowPatches(api, 0.05)
    async with started(StatusManager(api)) as sm:
        sm.set_pod_status(pods[0], generate_api_status(pods[0], runtime_status(running("a"))))
        await eventually(lambda: patches.in_flight == 1, timeout=5, interval=0.001)  # one pod, one writer
        for p in pods[1:]:
            sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
        await eventually(lambda: len(api.patched) == 40, timeout=10)
        assert 1 < patches.most <= 32


def watched_new_pod() -> dict[str, Any]:
    """A pod as the agent's watch delivers it right after its creation (the API set it Pending)."""
    p = pod(containers=["a"])
    p["metadata"]["resourceVersion"] = "7"
    p["status"] = {"phase": "Pending"}
    return p


@contextlib.asynccontextmanager
async def started(sm: StatusManager) -> AsyncIterator[StatusManager]:
    """``sm`` with its background writer loop running, stopped on the way out."""
    sm.start()
    try:
        yield sm
    finally:
        await sm.stop()


async def test_a_new_pod_that_starts_within_the_delay_has_only_its_running_status_written() -> None:
    p = watched_new_pod()
    api = api_with(p)
    async with started(StatusManager(api, first_write_delay=0.3)) as sm:
        sm.set_pod_status(p, generate_api_status(p, runtime_status()))  # Pending, ContainerCreating
        await asyncio.sleep(0.1)
        assert api.patched == []
        sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
        await eventually(lambda: len(api.patched) == 1, timeout=5)
        assert api.objects[pod_path(p)]["status"]["phase"] == "Running"
        await asyncio.sleep(0.4)  # past the delay: the held first status is not written after all
        assert len(api.patched) == 1


async def test_a_new_pod_still_creating_after_the_delay_shows_container_creating() -> None:
    p = watched_new_pod()
    api = api_with(p)
    async with started(StatusManager(api, first_write_delay=0.2)) as sm:
        sm.set_pod_status(p, generate_api_status(p, runtime_status()))
        await eventually(lambda: len(api.patched) == 1, timeout=5)
        st = api.objects[pod_path(p)]["status"]
        assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}


async def test_a_new_pods_status_that_changes_its_phase_is_written_without_waiting() -> None:
    p = watched_new_pod()
    api = api_with(p)
    async with started(StatusManager(api, first_write_delay=60)) as sm:
        failed = {**generate_api_status(p, runtime_status()), "phase": "Failed", "reason": "OutOfcpu"}
        sm.set_pod_status(p, failed)  # e.g. rejected at admission
        await eventually(lambda: len(api.patched) == 1, timeout=5)
        assert api.objects[pod_path(p)]["status"]["phase"] == "Failed"


async def test_status_manager_drops_the_status_of_a_pod_recreated_under_its_name() -> None:
    p = pod(containers=["a"])
    p["metadata"]["resourceVersion"] = "7"
    api = api_with(p)
    api.objects[pod_path(p)]["metadata"]["uid"] = "other"  # deleted and created again meanwhile
    sm = StatusManager(api)
    sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
    await sm.sync_all()
    assert sm.get_pod_status("uid-p") is None
    assert api.objects[pod_path(p)].get("status") == p.get("status")  # the new pod's status untouched


async def test_status_manager_background_loop() -> None:
    p = pod(containers=["a"])
    api = api_with(p)
    sm = StatusManager(api, reconcile_period=0.1)
    sm.start()
    try:
        sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
        async with asyncio.timeout(5):
            while not api.patched:  # noqa: ASYNC110 - polling the runtime/API under test
                await asyncio.sleep(0.01)
        # someone else overwrote the status and the pod watch shows it: ours is restored
        api.objects[pod_path(p)]["status"] = {"phase": "Pending"}
        sm.reconcile(copy.deepcopy(api.objects[pod_path(p)]))
        async with asyncio.timeout(5):
            while api.objects[pod_path(p)]["status"].get("phase") != "Running":  # noqa: ASYNC110 - polling the runtime/API under test
                await asyncio.sleep(0.01)
        assert api.objects[pod_path(p)]["status"]["phase"] == "Running" and len(api.patched) >= 2
    finally:
        await sm.stop()


async def test_a_failed_status_write_is_retried_on_the_reconcile_ticker() -> None:
    p = pod(containers=["a"])
    api = api_with(p)
    loop = asyncio.get_running_loop()
    tries: list[float] = []
    three = asyncio.Event()

    async def failing_patch(path: str, body: Any, patch_type: str = "merge", params: Any = None) -> dict[str, Any]:
        tries.append(loop.time())
        if len(tries) == 3:
            three.set()
        raise ApiError(503, "ServiceUnavailable", "the API server is restarting")

    api.patch = failing_patch  # type: ignore[method-assign]
    sm = StatusManager(api, reconcile_period=0.1)
    sm.start()
    try:
        await asyncio.sleep(0.03)  # off the grid
        sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
        await asyncio.wait_for(three.wait(), 5)
    finally:
        await sm.stop()
    # the write at once; the retries on multiples of the period of the loop clock (shared wake-ups)
    assert all(-0.001 < t - round(t / 0.1) * 0.1 < 0.03 for t in tries[1:])


def test_status_equal_ignores_timestamps() -> None:
    a = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "1"}]}
    b = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2"}]}
    assert status_equal(a, b)
    assert not status_equal(a, {**b, "phase": "Failed"})


def test_status_equal_ignores_condition_order_but_not_their_content_and_changes_neither_status() -> None:
    ready = {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "1"}
    sched = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "1"}
    a = {"phase": "Running", "conditions": [ready, sched]}
    b = {"phase": "Running", "conditions": [{**sched, "lastTransitionTime": "2"}, {**ready, "lastProbeTime": "3"}]}
    before = copy.deepcopy((a, b))
    assert status_equal(a, b)
    assert (a, b) == before
    assert not status_equal(a, {**b, "conditions": [sched, {**ready, "status": "False"}]})
    assert not status_equal(a, {**a, "podIP": "198.18.0.5"})


def test_generated_status_shares_nothing_with_the_previous_one() -> None:
    p = pod("a")
    p["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    before = copy.deepcopy(p["status"])
    status = generate_api_status(p, runtime_status(running("a")))
    for c in status["conditions"]:
        c["status"] = "changed"
    assert p["status"] == before
    assert {c["type"] for c in status["conditions"]} >= {"PodScheduled", "DisruptionTarget", "Ready"}


@pytest.mark.parametrize("ts", [0, 0.999, 1.0, 59.5, 1764590000.25, 1764590000.75, 1764590001, 1764590000.5, -0.5, -1.5,
                                4102444800.0])
def test_rfc3339_is_the_utc_second_of_the_time(ts: float) -> None:
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    assert rfc3339(ts) == expected and rfc3339(ts) == expected


def test_rfc3339_refuses_what_gmtime_refuses() -> None:
    with pytest.raises(ValueError):
        rfc3339(float("nan"))
    with pytest.raises(OverflowError):
        rfc3339(float("inf"))


async def _written_running(p: dict[str, Any]) -> tuple[FakeApi, StatusManager]:
    """The API holding ``p`` (as the agent's watch saw it) and a manager that wrote its Running status."""
    p["metadata"]["resourceVersion"] = "7"
    api = api_with(p)
    sm = StatusManager(api)
    sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a"))))
    await sm.sync_all()
    return api, sm


async def test_the_watch_echo_of_the_agents_own_write_causes_no_second_write() -> None:
    p = pod(containers=["a"])
    api, sm = await _written_running(p)
    assert len(api.patched) == 1
    sm.reconcile(copy.deepcopy(api.objects[pod_path(p)]))  # the watch shows what the agent wrote
    await sm.sync_all()
    assert len(api.patched) == 1


@pytest.mark.parametrize(("change", "rewritten"), [
    ({"phase": "Pending"}, True),  # another writer moved the phase back: ours is written again
    ({"podIP": "198.18.0.99"}, True),
    ({"conditions": []}, True),
    ({"message": "set by someone else"}, False),  # fields the kubelet does not set are kept as they are
])
async def test_a_status_change_by_another_writer_is_reconciled_when_ours_differs(
        change: dict[str, Any], rewritten: bool) -> None:
    p = pod(containers=["a"])
    api, sm = await _written_running(p)
    theirs = copy.deepcopy(api.objects[pod_path(p)])
    theirs["status"].update(change)
    api.objects[pod_path(p)] = copy.deepcopy(theirs)
    sm.reconcile(theirs)
    await sm.sync_all()
    assert len(api.patched) == (2 if rewritten else 1)
    if rewritten:
        assert status_equal(api.objects[pod_path(p)]["status"], sm.peek_pod_status("uid-p") or {})


async def test_a_condition_another_writer_added_is_kept_without_a_write() -> None:
    p = pod(containers=["a"])
    api, sm = await _written_running(p)
    theirs = copy.deepcopy(api.objects[pod_path(p)])
    theirs["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": "Preemption"})
    sm.reconcile(theirs)
    await sm.sync_all()
    assert len(api.patched) == 1


async def test_a_status_of_ours_changed_after_the_write_is_written_when_the_echo_of_the_old_one_arrives() -> None:
    p = pod(containers=["a"])
    api, sm = await _written_running(p)
    echo = copy.deepcopy(api.objects[pod_path(p)])
    sm.set_pod_status(p, generate_api_status(p, runtime_status(exited("a", 1), sandboxes=[sandbox(ready=False)])))
    sm.reconcile(echo)
    await sm.sync_all()
    assert len(api.patched) == 2
    assert api.objects[pod_path(p)]["status"]["containerStatuses"][0]["state"].get("terminated")


def _api_pods(*names: str) -> tuple[FakeApi, list[dict[str, Any]]]:
    """Pods as the API and the agent's watch hold them: created, with the server's Pending status."""
    api = FakeApi()
    pods = [pod(n, containers=["a"], metadata={"resourceVersion": "1"}, status={"phase": "Pending"}) for n in names]
    for p in pods:
        api.put(pod_path(p), p)
    return api, pods


async def test_a_write_that_makes_a_pod_running_goes_before_first_statuses_still_queued() -> None:
    api, (starting, started) = _api_pods("starting", "started")
    sm = StatusManager(api)
    assert sm.set_pod_status(starting, generate_api_status(starting, runtime_status(sandboxes=[sandbox()]), now=1))
    assert sm.set_pod_status(started, generate_api_status(started, runtime_status(running("a")), now=1))
    await sm.sync_all()
    assert [(path.split("/")[-2], body["status"]["phase"]) for path, body in api.patched] == [
        ("started", "Running"), ("starting", "Pending")]


async def test_a_pod_queued_for_its_first_status_that_starts_meanwhile_is_written_once_with_the_newest() -> None:
    api, (p,) = _api_pods("p")
    sm = StatusManager(api)
    sm.set_pod_status(p, generate_api_status(p, runtime_status(sandboxes=[sandbox()]), now=1))
    sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a")), now=2))
    await sm.sync_all()
    assert [body["status"]["phase"] for _path, body in api.patched] == ["Running"]


async def test_a_status_that_changes_while_it_is_written_is_written_again() -> None:
    api, (p,) = _api_pods("p")
    sm = StatusManager(api)
    writing, release = asyncio.Event(), asyncio.Event()
    patch = api.patch

    async def slow_patch(path: str, body: Any, **kw: Any) -> Any:
        writing.set()
        await release.wait()
        return await patch(path, body, **kw)

    api.patch = slow_patch  # type: ignore[method-assign]
    sm.set_pod_status(p, generate_api_status(p, runtime_status(sandboxes=[sandbox()]), now=1))
    sync = asyncio.create_task(sm.sync_all())
    await writing.wait()
    sm.set_pod_status(p, generate_api_status(p, runtime_status(running("a")), now=2))
    release.set()
    await asyncio.wait_for(sync, 5)
    assert [body["status"]["phase"] for _path, body in api.patched] == ["Pending", "Running"]


async def test_a_static_pod_without_its_mirror_pod_yet_is_left_for_the_periodic_retry() -> None:
    api = FakeApi()  # no mirror pod in the API
    static = pod("s", containers=["a"], annotations={"kubernetes.io/config.source": "file"})
    sm = StatusManager(api)
    sm.set_pod_status(static, generate_api_status(static, runtime_status(running("a")), now=1))
    await asyncio.wait_for(sm.sync_all(), 5)  # returns: the write is not retried over and over
    assert not api.patched and sm.version("uid-s") == 1
