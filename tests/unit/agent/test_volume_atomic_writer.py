"""Projected volume content switches atomically through upstream's ``..data`` layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykubelet.agent.volumemanager.atomic_writer import AtomicWriteError, FileProjection, write


def files(d: Path) -> dict[str, str]:
    """What a container sees: the user-visible names, read through their links."""
    out = {}
    for root, dirs, names in os.walk(d, followlinks=True):
        dirs[:] = [x for x in dirs if not x.startswith("..")]
        for n in names:
            if not n.startswith(".."):
                p = Path(root) / n
                out[str(p.relative_to(d))] = p.read_text()
    return dict(sorted(out.items()))


def test_keys_become_links_into_one_timestamped_data_directory(tmp_path: Path) -> None:
    assert write(tmp_path, {"a.conf": FileProjection(b"one", 0o644), "dir/b": FileProjection(b"two", 0o600)})
    assert files(tmp_path) == {"a.conf": "one", "dir/b": "two"}
    data = os.readlink(tmp_path / "..data")
    assert data.startswith("..") and data != "..data"
    assert os.readlink(tmp_path / "a.conf") == "..data/a.conf"
    assert os.readlink(tmp_path / "dir") == "..data/dir"
    assert (tmp_path / data / "dir" / "b").stat().st_mode & 0o777 == 0o600


def test_an_update_swaps_the_data_link_and_drops_removed_keys(tmp_path: Path) -> None:
    write(tmp_path, {"keep": FileProjection(b"1", 0o644), "gone": FileProjection(b"x", 0o644)})
    first = os.readlink(tmp_path / "..data")
    assert write(tmp_path, {"keep": FileProjection(b"2", 0o644), "new": FileProjection(b"y", 0o644)})
    assert files(tmp_path) == {"keep": "2", "new": "y"}
    assert not (tmp_path / "gone").is_symlink()
    assert not (tmp_path / first).exists()  # the old version is removed
    assert not (tmp_path / "..data_tmp").exists()


def test_an_unchanged_payload_writes_nothing(tmp_path: Path) -> None:
    write(tmp_path, {"k": FileProjection(b"v", 0o644)})
    before = os.readlink(tmp_path / "..data")
    assert write(tmp_path, {"k": FileProjection(b"v", 0o644)}) is False
    assert os.readlink(tmp_path / "..data") == before


@pytest.mark.parametrize(("path", "message"), [
    ("/etc/passwd", "invalid path: must be relative path: /etc/passwd"),
    ("a/../../b", "invalid path: must not contain '..': a/../../b"),
    ("..secret", "invalid path: must not start with '..': ..secret"),
    ("", 'invalid path: must not be empty: ""'),
])
def test_paths_that_would_leave_the_volume_are_refused(tmp_path: Path, path: str, message: str) -> None:
    with pytest.raises(AtomicWriteError, match=message.replace("(", r"\(").replace(".", r"\.")):
        write(tmp_path, {path: FileProjection(b"x", 0o644)})


def test_a_missing_volume_directory_is_made(tmp_path: Path) -> None:
    target = tmp_path / "volumes" / "v"
    assert write(target, {"k": FileProjection(b"v", 0o644)})
    assert files(target) == {"k": "v"}


def test_a_file_in_place_of_the_volume_directory_fails_the_write(tmp_path: Path) -> None:
    (tmp_path / "v").write_text("")
    with pytest.raises(FileExistsError):
        write(tmp_path / "v", {"k": FileProjection(b"v", 0o644)})


def test_nested_paths_share_their_directories(tmp_path: Path) -> None:
    assert write(tmp_path, {"d/a": FileProjection(b"1", 0o644), "d/b": FileProjection(b"2", 0o600),
                            "d/e/f": FileProjection(b"3", 0o644), "top": FileProjection(b"4", 0o644)})
    assert files(tmp_path) == {"d/a": "1", "d/b": "2", "d/e/f": "3", "top": "4"}
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith("..")) == ["d", "top"]
    data = tmp_path / os.readlink(tmp_path / "..data")
    assert (data / "d").stat().st_mode & 0o777 == 0o755


def test_a_name_already_taken_in_the_volume_directory_is_left_as_it_is(tmp_path: Path) -> None:
    os.symlink("nowhere", tmp_path / "dangling")
    (tmp_path / "plain").write_text("mine")
    assert write(tmp_path, {"dangling": FileProjection(b"1", 0o644), "plain": FileProjection(b"2", 0o644),
                            "new": FileProjection(b"3", 0o644)})
    assert os.readlink(tmp_path / "dangling") == "nowhere"
    assert (tmp_path / "plain").read_text() == "mine"
    assert os.readlink(tmp_path / "new") == "..data/new"


def test_a_temporary_link_left_by_an_interrupted_write_is_replaced(tmp_path: Path) -> None:
    os.symlink("..gone", tmp_path / "..data_tmp")
    assert write(tmp_path, {"k": FileProjection(b"v", 0o644)})
    assert files(tmp_path) == {"k": "v"}
    assert not os.path.lexists(tmp_path / "..data_tmp")


def test_a_file_that_cannot_be_written_leaves_the_old_version_in_place(tmp_path: Path) -> None:
    write(tmp_path, {"k": FileProjection(b"old", 0o644)})
    before = os.readlink(tmp_path / "..data")
    with pytest.raises(OSError):
        write(tmp_path, {"k": FileProjection(b"new", 0o644), "k/x": FileProjection(b"y", 0o644)})
    assert os.readlink(tmp_path / "..data") == before and files(tmp_path) == {"k": "old"}
    assert {n for n in os.listdir(tmp_path) if n.startswith("..")} == {"..data", before}
