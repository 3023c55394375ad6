"""Housekeeping removes the directories of pods the node no longer has, and only those."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.housekeeping import remove_pod_dirs, remove_pod_log_dirs


def test_log_directories_of_gone_pods_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    live = tmp_path / "default_web_uid-live"
    gone = tmp_path / "default_old_uid-gone"
    for d in (live, gone):
        (d / "main").mkdir(parents=True)
        (d / "main" / "0.log").write_text("previous run\n")
    (tmp_path / "not-a-pod-dir").mkdir()
    remove_pod_log_dirs(tmp_path, frozenset({"uid-live"}))
    assert (live / "main" / "0.log").read_text() == "previous run\n"  # kubectl logs --previous
    assert not gone.exists()
    assert (tmp_path / "not-a-pod-dir").is_dir()


def test_pod_directories_of_gone_pods_are_removed(tmp_path: Path) -> None:
    (tmp_path / "uid-live" / "volumes").mkdir(parents=True)
    (tmp_path / "uid-gone" / "volumes").mkdir(parents=True)
    remove_pod_dirs(tmp_path, frozenset({"uid-live"}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["uid-live"]
