"""`pykubelet hollow` against the dev control plane: hollow nodes register, turn Ready and run pods
that the scheduler places on them (the kubemark use: scale-testing a control plane without containers).

The control plane runs in-process (scheduler and node lifecycle controller on); `pykubelet hollow` is
the real command in a child process, stopped by PID with SIGTERM (SIGKILL if it hangs) whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pykubelet.common.apiclient import ApiClient
from pykubelet.server.main import run_server
from tests.builders import container, pod

SRC = Path(__file__).resolve().parents[3] / "src"
NODES = ("hollow-0", "hollow-1", "hollow-2")


async def eventually(check: Callable[[], Awaitable[bool]], limit: float = 60.0) -> None:
    """Poll ``check`` until true; ``limit`` only bounds a hang, it is not a timing assertion."""
    async with asyncio.timeout(limit):
        while True:
            if await check():
                return
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def hollow_process(*args: str, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    with open(log, "wb") as out:  # noqa: ASYNC230 - opening a local log file
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pykubelet", "hollow", *args, stdout=out, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(SRC)}, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[ApiClient, Path]]:
    async with run_server(tmp_path / "cp", port=0, controllers=True) as srv:
        api = ApiClient(srv.url, token=srv.admin_token, ca_file=str(srv.ca_file))
        try:
            yield api, srv.kubeconfig
        finally:
            await api.close()


def _log(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _mounts() -> list[str]:
    return Path("/proc/self/mountinfo").read_text().splitlines()


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


@pytest.mark.parametrize(("cri", "processes"), [("inprocess", 1), ("grpc", 1), ("inprocess", 2)])
async def test_hollow_nodes_register_ready_and_run_pods_the_scheduler_places(
        cluster: tuple[ApiClient, Path], tmp_path: Path, cri: str, processes: int) -> None:
    api, kubeconfig = cluster
    log = tmp_path / "hollow.log"
    async with hollow_process("--kubeconfig", str(kubeconfig), "--nodes", "3", "--data-dir", str(tmp_path / "hollow"),
                              "--cri", cri, "--processes", str(processes), "-v", "1", log=log) as proc:
        async def nodes_ready() -> bool:
            assert proc.returncode is None, _log(log)
            items = (await api.list("/api/v1/nodes")).get("items", [])
            return sorted(n["metadata"]["name"] for n in items if _ready(n)) == list(NODES)

        await eventually(nodes_ready)
        nodes = {n["metadata"]["name"]: n for n in (await api.list("/api/v1/nodes"))["items"]}
        for name in NODES:
            assert nodes[name]["metadata"]["labels"]["pykubelet.io/hollow"] == "true"
            assert nodes[name]["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("fakecri://")
        cidrs = {name: nodes[name]["spec"]["podCIDR"] for name in NODES}
        assert len(set(cidrs.values())) == 3  # one pod range per node

        # One pod per node, placed by the scheduler (no nodeName; a nodeSelector names the node).
        for name in NODES:
            p = pod(f"on-{name}", uid="", containers=[container("c", "busybox:1.36", command=["sleep", "3600"])],
                    nodeSelector={"kubernetes.io/hostname": name})
            await api.create("/api/v1/namespaces/default/pods", p)

        async def pods_running() -> bool:
            assert proc.returncode is None, _log(log)
            items = (await api.list("/api/v1/namespaces/default/pods")).get("items", [])
            return len(items) == 3 and all((p.get("status") or {}).get("phase") == "Running" for p in items)

        await eventually(pods_running)
        for name in NODES:
            got = await api.get(f"/api/v1/namespaces/default/pods/on-{name}")
            assert got["spec"]["nodeName"] == name
            assert ipaddress.ip_address(got["status"]["podIP"]) in ipaddress.ip_network(cidrs[name])
            assert got["status"]["containerStatuses"][0]["containerID"].startswith("fakecri://")

    assert proc.returncode == 0, _log(log)  # SIGTERM: a clean stop
    if processes == 2:  # each child ran its own slice of the nodes
        text = log.read_text(errors="replace")
        assert "2 hollow nodes started (hollow-0 … hollow-1)" in text
        assert "1 hollow nodes started (hollow-2 … hollow-2)" in text
    assert not [line for line in _mounts() if str(tmp_path) in line]  # volumes were plain folders
    # Like stopped kubelets, the nodes stay registered (the node lifecycle controller marks them later).
    assert len((await api.list("/api/v1/nodes"))["items"]) == 3


def _free_port_range(n: int) -> int:
    """A port P with P .. P+n-1 free on 127.0.0.1 just now."""
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n > 65535:
            continue
        try:
            with contextlib.ExitStack() as stack:
                for port in range(base, base + n):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {n} consecutive free ports")


async def _tls_handshake(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def test_hollow_nodes_in_several_processes_serve_their_kubelet_api_with_one_shared_certificate(
        cluster: tuple[ApiClient, Path], tmp_path: Path) -> None:
    api, kubeconfig = cluster
    log, data = tmp_path / "hollow.log", tmp_path / "hollow"
    base = _free_port_range(len(NODES))
    async with hollow_process("--kubeconfig", str(kubeconfig), "--nodes", "3", "--processes", "2",
                              "--kubelet-port-base", str(base), "--data-dir", str(data), log=log) as proc:
        async def served() -> bool:
            assert proc.returncode is None, _log(log)
            items = (await api.list("/api/v1/nodes")).get("items", [])
            if sorted(n["metadata"]["name"] for n in items if _ready(n)) != list(NODES):
                return False
            return all([await _tls_handshake(base + i) for i in range(len(NODES))])

        await eventually(served)
        nodes = {n["metadata"]["name"]: n for n in (await api.list("/api/v1/nodes"))["items"]}
        for i, name in enumerate(NODES):
            assert nodes[name]["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == base + i
    assert proc.returncode == 0, _log(log)
    # one key and the certificate made for it, whichever process started first
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
        data / "pki" / "kubelet.crt", data / "pki" / "kubelet.key")
    assert not list(data.glob(".kubelet-config.yaml.*"))  # no half-written copies left


async def test_hollow_nodes_in_several_processes_with_bad_settings_exit_non_zero_naming_the_flag(
        tmp_path: Path) -> None:
    log = tmp_path / "hollow.log"
    async with hollow_process("--kubeconfig", str(tmp_path / "missing.kubeconfig"), "--nodes", "2",
                              "--processes", "2", "--data-dir", str(tmp_path / "hollow"), log=log) as proc:
        async with asyncio.timeout(60):  # bounds a hang only
            rc = await proc.wait()
    assert rc == 1, _log(log)
    assert "--kubeconfig" in _log(log) and "refused its settings" in _log(log)
