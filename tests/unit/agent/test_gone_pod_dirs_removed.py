"""Housekeeping removes the directories of pods the node no longer has, and only those."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.housekeeping import (
    directory_step_on_change,
    remove_pod_dirs,
    remove_pod_log_dirs,
    unknown_pod_dirs_left,
    unknown_pod_log_dirs_left,
)
from pykubelet.agent.interfaces import HousekeepingContext


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


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


async def test_the_pod_directory_step_lists_only_when_the_known_pods_changed_or_something_was_left(
        tmp_path: Path) -> None:
    listings: list[frozenset[str]] = []
    mounted: set[str] = {"uid-gone"}  # its volumes are still mounted: left for a later pass

    def remove(base: Path, known: frozenset[str]) -> None:
        listings.append(known)
        for d in base.iterdir():
            if d.name not in known and d.name not in mounted:
                d.rmdir()

    now = [0.0]
    step = directory_step_on_change(remove, unknown_pod_dirs_left, tmp_path, period=60.0, clock=lambda: now[0])
    (tmp_path / "uid-live").mkdir()
    (tmp_path / "uid-gone").mkdir()
    live = HousekeepingContext(desired=frozenset({"uid-live"}), known=frozenset({"uid-live"}))
    await step(live)
    await step(live)  # the mounted directory is still there: tried again
    assert len(listings) == 2 and (tmp_path / "uid-gone").is_dir()
    mounted.clear()  # unmounted by the volume step
    await step(live)
    assert not (tmp_path / "uid-gone").exists() and len(listings) == 3
    for _ in range(5):  # same pods, nothing left: no listing at all
        await step(live)
    assert len(listings) == 3
    (tmp_path / "uid-new").mkdir()  # a new pod came...
    await step(HousekeepingContext(desired=frozenset({"uid-live", "uid-new"}), known=frozenset({"uid-live", "uid-new"})))
    await step(live)  # ...and went: its directory goes at once
    assert len(listings) == 5 and _names(tmp_path) == ["uid-live"]
    (tmp_path / "uid-stray").mkdir()  # made by something else: found by the periodic listing
    now[0] = 61.0
    await step(live)
    assert len(listings) == 6 and not (tmp_path / "uid-stray").exists()


def test_leftover_checks_see_only_directories_of_unknown_pods(tmp_path: Path) -> None:
    (tmp_path / "uid-live").mkdir()
    (tmp_path / "default_web_uid-live").mkdir()
    (tmp_path / "not-a-pod-dir").mkdir()
    known = frozenset({"uid-live"})
    assert not unknown_pod_log_dirs_left(tmp_path, known)
    assert unknown_pod_dirs_left(tmp_path, known)  # "not-a-pod-dir" is a pod directory name here
    (tmp_path / "default_old_uid-gone").mkdir()
    assert unknown_pod_log_dirs_left(tmp_path, known)
    assert not unknown_pod_dirs_left(tmp_path / "missing", known)
