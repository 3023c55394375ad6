"""The local registry as containerd's mirror: offline pulls with policy Always, same digests, loads.

Driven straight through CRI on the session's private containerd: the mirror's hosts.toml files are
written into its registry config_path (and removed again), exactly as `pykubelet up` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.cri import CRIClient
from pykubelet.up import images
from pykubelet.up.containerd import PrivateContainerd
from pykubelet.up.registry import DEFAULT_MIRRORED, LocalRegistry, write_mirror_hosts_toml

pytestmark = pytest.mark.skipif(shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
                                reason="docker-registry and skopeo are needed")


@pytest.fixture
def mirror(containerd: PrivateContainerd, tmp_path: Path, image_cache_dir: Path) -> Iterator[LocalRegistry]:
    reg = LocalRegistry(tmp_path / "registry")
    reg.start()
    written = [write_mirror_hosts_toml(containerd.registry_config_dir, r, reg.host) for r in DEFAULT_MIRRORED]
    try:
        reg.mirror_offline_images(images.build_all(image_cache_dir))
        yield reg
    finally:
        for p in written:
            shutil.rmtree(p.parent, ignore_errors=True)
        reg.stop()


async def _pull_after_remove(endpoint: str, ref: str) -> tuple[str, str, list[str]]:
    async with CRIClient(endpoint) as cri:
        before = (await cri.image_status(ref)).image
        await cri.remove_image(ref)
        await cri.pull_image(ref)  # what an untagged image / imagePullPolicy: Always does
        after = (await cri.image_status(ref)).image
        return before.id, after.id, list(after.repo_digests)


def test_an_offline_image_pulls_through_the_mirror_with_the_digest_it_was_imported_with(
        containerd: PrivateContainerd, mirror: LocalRegistry, image_cache_dir: Path) -> None:
    built = {ref: img for img in images.build_all(image_cache_dir) for ref in img.refs}
    for ref in ("docker.io/library/busybox:latest", "docker.io/library/busybox:1.36", "registry.k8s.io/pause:3.9"):
        if ref == "registry.k8s.io/pause:3.9":
            continue  # the sandbox image of running pods: pulled only, never removed here
        before, after, digests = asyncio.run(_pull_after_remove(containerd.endpoint, ref))
        assert after == before
        assert any(d.endswith(built[ref].digests[ref]) for d in digests), digests


def _oci_layout_of(image: images.BuiltImage, ref: str, dest: Path, name: str, entrypoint: list[str]) -> None:
    """An OCI layout holding `image` under a new name with a different entrypoint (a "user-built" one)."""
    import tarfile

    src = dest.parent / "src"
    with tarfile.open(image.archive) as tf:
        tf.extractall(src, filter="data")
    index = json.loads((src / "index.json").read_text())
    [desc] = [m for m in index["manifests"] if m["annotations"]["io.containerd.image.name"] == ref]
    blobs = src / "blobs" / "sha256"
    manifest = json.loads((blobs / desc["digest"].split(":")[1]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_bytes())
    config["config"]["Entrypoint"] = entrypoint
    config["config"].pop("Cmd", None)

    def put(obj: object) -> tuple[str, int]:
        data = json.dumps(obj, separators=(",", ":")).encode()
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest, len(data)

    manifest["config"]["digest"], manifest["config"]["size"] = put(config)
    mdigest, msize = put(manifest)
    desc.update(digest=mdigest, size=msize, annotations={"org.opencontainers.image.ref.name": name})
    (src / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    src.rename(dest)


def test_a_user_built_oci_layout_is_loaded_into_the_mirror_and_containerd_under_its_name(
        containerd: PrivateContainerd, mirror: LocalRegistry, image_cache_dir: Path, tmp_path: Path) -> None:
    busybox = images.archive_for(images.BUSYBOX_IMAGE, image_cache_dir)
    layout = tmp_path / "hello"
    _oci_layout_of(busybox, images.BUSYBOX_IMAGE, layout, "example.com/me/hello:v1", ["echo", "hello-from-load"])
    res = subprocess.run([sys.executable, "-m", "pykubelet", "images", "load", "--registry", mirror.host,
                          "--address", containerd.address, str(layout)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "example.com/me/hello:v1" in res.stdout
    assert "v1" in mirror.catalog().get("example.com/me/hello", [])

    async def run() -> str:
        async with CRIClient(containerd.endpoint) as cri:
            st = (await cri.image_status("example.com/me/hello:v1")).image
            return str(st.id)

    assert asyncio.run(run()).startswith("sha256:")
    listing = subprocess.run([sys.executable, "-m", "pykubelet", "images", "list", "--registry", mirror.host,
                              "--address", containerd.address], capture_output=True, text=True, check=False)
    assert listing.returncode == 0, listing.stderr
    assert "example.com/me/hello:v1" in listing.stdout and "docker.io/library/busybox:1.36" in listing.stdout
    with contextlib.suppress(Exception):
        subprocess.run(["ctr", "--address", containerd.address, "-n", "k8s.io", "images", "rm",
                        "example.com/me/hello:v1"], capture_output=True, check=False)


def test_loading_a_file_that_is_not_an_image_archive_fails_clearly(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello")
    res = subprocess.run([sys.executable, "-m", "pykubelet", "images", "load", "--registry", "127.0.0.1:1",
                          "--address", "/nonexistent.sock", str(junk)], capture_output=True, text=True, check=False)
    assert res.returncode == 1
    assert "is not an image archive" in res.stderr


@pytest.fixture
def small_containerd(e2e_slot: int, tmp_path: Path, image_cache_dir: Path) -> Iterator[PrivateContainerd]:
    """A containerd of its own whose root is a 48 MiB tmpfs: a disk that fills up quickly."""
    data = tmp_path / "cd"
    root = data / "root"
    root.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "pykubelet-e2e-gc", str(root)], check=True)
    cd = PrivateContainerd(data, pod_cidr=f"198.18.{200 + e2e_slot}.0/24", bridge=f"pkg{e2e_slot}",
                           cgroup_parent=f"/pykubelet-e2e-gc{e2e_slot}",
                           log=lambda m: print(f"[gc containerd] {m}", file=sys.stderr))
    try:
        asyncio.run(cd.start())
        asyncio.run(images.bootstrap_images(cd.address, cache_dir=image_cache_dir))
        yield cd
    finally:
        asyncio.run(cd.shutdown())
        subprocess.run(["umount", "-l", str(root)], check=False)


def _random_image(tmp: Path, ref: str, size: int) -> images.BuiltImage:
    import os

    layer = images.layer_tar([images.Entry("blob", "file", 0o644, os.urandom(size))])
    return images.write_oci_archive(tmp / (hashlib.sha256(ref.encode()).hexdigest()[:8] + ".tar"), [ref], layer,
                                    {"architecture": images.oci_arch(), "os": "linux", "config": {}})


def test_image_gc_on_a_full_disk_removes_unused_images_least_recently_used_first(
        small_containerd: PrivateContainerd, tmp_path: Path) -> None:
    from pykubelet.agent.images.gc import GCPolicy, ImageGCManager
    from pykubelet.cri import pb
    from tests.fakes import FakeClock, FakeEventRecorder

    cd = small_containerd
    clock = FakeClock(1_000.0)
    names = [f"example.com/gc/img{i}:1" for i in range(4)]

    async def scenario() -> tuple[list[str], set[str], int, int]:
        async with CRIClient(cd.endpoint) as cri:
            gc = ImageGCManager(cri, FakeEventRecorder(), dict, GCPolicy(20, 5, min_age=0), clock=clock)
            for ref in images.BUSYBOX_REFS:  # only the pause image and the test's images on this disk
                await cri.remove_image(ref)
            for ref in [*names, "example.com/gc/inuse:1"]:  # detected one after the other: LRU order
                await images.import_image(cd.address, _random_image(tmp_path, ref, 3_000_000))
                clock.advance(10)
                await gc.detect(clock())
            cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="gc", namespace="e2e", uid="gc-uid"),
                                      linux=pb.LinuxPodSandboxConfig(security_context=pb.LinuxSandboxSecurityContext(
                                          namespace_options=pb.NamespaceOption(network=pb.NODE))))
            sid = await cri.run_pod_sandbox(cfg)
            await cri.create_container(sid, pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image="example.com/gc/inuse:1"),
                command=["/blob"]), cfg)  # created, never started: still "in use"
            capacity, before = await gc._image_fs() or (0, 0)
            # thresholds that ask for 1.5 images' worth of space: the two least recently used must go
            size = max(i.size for i in await cri.list_images() if "example.com/gc/img0:1" in i.repo_tags)
            low = 100 - math.ceil((before + 1.5 * size) * 100 / capacity)
            gc.policy = GCPolicy(min(100 - math.ceil(before * 100 / capacity), low + 1), low, min_age=0)
            clock.advance(10)
            await gc.run_once()
            left = {t for i in await cri.list_images() for t in i.repo_tags}
            after = (await gc._image_fs() or (0, 0))[1]
            await cri.stop_pod_sandbox(sid)
            await cri.remove_pod_sandbox(sid)
            return names, left, before, after

    order, left, available_before, available_after = asyncio.run(scenario())
    assert [r for r in order if r not in left] == order[:2]  # least recently used first, just enough
    assert "example.com/gc/inuse:1" in left and "registry.k8s.io/pause:3.9" in left
    assert available_after > available_before
