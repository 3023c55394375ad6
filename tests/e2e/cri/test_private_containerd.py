"""The private containerd + offline images, end to end on the real runtime."""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pbg

from pykubelet.up.containerd import PrivateContainerd, cgroup_mounts
from pykubelet.up.images import ALL_IMAGES, bootstrap_images
from pykubelet.up.registry import LocalRegistry, write_hosts_toml


def _bridge_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def _nat_rules() -> str:
    return subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True, check=False).stdout


def _mountinfo() -> str:
    return Path("/proc/self/mountinfo").read_text()


def _sandbox_config(cd: PrivateContainerd, tmp: Path, name: str) -> pb.PodSandboxConfig:
    uid = uuid.uuid4().hex
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid=uid),
        hostname=name,
        log_directory=str(tmp / f"default_{name}_{uid}"),
        linux=pb.LinuxPodSandboxConfig(cgroup_parent=f"{cd.cgroup_parent}/pod{uid}"),
    )


async def test_images_are_visible_to_cri(containerd: PrivateContainerd) -> None:
    async with grpc.aio.insecure_channel(containerd.endpoint) as ch:
        resp = await pbg.ImageServiceStub(ch).ListImages(pb.ListImagesRequest())
    tags = {t for img in resp.images for t in img.repo_tags}
    assert set(ALL_IMAGES) <= tags


async def test_bootstrap_again_imports_nothing(containerd: PrivateContainerd, image_cache_dir: Path) -> None:
    assert await bootstrap_images(containerd.address, cache_dir=image_cache_dir) == []


async def test_pod_with_busybox_gets_ip_in_cidr(containerd: PrivateContainerd, tmp_path: Path) -> None:
    cfg = _sandbox_config(containerd, tmp_path, "web")
    async with grpc.aio.insecure_channel(containerd.endpoint) as ch:
        rt = pbg.RuntimeServiceStub(ch)
        sb = await rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg))
        try:
            st = await rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=sb.pod_sandbox_id))
            ip = st.status.network.ip
            assert ipaddress.ip_address(ip) in ipaddress.ip_network(containerd.pod_cidr)
            ctr = await rt.CreateContainer(
                pb.CreateContainerRequest(
                    pod_sandbox_id=sb.pod_sandbox_id,
                    sandbox_config=cfg,
                    config=pb.ContainerConfig(
                        metadata=pb.ContainerMetadata(name="httpd"),
                        image=pb.ImageSpec(image="docker.io/library/busybox:1.36"),
                        command=["httpd", "-f", "-p", "80", "-h", "/var/www"],
                        log_path="httpd/0.log",
                    ),
                )
            )
            await rt.StartContainer(pb.StartContainerRequest(container_id=ctr.container_id))
            # The pod answers on its IP from the host (wget retries until httpd listens).
            res = await asyncio.to_thread(
                subprocess.run,
                ["busybox", "sh", "-c", f"for i in $(seq 50); do wget -qO- http://{ip}/ && exit 0; sleep 0.1; done; exit 1"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert "hello from pykubelet busybox" in res.stdout
            status = await rt.ContainerStatus(pb.ContainerStatusRequest(container_id=ctr.container_id))
            assert status.status.state == pb.CONTAINER_RUNNING
        finally:
            await rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sb.pod_sandbox_id))
            await rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sb.pod_sandbox_id))


async def test_pull_from_local_registry_with_auth(containerd: PrivateContainerd, tmp_path: Path, image_cache_dir: Path) -> None:
    reg = LocalRegistry(tmp_path / "registry", htpasswd_user="alice", password="s3cret")
    await asyncio.to_thread(reg.start)
    try:
        write_hosts_toml(containerd.registry_config_dir, reg.host)
        ref = await reg.apush("docker.io/library/busybox:1.36", "private/busybox:v1", image_cache_dir)
        async with grpc.aio.insecure_channel(containerd.endpoint) as ch:
            img = pbg.ImageServiceStub(ch)
            with pytest.raises(grpc.aio.AioRpcError):
                await img.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=ref)))
            resp = await img.PullImage(
                pb.PullImageRequest(
                    image=pb.ImageSpec(image=ref), auth=pb.AuthConfig(username="alice", password="s3cret")
                )
            )
            assert resp.image_ref.startswith("sha256:")
            # Not removed: it shares its image ID with busybox:1.36, and CRI RemoveImage drops
            # every tag of an image ID.
    finally:
        await asyncio.to_thread(reg.stop)


async def test_cleanup_after_crash_leaves_nothing(
    require_root_containerd: None, e2e_slot: int, tmp_path: Path, image_cache_dir: Path
) -> None:
    """A stack killed with pods running is fully removed by cleanup(), and cleanup is idempotent."""
    # Its own slot-derived names so it cannot disturb the session's `containerd`.
    n = e2e_slot
    cd = PrivateContainerd(
        tmp_path / "cd",
        pod_cidr=f"198.19.{200 + n % 50}.0/24" if n < 200 else "198.19.255.0/24",
        bridge=f"pkc{n}",
        cgroup_parent=f"/pykubelet-e2e-crash{n}",
    )
    cd.cleanup()
    await cd.start()
    try:
        await bootstrap_images(cd.address, cache_dir=image_cache_dir)
        cfg = _sandbox_config(cd, tmp_path, "crash")
        cfg.port_mappings.append(pb.PortMapping(protocol=pb.TCP, container_port=80, host_port=0))
        cfg.port_mappings[0].host_port = 20000 + n
        cfg.port_mappings[0].host_ip = "127.0.0.1"
        async with grpc.aio.insecure_channel(cd.endpoint) as ch:
            rt = pbg.RuntimeServiceStub(ch)
            sb = await rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg))
            assert sb.pod_sandbox_id
        shims = cd.our_shims()
        assert shims
        assert _bridge_exists(cd.bridge)
        nat = _nat_rules()
        assert cd.network_name in nat
    finally:
        # Simulate a crash: containerd goes away without stopping the pod.
        await cd.stop()
        assert cd.cleanup() == []
    assert cd.cleanup() == []
    assert cd.our_shims() == []
    assert not _bridge_exists(cd.bridge)
    nat = _nat_rules()
    assert cd.network_name not in nat
    assert f"{cd.pod_cidr.rsplit('.', 1)[0]}." not in nat
    for mount in cgroup_mounts():
        assert not (mount / cd.cgroup_parent.strip("/")).exists()
    assert str(cd.data_dir) not in _mountinfo()
