"""`pykubelet up` command lines and flag handling (no processes started)."""

from __future__ import annotations

import socket
from pathlib import Path

from pykubelet.up import main as up


def test_defaults_are_loopback_the_pod_cidr_and_standard_ports() -> None:
    args = up.build_parser().parse_args([])
    assert args.data_dir == "./.pykubelet"
    assert (args.bind_address, args.node_ip) == ("127.0.0.1", "127.0.0.1")
    assert args.pod_cidr == "198.18.0.0/24"
    assert (args.secure_port, args.kubelet_port) == (6443, 10250)


def test_server_and_agent_command_lines(tmp_path: Path) -> None:
    args = up.build_parser().parse_args(["--secure-port", "7443", "--kubelet-port", "11250", "--agent-arg=--v=4"])
    server = up.server_argv(args, tmp_path)
    assert server[1:4] == ["-m", "pykubelet", "server"]
    assert server[server.index("--data-dir") + 1] == str(tmp_path)
    assert server[server.index("--secure-port") + 1] == "7443"
    agent = up.agent_argv(args, tmp_path, "node-a", "unix:///x.sock")
    assert agent[1:4] == ["-m", "pykubelet", "agent"]
    flags = dict(zip(agent[4:-1:2], agent[5::2], strict=False))
    assert flags["--kubeconfig"] == str(tmp_path / "nodes" / "node-a.kubeconfig")
    assert flags["--hostname-override"] == "node-a"
    assert flags["--bootstrap-kubeconfig"] == str(tmp_path / "nodes" / "node-a.bootstrap-kubeconfig")
    assert flags["--rotate-certificates"] == "true"
    assert flags["--container-runtime-endpoint"] == "unix:///x.sock"
    assert flags["--port"] == "11250"
    assert flags["--client-ca-file"] == str(tmp_path / "pki" / "ca.crt")
    assert agent[-1] == "--v=4"
    assert up.server_url(args) == "https://127.0.0.1:7443"


def test_injected_commands_replace_the_components(tmp_path: Path) -> None:
    args = up.build_parser().parse_args(["--server-command", "sleep 5", "--agent-command", "sh -c 'sleep 1'"])
    assert up.server_argv(args, tmp_path) == ["sleep", "5"]
    assert up.agent_argv(args, tmp_path, "n", "unix:///s") == ["sh", "-c", "sleep 1"]


def test_only_an_existing_socket_counts_as_external_runtime(tmp_path: Path) -> None:
    assert up.external_endpoint(None) is None
    assert up.external_endpoint(f"unix://{tmp_path}/missing.sock") is None
    path = tmp_path / "cri.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert up.external_endpoint(str(path)) == f"unix://{path}"
        assert up.external_endpoint(f"unix://{path}") == f"unix://{path}"
