"""The in-process CRI client (hollow nodes): the agent's CRIClient API and errors, with no socket."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest

from pykubelet.cri import CRIError, StatusCode, pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient


def sandbox_config(name: str, uid: str) -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid=uid, attempt=0),
        labels={"io.kubernetes.pod.uid": uid})


def container_config(name: str) -> pb.ContainerConfig:
    return pb.ContainerConfig(metadata=pb.ContainerMetadata(name=name), image=pb.ImageSpec(image="busybox"),
                              command=["sleep", "3600"], labels={"io.kubernetes.container.name": name})


async def test_in_process_client_runs_a_pod_with_ips_from_the_runtimes_range_and_reports_to_the_observer() -> None:
    seen: list[tuple[str, Any]] = []
    client = InProcessCRIClient(FakeRuntime(pod_cidr="198.19.4.0/25"), observer=lambda op, s, e: seen.append((op, e)))
    assert (await client.connect()).runtime_name == "fakecri"
    scfg = sandbox_config("web", "u1")
    sid = await client.run_pod_sandbox(scfg)
    ip = (await client.pod_sandbox_status(sid)).status.network.ip
    assert ipaddress.ip_address(ip) in ipaddress.ip_network("198.19.4.0/25")
    cid = await client.create_container(sid, container_config("app"), scfg)
    await client.start_container(cid)
    [listed] = await client.list_containers()
    assert listed.id == cid and listed.state == pb.CONTAINER_RUNNING
    await client.stop_container(cid, 0)
    [listed] = await client.list_containers()  # the list entry follows the state change
    assert listed.state == pb.CONTAINER_EXITED
    assert ("run_podsandbox", None) in seen and ("start_container", None) in seen
    await client.close()


async def test_in_process_client_raises_the_runtimes_grpc_errors_as_cri_errors() -> None:
    client = InProcessCRIClient(FakeRuntime())
    with pytest.raises(CRIError) as err:
        await client.container_status("nope")
    assert err.value.not_found and err.value.code is StatusCode.NOT_FOUND
    with pytest.raises(CRIError) as err:
        async for _ in client.get_container_events():
            pass
    assert err.value.unimplemented


def test_a_fake_runtime_pod_range_outside_the_pod_network_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("not inside 198.18.0.0/15")):
        FakeRuntime(pod_cidr="10.0.0.0/24")


async def test_container_lists_show_a_planned_exit_as_soon_as_it_is_due() -> None:
    now = [1_700_000_000_000_000_000]
    client = InProcessCRIClient(FakeRuntime(clock=lambda: now[0]))
    scfg = sandbox_config("job", "u2")
    sid = await client.run_pod_sandbox(scfg)
    cfg = container_config("work")
    cfg.command[:] = ["sh", "-c", "sleep 2; exit 3"]
    cid = await client.create_container(sid, cfg, scfg)
    await client.start_container(cid)
    assert [c.state for c in await client.list_containers()] == [pb.CONTAINER_RUNNING]
    assert [c.state for c in await client.list_containers()] == [pb.CONTAINER_RUNNING]  # unchanged, same answer
    now[0] += 3 * 10**9
    assert [c.state for c in await client.list_containers()] == [pb.CONTAINER_EXITED]
    assert (await client.container_status(cid)).status.exit_code == 3
