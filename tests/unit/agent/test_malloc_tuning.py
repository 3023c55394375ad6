"""The agent fixes glibc's malloc thresholds (large buffers stay out of the heap) and tunes the collector."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from pykubelet.agent import memory


class FakeMallopt:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def test_the_agent_fixes_the_mmap_and_trim_thresholds() -> None:
    fake = FakeMallopt()
    applied = memory.tune_malloc({}, fake)
    assert fake.calls == [(memory.M_MMAP_THRESHOLD, 128 * 1024), (memory.M_TRIM_THRESHOLD, 256 * 1024)]
    assert [s.tunable for s in applied] == ["mmap_threshold", "trim_threshold"]


@pytest.mark.parametrize("environ", [
    {"MALLOC_MMAP_THRESHOLD_": "65536"},
    {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"},
])
def test_an_operators_threshold_in_the_environment_wins(environ: dict[str, str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeMallopt()
    with caplog.at_level(logging.INFO, logger="pykubelet.agent.memory"):
        applied = memory.tune_malloc(environ, fake)
    assert fake.calls == [(memory.M_TRIM_THRESHOLD, 256 * 1024)]
    assert [s.tunable for s in applied] == ["trim_threshold"]
    assert "mmap_threshold is set in the environment" in caplog.text


def test_another_tunable_does_not_count_as_the_operators_threshold() -> None:
    fake = FakeMallopt()
    memory.tune_malloc({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, fake)
    assert len(fake.calls) == 2


def test_a_refused_setting_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pykubelet.agent.memory"):
        applied = memory.tune_malloc({}, FakeMallopt(answer=0))
    assert applied == []
    assert "mallopt refused mmap_threshold=131072" in caplog.text
    assert "mallopt refused trim_threshold=262144" in caplog.text


@pytest.mark.skipif(memory.glibc_mallopt() is None, reason="needs glibc")
def test_on_glibc_a_large_block_freed_does_not_pull_the_next_ones_into_the_heap() -> None:
    """glibc alone raises its mmap threshold past a freed 1 MB block; tuned, the next 256 kB block is
    still a mapping of its own (returned to the OS when freed), not heap that stays resident."""
    script = """
import ctypes, sys
from pykubelet.agent import memory
if sys.argv[1] == "tuned":
    assert memory.tune_malloc({}) == list(memory.AGENT_SETTINGS)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = MallInfo2
libc.free(libc.malloc(1 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(256 * 1024)
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    out = {mode: subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, env=env,
                                check=True).stdout.strip() for mode in ("default", "tuned")}
    assert out == {"default": "0", "tuned": "1"}


def test_after_start_up_the_collector_skips_the_import_objects_and_runs_less_often() -> None:
    import gc

    threshold = gc.get_threshold()
    try:
        before = len(gc.get_objects())  # what a full collection walks
        frozen = memory.tune_gc(threshold=5000)
        assert frozen > 1000  # at least the interpreter's and the test run's imports
        after = [["made after the freeze"]]
        walked = gc.get_objects()
        assert len(walked) < before // 10
        assert any(o is after for o in walked)  # new objects are still collected as usual
        assert gc.get_threshold() == (5000, threshold[1], threshold[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
