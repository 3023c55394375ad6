import importlib.util
import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

from pykubelet.server.nodelifecycle import (
    HealthTracker,
    NodeLifecycleController,
    desired_taints,
    eviction_time,
    fmt_time,
    unknown_conditions,
)


def _load_fake() -> Any:
    # pytest runs with --import-mode=importlib, so the shared fake is loaded by path.
    path = pathlib.Path(__file__).with_name("test_scheduler_fakeapi.py")
    spec = importlib.util.spec_from_file_location("_pykubelet_test_fakeapi_nlc", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FakeApi


FakeApi = _load_fake()
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def node(ready: str | None = "True", **spec: Any) -> dict[str, Any]:
    conds = [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
        {"type": "DiskPressure", "status": "False"},
        {"type": "PIDPressure", "status": "False"},
    ]
    if ready:
        conds.append({"type": "Ready", "status": ready, "reason": "KubeletReady", "lastHeartbeatTime": fmt_time(T0)})
    return {"metadata": {"name": "n1", "creationTimestamp": fmt_time(T0)}, "spec": spec, "status": {"conditions": conds}}


def lease(renew: datetime) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"holderIdentity": "n1", "renewTime": renew.isoformat()}}


def pod(name: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}], "tolerations": tolerations or []},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


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
    conds = unknown_conditions(node(), T0)
    assert conds is not None
    by = {c["type"]: c for c in conds}
    assert by["Ready"]["status"] == "Unknown"
    assert by["Ready"]["reason"] == "NodeStatusUnknown"
    assert by["Ready"]["message"] == "Kubelet stopped posting node status."
    assert {by[t]["status"] for t in ("MemoryPressure", "DiskPressure", "PIDPressure")} == {"Unknown"}
    assert unknown_conditions({**node(), "status": {"conditions": conds}}, T0) is None
    never = {c["type"]: c for c in unknown_conditions(node(ready=None), T0) or []}
    assert never["Ready"]["reason"] == "NodeStatusNeverUpdated"


def test_desired_taints_follow_conditions() -> None:
    assert desired_taints(node("True"), T0) == []
    t = desired_taints(node("Unknown"), T0)
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(T0)} in t
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in t
    t2 = desired_taints(node("False", taints=[{"key": "mine", "effect": "NoSchedule"}, *t]), T0 + timedelta(seconds=9))
    assert {"key": "mine", "effect": "NoSchedule"} in t2
    assert not any(x["key"] == "node.kubernetes.io/unreachable" for x in t2)
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": fmt_time(T0 + timedelta(seconds=9))} in t2
    # Existing managed taints keep their timeAdded.
    assert desired_taints(node("Unknown", taints=t), T0 + timedelta(seconds=99)) == t
    assert desired_taints(node("True", unschedulable=True), T0) == [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def test_eviction_time() -> None:
    taints = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(T0)}]
    assert eviction_time(pod("p", DEFAULT_TOLS), taints, T0) == T0 + timedelta(seconds=300)
    assert eviction_time(pod("p"), taints, T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=5)
    forever = [{"operator": "Exists"}]
    assert eviction_time(pod("p", forever), taints, T0) is None
    short = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]
    assert eviction_time(pod("p", short), taints, T0) == T0 + timedelta(seconds=10)
    assert eviction_time(pod("p"), [{"key": "x", "effect": "NoSchedule"}], T0) is None


async def test_controller_marks_unknown_taints_evicts_and_recovers() -> None:
    api = FakeApi()
    clock = [T0]
    api.put("/api/v1/nodes/n1", node())
    api.put("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease(T0))
    api.put("/api/v1/namespaces/default/pods/quick", pod("quick", [{**DEFAULT_TOLS[1], "tolerationSeconds": 30}]))
    api.put("/api/v1/namespaces/default/pods/slow", pod("slow", DEFAULT_TOLS))
    c = NodeLifecycleController(api, clock=lambda: clock[0])  # type: ignore[arg-type]
    for path, handler in (
        ("/api/v1/nodes", c.on_node_event),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", c.on_lease_event),
        ("/api/v1/pods", c.on_pod_event),
    ):
        for item in (await api.list(path))["items"]:
            handler("ADDED", item)

    clock[0] = T0 + timedelta(seconds=30)
    await c.reconcile()
    assert api.calls == []  # still within the grace period

    clock[0] = T0 + timedelta(seconds=45)
    await c.reconcile()
    n = api.objects["/api/v1/nodes/n1"]
    ready = next(x for x in n["status"]["conditions"] if x["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": fmt_time(clock[0])} in n["spec"]["taints"]
    quick = api.objects["/api/v1/namespaces/default/pods/quick"]
    assert next(x for x in quick["status"]["conditions"] if x["type"] == "Ready")["status"] == "False"

    clock[0] = T0 + timedelta(seconds=45 + 31)
    await c.reconcile()
    assert "/api/v1/namespaces/default/pods/quick" not in api.objects
    assert "/api/v1/namespaces/default/pods/slow" in api.objects

    # The kubelet comes back: lease renewed and Ready posted -> taints removed, no more evictions.
    c.on_lease_event("MODIFIED", lease(clock[0]))
    c.on_node_event("MODIFIED", {**api.objects["/api/v1/nodes/n1"], "status": node()["status"]})
    api.objects["/api/v1/nodes/n1"]["status"] = node()["status"]
    clock[0] = T0 + timedelta(seconds=400)
    c.on_lease_event("MODIFIED", lease(clock[0]))
    await c.reconcile()
    assert not api.objects["/api/v1/nodes/n1"].get("spec", {}).get("taints")
    assert "/api/v1/namespaces/default/pods/slow" in api.objects
