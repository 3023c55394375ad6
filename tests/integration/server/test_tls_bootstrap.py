"""TLS bootstrap end to end on the dev control plane + fake CRI: a node joins with a bootstrap token
only, its client and serving certificates come from approved CSRs and rotate (short lifetimes here)
while its pod keeps running untouched."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from pykubelet.agent.config import load_options
from pykubelet.agent.main import run_agent
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.server import bootstrap_tokens
from pykubelet.server.controllers.csrapprover import CSRApprover
from pykubelet.server.kubeletproxy import kubelet_ssl_context
from pykubelet.server.main import run_server
from pykubelet.server.tokencli import bootstrap_kubeconfig
from tests.fakes import free_port

fakecri_server = pytest.importorskip("pykubelet.fakecri.server")
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


async def until(check: Callable[[], Awaitable[Any]], limit: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy; ``limit`` only bounds a hang."""
    async with asyncio.timeout(limit):
        while True:
            if result := await check():
                return result
            await asyncio.sleep(0.2)


def _peer_cert(port: int, ca: Path) -> x509.Certificate:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


async def _csrs(admin: ApiClient, signer: str) -> list[dict[str, Any]]:
    items = (await admin.list(CSRS)).get("items") or []
    return [c for c in items if c["spec"]["signerName"] == signer]


async def test_a_node_joins_with_a_bootstrap_token_and_rotates_its_certificates(tmp_path: Path) -> None:
    sock = str(tmp_path / "cri.sock")
    grpc_server, _rt = await fakecri_server.serve(sock)
    try:
        async with run_server(tmp_path / "data", controllers=False) as srv:
            srv.registry.pki.signing_duration = 8.0  # kube-controller-manager --cluster-signing-duration
            admin = ApiClient(srv.url, token=srv.admin_token, ca_file=str(srv.ca_file))
            approver = asyncio.create_task(CSRApprover(admin).run())
            tid, secret = bootstrap_tokens.generate()
            await admin.create("/api/v1/namespaces/kube-system/secrets", bootstrap_tokens.token_secret(tid, secret))
            boot = tmp_path / "bootstrap.kubeconfig"
            boot.write_text(yaml.safe_dump(bootstrap_kubeconfig(srv.url, srv.ca_file.read_bytes(), f"{tid}.{secret}")))
            config = tmp_path / "kubelet.yaml"
            config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                              "rotateCertificates: true\nserverTLSBootstrap: true\n")
            port = free_port()
            kubeconfig = tmp_path / "kubelet.kubeconfig"
            opts = load_options([
                "--config", str(config), "--bootstrap-kubeconfig", str(boot), "--kubeconfig", str(kubeconfig),
                "--cert-dir", str(tmp_path / "pki"), "--hostname-override", "node-1", "--node-ip", "127.0.0.1",
                "--container-runtime-endpoint", f"unix://{sock}", "--root-dir", str(tmp_path / "root"),
                "--pod-logs-dir", str(tmp_path / "logs"), "--cgroups-per-qos=false", "--port", str(port),
                "--healthz-port", str(free_port()), "--address", "127.0.0.1",
            ])
            stop = asyncio.Event()
            agent = asyncio.create_task(run_agent(opts, stop, install_signals=False))
            try:
                async def registered() -> bool:
                    assert not agent.done(), agent.result()
                    try:
                        await admin.get("/api/v1/nodes/node-1")
                    except ApiError:
                        return False
                    return True

                await until(registered)
                # the first client certificate was requested by the bootstrap token, approved, issued
                first = (await _csrs(admin, "kubernetes.io/kube-apiserver-client-kubelet"))[0]
                assert first["spec"]["username"] == f"system:bootstrap:{tid}"
                assert "system:bootstrappers" in first["spec"]["groups"]
                assert [c["reason"] for c in first["status"]["conditions"]] == ["AutoApproved"]
                cfg = yaml.safe_load(kubeconfig.read_text())
                assert cfg["users"][0]["user"]["client-certificate"].endswith("kubelet-client-current.pem")

                await admin.create("/api/v1/namespaces/default/pods", {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                    "spec": {"nodeName": "node-1", "automountServiceAccountToken": False,
                             "containers": [{"name": "c", "image": "busybox:1"}]}})

                async def running() -> dict[str, Any] | None:
                    pod = await admin.get("/api/v1/namespaces/default/pods/web")
                    cs = (pod.get("status") or {}).get("containerStatuses") or []
                    return cs[0] if cs and "running" in (cs[0].get("state") or {}) else None

                before = await until(running)

                # two renewals by the node itself (selfnodeclient), each approved and issued
                async def renewed() -> list[dict[str, Any]] | None:
                    assert not agent.done(), agent.result()
                    done = [c for c in await _csrs(admin, "kubernetes.io/kube-apiserver-client-kubelet")
                            if c["spec"]["username"] == "system:node:node-1" and (c.get("status") or {}).get("certificate")]
                    return done if len(done) >= 2 else None

                renewals = await until(renewed)
                assert renewals[0]["status"]["conditions"][0]["message"] == \
                    "Auto approving self kubelet client certificate after SubjectAccessReview."
                # the agent keeps talking to the API with the renewed certificate
                lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1"
                renewed_at = (await admin.get(lease_path))["spec"]["renewTime"]

                async def lease_renewed() -> bool:
                    return bool((await admin.get(lease_path))["spec"]["renewTime"] != renewed_at)

                await until(lease_renewed)
                after = await running()
                assert after is not None
                assert (after["containerID"], after["restartCount"]) == (before["containerID"], 0)
                # the serving certificate came from a kubelet-serving CSR and is served
                async def serving_issued() -> bool:
                    return any((c.get("status") or {}).get("certificate")
                               for c in await _csrs(admin, "kubernetes.io/kubelet-serving"))

                await until(serving_issued)
                ca = x509.load_pem_x509_certificate(srv.ca_file.read_bytes())

                async def served_by_ca() -> bool:
                    return bool((await asyncio.to_thread(_peer_cert, port, srv.ca_file)).issuer == ca.subject)

                await until(served_by_ca)
                # the API server's kubelet client now dials this kubelet with full verification
                ctx = await kubelet_ssl_context(srv.data_dir / "pki", f"https://127.0.0.1:{port}")
                assert ctx.verify_mode == ssl.CERT_REQUIRED
                _r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
                w.close()
                served = await asyncio.to_thread(_peer_cert, port, srv.ca_file)
                sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
                issued = base64.b64decode(renewals[-1]["status"]["certificate"])
                assert x509.load_pem_x509_certificate(issued).issuer == ca.subject
            finally:
                stop.set()
                code = await asyncio.wait_for(agent, 30)
                approver.cancel()
                await asyncio.gather(approver, return_exceptions=True)
                await admin.close()
            assert code == 0
    finally:
        await grpc_server.stop(0)
