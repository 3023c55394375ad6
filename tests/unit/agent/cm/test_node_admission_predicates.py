"""Node-side admission: a pod that reached the node without the scheduler is checked like upstream's
predicateAdmitHandler does."""

from __future__ import annotations

from pykubelet.agent.cm.admission import PredicateAdmitHandler, admit_on_node
from pykubelet.agent.interfaces import PodAdmitAttributes
from tests.builders import container, node, pod

NODE = node("n1", allocatable={"cpu": "2", "memory": "1Gi", "pods": "110", "example.com/gpu": "1"},
            labels={"kubernetes.io/hostname": "n1", "disk": "ssd"})


def test_more_cpu_than_allocatable_is_out_of_cpu_with_upstreams_message() -> None:
    p = pod("big", containers=[container("c", requests={"cpu": "3"})])
    r = admit_on_node(p, NODE, [])
    assert (r.admit, r.reason, r.message) == (
        False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000")


def test_memory_already_requested_by_admitted_pods_counts_as_used() -> None:
    running = pod("r", containers=[container("c", requests={"memory": "800Mi"})])
    p = pod("p", containers=[container("c", requests={"memory": "300Mi"})])
    r = admit_on_node(p, NODE, [running])
    assert r.reason == "OutOfmemory"
    assert "used: 838860800, capacity: 1073741824" in r.message


def test_extended_resources_are_checked_when_the_node_has_them_and_ignored_otherwise() -> None:
    two_gpus = pod("g", containers=[container("c", requests={"example.com/gpu": "2"})])
    assert admit_on_node(two_gpus, NODE, []).reason == "OutOfexample.com/gpu"
    unknown = pod("u", containers=[container("c", requests={"other.io/thing": "5"})])
    assert admit_on_node(unknown, NODE, []).admit


def test_node_selector_mismatch_is_refused_as_node_affinity() -> None:
    r = admit_on_node(pod("p", nodeSelector={"disk": "hdd"}), NODE, [])
    assert (r.reason, r.message) == ("NodeAffinity",
                                     "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
    assert admit_on_node(pod("p", nodeSelector={"disk": "ssd"}), NODE, []).admit


def test_a_host_port_in_use_is_refused_as_node_ports() -> None:
    web = container("c", ports=[{"containerPort": 80, "hostPort": 8080}])
    r = admit_on_node(pod("b", containers=[web]), NODE, [pod("a", containers=[web])])
    assert r.reason == "NodePorts"


def test_untolerated_no_execute_taint_is_refused_but_no_schedule_is_not_the_kubelets_business() -> None:
    tainted = {**NODE, "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]}}
    r = admit_on_node(pod("p"), tainted, [])
    assert (r.reason, r.message) == (
        "TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
    tolerated = pod("t", tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute"}])
    assert admit_on_node(tolerated, tainted, []).admit
    static = pod("s", annotations={"kubernetes.io/config.source": "file"})
    assert admit_on_node(static, tainted, []).admit
    no_schedule = {**NODE, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    assert admit_on_node(pod("p"), no_schedule, []).admit


def test_without_node_info_the_pod_is_refused() -> None:
    r = PredicateAdmitHandler(lambda: None).admit(PodAdmitAttributes(pod("p"), []))
    assert (r.admit, r.reason) == (False, "InvalidNodeInfo")


def test_a_node_whose_allocatable_changes_is_checked_against_its_new_allocatable() -> None:
    # the parsed allocatable is kept by its strings: a change (or a number in place of a string) is re-read
    p = pod("p", containers=[container("c", requests={"cpu": "3"})])
    small = node("n1", allocatable={"cpu": "2", "memory": "1Gi", "pods": "110"})
    large = node("n1", allocatable={"cpu": "4", "memory": "1Gi", "pods": "110"})
    assert admit_on_node(p, small, []).reason == "OutOfcpu"
    assert admit_on_node(p, large, []).admit
    assert admit_on_node(p, small, []).reason == "OutOfcpu"
    small["status"]["allocatable"]["cpu"] = "8"  # the same dict, changed in place
    assert admit_on_node(p, small, []).admit
    numbers = node("n1", allocatable={"cpu": 2, "memory": "1Gi", "pods": "110"})
    r = admit_on_node(p, numbers, [])
    assert (r.reason, r.message) == (
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000")
    flag = node("n1", allocatable={"cpu": True, "memory": "1Gi", "pods": "110"})  # not a quantity: no cpu
    assert admit_on_node(p, flag, []).message.endswith("capacity: 0")
