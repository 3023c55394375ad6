"""End to end: `pykubelet up` on real containerd, driven with the real kubectl.

Each test creates its own pods and deletes them, so the session-wide cluster stays clean.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from pykubelet.cri import CRIClient, pb

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def pod_phase(cluster, name: str) -> str:  # type: ignore[no-untyped-def]
    return cluster.jsonpath("get", "pod", name, "-o", "jsonpath={.status.phase}")


def pod_json(cluster, name: str) -> dict:  # type: ignore[no-untyped-def]
    res = cluster.kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def cri_containers(cluster, pod_name: str) -> list[pb.Container]:  # type: ignore[no-untyped-def]
    async def go() -> list[pb.Container]:
        async with CRIClient(cluster.containerd.endpoint) as cri:
            f = pb.ContainerFilter(label_selector={"io.kubernetes.pod.name": pod_name})
            return await cri.list_containers(f)

    return asyncio.run(go())


def cri_sandboxes(cluster, pod_name: str) -> list[pb.PodSandbox]:  # type: ignore[no-untyped-def]
    async def go() -> list[pb.PodSandbox]:
        async with CRIClient(cluster.containerd.endpoint) as cri:
            f = pb.PodSandboxFilter(label_selector={"io.kubernetes.pod.name": pod_name})
            return await cri.list_pod_sandbox(f)

    return asyncio.run(go())


def apply(cluster, manifest: str) -> None:  # type: ignore[no-untyped-def]
    cluster.kubectl("apply", "-f", "-", input=textwrap.dedent(manifest))


def delete(cluster, name: str) -> None:  # type: ignore[no-untyped-def]
    cluster.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true", timeout=90)


def test_node_is_ready_and_local(cluster) -> None:  # type: ignore[no-untyped-def]
    out = cluster.kubectl("get", "nodes", "-o", "wide").stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(cluster.node_name))
    assert " Ready " in line
    assert "127.0.0.1" in line  # all-in-one: node address on loopback by default
    lease = cluster.kubectl("get", "lease", "-n", "kube-node-lease", cluster.node_name).stdout
    assert cluster.node_name in lease


def test_busybox_example_runs_and_is_removed(cluster) -> None:  # type: ignore[no-untyped-def]
    cluster.kubectl("apply", "-f", str(EXAMPLES / "busybox-pod.yaml"))
    try:
        cluster.wait_for("busybox Running", lambda: pod_phase(cluster, "busybox") == "Running", 90)
        wide = cluster.kubectl("get", "pod", "busybox", "-o", "wide").stdout
        assert "Running" in wide and cluster.node_name in wide
        ip = pod_json(cluster, "busybox")["status"]["podIP"]
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(cluster.containerd.pod_cidr)
        assert [c.metadata.name for c in cri_containers(cluster, "busybox")] == ["busybox"]
    finally:
        cluster.kubectl("delete", "-f", str(EXAMPLES / "busybox-pod.yaml"), "--wait=true", timeout=90)
    assert cluster.kubectl("get", "pod", "busybox", check=False).returncode != 0
    cluster.wait_for("busybox containers removed", lambda: not cri_containers(cluster, "busybox"), 30)
    cluster.wait_for("busybox sandbox removed", lambda: not cri_sandboxes(cluster, "busybox"), 30)


def test_two_containers_share_one_ip(cluster) -> None:  # type: ignore[no-untyped-def]
    cluster.kubectl("apply", "-f", str(EXAMPLES / "two-container-pod.yaml"))
    try:
        cluster.wait_for("two-containers Running", lambda: pod_phase(cluster, "two-containers") == "Running", 90)
        containers = cri_containers(cluster, "two-containers")
        assert sorted(c.metadata.name for c in containers) == ["client", "web"]
        assert len({c.pod_sandbox_id for c in containers}) == 1  # one sandbox: one network namespace

        client = next(c for c in containers if c.metadata.name == "client")

        async def wget() -> str:
            async with CRIClient(cluster.containerd.endpoint) as cri:
                res = await cri.exec_sync(client.id, ["wget", "-qO-", "http://localhost:80/"], timeout=10)
                return res.stdout.decode()

        cluster.wait_for("client reaches web on localhost", lambda: "hello from the web container" in wget_safe(wget), 30)
        status = pod_json(cluster, "two-containers")["status"]
        assert len(status["containerStatuses"]) == 2
        assert all(cs["state"].get("running") for cs in status["containerStatuses"])
    finally:
        delete(cluster, "two-containers")


def wget_safe(fn) -> str:  # type: ignore[no-untyped-def]
    try:
        return asyncio.run(fn())
    except Exception as e:  # the web container may not listen yet
        return str(e)


@pytest.mark.parametrize(("code", "phase"), [(0, "Succeeded"), (3, "Failed")])
def test_restart_never_reports_exit(cluster, code: int, phase: str) -> None:  # type: ignore[no-untyped-def]
    name = f"exit-{code}"
    apply(cluster, f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}}}
        spec:
          restartPolicy: Never
          containers:
          - name: main
            image: docker.io/library/busybox:1.36
            imagePullPolicy: IfNotPresent
            command: ["sh", "-c", "exit {code}"]
    """)
    try:
        cluster.wait_for(f"{name} {phase}", lambda: pod_phase(cluster, name) == phase, 90)
        term = pod_json(cluster, name)["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == code
        assert term["reason"] == ("Completed" if code == 0 else "Error")
    finally:
        delete(cluster, name)


def test_nonexistent_image_backs_off(cluster) -> None:  # type: ignore[no-untyped-def]
    apply(cluster, """
        apiVersion: v1
        kind: Pod
        metadata: {name: bad-image}
        spec:
          containers:
          - name: main
            image: 127.0.0.1:1/nonexistent/image:v1
    """)
    try:
        def waiting_reason() -> str:
            st = pod_json(cluster, "bad-image").get("status", {})
            for cs in st.get("containerStatuses") or []:
                return str(cs.get("state", {}).get("waiting", {}).get("reason", ""))
            return ""

        seen: set[str] = set()
        cluster.wait_for("ErrImagePull then ImagePullBackOff",
                         lambda: seen.add(waiting_reason()) or {"ErrImagePull", "ImagePullBackOff"} <= seen
                         or "ImagePullBackOff" in seen, 90, 0.3)
        assert "ImagePullBackOff" in cluster.kubectl("get", "pod", "bad-image").stdout or "ErrImagePull" in \
            cluster.kubectl("get", "pod", "bad-image").stdout
    finally:
        delete(cluster, "bad-image")


def test_oom_killed(cluster) -> None:  # type: ignore[no-untyped-def]
    apply(cluster, """
        apiVersion: v1
        kind: Pod
        metadata: {name: oom}
        spec:
          restartPolicy: Never
          containers:
          - name: main
            image: docker.io/library/busybox:1.36
            imagePullPolicy: IfNotPresent
            command: ["sh", "-c", "sleep 1; head -c 100m /dev/zero | tail"]
            resources: {limits: {memory: 16Mi}}
    """)
    try:
        cluster.wait_for("oom Failed", lambda: pod_phase(cluster, "oom") == "Failed", 90)
        term = pod_json(cluster, "oom")["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["reason"] == "OOMKilled"
    finally:
        delete(cluster, "oom")


def test_static_pod_and_mirror(cluster) -> None:  # type: ignore[no-untyped-def]
    manifests = cluster.data_dir / "manifests"
    mirror = f"static-web-{cluster.node_name}"
    (manifests / "static-web.yaml").write_text((EXAMPLES / "static-pod.yaml").read_text())
    (manifests / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [oops\n")
    try:
        cluster.wait_for("mirror pod Running", lambda: pod_phase(cluster, mirror) == "Running", 60)
        first = pod_json(cluster, mirror)
        assert first["metadata"]["annotations"].get("kubernetes.io/config.mirror")
        assert [c.metadata.name for c in cri_containers(cluster, mirror)] == ["web"]
        # Editing the manifest replaces the pod.
        edited = (EXAMPLES / "static-pod.yaml").read_text().replace("app: static-web", "app: static-web-v2")
        (manifests / "static-web.yaml").write_text(edited)
        cluster.wait_for(
            "the edited static pod",
            lambda: pod_json(cluster, mirror).get("metadata", {}).get("labels", {}).get("app") == "static-web-v2"
            and pod_phase(cluster, mirror) == "Running",
            60,
        )
        log = (cluster.data_dir / "logs" / "agent.log").read_text(errors="replace")
        assert "broken.yaml" in log  # the malformed manifest is reported, and skipped
    finally:
        for f in ("static-web.yaml", "broken.yaml"):
            (manifests / f).unlink(missing_ok=True)
    cluster.wait_for("static pod gone", lambda: not cri_containers(cluster, mirror), 60)
    cluster.wait_for("mirror pod gone", lambda: cluster.kubectl("get", "pod", mirror, check=False).returncode != 0, 60)


def agent_pid(cluster) -> int:  # type: ignore[no-untyped-def]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agent" in cmd and str(cluster.data_dir).encode() in b" ".join(cmd) and b"pykubelet" in b" ".join(cmd):
            return int(entry.name)
    raise AssertionError("agent process not found")


def test_agent_sigkill_restarts_no_container_and_leaves_no_stale_mount(cluster) -> None:  # type: ignore[no-untyped-def]
    """20 pods with a ConfigMap, a Secret, a Memory emptyDir and the service-account token volume."""
    names = [f"keep-{i}" for i in range(20)]
    pods = "\n---\n".join(
        f"""apiVersion: v1
kind: Pod
metadata: {{name: {n}}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts:
    - {{name: cfg, mountPath: /cfg}}
    - {{name: secret, mountPath: /secret}}
    - {{name: scratch, mountPath: /scratch}}
  volumes:
  - {{name: cfg, configMap: {{name: keep-cfg}}}}
  - {{name: secret, secret: {{secretName: keep-secret}}}}
  - {{name: scratch, emptyDir: {{medium: Memory}}}}"""
        for n in names
    )
    sources = """apiVersion: v1
kind: ConfigMap
metadata: {name: keep-cfg}
data: {a: b}
---
apiVersion: v1
kind: Secret
metadata: {name: keep-secret}
stringData: {token: t}
"""
    cluster.kubectl("apply", "-f", "-", input=sources + "---\n" + pods)
    uids: list[str] = []
    try:
        cluster.wait_for("20 pods Running", lambda: all(pod_phase(cluster, n) == "Running" for n in names), 180)
        uids = [pod_json(cluster, n)["metadata"]["uid"] for n in names]
        before = {n: [c.id for c in cri_containers(cluster, n)] for n in names}
        old = agent_pid(cluster)
        os.kill(old, signal.SIGKILL)
        cluster.wait_for("the agent restarted", lambda: _new_agent(cluster, old), 60)
        time.sleep(5)  # give a restarted agent time to do something wrong
        after = {n: [c.id for c in cri_containers(cluster, n)] for n in names}
        assert after == before
        for n in names:
            cs = pod_json(cluster, n)["status"]["containerStatuses"][0]
            assert cs["restartCount"] == 0 and "running" in cs["state"]
        assert cluster.kubectl("exec", "keep-0", "--", "cat", "/cfg/a", "/secret/token").stdout == "bt"
    finally:
        cluster.kubectl("delete", "pod", *names, "--ignore-not-found", "--wait=true", timeout=180)
        cluster.kubectl("delete", "configmap", "keep-cfg", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "secret", "keep-secret", "--ignore-not-found", check=False)
    # the restarted agent learnt the old mounts from disk and took them down with the pods
    cluster.wait_for("no mount of the deleted pods", lambda: not any(
        uid in Path("/proc/mounts").read_text() for uid in uids), 60)


def _new_agent(cluster, old: int) -> bool:  # type: ignore[no-untyped-def]
    try:
        return agent_pid(cluster) != old
    except AssertionError:
        return False
