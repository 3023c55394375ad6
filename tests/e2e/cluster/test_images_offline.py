"""Images like a real node, offline: `pykubelet up`'s registry mirror, `images load`, crictl, logs --previous.

One dedicated `pykubelet up` with its private containerd (the shared ``cluster`` fixture brings its
own containerd, whose registry config `up` does not own): untagged and ``Always`` pulls succeed
without internet, a user-built image loaded with ``pykubelet images load`` runs, ``pykubelet crictl``
sees the node, and the previous log of a restarted container survives container GC.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster, KubectlRunner, start_up, stop_process
from tests.fakes import free_port

pytestmark = pytest.mark.skipif(shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
                                reason="docker-registry and skopeo are needed")


@pytest.fixture(scope="module")
def node(e2e_slot: int, tmp_path_factory: pytest.TempPathFactory,
         kubectl: Callable[[str | os.PathLike[str]], KubectlRunner]) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("images-up")
    name = f"pk-img-{e2e_slot}"
    extra = ["--pod-cidr", f"198.18.{50 + e2e_slot}.0/24", "--bridge", f"pki{e2e_slot}",
             "--cgroup-root", f"/pykubelet-e2e-img{e2e_slot}", "--secure-port", str(free_port()),
             "--kubelet-port", str(free_port()), f"--agent-arg=--healthz-port={free_port()}",
             "--agent-arg=--container-gc-period=1s"]
    proc = start_up(data, name, extra, data / "up.log")
    c = Cluster(data, name, proc, kubectl(data / "kubeconfig"), None, 0)  # type: ignore[arg-type]
    try:
        c.wait_for(f"node {name} Ready", lambda: proc.poll() is None and c.jsonpath(
            "get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}") == "True", 90)
        yield c
    finally:
        rc = stop_process(proc)
        assert rc == 0, (data / "up.log").read_text()[-3000:]


def _phase(c: Cluster, pod: str) -> str:
    return c.jsonpath("get", "pod", pod, "-o", "jsonpath={.status.phase}")


def _events(c: Cluster, pod: str) -> str:
    return c.jsonpath("get", "events", "--field-selector", f"involvedObject.name={pod}", "-o",
                      "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}")


def test_untagged_and_always_pulled_images_run_offline_through_the_mirror(node: Cluster) -> None:
    node.kubectl("run", "t", "--image=busybox", "--", "sleep", "3600")
    node.kubectl("run", "always", "--image=busybox:1.36", "--image-pull-policy=Always", "--", "sleep", "3600")
    for pod in ("t", "always"):
        node.wait_for(f"pod {pod} Running", lambda p=pod: _phase(node, p) == "Running", 60)  # type: ignore[misc]
    assert 'Successfully pulled image "busybox:1.36"' in _events(node, "always")
    assert 'Successfully pulled image "busybox"' in _events(node, "t")
    ps = subprocess.run([sys.executable, "-m", "pykubelet", "crictl", "--data-dir", str(node.data_dir), "ps"],
                        capture_output=True, text=True, check=True).stdout
    header, *rows = ps.splitlines()
    assert header.split()[:4] == ["CONTAINER", "IMAGE", "CREATED", "STATE"]
    assert {r.split()[-1] for r in rows} >= {"t", "always"}


def _user_image(dest: Path) -> None:
    """An OCI layout of the offline busybox renamed example.com/me/hello:v1, entrypoint changed."""
    import hashlib

    from pykubelet.up import images

    busybox = images.archive_for(images.BUSYBOX_IMAGE)
    with tarfile.open(busybox.archive) as tf:
        tf.extractall(dest, filter="data")
    blobs = dest / "blobs" / "sha256"
    index = json.loads((dest / "index.json").read_text())
    [desc] = [m for m in index["manifests"] if m["annotations"]["io.containerd.image.name"] == images.BUSYBOX_IMAGE]
    manifest = json.loads((blobs / desc["digest"][7:]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
    config["config"]["Entrypoint"] = ["sh", "-c", "echo hello-from-load"]
    config["config"].pop("Cmd", None)

    def put(obj: object) -> tuple[str, int]:
        data = json.dumps(obj).encode()
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
        return "sha256:" + hashlib.sha256(data).hexdigest(), len(data)

    manifest["config"]["digest"], manifest["config"]["size"] = put(config)
    desc["digest"], desc["size"] = put(manifest)
    desc["annotations"] = {"org.opencontainers.image.ref.name": "example.com/me/hello:v1"}
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))


def test_a_user_built_image_loaded_with_images_load_runs(node: Cluster, tmp_path: Path) -> None:
    layout = tmp_path / "hello"
    _user_image(layout)
    res = subprocess.run([sys.executable, "-m", "pykubelet", "images", "load", "--data-dir", str(node.data_dir),
                          str(layout)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "loaded example.com/me/hello:v1" in res.stdout
    # Always: the pull goes through the mirror, which now serves example.com too
    node.kubectl("run", "hello", "--image=example.com/me/hello:v1", "--image-pull-policy=Always",
                 "--restart=Never")
    node.wait_for("pod hello Succeeded", lambda: _phase(node, "hello") == "Succeeded", 60)
    assert node.kubectl("logs", "hello").stdout.strip() == "hello-from-load"


def test_the_previous_log_of_a_restarted_container_survives_container_gc(node: Cluster) -> None:
    node.kubectl("run", "crash", "--image=busybox:1.36", "--", "sh", "-c", "echo run-$(date +%s%N); sleep 8; exit 1")

    def restarted_and_running() -> bool:
        out = node.jsonpath("get", "pod", "crash", "-o", "jsonpath={.status.containerStatuses[0].restartCount} "
                            "{.status.containerStatuses[0].state.running.startedAt}")
        count, _, started = out.partition(" ")
        return count not in ("", "0") and bool(started)

    node.wait_for("the second instance running", restarted_and_running, 60)
    time.sleep(1.5)  # container GC (period 1s here) has run since the restart
    prev = node.kubectl("logs", "crash", "--previous").stdout.strip()
    assert prev.startswith("run-"), prev
