"""End to end: the README's `make up` with its own containerd, then Ctrl-C, then `make up` again.

This is the newcomer's path: one command brings up a cluster that the real kubectl drives; Ctrl-C
leaves nothing behind (process, mount, cgroup, bridge, iptables chain); running it again resumes the
same cluster with its objects.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pykubelet.up.main import proxy_chain_prefix
from tests.fakes import free_port

ROOT = Path(__file__).resolve().parents[3]


def leftovers(data_dir: Path, bridge: str, cgroup_root: str, proxy_prefix: str = "") -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(data_dir) in cmd:
                found.append(f"process {entry.name}: {cmd[:160]}")
    for line in Path("/proc/mounts").read_text().splitlines():
        if str(data_dir) in line:
            found.append(f"mount: {line}")
    if subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0:
        found.append(f"bridge {bridge}")
    for controller in Path("/sys/fs/cgroup").iterdir():
        if (controller / cgroup_root.strip("/")).exists():
            found.append(f"cgroup {controller / cgroup_root.strip('/')}")
    if proxy_prefix:  # the service proxy's chains and the jumps into them (iptables-save)
        saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        found += [f"iptables: {line}" for line in saved.splitlines() if f"{proxy_prefix}-" in line]
    return found


def test_make_up_ctrl_c_and_resume(e2e_slot: int, tmp_path: Path, kubectl) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "state"
    bridge, cgroup_root = f"pku{e2e_slot}", f"/pykubelet-up{e2e_slot}"
    args = (f"--data-dir {data_dir} --node-name up-e2e --pod-cidr 198.18.{100 + e2e_slot}.0/24 "
            f"--bridge {bridge} --cgroup-root {cgroup_root} --secure-port {free_port()} "
            f"--kubelet-port {free_port()} --agent-arg=--healthz-port={free_port()}")
    run = kubectl(data_dir / "kubeconfig")
    prefix = proxy_chain_prefix(argparse.Namespace(pod_cidr=f"198.18.{100 + e2e_slot}.0/24"))

    def start() -> tuple[subprocess.Popen[str], list[str]]:
        proc = subprocess.Popen(["make", "-s", "up", f"ARGS={args}", f"PYTHON={sys.executable}"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("export KUBECONFIG="):
                break
        else:
            pytest.fail("make up ended before printing the KUBECONFIG line:\n" + "".join(lines))
        return proc, lines

    def stop(proc: subprocess.Popen[str]) -> str:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground process group
        out, _ = proc.communicate(timeout=120)
        return out

    def wait(what: str, fn, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if fn():
                return
            time.sleep(0.5)
        pytest.fail(f"timed out waiting for {what}\n" + (data_dir / "logs" / "agent.log").read_text()[-3000:])

    def phase(name: str) -> str:
        res = run("get", "pod", name, "-o", "jsonpath={.status.phase}", check=False)
        return res.stdout.strip()

    proc, lines = start()
    try:
        assert f"export KUBECONFIG={data_dir / 'kubeconfig'}" in lines[-1]
        wait("node Ready", lambda: "Ready" in run("get", "nodes", check=False).stdout.replace("NotReady", ""))
        run("apply", "-f", str(ROOT / "examples" / "busybox-pod.yaml"))
        wait("busybox Running", lambda: phase("busybox") == "Running")
        # The README's next commands, as a newcomer types them.
        assert "busybox" in run("get", "pods", "-o", "wide").stdout
        wait("the container's first log line", lambda: "started" in run("logs", "busybox", check=False).stdout)
        assert "Linux" in run("exec", "busybox", "--", "uname", "-a").stdout
        uid = json.loads(run("get", "pod", "busybox", "-o", "json").stdout)["metadata"]["uid"]
    finally:
        out = stop(proc)
    assert "host cleaned up" in out, out
    assert leftovers(data_dir, bridge, cgroup_root, prefix) == []

    proc, _ = start()
    try:
        # The same cluster: the pod object survived and runs again.
        assert json.loads(run("get", "pod", "busybox", "-o", "json").stdout)["metadata"]["uid"] == uid
        wait("busybox Running again", lambda: phase("busybox") == "Running")
        run("delete", "pod", "busybox", "--wait=true", timeout=90)
    finally:
        out = stop(proc)
    assert "host cleaned up" in out, out
    assert leftovers(data_dir, bridge, cgroup_root, prefix) == []
