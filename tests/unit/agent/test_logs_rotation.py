"""Pure parts of the container log subsystem: the rotation plan and legacy symlink names."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import os
from pathlib import Path

import pytest

from pykubelet.agent.config import load_options
from pykubelet.agent.logs import (
    cleanup_symlinks,
    containers_log_dir,
    create_symlink,
    legacy_log_symlink,
    parse_symlink_container_id,
    plan_rotation,
)
from pykubelet.agent.logs.manager import clean_rotated, compress_file

NOW = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
LOG = "/var/log/pods/ns_p_u/c/0.log"
D = "/var/log/pods/ns_p_u/c"


def full(*names: str) -> tuple[str, ...]:
    return tuple(os.path.join(D, n) for n in names)


def test_first_rotation_only_renames() -> None:
    plan = plan_rotation(LOG, ["0.log"], 5, NOW)
    assert plan.remove == () and plan.compress == ()
    assert plan.rotate_to == LOG + ".20240506-070809"


def test_timestamp_is_utc() -> None:
    local = NOW.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert plan_rotation(LOG, [], 5, local).rotate_to.endswith(".20240506-070809")


def test_older_rotated_files_are_compressed() -> None:
    siblings = ["0.log", "0.log.20240101-000000.gz", "0.log.20240102-000000"]
    plan = plan_rotation(LOG, siblings, 5, NOW)
    assert plan.remove == ()
    assert plan.compress == full("0.log.20240102-000000")


def test_oldest_removed_to_respect_max_files() -> None:
    # max 3 files including the live one: keep 1 rotated before rotating, so 3 after
    siblings = ["0.log", "0.log.20240101-000000.gz", "0.log.20240102-000000.gz", "0.log.20240103-000000"]
    plan = plan_rotation(LOG, siblings, 3, NOW)
    assert plan.remove == full("0.log.20240101-000000.gz", "0.log.20240102-000000.gz")
    assert plan.compress == full("0.log.20240103-000000")


def test_leftovers_of_interrupted_rotation_removed() -> None:
    siblings = ["0.log", "0.log.20240101-000000", "0.log.20240101-000000.gz", "0.log.20240102-000000.gz.tmp"]
    plan = plan_rotation(LOG, siblings, 5, NOW)
    assert set(plan.remove) == set(full("0.log.20240101-000000", "0.log.20240102-000000.gz.tmp"))
    assert plan.compress == ()


def test_other_files_untouched() -> None:
    siblings = ["0.log", "1.log", "1.log.20240101-000000", "0.log.bak", "0.logx.20240101-000000"]
    plan = plan_rotation(LOG, siblings, 2, NOW)
    assert plan.remove == () and plan.compress == ()


def test_two_files_keep_no_older_rotated() -> None:
    plan = plan_rotation(LOG, ["0.log", "0.log.20240101-000000"], 2, NOW)
    assert plan.remove == full("0.log.20240101-000000") and plan.compress == ()


def test_compress_and_clean(tmp_path: Path) -> None:
    live = tmp_path / "0.log"
    live.write_text("live")
    old = tmp_path / "0.log.20240101-000000"
    old.write_bytes(b"x" * 1000)
    compress_file(str(old))
    assert not old.exists()
    assert gzip.decompress((tmp_path / "0.log.20240101-000000.gz").read_bytes()) == b"x" * 1000
    clean_rotated(str(live))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.log"]


def test_symlink_naming() -> None:
    assert containers_log_dir("/var/log/pods") == "/var/log/containers"
    assert containers_log_dir("/var/log/pods/") == "/var/log/containers"
    cid = "a" * 64
    link = legacy_log_symlink("/var/log/containers", "web-0", "default", "nginx-main", cid)
    assert link == f"/var/log/containers/web-0_default_nginx-main-{cid}.log"
    assert parse_symlink_container_id(os.path.basename(link)) == cid
    assert parse_symlink_container_id("random.txt") is None


def test_symlink_name_cut_to_ext4_limit() -> None:
    link = legacy_log_symlink("/c", "p" * 200, "ns", "c", "b" * 64)
    name = os.path.basename(link)
    assert len(name) == 255 and name.endswith(".log")
    cid = parse_symlink_container_id(name)
    assert cid is not None and ("b" * 64).startswith(cid)


def test_symlink_create_and_cleanup(tmp_path: Path) -> None:
    target = tmp_path / "pods" / "0.log"
    target.parent.mkdir()
    cdir = tmp_path / "containers"
    assert not create_symlink(str(cdir / "p_ns_c-abc.log"), str(target))  # no log file: no link
    target.write_text("x")
    live = legacy_log_symlink(str(cdir), "p", "ns", "c", "abc")
    gone = legacy_log_symlink(str(cdir), "p", "ns", "c", "def")
    assert create_symlink(live, str(target)) and create_symlink(gone, str(target))
    assert os.readlink(live) == str(target)
    (cdir / "not_ours-x.log").write_text("regular file")
    far_future = 1e12
    assert cleanup_symlinks(str(cdir), {"abc"}, created_before=far_future) == [gone]
    assert os.path.islink(live) and (cdir / "not_ours-x.log").exists()
    # links newer than the listing are left alone (their container may postdate it)
    assert cleanup_symlinks(str(cdir), set(), created_before=0) == []


@pytest.mark.parametrize("argv, size, files", [
    ([], "10Mi", 5),
    (["--container-log-max-size", "20Ki", "--container-log-max-files", "3"], "20Ki", 3),
])
def test_flags(argv: list[str], size: str, files: int) -> None:
    opts = load_options(argv)
    assert opts.config.container_log_max_size == size and opts.config.container_log_max_files == files


class _FakeRuntime:
    """list_containers / container_status / reopen_container_log, enough for ContainerLogManager."""

    def __init__(self, log_path: str, *, reopen_fails: bool = False) -> None:
        self.log_path = log_path
        self.reopen_fails = reopen_fails
        self.reopened: list[str] = []

    async def list_containers(self, filter: object = None) -> list[object]:
        from pykubelet.cri import pb

        return [pb.Container(id="c1", state=pb.CONTAINER_RUNNING)]

    async def container_status(self, cid: str) -> object:
        from pykubelet.cri import pb

        return pb.ContainerStatusResponse(status=pb.ContainerStatus(id=cid, state=pb.CONTAINER_RUNNING,
                                                                     log_path=self.log_path))

    async def reopen_container_log(self, cid: str) -> None:
        self.reopened.append(cid)
        if self.reopen_fails:
            raise RuntimeError("reopen failed")
        await asyncio.to_thread(Path(self.log_path).write_text, "")  # the runtime makes a fresh file


@pytest.mark.parametrize("fails", [False, True])
def test_manager_rotates_or_renames_back(tmp_path: Path, fails: bool) -> None:
    import asyncio

    from pykubelet.agent.logs import ContainerLogManager

    live = tmp_path / "0.log"
    live.write_bytes(b"y" * 2048)
    (tmp_path / "0.log.20240101-000000").write_text("older")
    rt = _FakeRuntime(str(live), reopen_fails=fails)
    m = ContainerLogManager(rt, max_size="1Ki", max_files=3, now=lambda: NOW)
    asyncio.run(m.rotate_logs())
    assert rt.reopened == ["c1"]
    names = sorted(p.name for p in tmp_path.iterdir())
    if fails:
        assert live.read_bytes() == b"y" * 2048 and m.rotations == 0
        assert names == ["0.log", "0.log.20240101-000000.gz"]
    else:
        assert live.read_bytes() == b"" and m.rotations == 1
        assert names == ["0.log", "0.log.20240101-000000.gz", "0.log.20240506-070809"]


def test_container_log_max_files_must_keep_a_rotated_file() -> None:
    import pytest

    from pykubelet.agent.config import ConfigError, load_options

    with pytest.raises(ConfigError, match="container"):
        load_options(["--container-log-max-files", "1"])


class _CountingRuntime(_FakeRuntime):
    """Lists the given running container ids and counts the ContainerStatus calls."""

    def __init__(self, log_path: str, running: list[str]) -> None:
        super().__init__(log_path)
        self.running = running
        self.status_calls: list[str] = []

    async def list_containers(self, filter: object = None) -> list[object]:
        from pykubelet.cri import pb

        return [pb.Container(id=cid, state=pb.CONTAINER_RUNNING) for cid in self.running]

    async def container_status(self, cid: str) -> object:
        self.status_calls.append(cid)
        return await super().container_status(cid)


def test_a_created_container_log_is_rotated_without_asking_the_runtime_its_path(tmp_path: Path) -> None:
    from pykubelet.agent.logs import ContainerLogManager

    live = tmp_path / "0.log"
    rt = _CountingRuntime(str(live), running=[])
    m = ContainerLogManager(rt, max_size="1Ki", max_files=3, now=lambda: NOW)
    m.add("c1", str(live))  # handed at creation, before the container starts
    asyncio.run(m.rotate_logs())  # not running yet: the handed path waits
    rt.running = ["c1"]
    live.write_bytes(b"y" * 100)
    asyncio.run(m.rotate_logs())
    live.write_bytes(b"y" * 2048)
    asyncio.run(m.rotate_logs())
    assert rt.status_calls == [] and rt.reopened == ["c1"] and m.rotations == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.log", "0.log.20240506-070809"]


def test_an_adopted_container_log_is_found_with_one_container_status_and_rotated(tmp_path: Path) -> None:
    from pykubelet.agent.logs import ContainerLogManager

    live = tmp_path / "0.log"
    live.write_bytes(b"y" * 100)
    rt = _CountingRuntime(str(live), running=["c1"])  # running before this agent started: nobody handed it
    m = ContainerLogManager(rt, max_size="1Ki", max_files=3, now=lambda: NOW)
    asyncio.run(m.rotate_logs())
    live.write_bytes(b"y" * 2048)
    asyncio.run(m.rotate_logs())
    assert rt.status_calls == ["c1"] and m.rotations == 1
    assert (tmp_path / "0.log.20240506-070809").read_bytes() == b"y" * 2048


def test_a_handed_path_whose_container_never_runs_is_forgotten(tmp_path: Path) -> None:
    from pykubelet.agent.logs import ContainerLogManager
    from pykubelet.agent.logs.manager import HANDED_TTL

    clock = [1000.0]
    live = tmp_path / "0.log"
    rt = _CountingRuntime(str(live), running=[])
    m = ContainerLogManager(rt, max_size="1Ki", max_files=3, now=lambda: NOW, clock=lambda: clock[0])
    m.add("failed-start", str(live))
    asyncio.run(m.rotate_logs())
    assert "failed-start" in m._handed
    clock[0] += HANDED_TTL + 1
    asyncio.run(m.rotate_logs())
    assert m._handed == {}
    # should it run after all, it is asked about like any container the manager was not told of
    rt.running = ["failed-start"]
    asyncio.run(m.rotate_logs())
    assert rt.status_calls == ["failed-start"]


def test_a_disabled_manager_keeps_no_handed_paths() -> None:
    from pykubelet.agent.logs import ContainerLogManager

    m = ContainerLogManager(_FakeRuntime("/x/0.log"), max_size="0", max_files=3)
    m.add("c1", "/x/0.log")
    assert not m.enabled and m._handed == {}
