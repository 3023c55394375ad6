import asyncio
import functools
from typing import Any

from pykubelet.server.scheduler import (
    Scheduler,
    filter_node,
    fit_error_message,
    match_node_selector_terms,
    schedule,
    score_node,
)
from tests.builders import container, node, pod
from tests.fakes import FakeApi

# What the scheduler sees: nodes with room for 2 CPUs / 4Gi / 110 pods, pending pods for it.
ALLOCATABLE = {"cpu": "2", "memory": "4Gi", "pods": "110"}
sched_node = functools.partial(node, allocatable=ALLOCATABLE)
pending = functools.partial(pod, schedulerName="default-scheduler", status={"phase": "Pending"})


def needs_cpu(cpu: str) -> list[dict[str, Any]]:
    return [container(requests={"cpu": cpu})]


def test_insufficient_cpu_message() -> None:
    d = schedule(pending(containers=needs_cpu("3")), [sched_node("n1")], [])
    assert d.node is None
    assert d.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_least_allocated_score_is_the_mean_free_share_of_cpu_and_memory_rounded_down() -> None:
    big = node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    # a pod without requests counts as 100m / 200Mi: cpu 3900/4000 free = 97, memory 7992/8192 = 97
    assert score_node(pending(), big, []) == 97
    # 1 cpu + 2Gi beside a request-less pod: cpu 2900/4000 = 72, memory 5944/8192 = 72
    wants = pending(containers=[container(requests={"cpu": "1", "memory": "2Gi"})])
    assert score_node(wants, big, [pending("other", node_name="n1")]) == 72
    # more than the node has scores 0 for that resource; millicores count exactly
    assert score_node(pending(containers=[container(requests={"cpu": "4001m"})]), big, []) == 48
    assert score_node(pending(containers=[container(requests={"cpu": "1m"})]), big, []) == 98


def test_bound_pods_consume_capacity_but_terminal_ones_do_not() -> None:
    busy = pending("busy", containers=needs_cpu("1500m"), node_name="n1")
    assert schedule(pending(containers=needs_cpu("1")), [sched_node("n1")], [busy]).node is None
    busy["status"]["phase"] = "Succeeded"
    assert schedule(pending(containers=needs_cpu("1")), [sched_node("n1")], [busy]).node == "n1"


def test_cordoned_not_ready_and_taints() -> None:
    nodes = [sched_node("a", unschedulable=True), sched_node("b", ready="False"), sched_node("c", ready="Unknown"),
             sched_node("d", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])]
    d = schedule(pending(), nodes, [])
    assert d.message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
        "1 node(s) were unschedulable."
    )
    tol = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert schedule(pending(tolerations=tol), nodes, []).node == "d"
    assert filter_node(pending(tolerations=[{"operator": "Exists"}]), nodes[1], []) == []


def test_node_selector_and_affinity() -> None:
    assert filter_node(pending(nodeSelector={"zone": "b"}), sched_node("n"), []) == ["node(s) didn't match Pod's node affinity/selector"]
    n = sched_node("n", labels={"kubernetes.io/hostname": "n", "zone": "a", "gpus": "4"})
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
    assert filter_node(pending(affinity=aff), n, []) == []


def test_host_ports_and_max_pods() -> None:
    ported = pending("a", node_name="n")
    ported["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    new = pending("b")
    new["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    assert filter_node(new, sched_node("n"), [ported]) == ["node(s) didn't have free ports for the requested pod ports"]
    assert filter_node(pending(), sched_node("n", allocatable={**ALLOCATABLE, "pods": "1"}), [pending("x", node_name="n")]) == ["Too many pods"]


def test_least_allocated_prefers_emptier_node() -> None:
    nodes = [sched_node("a"), sched_node("b")]
    assert schedule(pending(containers=needs_cpu("100m")), nodes, [pending("x", containers=needs_cpu("1"), node_name="a")]).node == "b"
    assert fit_error_message(0, {}) == "no nodes available to schedule pods"


async def test_scheduler_binds_and_reports_unschedulable() -> None:
    api = FakeApi()
    api.put("/api/v1/nodes/n1", sched_node("n1"))
    api.put("/api/v1/namespaces/default/pods/small", pending("small", containers=needs_cpu("500m")))
    api.put("/api/v1/namespaces/default/pods/huge", pending("huge", containers=needs_cpu("8")))
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
        api.put("/api/v1/nodes/n2", sched_node("n2", allocatable={**ALLOCATABLE, "cpu": "16"}), notify="ADDED")
        await api.wait_for(lambda a: any(p.endswith("/huge/binding") for _, p, _ in a.calls))
        assert api.objects["/api/v1/namespaces/default/pods/huge"]["spec"]["nodeName"] == "n2"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_room_on_a_node_follows_its_pods_as_they_are_bound_finish_and_go() -> None:
    api = FakeApi()
    sched = Scheduler(api)  # type: ignore[arg-type]
    sched.on_node_event("ADDED", sched_node("n1"))
    web = [container(requests={"cpu": "1500m"}, ports=[{"containerPort": 80, "hostPort": 8080}])]
    busy = pending("busy", containers=web, node_name="n1")
    sched.on_pod_event("ADDED", busy)
    want = pending("want", containers=needs_cpu("1"))
    port = pending("port", containers=[container(ports=[{"containerPort": 80, "hostPort": 8080}])])
    more = pending("more", containers=needs_cpu("1500m"))
    for p in (want, port, more):
        api.put(f"/api/v1/namespaces/default/pods/{p['metadata']['name']}", p)
    try:
        assert (await sched.schedule_one(want)).message == "0/1 nodes are available: 1 Insufficient cpu."
        assert (await sched.schedule_one(port)).reasons == {"node(s) didn't have free ports for the requested pod ports": 1}
        # A finished pod gives its cpu and ports back; the pod bound next takes the cpu at once.
        sched.on_pod_event("MODIFIED", {**busy, "status": {"phase": "Succeeded"}})
        assert (await sched.schedule_one(want)).node == "n1"
        assert (await sched.schedule_one(more)).node is None
        assert (await sched.schedule_one(port)).node == "n1"
        # Deleting the bound pod frees its cpu again.
        sched.on_pod_event("DELETED", {**want, "spec": {**want["spec"], "nodeName": "n1"}})
        assert (await sched.schedule_one(more)).node == "n1"
    finally:
        await asyncio.gather(*sched._binding, return_exceptions=True)
