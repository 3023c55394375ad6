"""The mirror's hosts.toml: the local registry first (own namespace per upstream), the real registry second."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pykubelet.up.registry import RegistryError, split_ref, write_mirror_hosts_toml


def test_each_mirrored_registry_tries_the_local_mirror_then_falls_back_to_upstream(tmp_path: Path) -> None:
    docker = tomllib.loads(write_mirror_hosts_toml(tmp_path, "docker.io", "127.0.0.1:5000").read_text())
    assert docker["server"] == "https://registry-1.docker.io"
    [(url, host)] = docker["host"].items()
    assert url == "http://127.0.0.1:5000/v2/docker.io"
    assert host["override_path"] is True and host["capabilities"] == ["pull", "resolve"]
    k8s = tomllib.loads((write_mirror_hosts_toml(tmp_path, "registry.k8s.io", "127.0.0.1:5000")).read_text())
    assert k8s["server"] == "https://registry.k8s.io"
    assert list(k8s["host"]) == ["http://127.0.0.1:5000/v2/registry.k8s.io"]
    with pytest.raises(RegistryError, match="invalid registry host"):
        write_mirror_hosts_toml(tmp_path, "..", "127.0.0.1:5000")


def test_image_references_split_into_registry_path_and_tag() -> None:
    assert split_ref("docker.io/library/busybox:1.36") == ("docker.io", "library/busybox", "1.36")
    assert split_ref("localhost:5000/me/app:v1") == ("localhost:5000", "me/app", "v1")
    with pytest.raises(RegistryError, match="has no tag"):
        split_ref("example.com/me/app")
    with pytest.raises(RegistryError, match="not fully qualified"):
        split_ref("busybox:1")
