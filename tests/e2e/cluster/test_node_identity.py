"""The `pykubelet up` node joined by TLS bootstrap, and its credential is a node's, not an admin's
(real containerd + kubectl on the session cluster)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.e2e.conftest import Cluster


def _kubectl_as(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_node_joined_by_tls_bootstrap_and_may_only_touch_its_own_objects(cluster: Cluster) -> None:
    csrs: list[dict[str, Any]] = json.loads(cluster.kubectl("get", "csr", "-o", "json").stdout)["items"]
    client = [c for c in csrs if c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"]
    assert client and client[0]["spec"]["username"].startswith("system:bootstrap:")
    assert [c["type"] for c in client[0]["status"]["conditions"]] == ["Approved"]
    node_kc = cluster.data_dir / "nodes" / f"{cluster.node_name}.kubeconfig"
    assert "client-certificate" in node_kc.read_text()

    cluster.kubectl("create", "secret", "generic", "e2e-foreign", "--from-literal=k=v")
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "e2e-other-node"}}))
    try:
        res = _kubectl_as(str(node_kc), "get", "secret", "e2e-foreign")
        assert res.returncode != 0
        assert (f'User "system:node:{cluster.node_name}" cannot get resource "secrets"' in res.stderr
                and "no relationship found between node" in res.stderr), res.stderr
        res = _kubectl_as(str(node_kc), "label", "node", "e2e-other-node", "x=y")
        assert res.returncode != 0
        assert f'node "{cluster.node_name}" is not allowed to modify node "e2e-other-node"' in res.stderr, res.stderr
        res = _kubectl_as(str(node_kc), "auth", "can-i", "list", "secrets", "-n", "default")
        assert res.stdout.strip().startswith("no")
        res = _kubectl_as(str(node_kc), "get", "node", cluster.node_name)
        assert res.returncode == 0, res.stderr
    finally:
        cluster.kubectl("delete", "secret", "e2e-foreign", "--ignore-not-found")
        cluster.kubectl("delete", "node", "e2e-other-node", "--ignore-not-found")
