"""Services through the dev API server: ClusterIPs, the default/kubernetes Service, cluster DNS."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.server.main import ServerHandle, run_server


def _dead_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, controllers=False, advertise_address="127.0.0.1",
                          service_cluster_ip_range="198.18.128.0/24", dns_address="127.0.0.1", dns_port=0,
                          dns_upstreams=[("127.0.0.1", _dead_port())]) as s:
        yield s


@pytest.fixture
async def api(srv: ServerHandle) -> AsyncIterator[ApiClient]:
    c = ApiClient(srv.url, token=srv.admin_token, ca_file=str(srv.ca_file))
    yield c
    await c.close()


async def query(srv: ServerHandle, name: str, qtype: str = "A", tcp: bool = False) -> DNSRecord:
    q = DNSRecord.question(name, qtype)
    assert srv.dns_port
    raw = await asyncio.to_thread(q.send, "127.0.0.1", srv.dns_port, tcp, 5)
    return DNSRecord.parse(raw)


def answers(r: DNSRecord) -> list[str]:
    return sorted(str(rr.rdata) for rr in r.rr)


def service(name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("ports", [{"name": "http", "port": 80, "targetPort": 8080}])
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


async def test_kubernetes_service_points_at_the_advertised_api_server(srv: ServerHandle, api: ApiClient) -> None:
    svc = await api.get("/api/v1/namespaces/default/services/kubernetes")
    assert svc["spec"]["clusterIP"] == "198.18.128.1"
    sl = await api.get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
    port = int(srv.url.rsplit(":", 1)[1])
    assert sl["endpoints"][0]["addresses"] == ["127.0.0.1"] and sl["ports"][0]["port"] == port
    ep = await api.get("/api/v1/namespaces/default/endpoints/kubernetes")
    assert ep["subsets"][0]["ports"][0]["port"] == port
    r = await query(srv, "kubernetes.default.svc.cluster.local")
    assert answers(r) == ["198.18.128.1"]


async def test_created_service_gets_a_cluster_ip_and_a_dns_name(srv: ServerHandle, api: ApiClient) -> None:
    svc = await api.create("/api/v1/namespaces/default/services", service("web", selector={"app": "web"}))
    ip = svc["spec"]["clusterIP"]
    assert ip.startswith("198.18.128.") and svc["spec"]["clusterIPs"] == [ip]
    assert answers(await query(srv, "web.default.svc.cluster.local")) == [ip]
    assert answers(await query(srv, "web.default.svc.cluster.local", tcp=True)) == [ip]
    srv_r = await query(srv, "_http._tcp.web.default.svc.cluster.local", "SRV")
    assert answers(srv_r) == ["0 100 80 web.default.svc.cluster.local."]
    nodata = await query(srv, "web.default.svc.cluster.local", "AAAA")
    assert nodata.header.rcode == RCODE.NOERROR and not nodata.rr and nodata.auth[0].rtype == QTYPE.SOA
    with pytest.raises(ApiError) as e:
        await api.create("/api/v1/namespaces/default/services", service("web2", clusterIP=ip))
    assert e.value.status == 422 and "provided IP is already allocated" in e.value.message
    await api.delete("/api/v1/namespaces/default/services/web")
    r = await query(srv, "web.default.svc.cluster.local")
    assert r.header.rcode == RCODE.NXDOMAIN
    again = await api.create("/api/v1/namespaces/default/services", service("web3", clusterIP=ip))
    assert again["spec"]["clusterIP"] == ip  # the deleted Service's address is free again


async def test_headless_service_resolves_to_ready_endpoints_and_hostnames(srv: ServerHandle, api: ApiClient) -> None:
    await api.create("/api/v1/namespaces/default/services", service("db", clusterIP="None", selector={"a": "b"}))
    await api.create("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "db-x", "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["198.18.0.5"], "hostname": "db-0", "conditions": {"ready": True}},
                      {"addresses": ["198.18.0.6"], "conditions": {"ready": True}},
                      {"addresses": ["198.18.0.7"], "conditions": {"ready": False}}]})
    assert answers(await query(srv, "db.default.svc.cluster.local")) == ["198.18.0.5", "198.18.0.6"]
    assert answers(await query(srv, "db-0.db.default.svc.cluster.local")) == ["198.18.0.5"]
    srv_r = await query(srv, "_http._tcp.db.default.svc.cluster.local", "SRV")
    assert answers(srv_r) == ["0 50 8080 198-18-0-6.db.default.svc.cluster.local.",
                              "0 50 8080 db-0.db.default.svc.cluster.local."]
    assert answers(await query(srv, "198-18-0-9.default.pod.cluster.local")) == ["198.18.0.9"]


async def test_external_name_unknown_names_and_forwarding(srv: ServerHandle, api: ApiClient) -> None:
    await api.create("/api/v1/namespaces/default/services",
                     {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext"},
                      "spec": {"type": "ExternalName", "externalName": "db.example.org"}})
    r = await query(srv, "ext.default.svc.cluster.local")
    assert r.rr[0].rtype == QTYPE.CNAME and str(r.rr[0].rdata) == "db.example.org."
    assert (await query(srv, "nope.default.svc.cluster.local")).header.rcode == RCODE.NXDOMAIN
    assert (await query(srv, "default.svc.cluster.local")).header.rcode == RCODE.NOERROR
    assert (await query(srv, "example.org")).header.rcode == RCODE.SERVFAIL  # no resolver answers offline


@pytest.fixture
async def ctl_srv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, controllers=True, dns_address="127.0.0.1", dns_port=0,
                          dns_upstreams=[]) as s:
        yield s


async def _eventually(check: Any, within: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        got = await check()
        if got:
            return got
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.1)


async def test_endpoint_controllers_follow_pod_readiness(ctl_srv: ServerHandle) -> None:
    api = ApiClient(ctl_srv.url, token=ctl_srv.admin_token, ca_file=str(ctl_srv.ca_file))
    try:
        await api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        for i in range(2):
            await api.create("/api/v1/namespaces/default/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{i}", "labels": {"app": "web"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
                                                           "ports": [{"name": "http", "containerPort": 8080}]}]}})
            await api.patch(f"/api/v1/namespaces/default/pods/web-{i}/status", {"status": {
                "phase": "Running", "podIP": f"198.18.0.{10 + i}", "podIPs": [{"ip": f"198.18.0.{10 + i}"}],
                "conditions": [{"type": "Ready", "status": "True"}]}})
        await api.create("/api/v1/namespaces/default/services",
                         service("web", clusterIP="None", selector={"app": "web"},
                                 ports=[{"name": "http", "port": 80, "targetPort": "http"}]))

        async def ready_ips() -> list[str]:
            r = await query(ctl_srv, "web.default.svc.cluster.local")
            return answers(r)

        assert await _eventually(lambda: _eq(ready_ips(), ["198.18.0.10", "198.18.0.11"]))
        await api.patch("/api/v1/namespaces/default/pods/web-1/status",
                        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
        assert await _eventually(lambda: _eq(ready_ips(), ["198.18.0.10"]))

        async def endpoints() -> bool:
            ep = await api.get("/api/v1/namespaces/default/endpoints/web")
            sub = (ep.get("subsets") or [{}])[0]
            return [a["ip"] for a in sub.get("notReadyAddresses", [])] == ["198.18.0.11"] and \
                sub["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]

        assert await _eventually(endpoints)
        await api.delete("/api/v1/namespaces/default/services/web")

        async def gone() -> bool:
            lst = await api.list("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
                                 {"labelSelector": "kubernetes.io/service-name=web"})
            return not lst["items"]

        assert await _eventually(gone)
    finally:
        await api.close()


async def _eq(coro: Any, want: Any) -> bool:
    return bool(await coro == want)


async def test_kubectl_get_endpoints_and_slices_print_upstream_columns(srv: ServerHandle, tmp_path: Path) -> None:
    import shutil

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    proc = await asyncio.create_subprocess_exec(
        kubectl, f"--kubeconfig={srv.kubeconfig}", f"--cache-dir={tmp_path}", "get", "endpoints,endpointslices",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    port = srv.url.rsplit(":", 1)[1]
    lines = out.decode().splitlines()
    assert lines[0].split() == ["NAME", "ENDPOINTS", "AGE"], err
    assert lines[1].split()[:2] == ["endpoints/kubernetes", f"127.0.0.1:{port}"]
    assert lines[3].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert lines[4].split()[:4] == ["endpointslice.discovery.k8s.io/kubernetes", "IPv4", port, "127.0.0.1"]


async def test_malformed_endpoint_slices_are_refused_and_dns_keeps_answering(srv: ServerHandle,
                                                                            api: ApiClient) -> None:
    base = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    bad = [({"endpoints": "x"}, "endpoints"), ({"endpoints": [{"addresses": ["not-an-ip"]}]}, "endpoints[0].addresses[0]"),
           ({"endpoints": [{"addresses": ["198.18.0.2"], "conditions": {"ready": "yes"}}]},
            "endpoints[0].conditions.ready"),
           ({"ports": [{"port": 70000}]}, "ports[0].port"), ({"addressType": "IPX"}, "addressType")]
    for extra, field in bad:
        body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "bad"},
                "addressType": "IPv4", **extra}
        with pytest.raises(ApiError) as e:
            await api.create(base, body)
        assert e.value.status == 422 and field in e.value.message, e.value.message
    assert answers(await query(srv, "kubernetes.default.svc.cluster.local")) == ["198.18.128.1"]
