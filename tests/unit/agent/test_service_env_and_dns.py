"""Service environment variables and the resolv.conf a pod gets, as upstream's kubelet builds them."""

from __future__ import annotations

from typing import Any

from pykubelet.agent.kuberuntime.dns import missing_cluster_dns
from pykubelet.agent.kuberuntime.envvars import service_env

Obj = dict[str, Any]


def svc(name: str, ns: str = "default", ip: str = "198.18.128.5", ports: list[Obj] | None = None) -> Obj:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": ports or [{"name": "http", "port": 80, "protocol": "TCP"}]}}


def pod(ns: str = "app", links: bool | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c"}]}
    if links is not None:
        spec["enableServiceLinks"] = links
    return {"metadata": {"name": "p", "namespace": ns}, "spec": spec}


SERVICES = [svc("kubernetes", ip="198.18.128.1", ports=[{"name": "https", "port": 443, "protocol": "TCP"}]),
            svc("web-api", "app", ports=[{"name": "http", "port": 80, "protocol": "TCP"},
                                         {"name": "dns", "port": 53, "protocol": "UDP"}]),
            svc("headless", "app", ip="None"), svc("other", "elsewhere")]


def test_service_links_give_docker_link_variables_for_the_pods_namespace() -> None:
    env = dict(service_env(pod(), SERVICES))
    assert env["WEB_API_SERVICE_HOST"] == "198.18.128.5" and env["WEB_API_SERVICE_PORT"] == "80"
    assert env["WEB_API_SERVICE_PORT_DNS"] == "53"
    assert env["WEB_API_PORT"] == "tcp://198.18.128.5:80"
    assert env["WEB_API_PORT_53_UDP"] == "udp://198.18.128.5:53"
    assert env["WEB_API_PORT_53_UDP_PROTO"] == "udp" and env["WEB_API_PORT_53_UDP_ADDR"] == "198.18.128.5"
    assert env["KUBERNETES_SERVICE_HOST"] == "198.18.128.1" and env["KUBERNETES_SERVICE_PORT"] == "443"
    assert not any(k.startswith(("HEADLESS_", "OTHER_")) for k in env)


def test_without_service_links_only_the_kubernetes_service_is_there() -> None:
    env = dict(service_env(pod(links=False), SERVICES))
    assert env["KUBERNETES_SERVICE_HOST"] == "198.18.128.1"
    assert env["KUBERNETES_PORT_443_TCP"] == "tcp://198.18.128.1:443"
    assert not any(k.startswith("WEB_API") for k in env)


HOST = "nameserver 10.0.0.2\nsearch corp.example\noptions timeout:2\n"


def dns(p: Obj, cluster_dns: list[str] | None = None) -> Any:
    from pykubelet.agent.kuberuntime.dns import pod_dns

    return pod_dns(p, cluster_dns=["198.18.0.1"] if cluster_dns is None else cluster_dns,
                   cluster_domain="cluster.local", host_resolv=HOST)


def test_cluster_first_searches_the_namespace_then_the_cluster_then_the_host() -> None:
    d = dns(pod("app"))
    assert d.servers == ["198.18.0.1"] and d.options == ["ndots:5"]
    assert d.searches == ["app.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"]


def test_host_network_default_none_and_missing_cluster_dns() -> None:
    p = pod()
    p["spec"]["hostNetwork"] = True
    assert dns(p).servers == ["10.0.0.2"]
    p["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    assert dns(p).servers == ["198.18.0.1"]
    fallback = dns(pod(), cluster_dns=[])
    assert fallback.servers == ["10.0.0.2"] and "Falling back to \"Default\" policy" in fallback.warning
    none = pod()
    none["spec"].update(dnsPolicy="None", dnsConfig={"nameservers": ["198.18.0.9"], "searches": ["a.b"],
                                                     "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]})
    d = dns(none)
    assert (d.servers, d.searches, d.options) == (["198.18.0.9"], ["a.b"], ["ndots:2", "edns0"])


def test_the_missing_cluster_dns_warning_alone_is_the_one_the_pods_dns_gives() -> None:
    host_net = pod()
    host_net["spec"]["hostNetwork"] = True
    with_host_net = pod()
    with_host_net["spec"].update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    pods = [pod(), host_net, with_host_net]
    for policy in ("ClusterFirst", "Default", "None"):
        p = pod()
        p["spec"]["dnsPolicy"] = policy
        pods.append(p)
    for p in pods:
        for cluster_dns in ([], ["198.18.0.1"]):
            assert missing_cluster_dns(p, cluster_dns=cluster_dns) == dns(p, cluster_dns=cluster_dns).warning
    assert missing_cluster_dns(pod(), cluster_dns=[]) != ""
    assert missing_cluster_dns(with_host_net, cluster_dns=[]) != "" and missing_cluster_dns(host_net, cluster_dns=[]) == ""
