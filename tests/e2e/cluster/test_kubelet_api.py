"""The kubelet API end to end, through the real ports and real clients.

Real kubectl (current dispatcher and the versioned 1.28 / 1.29 / 1.33 binaries), the official Python
client, the API server's node proxy, and the kubelet port itself (authn/authz, path traversal,
clients that vanish mid-stream) against a `pykubelet up` cluster on a private containerd.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import pty
import queue
import re
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

VERSIONED = Path("/usr/lib/google-cloud-sdk/bin")
BUSYBOX = "docker.io/library/busybox:1.36"

POD_YAML = f"""
apiVersion: v1
kind: Pod
metadata: {{name: acc, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: {BUSYBOX}
    command: ["sh", "-c", "echo web-started; mkdir -p /www && echo pf-ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
    readinessProbe:
      httpGet: {{path: /, port: 8080}}
      periodSeconds: 2
  - name: ticker
    image: {BUSYBOX}
    command: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done"]
"""

CRASH_YAML = f"""
apiVersion: v1
kind: Pod
metadata: {{name: acc-crash, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Always
  containers:
  - name: main
    image: {BUSYBOX}
    command: ["sh", "-c", "echo run-$RANDOM$RANDOM; sleep 2; exit 1"]
"""


def _kubectl_binary() -> str:
    return shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture(scope="module")
def acc(cluster: Any) -> Iterator[Any]:
    cluster.kubectl("apply", "-f", "-", "--validate=false", input=POD_YAML)
    cluster.wait_for("pod acc Running",
                     lambda: cluster.jsonpath("get", "pod", "acc", "-o", "jsonpath={.status.phase}") == "Running",
                     120)
    cluster.wait_for("ticker output",
                     lambda: "tick-3" in cluster.kubectl("logs", "acc", "-c", "ticker", check=False).stdout, 60)
    yield cluster
    cluster.kubectl("delete", "pod", "acc", "--grace-period=0", "--force", check=False)


def _run(binary: str, kubeconfig: Path, *args: str, input: str | None = None, env: dict[str, str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, f"--kubeconfig={kubeconfig}", *args], input=input, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, check=False)


class _LineReader:
    """Reads a background process's stdout lines in a thread (so the test never blocks on a pipe)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.proc = proc
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace"))
        self.lines.put("")

    def collect_until(self, pred: Any, timeout: float = 60) -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line == "":
                break
            got.append(line)
            if pred(got):
                return got
        raise AssertionError(f"condition not met; got {got!r}")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# ---------------------------------------------------------------------------------------- python client
def test_python_client_exec(acc: Any) -> None:
    from kubernetes import client, config
    from kubernetes.stream import stream

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(acc.kubeconfig), client_configuration=cfg)
    api = client.CoreV1Api(client.ApiClient(cfg))
    try:
        resp = stream(api.connect_get_namespaced_pod_exec, "acc", "default", container="web",
                      command=["sh", "-c", "echo py-out; echo py-err >&2; exit 4"],
                      stdin=False, stdout=True, stderr=True, tty=False, _preload_content=False)
        out, err = "", ""
        while resp.is_open():
            resp.update(timeout=5)
            out += resp.read_stdout() if resp.peek_stdout() else ""
            err += resp.read_stderr() if resp.peek_stderr() else ""
        assert out == "py-out\n" and err == "py-err\n"
        assert resp.returncode == 4
        resp.close()

        resp = stream(api.connect_get_namespaced_pod_exec, "acc", "default", container="web",
                      command=["cat"], stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False)
        resp.write_stdin("via-python\n")
        got = ""
        deadline = time.monotonic() + 30
        while "via-python" not in got and time.monotonic() < deadline:
            resp.update(timeout=1)
            got += resp.read_stdout() if resp.peek_stdout() else ""
        assert got == "via-python\n"
        resp.close()

        # non-streaming form (preloaded): output as a string
        assert stream(api.connect_get_namespaced_pod_exec, "acc", "default", container="web",
                      command=["echo", "preloaded"], stdout=True, stderr=True, stdin=False, tty=False) == "preloaded\n"
    finally:
        api.api_client.close()


# ---------------------------------------------------------------------------------------- kubectl logs
_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) ")


def test_logs_container_tail_since_timestamps(acc: Any) -> None:
    assert acc.kubectl("logs", "acc", "-c", "web").stdout == "web-started\n"
    full = acc.kubectl("logs", "acc", "-c", "ticker").stdout.splitlines()
    assert full[:3] == ["tick-1", "tick-2", "tick-3"]
    tail = acc.kubectl("logs", "acc", "-c", "ticker", "--tail=2").stdout.splitlines()
    assert len(tail) == 2 and re.fullmatch(r"tick-\d+", tail[0]) and int(tail[1][5:]) == int(tail[0][5:]) + 1
    stamped = acc.kubectl("logs", "acc", "-c", "ticker", "--tail=3", "--timestamps").stdout.splitlines()
    assert len(stamped) == 3 and all(_TS.match(line) for line in stamped), stamped
    assert all(line.split(" ", 1)[1].startswith("tick-") for line in stamped)
    acc.wait_for("ticker to run > 6s", lambda: len(acc.kubectl("logs", "acc", "-c", "ticker").stdout.split()) > 6)
    since = acc.kubectl("logs", "acc", "-c", "ticker", "--since=3s").stdout.splitlines()
    assert "tick-1" not in since and all(line.startswith("tick-") for line in since)
    # without -c on a two-container pod kubectl uses the default (first) container
    res = acc.kubectl("logs", "acc", "-c", "nope", check=False)
    assert res.returncode != 0 and "nope" in res.stderr


def test_logs_follow(acc: Any) -> None:
    proc = subprocess.Popen([_kubectl_binary(), f"--kubeconfig={acc.kubeconfig}", "logs", "-f", "--tail=1",
                             "acc", "-c", "ticker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = _LineReader(proc).collect_until(lambda got: len(got) >= 3)
        nums = [int(line.strip()[5:]) for line in lines]
        assert nums == list(range(nums[0], nums[0] + 3)), lines  # new lines arrive as they are written
    finally:
        _stop(proc)


def test_logs_previous(acc: Any) -> None:
    acc.kubectl("apply", "-f", "-", "--validate=false", input=CRASH_YAML)
    try:
        def status() -> dict[str, Any]:
            pod = json.loads(acc.kubectl("get", "pod", "acc-crash", "-o", "json").stdout)
            return ((pod.get("status") or {}).get("containerStatuses") or [{}])[0]

        acc.wait_for("acc-crash restarted", lambda: int(status().get("restartCount") or 0) >= 1, 120)
        got: dict[str, Any] = {}

        def consistent() -> bool:
            before = status()
            last = ((before.get("lastState") or {}).get("terminated") or {})
            res = acc.kubectl("logs", "acc-crash", "--previous", check=False)
            after = status()
            if res.returncode != 0 or before != after or not last:
                return False
            got.update(previous=res.stdout, last=last)
            return True

        acc.wait_for("a stable previous instance", consistent, 60)
        assert re.fullmatch(r"run-\d+\n", got["previous"]), got
        assert got["last"]["exitCode"] == 1
    finally:
        acc.kubectl("delete", "pod", "acc-crash", "--grace-period=0", "--force", check=False)
    # a container that never restarted has no previous instance
    res = acc.kubectl("logs", "acc", "-c", "web", "--previous", check=False)
    assert res.returncode != 0 and "previous terminated container" in res.stderr, res.stderr


# ---------------------------------------------------------------------------------------- kubectl exec
def test_exec_one_shot_stdin_and_exit_code(acc: Any) -> None:
    assert acc.kubectl("exec", "acc", "-c", "web", "--", "echo", "one-shot").stdout == "one-shot\n"
    assert acc.kubectl("exec", "-i", "acc", "-c", "web", "--", "sh", "-c", "tr a-z A-Z",
                       input="piped in\n").stdout == "PIPED IN\n"
    res = acc.kubectl("exec", "acc", "-c", "web", "--", "sh", "-c", "echo bad >&2; exit 3", check=False)
    assert res.returncode == 3, res
    assert "bad" in res.stderr and "command terminated with exit code 3" in res.stderr


def _run_in_pty(argv: list[str], send: bytes, timeout: float = 60) -> tuple[int, bytes]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out = b""
    sent = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                if not sent and b"ready" in out:
                    os.write(master, send)
                    sent = True
            elif proc.poll() is not None:
                break
        rc = proc.wait(10)
    finally:
        _stop(proc)
        os.close(master)
    return rc, out


def test_exec_interactive_tty(acc: Any) -> None:
    rc, out = _run_in_pty([_kubectl_binary(), f"--kubeconfig={acc.kubeconfig}", "exec", "-i", "-t", "acc", "-c",
                           "web", "--", "sh", "-c", "tty; echo ready; read x; echo got-$x"], b"hello\r")
    text = out.decode(errors="replace")
    assert rc == 0, text
    assert "/dev/pts/" in text and "got-hello" in text, text


def test_exec_tty_without_terminal_does_not_hang(acc: Any) -> None:
    res = acc.kubectl("exec", "-t", "acc", "-c", "web", "--", "echo", "no-tty", timeout=60)
    assert res.returncode == 0 and "no-tty" in res.stdout, res
    # -i -t with piped stdin: kubectl warns and falls back to a plain stdin stream
    res = acc.kubectl("exec", "-i", "-t", "acc", "-c", "web", "--", "cat", input="not-a-tty\n", timeout=60)
    assert res.returncode == 0 and res.stdout == "not-a-tty\n", res
    assert "Unable to use a TTY" in res.stderr


# ---------------------------------------------------------------------------------------- attach
def test_attach_sees_output(acc: Any) -> None:
    proc = subprocess.Popen([_kubectl_binary(), f"--kubeconfig={acc.kubeconfig}", "attach", "acc", "-c", "ticker"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = _LineReader(proc).collect_until(lambda got: sum(line.startswith("tick-") for line in got) >= 2)
        assert any(line.startswith("tick-") for line in lines)
    finally:
        _stop(proc)
    # the attached container keeps running after the client left
    assert acc.jsonpath("get", "pod", "acc", "-o", "jsonpath={.status.containerStatuses[*].state.running}") != ""


# ---------------------------------------------------------------------------------------- port-forward
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_forward_get(binary: str, kubeconfig: Path, env: dict[str, str] | None = None) -> bytes:
    port = _free_port()
    proc = subprocess.Popen([binary, f"--kubeconfig={kubeconfig}", "port-forward", "pod/acc", f"{port}:8080"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    try:
        body = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                    body = r.read()
                if body:
                    break
            except OSError:
                time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()
        # a second request over a new local connection works too
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.read() == body
        return body
    finally:
        _stop(proc)


def test_port_forward(acc: Any) -> None:
    assert _port_forward_get(_kubectl_binary(), acc.kubeconfig) == b"pf-ok\n"


# ---------------------------------------------------------------------------------------- older kubectl
CLIENTS = [("1.28", {}), ("1.29", {}), ("1.33", {}), ("1.33", {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"})]


@pytest.mark.parametrize(("minor", "env"), CLIENTS, ids=["1.28", "1.29", "1.33", "1.33-spdy"])
def test_versioned_kubectl_exec_and_port_forward(acc: Any, minor: str, env: dict[str, str]) -> None:
    binary = str(VERSIONED / f"kubectl.{minor}")
    if not Path(binary).exists():
        pytest.skip(f"{binary} not installed")
    res = _run(binary, acc.kubeconfig, "exec", "acc", "-c", "web", "--", "echo", f"hi-{minor}", env=env)
    assert res.returncode == 0 and res.stdout == f"hi-{minor}\n", res
    res = _run(binary, acc.kubeconfig, "exec", "acc", "-c", "web", "--", "sh", "-c", "exit 3", env=env)
    assert res.returncode == 3, res
    res = _run(binary, acc.kubeconfig, "exec", "-i", "acc", "-c", "web", "--", "cat", input="stdin-ok\n", env=env)
    assert res.returncode == 0 and res.stdout == "stdin-ok\n", res
    res = _run(binary, acc.kubeconfig, "logs", "acc", "-c", "web", env=env)
    assert res.stdout == "web-started\n", res
    assert _port_forward_get(binary, acc.kubeconfig, env) == b"pf-ok\n"


# ---------------------------------------------------------------------------------------- node proxy
def _samples(text: str) -> list[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def _sample_names(text: str) -> set[str]:
    return {s.name for s in _samples(text)}


def test_node_proxy_metrics_and_summary(acc: Any) -> None:
    base = f"/api/v1/nodes/{acc.node_name}/proxy"

    def raw(path: str) -> str:
        return str(acc.kubectl("get", "--raw", base + path).stdout)

    expected = {
        "/metrics": {"kubelet_running_pods", "kubelet_node_name", "kubelet_runtime_operations_total",
                     "kubelet_running_containers"},
        "/metrics/cadvisor": {"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
                              "machine_cpu_cores", "machine_memory_bytes"},
        "/metrics/resource": {"node_cpu_usage_seconds_total", "node_memory_working_set_bytes",
                              "container_cpu_usage_seconds_total", "pod_memory_working_set_bytes"},
        "/metrics/probes": set(),  # parses; samples appear once probes run (see test_probe_metrics)
    }
    for path, names in expected.items():
        got = _sample_names(raw(path))
        assert names <= got, (path, names - got)
    cad = raw("/metrics/cadvisor")
    assert 'container="ticker"' in cad and 'pod="acc"' in cad
    summary = json.loads(raw("/stats/summary"))
    assert summary["node"]["nodeName"] == acc.node_name
    pods = {p["podRef"]["name"]: p for p in summary["pods"]}
    assert {c["name"] for c in pods["acc"]["containers"]} == {"web", "ticker"}


def test_probe_metrics(acc: Any) -> None:
    path = f"/api/v1/nodes/{acc.node_name}/proxy/metrics/probes"
    acc.wait_for("prober_probe_total for the readiness probe",
                 lambda: 'probe_type="Readiness"' in acc.kubectl("get", "--raw", path).stdout, 30)
    samples = [s for s in _samples(acc.kubectl("get", "--raw", path).stdout) if s.name == "prober_probe_total"]
    assert any(s.labels.get("container") == "web" and s.labels.get("result") == "successful" for s in samples)


# ---------------------------------------------------------------------------------------- kubelet port security
def _admin_token(cluster: Any) -> str:
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    return str(cfg["users"][0]["user"]["token"])


def _kubelet_get(cluster: Any, path: str, token: str | None = None,
                 timeout: float = 30) -> tuple[int, bytes]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", cluster.kubelet_port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _sa_token(cluster: Any, name: str) -> str:
    async def go() -> str:
        api = cluster.api()
        try:
            try:
                await api.create("/api/v1/namespaces/default/serviceaccounts",
                                 {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
            except Exception as e:  # already exists from an earlier run of this module
                if "AlreadyExists" not in str(e) and "409" not in str(e):
                    raise
            tr = await api.create(f"/api/v1/namespaces/default/serviceaccounts/{name}/token",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 3600}})
            return str(tr["status"]["token"])
        finally:
            await api.close()

    return asyncio.run(go())


def test_kubelet_port_authn_authz(acc: Any) -> None:
    assert _kubelet_get(acc, "/pods")[0] == 401
    assert _kubelet_get(acc, "/metrics", token="not-a-token")[0] == 401
    sa = _sa_token(acc, "acc-viewer")
    status, body = _kubelet_get(acc, "/pods", token=sa)
    assert status == 403, body
    assert b"system:serviceaccount:default:acc-viewer" in body
    status, body = _kubelet_get(acc, "/healthz", token=_admin_token(acc))
    assert (status, body) == (200, b"ok")


@pytest.mark.parametrize("path", [
    "/logs/../../etc/passwd",
    "/logs/%2e%2e/%2e%2e/etc/passwd",
    "/logs/..%2f..%2fetc%2fpasswd",
    "/logs/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/containerLogs/default/acc/..%2f..%2f..%2fetc%2fpasswd",
    "/containerLogs/default/acc/web/..%2f..%2f..%2fetc%2fpasswd",
    "/containerLogs/default/..%2f..%2f..%2fetc/passwd/web",
])
def test_kubelet_path_traversal(acc: Any, path: str) -> None:
    status, body = _kubelet_get(acc, path, token=_admin_token(acc))
    assert 400 <= status < 500, (status, body[:200])
    assert b"root:" not in body


@pytest.mark.parametrize("path", ["/logs/..%2f..%2fetc%2fpasswd", "/logs/%2e%2e/%2e%2e/etc/passwd"])
def test_node_proxy_path_traversal(acc: Any, path: str) -> None:
    res = acc.kubectl("get", "--raw", f"/api/v1/nodes/{acc.node_name}/proxy{path}", check=False)
    assert res.returncode != 0 and "root:" not in res.stdout, res


# ---------------------------------------------------------------------------------------- disconnects
def _server_task_count(cluster: Any) -> int:
    """Tasks of the kubelet API server (request handlers, stream pumps, log followers)."""
    status, body = _kubelet_get(cluster, "/debug/pprof/goroutine?debug=1", token=_admin_token(cluster))
    assert status == 200, body
    n = 0
    for line in body.decode().splitlines()[1:]:
        count, _, name = line.partition(" @ ")
        if name.startswith(("pykubelet.agent.server", "pykubelet.common", "aiohttp.web_protocol")):
            n += int(count)
    return n


def _established(port: int) -> int:
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[1].rsplit(":", 1)[1] == f"{port:04X}" and parts[3] == "01":
                    n += 1
    return n


def _ps(cluster: Any) -> str:
    return str(cluster.kubectl("exec", "acc", "-c", "web", "--", "ps", "-o", "pid,args").stdout)


def test_client_disconnect_leaves_nothing_behind(acc: Any) -> None:
    # settle: the API server may keep a proxied connection alive for a moment
    acc.wait_for("no leftover exec in the container", lambda: "marker4242" not in _ps(acc), 30)
    baseline_tasks = _server_task_count(acc)
    baseline_conns = _established(acc.kubelet_port)

    # logs -f through the API server, killed mid-stream
    follow = subprocess.Popen([_kubectl_binary(), f"--kubeconfig={acc.kubeconfig}", "logs", "-f", "acc", "-c",
                               "ticker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _LineReader(follow).collect_until(lambda got: len(got) >= 2)
    finally:
        follow.kill()
        follow.wait(10)

    # logs -f straight on the kubelet port, socket dropped mid-stream
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", acc.kubelet_port, context=ctx, timeout=30)
    conn.request("GET", "/containerLogs/default/acc/ticker?follow=true&tailLines=1",
                 headers={"Authorization": f"Bearer {_admin_token(acc)}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read1(64).startswith(b"tick-")
    conn.close()

    # exec -i (websocket and SPDY), killed while the command still waits on stdin: the kubelet must
    # tear the runtime stream down (stdin closed), so the process sees EOF and exits. (A command that
    # ignores stdin keeps running after a disconnect, with upstream's kubelet and containerd 1.6 too.)
    for env in ({}, {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}):
        ex = subprocess.Popen([_kubectl_binary(), f"--kubeconfig={acc.kubeconfig}", "exec", "-i", "acc", "-c", "web",
                               "--", "sh", "-c", "echo in; cat; echo done", "marker4242"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, **env})
        try:
            _LineReader(ex).collect_until(lambda got: "in\n" in got)
            assert "marker4242" in _ps(acc)
        finally:
            ex.kill()
            ex.wait(10)
            assert ex.stdin is not None
            ex.stdin.close()
        acc.wait_for("the exec'd process to go away", lambda: "marker4242" not in _ps(acc), 60)

    acc.wait_for(f"kubelet API tasks back to {baseline_tasks}",
                 lambda: _server_task_count(acc) <= baseline_tasks, 60)
    acc.wait_for(f"kubelet port connections back to {baseline_conns}",
                 lambda: _established(acc.kubelet_port) <= baseline_conns, 60)
