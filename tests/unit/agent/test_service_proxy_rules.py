"""The service proxy's iptables rules, generated from Services and EndpointSlices (no I/O)."""

from __future__ import annotations

from typing import Any

from pykubelet.agent.proxy import rules

Obj = dict[str, Any]


def svc(name: str = "web", **spec: Any) -> Obj:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("clusterIP", "198.18.128.10")
    spec.setdefault("ports", [{"name": "http", "port": 80, "protocol": "TCP"}])
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def eps(name: str = "web", *endpoints: tuple[str, dict[str, bool]], port: int = 8080) -> Obj:
    return {"metadata": {"name": f"{name}-x", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": name}},
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": c} for ip, c in endpoints]}


READY = {"ready": True, "serving": True, "terminating": False}
NOT_READY = {"ready": False, "serving": False, "terminating": False}
TERMINATING = {"ready": False, "serving": True, "terminating": True}


def dnat_targets(text: str) -> list[str]:
    return sorted(line.rsplit(" ", 1)[1] for line in text.splitlines() if "DNAT" in line)


def test_cluster_ip_balances_randomly_over_ready_endpoints_only() -> None:
    ports = rules.service_ports([svc()], [eps("web", ("198.18.0.2", READY), ("198.18.0.3", READY),
                                                ("198.18.0.4", READY), ("198.18.0.5", NOT_READY))])
    rs = rules.build_rules(ports)
    assert dnat_targets(rs.nat) == ["198.18.0.2:8080", "198.18.0.3:8080", "198.18.0.4:8080"]
    probs = [line.split("--probability ")[1].split()[0] for line in rs.nat.splitlines() if "statistic" in line]
    assert probs == ["0.3333333333", "0.5000000000"]  # 1/3, then 1/2 of the rest, then the last: 1/3 each
    assert "-d 198.18.128.10/32 -p tcp" in rs.nat and "--dport 80 -j PYK-SVC-" in rs.nat
    assert rs.filter.count("REJECT") == 0


def test_terminating_endpoints_are_used_only_when_none_is_ready() -> None:
    only_term = rules.service_ports([svc()], [eps("web", ("198.18.0.2", TERMINATING), ("198.18.0.3", NOT_READY))])
    assert [e.ip for e in only_term[0].endpoints] == ["198.18.0.2"]
    mixed = rules.service_ports([svc()], [eps("web", ("198.18.0.2", TERMINATING), ("198.18.0.3", READY))])
    assert [e.ip for e in mixed[0].endpoints] == ["198.18.0.3"]


def test_service_without_endpoints_rejects_in_the_filter_table() -> None:
    rs = rules.build_rules(rules.service_ports([svc(type="NodePort", ports=[
        {"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}])], []))
    assert "-d 198.18.128.10/32 -p tcp" in rs.filter and "--dport 30080 -j REJECT" in rs.filter
    assert "DNAT" not in rs.nat


def test_node_port_marks_for_masquerade_then_balances() -> None:
    s = svc(type="NodePort", ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}])
    rs = rules.build_rules(rules.service_ports([s], [eps("web", ("198.18.0.2", READY))]))
    assert "--dport 30080 -j PYK-EXT-" in rs.nat
    assert "-m addrtype --dst-type LOCAL -j PYK-NODEPORTS" in rs.nat.splitlines()[-2]


def test_client_ip_affinity_uses_the_recent_module() -> None:
    s = svc(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    rs = rules.build_rules(rules.service_ports([s], [eps("web", ("198.18.0.2", READY), ("198.18.0.3", READY))]))
    assert rs.nat.count("--rcheck --seconds 60 --reap") == 2 and rs.nat.count("--rsource --set") == 2


def test_headless_and_external_name_services_get_no_rules() -> None:
    ports = rules.service_ports([svc(clusterIP="None"), svc("ext", type="ExternalName", clusterIP=None)], [])
    assert ports == []


def test_only_prefixed_chains_are_declared_and_stale_ones_deleted() -> None:
    first = rules.build_rules(rules.service_ports([svc(), svc("db", clusterIP="198.18.128.11")],
                                                  [eps("web", ("198.18.0.2", READY)), eps("db", ("198.18.0.4", READY))]),
                              prefix="PYK7")
    second = rules.build_rules(rules.service_ports([svc()], [eps("web", ("198.18.0.3", READY))]), prefix="PYK7",
                               existing=first.chains)
    declared = [line[1:].split()[0] for t in (second.nat, second.filter) for line in t.splitlines()
                if line.startswith(":")]
    assert all(c.startswith("PYK7-") and len(c) <= 28 for c in declared)
    deleted = [line.split()[1] for line in second.nat.splitlines() if line.startswith("-X ")]
    assert len(deleted) == 1 and deleted[0].startswith("PYK7-SVC-")


def test_partial_sync_rewrites_only_the_changed_service_chain() -> None:
    services = [svc(), svc("db", clusterIP="198.18.128.11")]
    first = rules.build_rules(rules.service_ports(services, [eps("web", ("198.18.0.2", READY)),
                                                             eps("db", ("198.18.0.4", READY))]))
    assert rules.changed_text(first, first.content) == ""
    second = rules.build_rules(rules.service_ports(services, [eps("web", ("198.18.0.3", READY)),
                                                              eps("db", ("198.18.0.4", READY))]))
    text = rules.changed_text(second, first.content)
    assert [line for line in text.splitlines() if line.startswith(":")] == [
        f":PYK-SVC-{rules.chain_hash('default/web:http', 'TCP')} - [0:0]"]
    assert "198.18.0.3:8080" in text and "198.18.0.4" not in text


def test_cleanup_finds_our_jumps_and_chains_in_iptables_save_output() -> None:
    saved = "\n".join([
        "*nat", ":PREROUTING ACCEPT [0:0]", ":PYK-SERVICES - [0:0]", ":KUBE-SERVICES - [0:0]",
        '-A PREROUTING -m comment --comment "pykubelet service portals" -j PYK-SERVICES',
        "-A PREROUTING -j KUBE-SERVICES", "-A PYK-SERVICES -j PYK-NODEPORTS", "COMMIT"])
    assert rules.our_chains(saved, "PYK") == {"PYK-SERVICES"}
    assert rules.our_jumps(saved, "PYK") == [["-D", "PREROUTING", "-m", "comment", "--comment",
                                              "pykubelet service portals", "-j", "PYK-SERVICES"]]
    assert "-X PYK-SERVICES" in rules.cleanup_text("nat", {"PYK-SERVICES"})


def test_local_traffic_policies_keep_this_nodes_endpoints() -> None:
    s = svc(type="NodePort", internalTrafficPolicy="Local", externalTrafficPolicy="Local",
            ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}])
    sl = eps("web", ("198.18.0.2", READY), ("198.18.0.3", READY))
    sl["endpoints"][0]["nodeName"] = "n1"
    sl["endpoints"][1]["nodeName"] = "n2"
    [sp] = rules.service_ports([s], [sl], node_name="n1")
    assert [e.ip for e in sp.endpoints] == ["198.18.0.2"]
    assert sp.external_endpoints is not None and [e.ip for e in sp.external_endpoints] == ["198.18.0.2"]
    rs = rules.build_rules([sp])
    assert "-j PYK-SVL-" in rs.nat and dnat_targets(rs.nat) == ["198.18.0.2:8080", "198.18.0.2:8080"]
    [none_here] = rules.service_ports([s], [sl], node_name="n3")
    assert none_here.endpoints == [] and "--dport 30080 -j REJECT" in rules.build_rules([none_here]).filter


def test_external_ips_are_served_like_the_cluster_ip() -> None:
    rs = rules.build_rules(rules.service_ports([svc(externalIPs=["198.18.64.9"])], [eps("web", ("198.18.0.2", READY))]))
    assert "-d 198.18.64.9/32 -p tcp" in rs.nat and rs.nat.count("-j PYK-SVC-") == 2
