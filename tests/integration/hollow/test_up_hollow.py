"""`pykubelet up --hollow-nodes N` without a container runtime: the control plane and N hollow nodes
only (no root, no containerd), with per-node credentials, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pykubelet.common.apiclient import ApiClient, ApiError

SRC = Path(__file__).resolve().parents[3] / "src"


def _log(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_up_with_hollow_nodes_and_no_runtime_runs_control_plane_and_hollow_nodes(tmp_path: Path) -> None:
    data = tmp_path / "up"
    log = tmp_path / "up.log"
    with open(log, "wb") as out:  # noqa: ASYNC230 - opening a local log file
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pykubelet", "up", "--data-dir", str(data), "--secure-port", str(_free_port()),
            "--hollow-nodes", "2", "--container-runtime-endpoint", f"unix://{tmp_path}/no-runtime.sock",
            stdout=out, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(SRC)},
            start_new_session=True)
    api: ApiClient | None = None
    try:
        async with asyncio.timeout(90):  # bounds a hang only
            while not (data / "kubeconfig").exists():
                assert proc.returncode is None, _log(log)
                await asyncio.sleep(0.2)
            api = ApiClient.from_kubeconfig(str(data / "kubeconfig"))
            while True:
                assert proc.returncode is None, _log(log)
                try:
                    nodes = (await api.list("/api/v1/nodes"))["items"]
                except (ApiError, OSError):
                    nodes = []
                if sorted(n["metadata"]["name"] for n in nodes if _ready(n)) == ["hollow-0", "hollow-1"]:
                    break
                await asyncio.sleep(0.3)
        assert "no real node" in _log(log)
        assert sorted(p.name for p in (data / "nodes").iterdir()) == ["hollow-0.kubeconfig", "hollow-1.kubeconfig"]
    finally:
        if api is not None:
            await api.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, _log(log)
