"""Real kubectl → pykubelet API server → kubelet API → containerd: logs, exec, port-forward, node proxy."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

POD_YAML = """
apiVersion: v1
kind: Pod
metadata: {name: kapi-web, namespace: default}
spec:
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "echo started; mkdir -p /www && echo pf-ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
"""


@pytest.fixture(scope="module")
def web(cluster: Any) -> Iterator[Any]:
    cluster.kubectl("apply", "-f", "-", "--validate=false", input=POD_YAML)
    cluster.wait_for("pod kapi-web Running",
                     lambda: cluster.jsonpath("get", "pod", "kapi-web", "-o", "jsonpath={.status.phase}") == "Running",
                     120)
    yield cluster
    cluster.kubectl("delete", "pod", "kapi-web", "--grace-period=0", "--force", check=False)


def test_logs(web: Any) -> None:
    web.wait_for("logs", lambda: web.kubectl("logs", "kapi-web", check=False).stdout == "started\n", 30)
    assert web.kubectl("logs", "kapi-web", "--tail=1", "--timestamps").stdout.endswith(" started\n")


def test_exec_output_exit_code_and_stdin(web: Any) -> None:
    assert web.kubectl("exec", "kapi-web", "--", "echo", "hi").stdout == "hi\n"
    res = web.kubectl("exec", "kapi-web", "--", "sh", "-c", "exit 3", check=False)
    assert res.returncode == 3, res.stderr
    assert web.kubectl("exec", "-i", "kapi-web", "--", "cat", input="piped\n").stdout == "piped\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_port_forward(web: Any) -> None:
    port = _free_port()
    kubectl_cmd = web.kubectl  # runner; build the command line by hand for a background process
    del kubectl_cmd
    import shutil

    binary = shutil.which("kubectl") or "/usr/bin/kubectl"
    proc = subprocess.Popen([binary, f"--kubeconfig={web.kubeconfig}", "port-forward", "pod/kapi-web",
                             f"{port}:8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        body = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"pf-ok" not in body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    body = r.read()
            except OSError:
                time.sleep(0.3)
        assert body == b"pf-ok\n"
    finally:
        proc.terminate()
        proc.wait(10)


def test_node_proxy(web: Any) -> None:
    node = web.node_name
    metrics = web.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/resource").stdout
    assert "node_cpu_usage_seconds_total" in metrics
    summary = json.loads(web.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/stats/summary").stdout)
    assert summary["node"]["nodeName"] == node
    assert web.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/healthz").stdout == "ok"
