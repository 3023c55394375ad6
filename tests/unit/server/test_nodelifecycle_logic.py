import asyncio
import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from pykubelet.common.apiclient import ApiError
from pykubelet.server.nodelifecycle import (
    HealthTracker,
    NodeLifecycleController,
    condition_status,
    desired_taints,
    eviction_time,
    fmt_time,
    node_ready_left_true,
    unknown_conditions,
)
from tests.builders import node, pod
from tests.fakes import FakeApi

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


PRESSURE_OK = [
    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
    {"type": "DiskPressure", "status": "False"},
    {"type": "PIDPressure", "status": "False"},
]


def kubelet_node(ready: str | None = "True", **spec: Any) -> dict[str, Any]:
    """Node n1 as its kubelet last reported it at T0 (no Ready condition when ``ready`` is None)."""
    conds = [*PRESSURE_OK]
    if ready:
        conds.append({"type": "Ready", "status": ready, "reason": "KubeletReady", "lastHeartbeatTime": fmt_time(T0)})
    return node("n1", ready=None, conditions=conds, metadata={"creationTimestamp": fmt_time(T0)}, **spec)


def lease(renew: datetime) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"holderIdentity": "n1", "renewTime": renew.isoformat()}}


# A running, ready pod on n1 (tolerations none unless given).
running_pod = functools.partial(pod, uid="", node_name="n1", tolerations=[],
                                status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})


DEFAULT_TOLS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def test_health_tracker_uses_observation_time() -> None:
    h = HealthTracker(40.0)
    h.observe("n1", "a", T0)
    assert not h.is_stale("n1", T0 + timedelta(seconds=40))
    assert h.is_stale("n1", T0 + timedelta(seconds=41))
    h.observe("n1", "a", T0 + timedelta(seconds=50))  # same signature: no renewal
    assert h.is_stale("n1", T0 + timedelta(seconds=50))
    h.observe("n1", "b", T0 + timedelta(seconds=50))
    assert not h.is_stale("n1", T0 + timedelta(seconds=60))
    assert not h.is_stale("unknown-node", T0)


def test_unknown_conditions() -> None:
    conds = unknown_conditions(kubelet_node(), T0)
    assert conds is not None
    by = {c["type"]: c for c in conds}
    assert by["Ready"]["status"] == "Unknown"
    assert by["Ready"]["reason"] == "NodeStatusUnknown"
    assert by["Ready"]["message"] == "Kubelet stopped posting node status."
    assert {by[t]["status"] for t in ("MemoryPressure", "DiskPressure", "PIDPressure")} == {"Unknown"}
    assert unknown_conditions({**kubelet_node(), "status": {"conditions": conds}}, T0) is None
    never = {c["type"]: c for c in unknown_conditions(kubelet_node(ready=None), T0) or []}
    assert never["Ready"]["reason"] == "NodeStatusNeverUpdated"


def test_desired_taints_follow_conditions() -> None:
    assert desired_taints(kubelet_node("True"), T0) == []
    t = desired_taints(kubelet_node("Unknown"), T0)
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(T0)} in t
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in t
    t2 = desired_taints(kubelet_node("False", taints=[{"key": "mine", "effect": "NoSchedule"}, *t]), T0 + timedelta(seconds=9))
    assert {"key": "mine", "effect": "NoSchedule"} in t2
    assert not any(x["key"] == "node.kubernetes.io/unreachable" for x in t2)
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": fmt_time(T0 + timedelta(seconds=9))} in t2
    # Existing managed taints keep their timeAdded.
    assert desired_taints(kubelet_node("Unknown", taints=t), T0 + timedelta(seconds=99)) == t
    assert desired_taints(kubelet_node("True", unschedulable=True), T0) == [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def test_eviction_time() -> None:
    taints = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(T0)}]
    assert eviction_time(running_pod("p", tolerations=DEFAULT_TOLS), taints, T0) == T0 + timedelta(seconds=300)
    assert eviction_time(running_pod("p"), taints, T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=5)
    forever = [{"operator": "Exists"}]
    assert eviction_time(running_pod("p", tolerations=forever), taints, T0) is None
    short = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]
    assert eviction_time(running_pod("p", tolerations=short), taints, T0) == T0 + timedelta(seconds=10)
    assert eviction_time(running_pod("p"), [{"key": "x", "effect": "NoSchedule"}], T0) is None


async def test_controller_marks_unknown_taints_evicts_and_recovers() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/quick", running_pod("quick", tolerations=[{**DEFAULT_TOLS[1], "tolerationSeconds": 30}]))
    api.put("/api/v1/namespaces/default/pods/slow", running_pod("slow", tolerations=DEFAULT_TOLS))
    c = NodeLifecycleController(api, clock=lambda: clock[0])  # type: ignore[arg-type]
    for path, handler in (
        ("/api/v1/nodes", c.on_node_event),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", c.on_lease_event),
        ("/api/v1/pods", c.on_pod_event),
    ):
        for item in (await api.list(path))["items"]:
            handler("ADDED", item)

    clock[0] = T0 + timedelta(seconds=30)
    await _pass(c)
    assert api.calls == []  # still within the grace period

    clock[0] = T0 + timedelta(seconds=45)
    await _pass(c)
    n = api.objects["/api/v1/nodes/n1"]
    ready = next(x for x in n["status"]["conditions"] if x["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(clock[0])} in n["spec"]["taints"]
    quick = api.objects["/api/v1/namespaces/default/pods/quick"]
    assert next(x for x in quick["status"]["conditions"] if x["type"] == "Ready")["status"] == "False"

    clock[0] = T0 + timedelta(seconds=45 + 31)
    await _pass(c)
    assert "/api/v1/namespaces/default/pods/quick" not in api.objects
    assert "/api/v1/namespaces/default/pods/slow" in api.objects

    # The kubelet comes back: lease renewed and Ready posted -> taints removed, no more evictions.
    c.on_lease_event("MODIFIED", lease(clock[0]))
    c.on_node_event("MODIFIED", {**api.objects["/api/v1/nodes/n1"], "status": kubelet_node()["status"]})
    api.objects["/api/v1/nodes/n1"]["status"] = kubelet_node()["status"]
    clock[0] = T0 + timedelta(seconds=400)
    c.on_lease_event("MODIFIED", lease(clock[0]))
    await _pass(c)
    assert not api.objects["/api/v1/nodes/n1"].get("spec", {}).get("taints")
    assert "/api/v1/namespaces/default/pods/slow" in api.objects


async def _pass(c: NodeLifecycleController) -> None:
    """A monitoring pass, then the pod work it queued (done by background workers when running)."""
    await c.reconcile()
    await c.settle()


async def _controller(api: Any, clock: list[datetime], **kw: Any) -> NodeLifecycleController:
    c = NodeLifecycleController(api, clock=lambda: clock[0], **kw)
    for path, handler in (
        ("/api/v1/nodes", c.on_node_event),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", c.on_lease_event),
        ("/api/v1/pods", c.on_pod_event),
    ):
        for item in (await api.list(path))["items"]:
            handler("ADDED", item)
    return c


def _pod_ready(api: Any, name: str) -> str:
    p = api.objects[f"/api/v1/namespaces/default/pods/{name}"]
    return str(next(x for x in p["status"]["conditions"] if x["type"] == "Ready")["status"])


def _kubelet_posts(c: NodeLifecycleController, api: Any, ready: str, at: datetime) -> None:
    n = {**api.objects["/api/v1/nodes/n1"], "status": kubelet_node(ready)["status"]}
    for cond in n["status"]["conditions"]:
        cond["lastHeartbeatTime"] = fmt_time(at)
    api.objects["/api/v1/nodes/n1"] = n
    c.on_node_event("MODIFIED", n)
    c.on_lease_event("MODIFIED", lease(at))


async def test_pods_of_a_node_whose_kubelet_reports_not_ready_are_marked_not_ready() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/a", running_pod("a", tolerations=DEFAULT_TOLS))
    api.put("/api/v1/namespaces/default/pods/b", running_pod("b", tolerations=DEFAULT_TOLS))
    c = await _controller(api, clock)
    await _pass(c)
    assert (_pod_ready(api, "a"), _pod_ready(api, "b")) == ("True", "True")

    clock[0] = T0 + timedelta(seconds=5)
    _kubelet_posts(c, api, "False", clock[0])  # e.g. the container runtime is down
    await _pass(c)
    assert (_pod_ready(api, "a"), _pod_ready(api, "b")) == ("False", "False")
    events = [body for verb, path, body in api.calls if verb == "create" and path.endswith("/events")]
    assert {(e["involvedObject"]["name"], e["type"], e["reason"], e["message"]) for e in events} == {
        ("a", "Warning", "NodeNotReady", "Node is not ready"),
        ("b", "Warning", "NodeNotReady", "Node is not ready"),
    }
    # Tainted not-ready, but the pods tolerate it for 300 s: nothing is deleted.
    taints = api.objects["/api/v1/nodes/n1"]["spec"]["taints"]
    assert {t["key"] for t in taints} == {"node.kubernetes.io/not-ready"}
    assert "/api/v1/namespaces/default/pods/a" in api.objects

    # The kubelet writes the pods' readiness back; the controller does not fight it while the node
    # stays NotReady (marking happens when Ready leaves True), and the node is untainted once Ready.
    api.objects["/api/v1/namespaces/default/pods/a"]["status"]["conditions"][0]["status"] = "True"
    clock[0] = T0 + timedelta(seconds=10)
    _kubelet_posts(c, api, "True", clock[0])
    await _pass(c)
    assert _pod_ready(api, "a") == "True"
    assert not api.objects["/api/v1/nodes/n1"]["spec"].get("taints")


async def test_marking_pods_not_ready_is_retried_after_a_failed_update() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/a", running_pod("a", tolerations=DEFAULT_TOLS))
    c = await _controller(api, clock)
    await _pass(c)
    real_patch = api.patch
    failing = [True]

    async def flaky_patch(path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Any:
        if failing[0] and "/pods/" in path:
            raise ApiError(500, "InternalError", "etcd is sad")
        return await real_patch(path, body, patch_type, params)

    api.patch = flaky_patch
    clock[0] = T0 + timedelta(seconds=5)
    _kubelet_posts(c, api, "False", clock[0])
    await _pass(c)
    assert _pod_ready(api, "a") == "True"
    failing[0] = False
    clock[0] = T0 + timedelta(seconds=10)
    await _pass(c)
    assert _pod_ready(api, "a") == "False"


async def test_a_pod_seen_on_a_node_that_is_not_ready_is_marked_not_ready() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node("False"))
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/a", running_pod("a", tolerations=DEFAULT_TOLS))
    c = await _controller(api, clock)
    await _pass(c)
    assert _pod_ready(api, "a") == "False"


async def test_a_paused_controller_gives_nodes_a_fresh_grace_period_instead_of_marking_them_unknown() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/a", running_pod("a", tolerations=DEFAULT_TOLS))
    c = await _controller(api, clock)
    await _pass(c)
    # The whole control plane was stopped for 60 s: no lease could be observed meanwhile.
    clock[0] = T0 + timedelta(seconds=60)
    await _pass(c)
    assert condition_status(api.objects["/api/v1/nodes/n1"], "Ready") == "True"
    assert not api.objects["/api/v1/nodes/n1"].get("spec", {}).get("taints")
    assert _pod_ready(api, "a") == "True"
    # A kubelet that really stays silent is still noticed, one grace period after the resume.
    for seconds in range(65, 106, 5):
        clock[0] = T0 + timedelta(seconds=seconds)
        await _pass(c)
    assert condition_status(api.objects["/api/v1/nodes/n1"], "Ready") == "Unknown"
    assert _pod_ready(api, "a") == "False"


def test_pods_are_marked_when_ready_leaves_true() -> None:
    assert node_ready_left_true("True", "False")
    assert node_ready_left_true("True", "Unknown")
    assert not node_ready_left_true("False", "False")
    assert not node_ready_left_true("Unknown", "True")
    assert not node_ready_left_true(None, "False")


def test_a_malformed_toleration_seconds_never_crashes_eviction() -> None:
    taints = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(T0)}]
    odd = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": "soon"}, "not-a-toleration"]
    assert eviction_time(running_pod("p", tolerations=odd), taints, T0) is None  # tolerated, for ever


async def test_a_lost_node_s_pod_writes_never_hold_up_the_other_nodes_health_checks() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    n2 = {**kubelet_node(), "metadata": {"name": "n2", "creationTimestamp": fmt_time(T0)}}
    api.put("/api/v1/nodes/n2", n2)
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2",
            {**lease(T0), "metadata": {"name": "n2", "namespace": "kube-node-lease"}})
    for i in range(30):
        api.put(f"/api/v1/namespaces/default/pods/p{i}", running_pod(f"p{i}", tolerations=[]))
    api_up = asyncio.Event()
    real_patch, real_delete = api.patch, api.delete

    async def stuck_patch(path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Any:
        if "/pods/" in path:
            await api_up.wait()  # pod writes hang (an overloaded API server)
        return await real_patch(path, body, patch_type, params)

    async def stuck_delete(path: str, body: Any = None, params: Any = None) -> Any:
        await api_up.wait()
        return await real_delete(path, body, params)

    api.patch, api.delete = stuck_patch, stuck_delete
    c = await _controller(api, clock)
    workers = [asyncio.create_task(c.pod_workers())]
    try:
        for seconds in range(0, 66, 5):  # a pass every 5 s; n2's kubelet renews once more at 20 s, then goes silent
            clock[0] = T0 + timedelta(seconds=seconds)
            if seconds == 20:
                c.on_lease_event("MODIFIED", {**lease(clock[0]), "metadata": {"name": "n2", "namespace": "kube-node-lease"}})
            await asyncio.wait_for(c.reconcile(), 1)  # never waits for the hanging pod writes
            await asyncio.sleep(0)
        assert condition_status(api.objects["/api/v1/nodes/n1"], "Ready") == "Unknown"  # at 45 s
        assert condition_status(api.objects["/api/v1/nodes/n2"], "Ready") == "Unknown"  # at 65 s, on time
        assert all(_pod_ready(api, f"p{i}") == "True" for i in range(30))  # still queued
        api_up.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not any(p.startswith("/api/v1/namespaces/default/pods/") for p in api.objects):
                break
        assert not any(p.startswith("/api/v1/namespaces/default/pods/") for p in api.objects)  # evicted
        writes = [(verb, path, json.dumps(body and body["status"]["conditions"][0]["type"]))
                  for verb, path, body in api.calls if "/pods/" in path]
        assert len(writes) == len(set(writes)) == 3 * 30  # Ready=False, DisruptionTarget, delete: once each
    finally:
        for t in workers:
            t.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def test_taint_eviction_records_upstream_events_and_disruption_target() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", kubelet_node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/now", running_pod("now", tolerations=[]))
    api.put("/api/v1/namespaces/default/pods/later", running_pod("later", tolerations=DEFAULT_TOLS))
    c = await _controller(api, clock)
    deleted: list[dict[str, Any]] = []
    api.react("delete", "/pods/now", lambda _v, path, _b: deleted.append(api.objects[path]))
    clock[0] = T0 + timedelta(seconds=45)
    await _pass(c)
    assert "/api/v1/namespaces/default/pods/now" not in api.objects
    cond = next(x for x in deleted[0]["status"]["conditions"] if x["type"] == "DisruptionTarget")
    assert (cond["status"], cond["reason"]) == ("True", "DeletionByTaintManager")
    # The kubelet comes back before "later"'s 300 s: its deletion is cancelled.
    clock[0] = T0 + timedelta(seconds=50)
    _kubelet_posts(c, api, "True", clock[0])
    await _pass(c)
    assert "/api/v1/namespaces/default/pods/later" in api.objects
    events = {(e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
              for verb, path, e in api.calls if verb == "create" and path.endswith("/events")}
    assert ("now", "Normal", "TaintManagerEviction", "Marking for deletion Pod default/now") in events
    assert ("later", "Normal", "TaintManagerEviction", "Cancelling deletion of Pod default/later") in events


async def test_a_node_that_reports_ready_while_being_tainted_loses_the_unreachable_taint() -> None:
    """The kubelet's first Ready=True lands while the controller's taint PATCH is in flight: the
    watch delivers it before the PATCH answer, which must not replace it in the cache (it would keep
    the node tainted until the kubelet's next status write, minutes later with a Lease)."""
    ready = {**kubelet_node(), "metadata": {**kubelet_node()["metadata"], "resourceVersion": "3"}}
    c: NodeLifecycleController

    class RacingApi(FakeApi):
        async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Any = None) -> Any:
            answer = await super().patch(path, body, patch_type, params)
            if "unreachable" in json.dumps(body):  # the taint write; the Ready status was stored meanwhile
                c.on_node_event("MODIFIED", {**ready, "spec": {"taints": answer["spec"]["taints"]}})
            return {**answer, "metadata": {**answer["metadata"], "resourceVersion": "2"}}

    api = RacingApi()
    registered = {**kubelet_node(ready=None), "metadata": {**kubelet_node()["metadata"], "resourceVersion": "1"}}
    api.put("/api/v1/nodes/n1", registered)
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    c = NodeLifecycleController(api, clock=lambda: T0)  # type: ignore[arg-type]
    c.on_node_event("ADDED", registered)
    c.on_lease_event("ADDED", lease(T0))
    await _pass(c)  # no Ready condition yet: tainted unreachable
    assert condition_status(c.nodes["n1"], "Ready") == "True"  # the watch's later revision was kept
    await _pass(c)
    assert not api.objects["/api/v1/nodes/n1"]["spec"].get("taints")
