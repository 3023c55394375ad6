"""A pod's data directories (upstream makePodDataDirs): ``<root>/pods/<uid>/{volumes,plugins,containers}``
are made before its first sync, once, and a file in their place is a warning, never a crash."""

from __future__ import annotations

import os
from pathlib import Path

from pykubelet.agent.podsyncer import PodDirectories
from tests.builders import pod


async def test_a_pods_data_directories_are_made_once_and_a_file_in_their_place_is_only_a_warning(
        tmp_path: Path) -> None:
    dirs = PodDirectories(tmp_path / "root")  # not even <root> exists yet
    p = pod("p")
    uid = p["metadata"]["uid"]
    await dirs.prepare_pod(p)
    pod_dir = tmp_path / "root" / "pods" / uid
    assert sorted(os.listdir(pod_dir)) == ["containers", "plugins", "volumes"]
    await dirs.prepare_pod(p)  # again: nothing to do, nothing raised

    other = pod("q")
    blocked = tmp_path / "root" / "pods" / other["metadata"]["uid"]
    blocked.mkdir()
    (blocked / "plugins").write_text("not a directory")
    await dirs.prepare_pod(other)  # logged, not raised
    assert sorted(os.listdir(blocked)) == ["plugins", "volumes"]
    await dirs.release_pod(other["metadata"]["uid"])
