import asyncio
import importlib.util
import pathlib
from typing import Any

from pykubelet.server.scheduler import (
    Scheduler,
    filter_node,
    fit_error_message,
    match_node_selector_terms,
    schedule,
)


def _load_fake() -> Any:
    # pytest runs with --import-mode=importlib, so sibling modules are loaded by path.
    path = pathlib.Path(__file__).with_name("test_scheduler_fakeapi.py")
    spec = importlib.util.spec_from_file_location("_pykubelet_test_fakeapi", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FakeApi


FakeApi = _load_fake()


def node(name: str, cpu: str = "2", memory: str = "4Gi", pods: str = "110", ready: str = "True", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": "a", "gpus": "4"}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(name: str = "p", cpu: str | None = None, node_name: str = "", **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if cpu:
        c["resources"] = {"requests": {"cpu": cpu}}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [c], "schedulerName": "default-scheduler", "nodeName": node_name, **spec},
        "status": {"phase": "Pending"},
    }


def test_insufficient_cpu_message() -> None:
    d = schedule(pod(cpu="3"), [node("n1")], [])
    assert d.node is None
    assert d.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_bound_pods_consume_capacity_but_terminal_ones_do_not() -> None:
    busy = pod("busy", cpu="1500m", node_name="n1")
    assert schedule(pod(cpu="1"), [node("n1")], [busy]).node is None
    busy["status"]["phase"] = "Succeeded"
    assert schedule(pod(cpu="1"), [node("n1")], [busy]).node == "n1"


def test_cordoned_not_ready_and_taints() -> None:
    nodes = [node("a", unschedulable=True), node("b", ready="False"), node("c", ready="Unknown"),
             node("d", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])]
    d = schedule(pod(), nodes, [])
    assert d.message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
        "1 node(s) were unschedulable."
    )
    tol = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert schedule(pod(tolerations=tol), nodes, []).node == "d"
    assert filter_node(pod(tolerations=[{"operator": "Exists"}]), nodes[1], []) == []


def test_node_selector_and_affinity() -> None:
    assert filter_node(pod(nodeSelector={"zone": "b"}), node("n"), []) == ["node(s) didn't match Pod's node affinity/selector"]
    n = node("n")
    term = lambda *e: {"matchExpressions": list(e)}  # noqa: E731
    assert match_node_selector_terms([term({"key": "zone", "operator": "In", "values": ["a", "b"]})], n)
    assert not match_node_selector_terms([term({"key": "zone", "operator": "NotIn", "values": ["a"]})], n)
    assert match_node_selector_terms([term({"key": "gpus", "operator": "Gt", "values": ["3"]})], n)
    assert not match_node_selector_terms([term({"key": "gpus", "operator": "Lt", "values": ["3"]})], n)
    assert match_node_selector_terms([term({"key": "missing", "operator": "DoesNotExist"})], n)
    assert not match_node_selector_terms([term({"key": "missing", "operator": "Exists"})], n)
    assert not match_node_selector_terms([{}], n)
    assert match_node_selector_terms([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}], n)
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        term({"key": "zone", "operator": "In", "values": ["z"]}), term({"key": "zone", "operator": "Exists"})]}}}
    assert filter_node(pod(affinity=aff), n, []) == []


def test_host_ports_and_max_pods() -> None:
    ported = pod("a", node_name="n")
    ported["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    new = pod("b")
    new["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    assert filter_node(new, node("n"), [ported]) == ["node(s) didn't have free ports for the requested pod ports"]
    assert filter_node(pod(), node("n", pods="1"), [pod("x", node_name="n")]) == ["Too many pods"]


def test_least_allocated_prefers_emptier_node() -> None:
    nodes = [node("a"), node("b")]
    assert schedule(pod(cpu="100m"), nodes, [pod("x", cpu="1", node_name="a")]).node == "b"
    assert fit_error_message(0, {}) == "no nodes available to schedule pods"


async def test_scheduler_binds_and_reports_unschedulable() -> None:
    api = FakeApi()
    api.put("/api/v1/nodes/n1", node("n1"))
    api.put("/api/v1/namespaces/default/pods/small", pod("small", cpu="500m"))
    api.put("/api/v1/namespaces/default/pods/huge", pod("huge", cpu="8"))
    sched = Scheduler(api)  # type: ignore[arg-type]
    task = asyncio.create_task(sched.run())
    try:
        await api.wait_for(lambda a: any(v == "create" and p.endswith("/events") and b["reason"] == "FailedScheduling" for v, p, b in a.calls)
                           and any(p.endswith("/small/binding") for _, p, _ in a.calls))
        assert api.objects["/api/v1/namespaces/default/pods/small"]["spec"]["nodeName"] == "n1"
        huge = api.objects["/api/v1/namespaces/default/pods/huge"]
        cond = huge["status"]["conditions"][0]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
        assert cond["message"] == "0/1 nodes are available: 1 Insufficient cpu."
        events = [b for v, p, b in api.calls if v == "create" and p.endswith("/events")]
        scheduled = [e for e in events if e["reason"] == "Scheduled"]
        assert scheduled[0]["message"] == "Successfully assigned default/small to n1"
        assert scheduled[0]["type"] == "Normal" and scheduled[0]["source"] == {"component": "default-scheduler"}
        failed = next(e for e in events if e["reason"] == "FailedScheduling")
        assert failed["type"] == "Warning" and failed["involvedObject"]["name"] == "huge"

        # A bigger node appears: the unschedulable pod is retried and bound there.
        api.put("/api/v1/nodes/n2", node("n2", cpu="16"), notify="ADDED")
        await api.wait_for(lambda a: any(p.endswith("/huge/binding") for _, p, _ in a.calls))
        assert api.objects["/api/v1/namespaces/default/pods/huge"]["spec"]["nodeName"] == "n2"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
