"""The kubelet-managed /etc/hosts of a pod: content, host network copy, written once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykubelet.agent.kuberuntime import etchosts
from tests.builders import container, pod

ALIASES = [{"ip": "10.1.2.3", "hostnames": ["foo.remote", "bar.remote"]}]


def test_managed_hosts_file_has_pod_ip_hostname_and_aliases(tmp_path: Path) -> None:
    p = pod("web", namespace="ns", hostAliases=ALIASES)
    path = etchosts.ensure_hosts_file(str(tmp_path), p, ["198.18.0.5"], "cluster.local")
    text = Path(path).read_text()
    assert text.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert "198.18.0.5\tweb\n" in text
    assert text.endswith("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n")


def test_subdomain_gives_the_fqdn() -> None:
    p = pod("web-0", namespace="ns", hostname="h", subdomain="sub")
    text = etchosts.hosts_content(p, ["198.18.0.5"], "cluster.local")
    assert "198.18.0.5\th.sub.ns.svc.cluster.local\th\n" in text


def test_host_network_pods_get_the_node_hosts_file_plus_aliases(tmp_path: Path) -> None:
    node_hosts = tmp_path / "hosts"
    node_hosts.write_text("127.0.0.1 localhost\n192.0.2.1 node1\n")
    p = pod("hn", hostNetwork=True, hostAliases=ALIASES)
    text = etchosts.hosts_content(p, ["192.0.2.1"], "cluster.local", str(node_hosts))
    assert text.startswith("# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.0.2.1 node1\n")
    assert "10.1.2.3\tfoo.remote\tbar.remote" in text


def test_file_is_written_once(tmp_path: Path) -> None:
    p = pod("web")
    path = etchosts.ensure_hosts_file(str(tmp_path), p, ["198.18.0.5"], "cluster.local")
    etchosts.ensure_hosts_file(str(tmp_path), p, ["198.18.0.9"], "cluster.local")
    assert "198.18.0.5" in Path(path).read_text() and "198.18.0.9" not in Path(path).read_text()


def test_not_mounted_without_ip_or_over_a_user_mount() -> None:
    assert not etchosts.needs_hosts_mount(container("c"), [])
    assert etchosts.needs_hosts_mount(container("c"), ["198.18.0.5"])
    assert etchosts.needs_hosts_mount(container("c"), [], host_network=True)  # the node's file, IP or not
    own = container("c", volumeMounts=[{"name": "h", "mountPath": "/etc/hosts"}])
    assert not etchosts.needs_hosts_mount(own, ["198.18.0.5"])


def test_the_file_is_0644_whatever_the_umask_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        path = etchosts.ensure_hosts_file(str(tmp_path), pod("web"), ["198.18.0.5"], "cluster.local")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["etc-hosts"]


def test_a_missing_pod_directory_is_made_for_the_file(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pods" / "uid-1"
    path = etchosts.ensure_hosts_file(str(pod_dir), pod("web"), ["198.18.0.5"], "cluster.local")
    assert path == str(pod_dir / "etc-hosts")
    assert "198.18.0.5\tweb\n" in Path(path).read_text()


def test_a_file_in_place_of_the_pod_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "pod").write_text("")
    with pytest.raises(FileExistsError):
        etchosts.ensure_hosts_file(str(tmp_path / "pod"), pod("web"), ["198.18.0.5"], "cluster.local")
