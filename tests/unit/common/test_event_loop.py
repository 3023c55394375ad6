"""The long-running commands run on uvloop by default and on the stdlib loop when asked."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from pykubelet.common import aio


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_commands_run_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYKUBELET_EVENT_LOOP", raising=False)
    assert aio.run(_loop_type()) is uvloop.Loop


def test_the_stdlib_loop_is_one_variable_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUBELET_EVENT_LOOP", "asyncio")
    assert not issubclass(aio.run(_loop_type()), uvloop.Loop)


def test_an_unknown_loop_name_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKUBELET_EVENT_LOOP", "trio")
    coro = _loop_type()
    with pytest.raises(SystemExit, match="'trio'"):
        aio.run(coro)
    coro.close()
