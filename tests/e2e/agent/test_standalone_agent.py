"""End to end: the agent on its own, as the README shows it (no API server, a KubeletConfiguration file).

`pykubelet agent --config FILE` with `staticPodPath` runs the manifests in that folder on containerd,
exactly like an upstream kubelet in standalone mode. Stopping the agent leaves the containers running
(restarting it must never restart healthy containers); removing the manifest removes the pod.

The agent gets a containerd of its own here: an agent removes the containers of pods it does not know,
so two agents must never share one runtime (the session's cluster fixture already has one).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.cri import CRIClient, CRIError, pb
from pykubelet.up.containerd import PrivateContainerd
from pykubelet.up.images import bootstrap_images
from tests.fakes import free_port

MANIFEST = """\
apiVersion: v1
kind: Pod
metadata: {name: lonely}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
"""


@pytest.fixture
def own_containerd(e2e_slot: int, tmp_path: Path, image_cache_dir: Path) -> Iterator[PrivateContainerd]:
    cd = PrivateContainerd(tmp_path / "cd", pod_cidr=f"198.18.{150 + e2e_slot}.0/24", bridge=f"pks{e2e_slot}",
                           cgroup_parent=f"/pykubelet-sa{e2e_slot}")
    cd.cleanup()
    try:
        asyncio.run(cd.start())
        asyncio.run(bootstrap_images(cd.address, cache_dir=image_cache_dir))
        yield cd
    finally:
        asyncio.run(cd.shutdown())


def containers(cd: PrivateContainerd) -> list[pb.Container]:
    async def go() -> list[pb.Container]:
        async with CRIClient(cd.endpoint) as cri:
            return [c for c in await cri.list_containers()
                    if c.state == pb.ContainerState.CONTAINER_RUNNING]

    return asyncio.run(go())


def wait(what: str, fn, log: Path, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if fn():
                return
        except CRIError:  # containerd slow to answer on a loaded machine: ask again
            pass
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}\n{log.read_text()[-3000:]}")


def test_standalone_agent_with_config_file(own_containerd: PrivateContainerd, tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    config = tmp_path / "kubelet-config.yaml"
    config.write_text(f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {manifests}
fileCheckFrequency: 1s
port: {free_port()}
healthzPort: {free_port()}
address: 127.0.0.1
cgroupRoot: {own_containerd.cgroup_parent}
podLogsDir: {tmp_path / "pod-logs"}
""")
    log = tmp_path / "agent.log"

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "pykubelet", "agent", "--config", str(config),
             "--container-runtime-endpoint", own_containerd.endpoint, "--root-dir", str(tmp_path / "root"),
             "--hostname-override", "standalone"],
            stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def stop(proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0

    (manifests / "lonely.yaml").write_text(MANIFEST)
    agent = start()
    try:
        wait("the static pod's container", lambda: [c.metadata.name for c in containers(own_containerd)] == ["main"],
             log)
        before = [c.id for c in containers(own_containerd)]
    finally:
        stop(agent)
    assert [c.id for c in containers(own_containerd)] == before  # stopping the agent stops no container

    agent = start()
    try:
        time.sleep(3)  # a restarted agent must adopt the running container, not replace it
        assert [c.id for c in containers(own_containerd)] == before
        (manifests / "lonely.yaml").unlink()
        wait("the pod removed with its manifest", lambda: containers(own_containerd) == [], log)
    finally:
        stop(agent)
