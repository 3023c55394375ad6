"""Service defaulting, validation and ClusterIP/NodePort allocation as upstream's service REST does."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.server.errors import StatusError
from pykubelet.server.services import ServiceAllocator, parse_port_range

Obj = dict[str, Any]


def svc(name: str = "web", **spec: Any) -> Obj:
    spec.setdefault("ports", [{"port": 80}])
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def created(alloc: ServiceAllocator, others: list[Obj], obj: Obj) -> Obj:
    assert alloc.prepare_create(obj, others) == []
    others.append(obj)
    return obj


def test_cluster_ip_service_gets_upstream_defaults_and_an_ip_in_range() -> None:
    a = ServiceAllocator("198.18.128.0/28")
    s = created(a, [], svc(selector={"app": "web"}))["spec"]
    assert s["type"] == "ClusterIP" and s["sessionAffinity"] == "None"
    assert s["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert s["ipFamilies"] == ["IPv4"] and s["ipFamilyPolicy"] == "SingleStack"
    assert s["internalTrafficPolicy"] == "Cluster"
    assert s["clusterIPs"] == [s["clusterIP"]]
    assert s["clusterIP"].startswith("198.18.128.") and s["clusterIP"] != a.kubernetes_ip


def test_requested_ip_that_is_taken_or_outside_the_range_is_refused_with_upstream_messages() -> None:
    a = ServiceAllocator("198.18.128.0/24")
    others: list[Obj] = []
    created(a, others, svc("a", clusterIP="198.18.128.10"))
    errs = a.prepare_create(svc("b", clusterIP="198.18.128.10"), others)
    assert errs == [("spec.clusterIPs", 'Invalid value: []string{"198.18.128.10"}: failed to allocate IP '
                     "198.18.128.10: provided IP is already allocated")]
    errs = a.prepare_create(svc("c", clusterIP="10.0.0.1"), others)
    assert "is not in the valid range. The range of valid IPs is 198.18.128.0/24" in errs[0][1]


def test_exhausted_range_is_an_internal_error() -> None:
    a = ServiceAllocator("198.18.128.0/29")  # 6 hosts, one kept for kubernetes
    others: list[Obj] = []
    for i in range(5):
        created(a, others, svc(f"s{i}"))
    assert len({o["spec"]["clusterIP"] for o in others}) == 5
    with pytest.raises(StatusError) as e:
        a.prepare_create(svc("full"), others)
    assert e.value.code == 500 and "failed to allocate a serviceIP: range is full" in e.value.message


def test_node_ports_are_allocated_in_range_and_conflicts_refused() -> None:
    a = ServiceAllocator(node_ports=(30000, 30002))
    others: list[Obj] = []
    s = created(a, others, svc("np", type="NodePort"))["spec"]
    assert 30000 <= s["ports"][0]["nodePort"] <= 30002 and s["externalTrafficPolicy"] == "Cluster"
    taken = s["ports"][0]["nodePort"]
    errs = a.prepare_create(svc("dup", type="NodePort", ports=[{"port": 80, "nodePort": taken}]), others)
    assert errs == [("spec.ports[0].nodePort", f"Invalid value: {taken}: provided port is already allocated")]
    errs = a.prepare_create(svc("out", type="NodePort", ports=[{"port": 80, "nodePort": 80}]), others)
    assert "provided port is not in the valid range. The range of valid ports is 30000-30002" in errs[0][1]
    created(a, others, svc("n2", type="NodePort"))
    created(a, others, svc("n3", type="NodePort"))
    with pytest.raises(StatusError, match="failed to allocate a nodePort: range is full"):
        a.prepare_create(svc("n4", type="NodePort"), others)


def test_headless_external_name_and_client_ip_affinity() -> None:
    a = ServiceAllocator()
    h = created(a, [], svc("h", clusterIP="None", selector={"a": "b"}))["spec"]
    assert h["clusterIPs"] == ["None"]
    e = created(a, [], {"metadata": {"name": "e"}, "spec": {"type": "ExternalName", "externalName": "example.org"}})
    assert "clusterIP" not in e["spec"] and "ipFamilies" not in e["spec"]
    c = created(a, [], svc("c", sessionAffinity="ClientIP"))["spec"]
    assert c["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}


def test_invalid_services_name_the_field() -> None:
    a = ServiceAllocator()
    assert a.prepare_create(svc(type="Foo"), [])[0][0] == "spec.type"
    assert ("spec.ports", "Required value") in a.prepare_create(svc(ports=[]), [])
    assert ("spec.ports[1].name", "Required value") in a.prepare_create(
        svc(ports=[{"port": 80, "name": "a"}, {"port": 81}]), [])
    errs = a.prepare_create(svc(ports=[{"port": 80, "nodePort": 30001}]), [])
    assert errs == [("spec.ports[0].nodePort", "Forbidden: may not be used when `type` is 'ClusterIP'")]
    errs = a.prepare_create(svc(type="NodePort", clusterIP="None"), [])
    assert errs[0][0] == "spec.clusterIPs[0]"


def test_update_keeps_cluster_ip_and_node_ports_and_refuses_a_changed_ip() -> None:
    a = ServiceAllocator()
    old = created(a, [], svc(type="NodePort"))
    new = svc(type="NodePort")
    assert a.prepare_update(old, new, []) == []
    assert new["spec"]["clusterIP"] == old["spec"]["clusterIP"]
    assert new["spec"]["ports"][0]["nodePort"] == old["spec"]["ports"][0]["nodePort"]
    changed = svc(type="NodePort", clusterIP="198.18.128.77")
    assert a.prepare_update(old, changed, [])[0][1].endswith("may not change once set")
    back = svc(type="ClusterIP")
    assert a.prepare_update(old, back, []) == []
    assert "nodePort" not in back["spec"]["ports"][0]


def test_port_range_flag_formats() -> None:
    assert parse_port_range("30000-32767") == (30000, 32767)
    assert parse_port_range("30000+10") == (30000, 30010)
    with pytest.raises(ValueError):
        parse_port_range("5-1")
