"""End to end: Services carry traffic on a `pykubelet up` cluster (proxy, EndpointSlices, DNS, API).

Three labelled busybox httpd pods answer with their own name behind `kubectl expose`; a client pod
resolves and fetches through the cluster DNS and the node's iptables proxy.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import textwrap
import urllib.request
from collections import Counter

import pytest

WEB = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: svc-web}}
spec:
  hostname: {name}
  subdomain: svc-web-headless
  terminationGracePeriodSeconds: 0
  containers:
  - name: web
    image: busybox:1.36
    command: ["sh", "-c", "mkdir -p /www && echo {name} > /www/index.html && touch /tmp/ready && exec httpd -f -p 8080 -h /www"]
    ports: [{{name: http, containerPort: 8080}}]
    readinessProbe:
      exec: {{command: ["cat", "/tmp/ready"]}}
      periodSeconds: 1
      failureThreshold: 1
      successThreshold: 1
---
"""
CLIENT = """
apiVersion: v1
kind: Pod
metadata: {name: svc-client}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: Service
metadata: {name: svc-web-headless}
spec:
  clusterIP: None
  selector: {app: svc-web}
  ports: [{name: http, port: 8080}]
"""
PODS = ["svc-web-0", "svc-web-1", "svc-web-2"]


def _client_exec(cluster, script: str, timeout: float = 60) -> str:  # type: ignore[no-untyped-def]
    res = cluster.kubectl("exec", "svc-client", "--", "sh", "-c", script, check=False, timeout=timeout)
    return str(res.stdout)


def _fetch_many(cluster, n: int) -> Counter[str]:  # type: ignore[no-untyped-def]
    out = _client_exec(cluster, f"for i in $(seq {n}); do wget -qO- http://svc-web.default.svc.cluster.local; "
                                "done")
    return Counter(line.strip() for line in out.splitlines() if line.strip())


def _slice_ready(cluster) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    """Pod name → its endpoint's ``ready`` condition in the EndpointSlices of Service svc-web."""
    out = cluster.kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=svc-web", "-o", "json").stdout
    return {ep["targetRef"]["name"]: bool((ep.get("conditions") or {}).get("ready"))
            for sl in json.loads(out)["items"] for ep in sl.get("endpoints") or [] if ep.get("targetRef")}


@pytest.fixture(scope="module")
def web(cluster):  # type: ignore[no-untyped-def]
    manifest = "".join(WEB.format(name=n) for n in PODS) + CLIENT
    cluster.kubectl("apply", "-f", "-", input=textwrap.dedent(manifest))
    try:
        for name in [*PODS, "svc-client"]:
            cluster.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=90s", timeout=100)
        cluster.kubectl("expose", "pod", "svc-web-0", "--name=svc-web", "--port=80", "--target-port=http",
                        "--selector=app=svc-web")
        yield cluster
    finally:
        cluster.kubectl("delete", "pod", *PODS, "svc-client", "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "service", "svc-web", "svc-web-headless", "--ignore-not-found", check=False)


def test_cluster_ip_spreads_over_ready_pods_and_follows_readiness(web) -> None:  # type: ignore[no-untyped-def]
    web.wait_for("all three pods answering through the ClusterIP",
                 lambda: set(_fetch_many(web, 12)) == set(PODS), 30, 1.0)
    counts = _fetch_many(web, 60)
    assert set(counts) == set(PODS) and min(counts.values()) >= 5, counts

    web.kubectl("exec", "svc-web-1", "--", "rm", "/tmp/ready")
    # A failed readiness probe (period 1 s) marks the pod's endpoint not ready in the EndpointSlice,
    # and the proxy's next sync (0.1 s later at most) takes it out of the rules: ~1.3 s on a quiet
    # machine, several seconds on a loaded CI machine. A few fetches without svc-web-1 prove
    # nothing (6 miss it one time in 11 by chance), so the slice is waited for, then the rules.
    web.wait_for("svc-web-1 not ready in the EndpointSlice", lambda: _slice_ready(web).get("svc-web-1") is False,
                 30, 0.2)
    web.wait_for("svc-web-1 out of rotation", lambda: "svc-web-1" not in _fetch_many(web, 20), 10, 0.2)
    counts = _fetch_many(web, 30)
    assert "svc-web-1" not in counts and sum(counts.values()) == 30, counts

    web.kubectl("exec", "svc-web-1", "--", "touch", "/tmp/ready")
    web.wait_for("svc-web-1 back in rotation", lambda: "svc-web-1" in _fetch_many(web, 15), 15, 0.5)


def test_node_port_answers_on_the_node_address(web) -> None:  # type: ignore[no-untyped-def]
    web.kubectl("patch", "service", "svc-web", "-p", '{"spec":{"type":"NodePort"}}')
    port = int(web.jsonpath("get", "service", "svc-web", "-o", "jsonpath={.spec.ports[0].nodePort}"))
    assert 30000 <= port <= 32767
    node_addr = str(ipaddress.ip_network(web.containerd.pod_cidr).network_address + 1)

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://{node_addr}:{port}/", timeout=2) as r:
                return r.read().decode().strip() in PODS
        except OSError:
            return False

    web.wait_for(f"NodePort {node_addr}:{port}", answers, 15, 0.5)


def test_headless_service_and_pod_hostnames_resolve_to_pod_ips(web) -> None:  # type: ignore[no-untyped-def]
    ips = {json.loads(web.kubectl("get", "pod", n, "-o", "json").stdout)["status"]["podIP"] for n in PODS}
    out = _client_exec(web, "nslookup svc-web-headless.default.svc.cluster.local")
    assert ips <= set(out.split()), out
    ip0 = json.loads(web.kubectl("get", "pod", "svc-web-0", "-o", "json").stdout)["status"]["podIP"]
    out = _client_exec(web, "nslookup svc-web-0.svc-web-headless.default.svc.cluster.local")
    assert ip0 in out.split(), out
    out = _client_exec(web, "nslookup nothing-here.default.svc.cluster.local; echo rc=$?")
    assert "NXDOMAIN" in out or "can't find" in out, out


RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: svc-pod-reader}
rules: [{apiGroups: [""], resources: ["pods"], verbs: ["get", "list"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: svc-pod-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: svc-pod-reader}
subjects: [{kind: ServiceAccount, name: default, namespace: default}]
"""


def test_pod_credentials_list_pods_with_the_official_client_in_cluster_config(web, tmp_path) -> None:  # type: ignore[no-untyped-def]
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes.config.incluster_config import InClusterConfigLoader

    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    env = dict(line.split("=", 1) for line in _client_exec(web, "env").splitlines() if "=" in line)
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert "SVC_WEB_HEADLESS_SERVICE_HOST" not in env  # headless: no variables
    # From the pod, kubernetes.default.svc resolves and its TLS listener answers through the proxy
    # (busybox's own TLS cannot finish a handshake with this server: only reachability is checked).
    out = _client_exec(web, "wget -qO- https://kubernetes.default.svc/version 2>&1")
    assert "bad address" not in out and "refused" not in out and "timed out" not in out, out
    # The pod's credentials and environment, used by load_incluster_config() (from the node: the
    # client reaches KUBERNETES_SERVICE_HOST, the ClusterIP, through the same proxy rules).
    (tmp_path / "token").write_text(_client_exec(web, f"cat {sa}/token"))
    (tmp_path / "ca.crt").write_text(_client_exec(web, f"cat {sa}/ca.crt"))
    web.kubectl("apply", "-f", "-", input=RBAC)
    try:
        cfg = kubernetes.client.Configuration()
        InClusterConfigLoader(token_filename=str(tmp_path / "token"), cert_filename=str(tmp_path / "ca.crt"),
                              environ={k: env[k] for k in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")},
                              ).load_and_set(cfg)
        assert cfg.host == f"https://{env['KUBERNETES_SERVICE_HOST']}:443"
        with kubernetes.client.ApiClient(cfg) as client:
            pods = kubernetes.client.CoreV1Api(client).list_namespaced_pod("default")
        assert "svc-client" in {p.metadata.name for p in pods.items}
    finally:
        web.kubectl("delete", "-f", "-", input=RBAC, check=False)


def test_proxy_rules_use_only_our_own_chains(web) -> None:  # type: ignore[no-untyped-def]
    saved = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout
    svc_ip = web.jsonpath("get", "service", "svc-web", "-o", "jsonpath={.spec.clusterIP}")
    ours = [line for line in saved.splitlines() if f"-d {svc_ip}/32" in line]
    assert ours and all(line.split()[1].startswith("PYK") for line in ours), ours


def test_kubectl_debug_shell_shares_the_target_process_namespace(web) -> None:  # type: ignore[no-untyped-def]
    # An interactive shell (stdin attached): its `ps` sees the target's httpd as PID 1.
    res = web.kubectl("debug", "-i", "svc-web-2", "--image=busybox:1.36", "--target=web", "-c", "dbg",
                      "--", "sh", input="ps\nexit\n", timeout=60, check=False)
    assert res.returncode == 0, res.stderr

    def shell_output() -> str:  # what the shell printed (the attach may end before it is relayed)
        return str(web.kubectl("logs", "svc-web-2", "-c", "dbg", check=False).stdout)

    web.wait_for("the debug shell's ps", lambda: "1 root     httpd -f -p 8080" in shell_output(), 20, 0.5)
    pod = json.loads(web.kubectl("get", "pod", "svc-web-2", "-o", "json").stdout)
    [st] = pod["status"]["ephemeralContainerStatuses"]
    assert st["name"] == "dbg" and st["containerID"].startswith("containerd://"), st


def test_kubectl_debug_it_gives_an_interactive_shell_on_a_tty(web) -> None:  # type: ignore[no-untyped-def]
    import shutil
    import threading

    if shutil.which("script") is None:
        pytest.skip("util-linux script (to give kubectl a terminal) not installed")
    cmd = (f"kubectl --kubeconfig={web.kubeconfig} --cache-dir={web.data_dir / 'kubectl-debug-cache'} debug -it "
           "svc-web-1 --image=busybox:1.36 --target=web -c tty-shell -- sh")
    proc = subprocess.Popen(["script", "-qfec", cmd, "/dev/null"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    seen = bytearray()

    def pump() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(4096):  # type: ignore[attr-defined]
            seen.extend(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        web.wait_for("the debug shell's prompt", lambda: b"/ # " in seen, 30, 0.2)
        proc.stdin.write(b"ps\n")
        proc.stdin.flush()
        web.wait_for("ps in the debug shell", lambda: b"httpd -f -p 8080" in seen, 15, 0.2)
        proc.stdin.write(b"exit\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"1 root     httpd -f -p 8080" in seen, seen.decode(errors="replace")
