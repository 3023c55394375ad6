"""What the EndpointSlice and Endpoints controllers list for a Service, from pod readiness."""

from __future__ import annotations

from typing import Any

from pykubelet.server.controllers.endpoints import desired_subsets
from pykubelet.server.controllers.endpointslice import desired_slices

Obj = dict[str, Any]


def svc(**spec: Any) -> Obj:
    spec.setdefault("selector", {"app": "web"})
    spec.setdefault("ports", [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
                              {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}])
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u1"}, "spec": spec}


def pod(name: str, ip: str, *, ready: bool = True, port: int = 8080, terminating: bool = False,
        labels: dict[str, str] | None = None, phase: str = "Running", **spec: Any) -> Obj:
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {"app": "web"}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta,
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": "web", "containerPort": port}]}],
                     **spec},
            "status": {"phase": phase, "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_ready_not_ready_and_terminating_pods_get_upstream_conditions() -> None:
    pods = [pod("a", "198.18.0.2"), pod("b", "198.18.0.3", ready=False), pod("c", "198.18.0.4", terminating=True),
            pod("other", "198.18.0.5", labels={"app": "db"}), pod("done", "198.18.0.6", phase="Succeeded")]
    [sl] = desired_slices(svc(), pods)
    conds = {e["targetRef"]["name"]: e["conditions"] for e in sl["endpoints"]}
    assert conds == {"a": {"ready": True, "serving": True, "terminating": False},
                     "b": {"ready": False, "serving": False, "terminating": False},
                     "c": {"ready": False, "serving": True, "terminating": True}}
    assert sl["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"},
                           {"name": "metrics", "port": 9090, "protocol": "TCP"}]
    assert sl["metadata"]["labels"]["kubernetes.io/service-name"] == "web"


def test_named_target_ports_resolving_differently_split_slices() -> None:
    slices = desired_slices(svc(), [pod("a", "198.18.0.2", port=8080), pod("b", "198.18.0.3", port=8081)])
    assert sorted(s["ports"][0]["port"] for s in slices) == [8080, 8081]


def test_publish_not_ready_addresses_and_hostnames() -> None:
    s = svc(publishNotReadyAddresses=True, clusterIP="None")
    [sl] = desired_slices(s, [pod("a", "198.18.0.2", ready=False, hostname="a0", subdomain="web")])
    assert sl["endpoints"][0]["conditions"]["ready"] is True and sl["endpoints"][0]["hostname"] == "a0"


def test_service_without_matching_pods_keeps_one_empty_slice() -> None:
    [sl] = desired_slices(svc(), [])
    assert sl["endpoints"] == [] and sl["ports"] == []


def test_endpoints_put_not_ready_pods_apart_and_leave_terminating_ones_out() -> None:
    pods = [pod("a", "198.18.0.2"), pod("b", "198.18.0.3", ready=False), pod("c", "198.18.0.4", terminating=True)]
    [sub] = desired_subsets(svc(), pods)
    assert [a["ip"] for a in sub["addresses"]] == ["198.18.0.2"]
    assert [a["ip"] for a in sub["notReadyAddresses"]] == ["198.18.0.3"]
    assert sub["ports"][0] == {"name": "http", "port": 8080, "protocol": "TCP"}
