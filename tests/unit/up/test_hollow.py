"""How `pykubelet hollow` names its nodes, carves their pod ranges and configures their agents."""

from __future__ import annotations

import ipaddress
import re
import shutil
from pathlib import Path

import pytest

from pykubelet.agent.config import load_options
from pykubelet.up import hollow


def test_nodes_are_named_prefix_and_index() -> None:
    assert hollow.node_names("hollow-", 3) == ["hollow-0", "hollow-1", "hollow-2"]


def test_each_node_gets_its_own_pod_range_big_enough_for_its_max_pods() -> None:
    cidrs = hollow.pod_cidrs("198.19.0.0/16", 100, 110)
    nets = [ipaddress.ip_network(c) for c in cidrs]
    assert len(set(nets)) == 100 and all(n.prefixlen == 25 for n in nets)  # 126 usable >= 110 pods
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    assert hollow.pod_cidrs("198.19.0.0/16", 2, 1100)[1] == "198.19.8.0/21"


def test_pod_ranges_outside_the_pod_network_or_too_small_are_refused_naming_the_flag() -> None:
    with pytest.raises(hollow.HollowError, match=re.escape("--pod-cidr: 10.0.0.0/16 is not inside 198.18.0.0/15")):
        hollow.pod_cidrs("10.0.0.0/16", 1, 110)
    with pytest.raises(hollow.HollowError, match="holds 2 ranges of /25"):
        hollow.pod_cidrs("198.19.0.0/24", 3, 110)
    with pytest.raises(hollow.HollowError, match="too small"):
        hollow.pod_cidrs("198.19.0.0/28", 1, 110)


def test_hollow_agents_run_without_kubelet_server_or_cgroups_unless_ports_are_given() -> None:
    cfg = hollow.hollow_config(kubelet_server=False)
    assert cfg["enableServer"] is False and cfg["cgroupsPerQOS"] is False and cfg["healthzPort"] == 0
    served = hollow.hollow_config(kubelet_server=True, tls=("/c.crt", "/c.key"), client_ca="/ca.crt")
    assert served["enableServer"] is True and served["tlsCertFile"] == "/c.crt"
    assert served["authentication"] == {"x509": {"clientCAFile": "/ca.crt"}}


def test_agent_flags_are_valid_agent_options_with_per_node_name_dirs_and_range(tmp_path: Path) -> None:
    import yaml

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(hollow.hollow_config(kubelet_server=True)))
    node = hollow.HollowNode(name="hollow-7", index=7, pod_cidr="198.19.3.128/25", dir=tmp_path / "hollow-7",
                             socket=tmp_path / "7.sock")
    opts = load_options(hollow.agent_flags(node, kubeconfig="/kc", config_path=config, node_ip="127.0.0.1",
                                           max_pods=30, kubelet_port=20257, labels="zone=a",
                                           extra=["--node-status-update-frequency=20s"]))
    assert opts.node_name == "hollow-7"
    assert opts.node_labels == {"pykubelet.io/hollow": "true", "zone": "a"}
    assert opts.root_dir == tmp_path / "hollow-7" / "root"
    assert opts.pod_logs_dir == tmp_path / "hollow-7" / "pod-logs"
    assert opts.config.pod_cidr == "198.19.3.128/25" and opts.max_pods == 30 and opts.config.port == 20257
    assert opts.config.node_status_update_frequency == 20.0
    assert opts.container_runtime_endpoint == f"unix://{tmp_path / '7.sock'}"


def test_up_runs_hollow_nodes_with_per_node_kubeconfigs_under_its_data_dir(tmp_path: Path) -> None:
    argv = hollow.up_argv(tmp_path, 5, node_ip="127.0.0.1", extra=["--name-prefix", "kubemark-"])
    ns = hollow.build_parser().parse_args(argv[argv.index("hollow") + 1:])
    assert ns.kubeconfig_dir == str(tmp_path / "nodes") and ns.nodes == 5
    assert ns.data_dir == str(tmp_path / "hollow") and ns.client_ca_file == str(tmp_path / "pki" / "ca.crt")
    assert hollow.up_node_names(["--name-prefix", "kubemark-"], 2) == ["kubemark-0", "kubemark-1"]


def test_real_node_next_to_hollow_ones_needs_an_existing_runtime_socket(tmp_path: Path) -> None:
    missing = f"unix://{tmp_path}/nothing.sock"
    assert hollow.real_node_unavailable(missing) == f"{missing} does not exist"
    present = tmp_path / "cri.sock"
    present.touch()
    assert hollow.real_node_unavailable(f"unix://{present}") is None


def test_processes_split_the_nodes_into_contiguous_slices_covering_each_once() -> None:
    slices = [hollow.shard_range(f"{i}/3", 100) for i in range(3)]
    assert slices == [(0, 34), (34, 33), (67, 33)]
    covered = [n for first, count in slices for n in range(first, first + count)]
    assert covered == list(range(100))
    assert hollow.shard_range(None, 7) == (0, 7)
    with pytest.raises(hollow.HollowError, match=re.escape("--shard: index 3 is not in 0..2")):
        hollow.shard_range("3/3", 10)


def test_each_process_gets_the_parents_flags_its_shard_and_one_shared_data_dir(tmp_path: Path) -> None:
    argv = ["--kubeconfig", "/kc", "--nodes", "10", "--processes", "2", "--data-dir=/elsewhere", "-v", "1"]
    child = hollow.shard_argv(argv, 1, 2, tmp_path)
    ns = hollow.build_parser().parse_args(child[child.index("hollow") + 1:])
    assert ns.processes == 1 and ns.shard == "1/2" and ns.nodes == 10 and ns.kubeconfig == "/kc"
    assert ns.data_dir == str(tmp_path) and ns.verbosity == 1


def test_a_shard_prepares_only_its_own_nodes_with_the_names_and_ranges_of_the_whole_set(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("")
    args = hollow.build_parser().parse_args(["--kubeconfig", str(kubeconfig), "--nodes", "5", "--shard", "1/2",
                                             "--data-dir", str(tmp_path / "data")])
    nodes = hollow.HollowNodes(args)
    try:
        nodes._prepare()
    finally:
        shutil.rmtree(nodes.sock_dir)
    assert [(n.name, n.index) for n in nodes.nodes] == [("hollow-3", 3), ("hollow-4", 4)]
    assert [n.pod_cidr for n in nodes.nodes] == hollow.pod_cidrs(hollow.DEFAULT_POD_CIDR, 5, 110)[3:]
