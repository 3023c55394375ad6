"""Housekeeping's log-link step: stale ``/var/log/containers`` links go once per container GC period."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.housekeeping import LOG_LINKS_PERIOD, log_links_step
from pykubelet.agent.interfaces import HousekeepingContext
from pykubelet.agent.logs import create_symlink, legacy_log_symlink


def links(d: Path) -> set[str]:
    return {str(p) for p in d.iterdir() if p.is_symlink()}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_links_of_containers_the_runtime_no_longer_has_go_once_per_container_gc_period(
        tmp_path: Path) -> None:
    target = tmp_path / "pods" / "0.log"
    target.parent.mkdir()
    target.write_text("x")
    cdir = tmp_path / "containers"
    live = legacy_log_symlink(str(cdir), "p", "ns", "c", "abc")
    gone = legacy_log_symlink(str(cdir), "p", "ns", "c", "def")
    assert create_symlink(live, str(target)) and create_symlink(gone, str(target))
    clock = Clock()
    step = log_links_step(str(cdir), clock=clock)
    ctx = HousekeepingContext(desired=frozenset(), known=frozenset(), runtime_container_ids=frozenset({"abc"}),
                              listed_at=1e12)
    await step(ctx)
    assert links(cdir) == {live}
    later = legacy_log_symlink(str(cdir), "p", "ns", "c", "0ff")
    assert create_symlink(later, str(target))
    await step(ctx)  # the next 2 s pass: within the period, nothing is listed
    assert links(cdir) == {live, later}
    clock.now += LOG_LINKS_PERIOD
    await step(ctx)
    assert links(cdir) == {live}
