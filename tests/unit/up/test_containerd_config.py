"""Config generation and the pure host-inspection helpers of the private containerd."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pykubelet.up.containerd import (
    PrivateContainerd,
    mounts_under,
    nat_rules_to_delete,
    parse_mountinfo,
    render_cni_conflist,
    render_config,
    validate_pod_cidr,
)
from pykubelet.up.images import PAUSE_IMAGE


def test_config_has_the_settings_this_machine_needs(tmp_path: Path) -> None:
    cd = PrivateContainerd(tmp_path, pod_cidr="198.18.4.0/24", bridge="pktest")
    cd.write_config()
    cfg = tomllib.loads(cd.config_path.read_text())
    assert cfg["version"] == 2
    assert cfg["root"] == str(tmp_path / "root") and cfg["state"] == str(tmp_path / "state")
    assert cfg["grpc"]["address"] == cd.address and cfg["ttrpc"]["address"] != cd.address
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True
    assert cri["disable_apparmor"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert (cri["stream_server_address"], cri["stream_server_port"]) == ("127.0.0.1", "0")
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False
    assert runc["options"]["BinaryName"] == "/usr/sbin/runc"
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    assert cri["cni"]["conf_dir"] == str(cd.cni_conf_dir)
    assert cri["registry"]["config_path"] == str(cd.registry_config_dir)
    assert (cd.cni_conf_dir / "10-pykubelet.conflist").exists()


def test_conflist_chains_bridge_portmap_loopback(tmp_path: Path) -> None:
    c = render_cni_conflist(network_name="n", bridge="br9", pod_cidr="198.18.7.0/24", ipam_data_dir=tmp_path)
    plugins = c["plugins"]
    assert isinstance(plugins, list)
    assert [p["type"] for p in plugins] == ["bridge", "portmap", "loopback"]
    bridge = plugins[0]
    assert bridge["bridge"] == "br9" and bridge["isGateway"] and not bridge["ipMasq"] and bridge["hairpinMode"]
    assert bridge["ipam"]["type"] == "host-local" and bridge["ipam"]["dataDir"] == str(tmp_path)
    assert bridge["ipam"]["ranges"][0][0]["subnet"] == "198.18.7.0/24"
    assert plugins[1]["capabilities"] == {"portMappings": True}


@pytest.mark.parametrize("cidr", ["10.0.0.0/24", "192.168.1.0/24", "198.20.0.0/24", "198.18.0.0/30"])
def test_pod_cidr_must_be_in_the_benchmark_range(cidr: str) -> None:
    with pytest.raises(ValueError):
        validate_pod_cidr(cidr)


def test_long_data_dirs_get_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 120)
    cd = PrivateContainerd(deep)
    assert len(cd.address) < 100 and cd.address.startswith("/run/pykubelet/")
    assert PrivateContainerd(deep).address == cd.address


def test_render_config_is_valid_toml_with_quotes_in_paths(tmp_path: Path) -> None:
    weird = tmp_path / 'a "quoted" dir'
    text = render_config(
        root=weird, state=weird, grpc_address="/s", ttrpc_address="/t", cni_conf_dir=weird, registry_config_dir=weird
    )
    assert tomllib.loads(text)["root"] == str(weird)


def test_mounts_under_returns_deepest_first() -> None:
    info = (
        "1 0 8:1 / / rw - ext4 /dev/vda rw\n"
        "2 1 0:5 / /d/state/netns/cni-1 rw - nsfs nsfs rw\n"
        "3 1 0:6 / /d/root/snap/rootfs rw - overlay overlay rw\n"
        "4 1 0:7 / /d/state/task/k8s.io/abc/rootfs rw - overlay overlay rw\n"
        "5 1 0:8 / /d/state\\040x rw - tmpfs tmpfs rw\n"
        "6 1 0:9 / /other rw - tmpfs tmpfs rw\n"
    )
    points = parse_mountinfo(info)
    assert "/d/state x" in points
    got = mounts_under(points, [Path("/d/root"), Path("/d/state")])
    assert got[0] == "/d/state/task/k8s.io/abc/rootfs"
    assert set(got) == {"/d/state/netns/cni-1", "/d/root/snap/rootfs", "/d/state/task/k8s.io/abc/rootfs"}


NAT = """-P PREROUTING ACCEPT
-N CNI-DN-aaa
-N CNI-DN-bbb
-N CNI-HOSTPORT-DNAT
-N CNI-HOSTPORT-MASQ
-N CNI-HOSTPORT-SETMARK
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A CNI-DN-aaa -d 127.0.0.1/32 -p tcp -m tcp --dport 18080 -j DNAT --to-destination 198.18.5.2:80
-A CNI-DN-bbb -d 127.0.0.1/32 -p tcp -m tcp --dport 18081 -j DNAT --to-destination 198.19.9.2:80
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"mine\\" id: \\"x\\"" -m multiport --dports 18080 -j CNI-DN-aaa
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"other\\" id: \\"y\\"" -m multiport --dports 18081 -j CNI-DN-bbb
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
""".splitlines()


def test_only_our_portmap_chains_are_removed_while_others_use_the_shared_ones() -> None:
    rules, chains = nat_rules_to_delete(NAT, "mine", "198.18.5.0/24")
    assert chains == ["CNI-DN-aaa"]
    assert len(rules) == 1 and rules[0].startswith("-D CNI-HOSTPORT-DNAT") and "CNI-DN-aaa" in rules[0]


def test_shared_chains_go_when_we_are_the_last_user() -> None:
    mine_only = [line for line in NAT if "bbb" not in line]
    rules, chains = nat_rules_to_delete(mine_only, "mine", "198.18.5.0/24")
    assert set(chains) == {"CNI-DN-aaa", "CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK"}
    assert any(r.startswith("-D PREROUTING") for r in rules)
    assert any(r.startswith("-D OUTPUT") for r in rules)
    assert any(r.startswith("-D POSTROUTING") for r in rules)


def test_orphan_dn_chain_found_by_destination_in_our_cidr() -> None:
    lines = [line for line in NAT if not line.startswith("-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"mine")]
    _, chains = nat_rules_to_delete(lines, "mine", "198.18.5.0/24")
    assert "CNI-DN-aaa" in chains and "CNI-DN-bbb" not in chains


def test_nothing_to_do_on_a_clean_host() -> None:
    assert nat_rules_to_delete(["-P PREROUTING ACCEPT"], "mine", "198.18.5.0/24") == ([], [])


def test_cleanup_also_unmounts_the_pods_volumes(tmp_path: Path) -> None:
    from pykubelet.up.containerd import PrivateContainerd, mounts_under

    cd = PrivateContainerd(tmp_path / "containerd", also_unmount=[tmp_path / "agent" / "pods"])
    points = [str(tmp_path / "agent/pods/u1/volumes/kubernetes.io~secret/s"), "/other/mount",
              str(cd.root / "io.containerd.runtime.v2.task/k8s.io/x/rootfs")]
    found = mounts_under(points, [cd.root, cd.state, *cd.also_unmount])
    assert str(tmp_path / "agent/pods/u1/volumes/kubernetes.io~secret/s") in found
    assert "/other/mount" not in found
