"""The node usage admission reads (summed requests, pod count, host ports of the admitted pods) is kept
up to date as pods come and go, and admits exactly as summing the admitted pods afresh does."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

from pykubelet.agent.cm.admission import (
    NodeAdmitAttributes,
    NodeUsage,
    PredicateAdmitHandler,
    admit_on_node,
    admit_on_node_usage,
)
from tests.builders import container, node, pod

NODE = node("n1", allocatable={"cpu": "2", "memory": "1Gi", "pods": "110", "example.com/gpu": "2"})


def _web(name: str, cpu: str = "500m", host_port: int | None = None, host_ip: str | None = None,
         rv: str = "1") -> dict[str, Any]:
    ports = [] if host_port is None else [{"containerPort": 80, "hostPort": host_port,
                                           **({"hostIP": host_ip} if host_ip else {})}]
    return pod(name, containers=[container("c", requests={"cpu": cpu, "memory": "100Mi"}, ports=ports)],
               metadata={"resourceVersion": rv})


def test_requests_of_added_pods_are_summed_and_removed_pods_stop_counting() -> None:
    usage = NodeUsage()
    usage.add("a", _web("a", "500m"))
    usage.add("b", _web("b", "250m"))
    assert (len(usage), usage.requested["cpu"]) == (2, Decimal("0.75"))
    usage.discard("a")
    assert (len(usage), usage.requested["cpu"], "a" in usage) == (1, Decimal("0.25"), False)
    usage.discard("b")
    usage.discard("never-added")
    assert (len(usage), dict(usage.requested)) == (0, {})


def test_a_pod_whose_resources_changed_is_counted_with_its_new_requests_only() -> None:
    usage = NodeUsage()
    usage.add("a", _web("a", "500m", rv="1"))
    usage.add("a", _web("a", "1500m", rv="2"))
    assert (len(usage), usage.requested["cpu"]) == (1, Decimal("1.5"))
    usage.add("a", _web("a", "1500m", rv="2"))  # the same version again: nothing changes
    assert usage.requested["cpu"] == Decimal("1.5")


def test_host_ports_conflict_until_the_pod_holding_them_goes() -> None:
    usage = NodeUsage()
    usage.add("a", _web("a", host_port=8080))
    usage.add("b", _web("b", host_port=8080, host_ip="127.0.0.2"))  # same port on another IP
    assert usage.ports_conflict([("0.0.0.0", "TCP", 8080)])
    assert usage.ports_conflict([("127.0.0.3", "TCP", 8080)])  # a holds 8080 on every IP
    assert not usage.ports_conflict([("0.0.0.0", "UDP", 8080), ("0.0.0.0", "TCP", 9090)])
    usage.discard("a")
    assert usage.ports_conflict([("127.0.0.2", "TCP", 8080)])
    assert not usage.ports_conflict([("127.0.0.3", "TCP", 8080)])
    usage.discard("b")
    assert not usage.ports_conflict([("0.0.0.0", "TCP", 8080)])


def test_the_handler_refuses_with_the_same_reason_and_message_from_the_aggregate() -> None:
    usage = NodeUsage()
    usage.add("a", _web("a", "1500m", host_port=8080))
    handler = PredicateAdmitHandler(lambda: NODE)
    big = _web("big", "1")
    r = handler.admit(NodeAdmitAttributes(big, usage.pods(), usage))
    assert (r.admit, r.reason, r.message) == (
        False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000")
    r = handler.admit(NodeAdmitAttributes(_web("p", "100m", host_port=8080), usage.pods(), usage))
    assert (r.admit, r.reason) == (False, "NodePorts")


def test_recount_finds_and_repairs_bookkeeping_that_went_out_of_step() -> None:
    usage = NodeUsage()
    a, b, c = _web("a"), _web("b"), _web("c", host_port=8080)
    usage.add("a", a)
    usage.add("b", b)
    assert usage.reconcile({"a": a, "b": b}) == []
    drift = usage.reconcile({"a": a, "c": c})  # b should have gone, c should have been counted
    assert drift == ["b", "c"]
    assert (usage.uids(), usage.requested["cpu"]) == ({"a", "c"}, Decimal(1))
    assert usage.ports_conflict([("0.0.0.0", "TCP", 8080)])


def test_admissions_from_the_aggregate_match_summing_the_admitted_pods_through_any_history() -> None:
    rng = random.Random(7)
    usage = NodeUsage()
    counted: dict[str, dict[str, Any]] = {}
    for step in range(400):
        uid = f"p{rng.randrange(12)}"
        if rng.random() < 0.4:
            usage.discard(uid)
            counted.pop(uid, None)
        else:
            p = pod(uid, uid=uid, metadata={"resourceVersion": str(step)}, containers=[container(
                "c", requests={"cpu": rng.choice(["100m", "250m", "0.3"]), "memory": rng.choice(["50Mi", "0.1Gi"]),
                               **({"example.com/gpu": "1"} if rng.random() < 0.2 else {})},
                ports=[{"containerPort": 1, "hostPort": rng.choice([80, 81]), "protocol": rng.choice(["TCP", "UDP"]),
                        "hostIP": rng.choice(["0.0.0.0", "127.0.0.1", "127.0.0.2"])}] if rng.random() < 0.3 else [])])
            usage.add(uid, p)
            counted[uid] = p
        cand = pod("new", uid="new", containers=[container(
            "c", requests={"cpu": rng.choice(["100m", "600m"]), "memory": "200Mi", "example.com/gpu": "1"},
            ports=[{"containerPort": 1, "hostPort": 80, "hostIP": rng.choice(["0.0.0.0", "127.0.0.1"])}]
            if rng.random() < 0.5 else [])])
        want = admit_on_node(cand, NODE, list(counted.values()))
        assert admit_on_node_usage(cand, NODE, usage) == want, step
        assert sorted(p["metadata"]["uid"] for p in usage.pods()) == sorted(counted)
