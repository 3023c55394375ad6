"""The real kubectl against the in-process API server, for reported minors 32 and 33."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from .conftest import Http, Kubectl

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: web}}
spec:
  {node}containers:
  - name: c1
    image: {image}
    ports: [{{containerPort: 80}}]
"""

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                                   "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                                   "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                   "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                   "nodeInfo": {"kubeletVersion": "v1.33.0", "containerRuntimeVersion": "containerd://1.6",
                                "osImage": "Linux", "kernelVersion": "6", "architecture": "amd64",
                                "operatingSystem": "linux"}}}


def pod_yaml(name: str = "web", image: str = "busybox:1.36", node: str | None = None) -> str:
    return POD.format(name=name, image=image, node=f"nodeName: {node}\n  " if node else "")


async def make_node(http: Http) -> None:
    st, body = await http.req("POST", "/api/v1/nodes", NODE)
    assert st == 201, body


class FakeAgent:
    """Does what a node agent does on pod deletion: a grace-0 DELETE once deletionTimestamp is set."""

    def __init__(self, http: Http) -> None:
        self.http = http
        self.task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            _st, lst = await self.http.req("GET", "/api/v1/pods")
            for p in lst.get("items", []):
                m = p["metadata"]
                if m.get("deletionTimestamp"):
                    await self.http.req("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                                        {"gracePeriodSeconds": 0})
            await asyncio.sleep(0.2)

    async def __aenter__(self) -> FakeAgent:
        self.task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def test_version_and_api_resources(kubectl: Kubectl, version_minor: str) -> None:
    out = await kubectl.ok("version", "-o", "json")
    assert json.loads(out)["serverVersion"]["minor"] == version_minor
    out = await kubectl.ok("api-resources")
    for r in ("pods", "nodes", "leases", "certificatesigningrequests", "events", "runtimeclasses"):
        assert r in out
    out = await kubectl.ok("api-versions")
    assert "policy/v1" in out and "coordination.k8s.io/v1" in out


async def test_get_nodes_and_pods_wide(kubectl: Kubectl, http: Http) -> None:
    await make_node(http)
    out = await kubectl.ok("get", "nodes", "-o", "wide")
    assert "n1" in out and "Ready" in out
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(node="n1"))
    out = await kubectl.ok("get", "pods", "-A", "-o", "wide")
    assert "default" in out and "web" in out and "n1" in out
    out = await kubectl.ok("get", "po", "--show-labels")
    assert "app=web" in out
    out = await kubectl.ok("get", "ns")
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        assert ns in out


async def test_get_pods_watch(kubectl: Kubectl, http: Http) -> None:
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml())
    proc = await kubectl.spawn("get", "pods", "-w", "--output-watch-events")
    try:
        assert proc.stdout is not None
        # the watch is established once kubectl printed the pod it listed first
        seen: list[str] = []
        while not any(line.startswith("ADDED") for line in seen):
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, "kubectl get -w ended before listing the pod"
            seen.append(line)
        await kubectl.ok("label", "pod", "web", "tier=front")
        await kubectl.ok("delete", "pod", "web")

        async def read_until_deleted() -> None:
            assert proc.stdout is not None
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    return
                seen.append(line)
                if line.startswith("DELETED"):
                    return

        await asyncio.wait_for(read_until_deleted(), 60)
        events = [ln.split()[0] for ln in seen if ln.split() and ln.split()[0] in ("ADDED", "MODIFIED", "DELETED")]
        assert "ADDED" in events and "MODIFIED" in events and events[-1] == "DELETED"
    finally:
        proc.kill()
        await proc.communicate()  # reads the pipes to their end, so their transport closes on this loop


async def test_create_apply_client_and_server_side(kubectl: Kubectl, tmp_path: Any) -> None:
    f = tmp_path / "pod.yaml"
    f.write_text(pod_yaml(name="app1"))
    assert "created" in await kubectl.ok("apply", "-f", str(f))
    f.write_text(pod_yaml(name="app1", image="busybox:1.37"))
    assert "configured" in await kubectl.ok("apply", "-f", str(f))
    out = await kubectl.ok("get", "pod", "app1", "-o", "json")
    pod = json.loads(out)
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert pod["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}] or \
        pod["spec"]["containers"][0]["ports"][0]["containerPort"] == 80
    # server-side apply: creates when missing, then updates
    f.write_text(pod_yaml(name="app2"))
    assert "serverside-applied" in await kubectl.ok("apply", "--server-side", "-f", str(f))
    f.write_text(pod_yaml(name="app2", image="busybox:1.37"))
    await kubectl.ok("apply", "--server-side", "-f", str(f))
    out = await kubectl.ok("get", "pod", "app2", "-o", "jsonpath={.spec.containers[0].image}")
    assert out == "busybox:1.37"
    rc, _out, err = await kubectl.run("create", "-f", str(f))
    assert rc == 1 and "AlreadyExists" in err


async def test_delete_bound_pod_graceful(kubectl: Kubectl, http: Http) -> None:
    await make_node(http)
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(node="n1"))
    out = await kubectl.ok("delete", "pod", "web", "--wait=false")
    assert 'pod "web" deleted' in out
    st, pod = await http.req("GET", "/api/v1/namespaces/default/pods/web")
    assert st == 200 and pod["metadata"]["deletionTimestamp"] and pod["metadata"]["deletionGracePeriodSeconds"] == 30
    # the agent confirms with a grace-0 delete; kubectl delete (waiting) then finishes
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(name="web2", node="n1"))
    async with FakeAgent(http):
        out = await kubectl.ok("delete", "pod", "web2")
        assert 'pod "web2" deleted' in out
    st, _ = await http.req("GET", "/api/v1/namespaces/default/pods/web")
    assert st == 404
    # unbound pods go at once
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(name="loose"))
    await kubectl.ok("delete", "pod", "loose", "--wait=false")
    assert (await http.req("GET", "/api/v1/namespaces/default/pods/loose"))[0] == 404


async def test_events_and_leases(kubectl: Kubectl, http: Http) -> None:
    await make_node(http)
    st, node = await http.req("GET", "/api/v1/nodes/n1")
    ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "n1.1", "namespace": "default"},
          "involvedObject": {"kind": "Node", "name": "n1", "uid": node["metadata"]["uid"]},
          "reason": "Starting", "message": "Starting kubelet.", "type": "Normal", "source": {"component": "kubelet"},
          "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1}
    assert (await http.req("POST", "/api/v1/namespaces/default/events", ev))[0] == 201
    ev2 = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "n1.2", "namespace": "default"},
           "regarding": {"kind": "Node", "name": "n1"}, "reason": "NodeReady", "note": "Node n1 is ready",
           "type": "Normal", "action": "Ready", "reportingController": "kubelet", "reportingInstance": "n1",
           "eventTime": "2025-01-01T00:00:00.000000Z"}
    st, body = await http.req("POST", "/apis/events.k8s.io/v1/namespaces/default/events", ev2)
    assert st == 201, body
    out = await kubectl.ok("get", "events")
    assert "Starting" in out and "NodeReady" in out
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1", "namespace": "kube-node-lease"},
             "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "2025-01-01T00:00:00.000000Z"}}
    assert (await http.req("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease))[0] == 201
    out = await kubectl.ok("get", "lease", "-n", "kube-node-lease")
    assert "n1" in out
    out = await kubectl.ok("describe", "node", "n1")
    assert "n1" in out and "Starting" in out
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(node="n1"))
    out = await kubectl.ok("describe", "pod", "web")
    assert "web" in out and "busybox:1.36" in out


async def test_cordon_uncordon_drain(kubectl: Kubectl, http: Http) -> None:
    await make_node(http)
    await kubectl.ok("cordon", "n1")
    assert (await http.req("GET", "/api/v1/nodes/n1"))[1]["spec"]["unschedulable"] is True
    assert "SchedulingDisabled" in await kubectl.ok("get", "nodes")
    await kubectl.ok("uncordon", "n1")
    assert "unschedulable" not in (await http.req("GET", "/api/v1/nodes/n1"))[1]["spec"]
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(name="d1", node="n1"))
    await kubectl.ok("create", "-f", "-", stdin=pod_yaml(name="d2", node="n1"))
    async with FakeAgent(http):
        out = await kubectl.ok("drain", "n1", "--ignore-daemonsets", "--force")
    assert "drained" in out
    _st, lst = await http.req("GET", "/api/v1/pods")
    assert lst["items"] == []
    assert (await http.req("GET", "/api/v1/nodes/n1"))[1]["spec"]["unschedulable"] is True


async def test_certificate_approve(kubectl: Kubectl, http: Http) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                    x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1")]))
           .sign(key, hashes.SHA256()))
    pem = csr.public_bytes(serialization.Encoding.PEM)
    obj = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
           "metadata": {"name": "node-csr-1"},
           "spec": {"request": base64.b64encode(pem).decode(),
                    "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                    "usages": ["digital signature", "client auth"]}}
    await kubectl.ok("create", "-f", "-", stdin=json.dumps(obj))
    assert "Pending" in await kubectl.ok("get", "csr")
    await kubectl.ok("certificate", "approve", "node-csr-1")
    out = await kubectl.ok("get", "csr", "node-csr-1", "-o", "json")
    got = json.loads(out)
    assert got["spec"]["username"] == "admin"
    cert = x509.load_pem_x509_certificate(base64.b64decode(got["status"]["certificate"]))
    ca = x509.load_pem_x509_certificate(http.srv.ca_file.read_bytes())
    assert cert.issuer == ca.subject
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert "Approved,Issued" in await kubectl.ok("get", "csr")
