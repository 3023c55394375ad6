"""End to end: deletion grace periods, private-registry pulls with
imagePullSecrets, deletion while the agent is down, and invalid static pods.

Runs on the session's `cluster` (`pykubelet up` on a private containerd) with the real kubectl.
Each test creates and deletes its own pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import textwrap
import time
from pathlib import Path

import pytest

from pykubelet.cri import CRIClient, pb


def _containers(cluster, pod_name: str) -> list[pb.Container]:  # type: ignore[no-untyped-def]
    async def go() -> list[pb.Container]:
        async with CRIClient(cluster.containerd.endpoint) as cri:
            return await cri.list_containers(pb.ContainerFilter(label_selector={"io.kubernetes.pod.name": pod_name}))

    return asyncio.run(go())


def _sandboxes(cluster, pod_name: str) -> list[pb.PodSandbox]:  # type: ignore[no-untyped-def]
    async def go() -> list[pb.PodSandbox]:
        async with CRIClient(cluster.containerd.endpoint) as cri:
            return await cri.list_pod_sandbox(pb.PodSandboxFilter(label_selector={"io.kubernetes.pod.name": pod_name}))

    return asyncio.run(go())


def _running(cluster, pod_name: str) -> list[pb.Container]:  # type: ignore[no-untyped-def]
    return [c for c in _containers(cluster, pod_name) if c.state == pb.CONTAINER_RUNNING]


def _get_pod(cluster, name: str) -> dict:  # type: ignore[no-untyped-def]
    res = cluster.kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def _phase(cluster, name: str) -> str:  # type: ignore[no-untyped-def]
    return str(_get_pod(cluster, name).get("status", {}).get("phase", ""))


def _waiting_reason(cluster, name: str) -> str:  # type: ignore[no-untyped-def]
    for cs in _get_pod(cluster, name).get("status", {}).get("containerStatuses") or []:
        return str(cs.get("state", {}).get("waiting", {}).get("reason", ""))
    return ""


def _gone_from_api(cluster, name: str) -> bool:  # type: ignore[no-untyped-def]
    return cluster.kubectl("get", "pod", name, check=False).returncode != 0


def _stubborn_pod(name: str) -> str:
    """A pod whose only container ignores SIGTERM (default 30 s grace period)."""
    return textwrap.dedent(f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}}}
        spec:
          containers:
          - name: main
            image: docker.io/library/busybox:1.36
            imagePullPolicy: IfNotPresent
            command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
        """)


def _force_cleanup(cluster, *names: str) -> None:  # type: ignore[no-untyped-def]
    cluster.kubectl("delete", "pod", *names, "--ignore-not-found", "--grace-period=0", "--force",
                    "--wait=false", check=False)


# ------------------------------------------------------------------------------------------
# deletion grace periods


def test_force_delete_grace_0_kills_at_once(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "force-del"
    cluster.kubectl("apply", "-f", "-", input=_stubborn_pod(name))
    try:
        cluster.wait_for(f"{name} Running", lambda: _phase(cluster, name) == "Running", 90)
        assert _running(cluster, name)
        t0 = time.monotonic()
        cluster.kubectl("delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
        cluster.wait_for("no running container", lambda: not _running(cluster, name), 20, 0.2)
        stopped = time.monotonic() - t0
        cluster.wait_for("containers removed", lambda: not _containers(cluster, name), 20, 0.2)
        removed = time.monotonic() - t0
        cluster.wait_for("sandbox removed", lambda: not _sandboxes(cluster, name), 20, 0.2)
        # upstream: grace 0 becomes the 1 s pod minimum (2 s per container): never the spec's 30 s
        assert stopped < 8, f"container still running {stopped:.1f}s after a forced delete"
        assert removed < 12, f"containers removed only {removed:.1f}s after a forced delete"
    finally:
        _force_cleanup(cluster, name)


def test_delete_grace_3_honours_deletion_grace_period(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "grace-3"
    cluster.kubectl("apply", "-f", "-", input=_stubborn_pod(name))
    try:
        cluster.wait_for(f"{name} Running", lambda: _phase(cluster, name) == "Running", 90)
        t0 = time.monotonic()
        cluster.kubectl("delete", "pod", name, "--grace-period=3", "--wait=false")
        cluster.wait_for("no running container", lambda: not _running(cluster, name), 30, 0.2)
        stopped = time.monotonic() - t0
        cluster.wait_for("pod gone from the API", lambda: _gone_from_api(cluster, name), 30, 0.2)
        cluster.wait_for("containers removed", lambda: not _containers(cluster, name), 30, 0.2)
        removed = time.monotonic() - t0
        assert 2 <= stopped < 15, f"SIGTERM-ignoring container stopped after {stopped:.1f}s (grace 3)"
        assert removed < 20
    finally:
        _force_cleanup(cluster, name)


# ------------------------------------------------------------------------------------------
# private registry + imagePullSecrets


@pytest.fixture
def private_registry(cluster, tmp_path: Path, image_cache_dir: Path):  # type: ignore[no-untyped-def]
    from pykubelet.up.registry import LocalRegistry, write_hosts_toml

    missing = [b for b in ("docker-registry", "skopeo", "htpasswd") if shutil.which(b) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (apt-get install docker-registry skopeo apache2-utils)")
    reg = LocalRegistry(tmp_path / "registry", htpasswd_user="alice", password="s3cret")
    reg.start()
    try:
        write_hosts_toml(cluster.containerd.registry_config_dir, reg.host)
        ref = reg.push("docker.io/library/busybox:1.36", "agent-e2e/busybox:v1", image_cache_dir)
        yield reg, ref
    finally:
        reg.stop()


def _private_pod(name: str, image: str, secret: str | None) -> str:
    secrets = f"\n  imagePullSecrets: [{{name: {secret}}}]" if secret else ""
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1{secrets}
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["sleep", "3600"]
"""


def test_private_registry_needs_image_pull_secret(cluster, private_registry) -> None:  # type: ignore[no-untyped-def]
    reg, ref = private_registry
    cluster.kubectl("apply", "-f", "-", input=_private_pod("no-secret", ref, None))
    try:
        seen: set[str] = set()
        cluster.wait_for("ErrImagePull/ImagePullBackOff without a secret",
                         lambda: bool(seen.add(_waiting_reason(cluster, "no-secret"))
                                      or {"ErrImagePull", "ImagePullBackOff"} & seen), 90, 0.3)
        assert _phase(cluster, "no-secret") == "Pending"
        assert not _containers(cluster, "no-secret")

        cluster.kubectl("create", "secret", "docker-registry", "agent-regcred", f"--docker-server={reg.host}",
                        "--docker-username=alice", "--docker-password=s3cret")
        cluster.kubectl("apply", "-f", "-", input=_private_pod("with-secret", ref, "agent-regcred"))
        cluster.wait_for("with-secret Running", lambda: _phase(cluster, "with-secret") == "Running", 90)
        status = _get_pod(cluster, "with-secret")["status"]["containerStatuses"][0]
        assert status["image"].startswith(reg.host) or status["imageID"]
        events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=with-secret").stdout
        assert "Pulled" in events
    finally:
        cluster.kubectl("delete", "pod", "no-secret", "with-secret", "--ignore-not-found", "--wait=true",
                        timeout=90, check=False)
        cluster.kubectl("delete", "secret", "agent-regcred", "--ignore-not-found", check=False)


# ------------------------------------------------------------------------------------------
# deleted while the agent was down


def _agent_pid(cluster) -> int:  # type: ignore[no-untyped-def]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        joined = b" ".join(cmd)
        if b"agent" in cmd and str(cluster.data_dir).encode() in joined and b"pykubelet" in joined:
            return int(entry.name)
    raise AssertionError("agent process not found")


def test_pod_deleted_while_agent_down_is_removed_after_restart(cluster) -> None:  # type: ignore[no-untyped-def]
    name = "deleted-offline"
    cluster.kubectl("apply", "-f", "-", input=_stubborn_pod(name))
    frozen: int | None = None
    try:
        cluster.wait_for(f"{name} Running", lambda: _phase(cluster, name) == "Running", 90)
        before = {c.id for c in _containers(cluster, name)}
        assert before
        frozen = _agent_pid(cluster)
        os.kill(frozen, signal.SIGSTOP)  # a real outage: the supervisor only restarts dead agents
        cluster.kubectl("delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
        cluster.wait_for("pod gone from the API", lambda: _gone_from_api(cluster, name), 30)
        time.sleep(1)
        assert {c.id for c in _running(cluster, name)} == before  # nobody touched the containers
        os.kill(frozen, signal.SIGKILL)
        old, frozen = frozen, None

        def restarted() -> bool:
            try:
                return _agent_pid(cluster) != old
            except AssertionError:
                return False

        cluster.wait_for("the agent restarted", restarted, 60)
        cluster.wait_for("containers removed after the restart", lambda: not _containers(cluster, name), 60)
        cluster.wait_for("sandbox removed after the restart", lambda: not _sandboxes(cluster, name), 60)
        cluster.wait_for(
            "node Ready again",
            lambda: cluster.jsonpath("get", "node", cluster.node_name, "-o",
                                     "jsonpath={.status.conditions[?(@.type=='Ready')].status}") == "True",
            60,
        )
    finally:
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGCONT)
        _force_cleanup(cluster, name)


# ------------------------------------------------------------------------------------------
# invalid pods


def test_invalid_pod_spec_rejected_by_server(cluster) -> None:  # type: ignore[no-untyped-def]
    manifest = _stubborn_pod("bad-policy").replace("spec:\n", "spec:\n  restartPolicy: Sometimes\n")
    res = cluster.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert res.returncode != 0
    assert "restartPolicy" in res.stderr
    assert _gone_from_api(cluster, "bad-policy")


def test_invalid_static_pod_is_logged_and_skipped(cluster) -> None:  # type: ignore[no-untyped-def]
    manifests = cluster.data_dir / "manifests"
    bad = manifests / "agent-bad-policy.yaml"
    good = manifests / "agent-good-static.yaml"
    pid = _agent_pid(cluster)
    bad.write_text(_stubborn_pod("bad-static").replace("spec:\n", "spec:\n  restartPolicy: Sometimes\n"))
    good.write_text(_stubborn_pod("good-static").replace("spec:\n", "spec:\n  terminationGracePeriodSeconds: 1\n"))
    mirror = f"good-static-{cluster.node_name}"
    agent_log = cluster.data_dir / "logs" / "agent.log"
    try:
        cluster.wait_for("the valid static pod Running", lambda: _phase(cluster, mirror) == "Running", 60)

        def logged() -> bool:
            text = agent_log.read_text(errors="replace")
            return any("agent-bad-policy.yaml" in ln and "restartPolicy" in ln for ln in text.splitlines())

        cluster.wait_for("a log line naming the manifest and the field", logged, 30)
        assert not _containers(cluster, f"bad-static-{cluster.node_name}")
        assert _gone_from_api(cluster, f"bad-static-{cluster.node_name}")
        assert _agent_pid(cluster) == pid  # never crashed
    finally:
        bad.unlink(missing_ok=True)
        good.unlink(missing_ok=True)
    cluster.wait_for("static pod gone", lambda: not _containers(cluster, mirror), 60)
    assert _agent_pid(cluster) == pid
