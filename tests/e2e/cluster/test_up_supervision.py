"""`pykubelet up` as a user runs it: starts, prints the KUBECONFIG line, restarts a crashed component,
stops on SIGTERM and leaves nothing on the host; a second run on the same data dir resumes.

The server and agent are replaced by tiny stand-ins (``--server-command``/``--agent-command``) so this
tests the orchestration and the host cleanup on the real containerd independently of them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pbg

from pykubelet.up.containerd import cgroup_mounts

FAKE_SERVER = """
import socket, sys, pathlib, time
data, port = pathlib.Path(sys.argv[1]), int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
(data / "kubeconfig").write_text("apiVersion: v1\\nkind: Config\\n")
runs = data / "server-runs"; runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
while True: time.sleep(1)
"""

# The agent stand-in starts one pod through CRI (so shutdown has a sandbox to stop) and then crashes
# once, to exercise the restart path.
FAKE_AGENT = """
import sys, pathlib, time, grpc
from cri_api.v1 import api_pb2 as pb, api_pb2_grpc as pbg
data, endpoint, parent = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
marker = data / "agent-crashed"
ch = grpc.insecure_channel(endpoint)
rt = pbg.RuntimeServiceStub(ch)
if not marker.exists():
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", namespace="default", uid="u-1"),
        log_directory=str(data / "podlogs"), linux=pb.LinuxPodSandboxConfig(cgroup_parent=parent + "/podu1"))
    rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg))
    marker.write_text("1")
    print("agent: crashing on purpose", flush=True)
    sys.exit(7)
(data / "agent-ok").write_text("1")
while True: time.sleep(1)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(pred, what: str, seconds: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _run_up(data: Path, slot: int, port: int, script_dir: Path) -> tuple[subprocess.Popen[str], Path]:
    (script_dir / "server.py").write_text(FAKE_SERVER)
    (script_dir / "agent.py").write_text(FAKE_AGENT)
    endpoint = f"unix://{data}/containerd/containerd.sock"
    parent = f"/pykubelet-e2e-up{slot}"
    out = script_dir / "up.out"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "pykubelet", "up",
            "--data-dir", str(data),
            "--pod-cidr", f"198.19.{150 + slot % 50}.0/24",
            "--bridge", f"pku{slot}",
            "--cgroup-root", parent,
            "--secure-port", str(port),
            "--server-command", f"{sys.executable} {script_dir / 'server.py'} {data} {port}",
            "--agent-command", f"{sys.executable} {script_dir / 'agent.py'} {data} {endpoint} {parent}",
        ],
        stdout=out.open("w"), stderr=subprocess.STDOUT, text=True,
    )
    return proc, out


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=90)


def test_up_runs_restarts_and_cleans_up(require_root_containerd: None, e2e_slot: int, tmp_path: Path) -> None:
    data = tmp_path / "d"
    port = _free_port()
    proc, out = _run_up(data, e2e_slot, port, tmp_path)
    try:
        _wait_for(lambda: "export KUBECONFIG=" in out.read_text(), "the KUBECONFIG line")
        assert f"export KUBECONFIG={data}/kubeconfig" in out.read_text()
        _wait_for(lambda: (data / "agent-ok").exists(), "the agent restart")
        log = out.read_text()
        assert "agent exited with code 7" in log and "crashing on purpose" in log
        # The pod the first agent run made is still there until shutdown.
        with grpc.insecure_channel(f"unix://{data}/containerd/containerd.sock") as ch:
            items = pbg.RuntimeServiceStub(ch).ListPodSandbox(pb.ListPodSandboxRequest()).items
        assert len(items) == 1
    finally:
        rc = _stop(proc)
    log = out.read_text()
    assert rc == 0, log
    assert "host cleaned up" in log
    assert not Path(f"/sys/class/net/pku{e2e_slot}").exists()
    for mount in cgroup_mounts():
        assert not (mount / f"pykubelet-e2e-up{e2e_slot}").exists()
    assert str(data) not in Path("/proc/self/mountinfo").read_text()
    nat = subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True).stdout
    assert f"pykubelet-pku{e2e_slot}" not in nat
    leftovers = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and str(data).encode() in _cmdline(int(pid))
    ]
    assert leftovers == []

    # Same data dir again: resumes (the server stand-in sees its earlier state, images are kept).
    proc, out = _run_up(data, e2e_slot, port, tmp_path)
    try:
        _wait_for(lambda: "export KUBECONFIG=" in out.read_text(), "the second start")
        assert "images ready (0 imported)" in out.read_text()
        _wait_for(lambda: (data / "server-runs").read_text() == "xx", "the resumed server")
    finally:
        assert _stop(proc) == 0, out.read_text()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
