"""Containers get their volumeMounts as CRI mounts; subPaths never leave their volume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.kuberuntime.criconfig import ConfigError
from pykubelet.agent.volumemanager.atomic_writer import FileProjection, write
from pykubelet.agent.volumemanager.mounts import container_mounts, needs_filesystem
from pykubelet.agent.volumemanager.types import MountedVolume, PluginName
from pykubelet.cri import pb
from tests.builders import container

JSON = dict[str, Any]


@pytest.fixture
def volumes(tmp_path: Path) -> dict[str, MountedVolume]:
    data = tmp_path / "empty"
    data.mkdir()
    cfg = tmp_path / "cfg"
    write(cfg, {"app.conf": FileProjection(b"x=1", 0o644)})
    return {
        "data": MountedVolume("data", PluginName.EMPTY_DIR, str(data), dir=data),
        "cfg": MountedVolume("cfg", PluginName.CONFIGMAP, str(cfg), dir=cfg, read_only=True),
    }


def mounts(vols: dict[str, MountedVolume], *vms: JSON, env: dict[str, str] | None = None, **c: Any) -> list[pb.Mount]:
    return container_mounts("containers", 0, container(volumeMounts=list(vms), **c), vols, env or {})


def test_mounts_keep_order_read_only_and_propagation(volumes: dict[str, MountedVolume]) -> None:
    out = mounts(volumes, {"name": "data", "mountPath": "/data", "mountPropagation": "HostToContainer"},
                 {"name": "cfg", "mountPath": "/etc/app"},
                 {"name": "data", "mountPath": "/ro", "readOnly": True})
    assert [(m.container_path, m.host_path, m.readonly, m.propagation) for m in out] == [
        ("/data", volumes["data"].host_path, False, pb.PROPAGATION_HOST_TO_CONTAINER),
        ("/etc/app", volumes["cfg"].host_path, True, pb.PROPAGATION_PRIVATE),  # configMap: always read-only
        ("/ro", volumes["data"].host_path, True, pb.PROPAGATION_PRIVATE),
    ]


def test_a_sub_path_of_a_config_map_key_mounts_the_resolved_file(volumes: dict[str, MountedVolume]) -> None:
    (m,) = mounts(volumes, {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"})
    # the timestamped data file itself: later edits switch ..data and do not reach this mount (upstream)
    assert m.host_path == os.path.realpath(Path(volumes["cfg"].host_path) / "app.conf")
    assert "/.." in m.host_path


def test_a_missing_sub_path_is_created_inside_the_volume(volumes: dict[str, MountedVolume]) -> None:
    (m,) = mounts(volumes, {"name": "data", "mountPath": "/logs", "subPath": "a/b"})
    assert m.host_path == os.path.join(os.path.realpath(volumes["data"].host_path), "a/b")
    assert os.path.isdir(m.host_path)
    assert os.stat(m.host_path).st_mode & 0o777 == os.stat(volumes["data"].host_path).st_mode & 0o777


def test_sub_path_expr_expands_the_container_environment(volumes: dict[str, MountedVolume]) -> None:
    (m,) = mounts(volumes, {"name": "data", "mountPath": "/w", "subPathExpr": "pods/$(POD_NAME)"},
                  env={"POD_NAME": "web-0"})
    assert m.host_path.endswith("/empty/pods/web-0")


@pytest.mark.parametrize(("mount", "message"), [
    ({"subPath": "/etc"}, "error SubPath `/etc` must not be an absolute path"),
    ({"subPath": "../../etc"}, "unable to provision SubPath `../../etc`: must not contain '..'"),
    ({"subPathExpr": "$(NOPE)/x"}, "missing value for NOPE"),
    ({"subPath": "escape"}, 'failed to prepare subPath for volumeMount "data" of container "c": subPath `escape` '
                            "resolves outside the volume"),
    ({"subPath": "escape/deeper"}, 'failed to create subPath directory for volumeMount "data" of container "c"'),
])
def test_sub_paths_that_leave_the_volume_are_refused(volumes: dict[str, MountedVolume], mount: JSON,
                                                     message: str) -> None:
    os.symlink("/etc", Path(volumes["data"].host_path) / "escape")
    with pytest.raises(ConfigError) as e:
        mounts(volumes, {"name": "data", "mountPath": "/x", **mount})
    assert str(e.value).startswith(message)
    assert not os.path.exists("/etc/deeper")


def test_bidirectional_propagation_needs_a_privileged_container(volumes: dict[str, MountedVolume]) -> None:
    vm = {"name": "data", "mountPath": "/d", "mountPropagation": "Bidirectional"}
    with pytest.raises(ConfigError, match="Bidirectional mount propagation is available only to privileged containers"):
        mounts(volumes, vm)
    (m,) = mounts(volumes, vm, securityContext={"privileged": True})
    assert m.propagation == pb.PROPAGATION_BIDIRECTIONAL


def test_a_mount_of_a_volume_that_is_not_set_up_is_refused(volumes: dict[str, MountedVolume]) -> None:
    with pytest.raises(ConfigError, match='cannot find volume "ghost" to mount into container "c"'):
        mounts(volumes, {"name": "ghost", "mountPath": "/g"})


def test_an_unknown_propagation_mode_is_refused(volumes: dict[str, MountedVolume]) -> None:
    with pytest.raises(ConfigError, match='invalid MountPropagation mode: "Sideways"'):
        mounts(volumes, {"name": "data", "mountPath": "/d", "mountPropagation": "Sideways"})


@pytest.mark.parametrize(("mounts", "blocking"), [
    ([{"name": "data", "mountPath": "/d"}, {"name": "cfg", "mountPath": "/c", "readOnly": True}], False),
    ([], False),
    ([{"name": "data", "mountPath": "/d", "subPath": "x"}], True),
    ([{"name": "data", "mountPath": "/d"}, {"name": "data", "mountPath": "/e", "subPathExpr": "$(A)"}], True),
    ("not a list", True),
    (["not an object"], True),
])
def test_only_a_subpath_makes_a_containers_mounts_touch_the_filesystem(
        mounts: Any, blocking: bool, volumes: dict[str, MountedVolume]) -> None:
    c = {**container("c"), "volumeMounts": mounts}
    assert needs_filesystem(c) is blocking
    if not blocking and mounts:
        got = container_mounts("containers", 0, c, volumes, {})
        assert [m.host_path for m in got] == [volumes["data"].host_path, volumes["cfg"].host_path]
