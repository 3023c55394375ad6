"""Process-wide memory settings of the agent: large buffers stay out of the heap, and the
collector leaves the start-up objects alone.

Why: the agent's goal is 110 pods at ≤ 60 MB RSS (issue 17), and part of its RSS with pods was heap
that glibc kept after the pods started. Every TLS connection to the API server holds a 256 kB read
buffer (uvloop's ``SSLProtocol``, ``malloc``'d, of which a small response touches a few pages); the
start of many pods opens up to 16 of them (``API_REQUEST_CONNECTIONS``), which the API client closes
after 15 s idle (``common/http1.py``). glibc serves allocations of 128 kB and more with their own
``mmap`` (untouched pages are never resident, ``free`` unmaps them), but its *dynamic* threshold
rises to the size of the first such block freed: from then on the buffers, and every large response
or list, are carved from the heap, whose pages stay resident and fragmented after the connections
close (``mallinfo2`` of the agent at 110 pods: 3.5-7.5 MB free in the heap after the start burst).
``mallopt(M_MMAP_THRESHOLD)`` fixes the threshold at glibc's own starting value, 128 kB, which turns
the dynamic adjustment off; ``M_TRIM_THRESHOLD`` at 256 kB (what the dynamic rule would pair with
it) gives the top of the heap back once 256 kB of it are free. Measured (docs/benchmarks-scale.md,
"Agent heap: glibc malloc thresholds", sixth session): 0.6-0.7 MB less with 110 pods, no change idle
or in CPU; ``malloc_trim``, one arena, a smaller thread pool and ``gc`` were tried and not kept.

There is no upstream counterpart (the Go runtime's scavenger returns free heap to the OS by itself);
what is followed is glibc's documented interface (mallopt(3), the ``MALLOC_*_`` variables and
``GLIBC_TUNABLES``). An operator's own setting of either threshold in the environment wins: the agent
leaves that one alone and says so. Not glibc (musl), or a ``mallopt`` that refuses: logged, nothing
else changes. Process-wide, so only ``pykubelet agent``'s ``main`` applies it, not ``run_agent``
(hollow nodes run many agents in one process that has its own allocation pattern).

``tune_gc``: the cyclic garbage collector cost the agent ~0.5 s of CPU in a 1,000-pod start (fake
runtime, ~7 % of its CPU; 398 young, 36 middle and 4 full collections, measured with
``gc.callbacks``). Two standard settings (the ``gc`` module's documented interface):
``gc.freeze()`` after the imports moves their ~50,000 objects (code, functions, classes, module
dicts; they live as long as the process) to a permanent generation that full collections no longer
walk (17-26 ms each), after one ``gc.collect()`` so that import-time cycles are not kept forever;
and a young-generation threshold of 50,000 allocations instead of 700 (the API server's, for the
same reason), so that most short-lived containers (decoded JSON, request objects) are freed by
reference counting before a collection ever visits them. Measured (``gc.callbacks``, 1,000-pod
start): GC CPU 478-530 ms at 700; 165-240 ms at 10,000 (13 young collections of ~12 ms and one
middle one of ~80 ms); 67-69 ms at 50,000 (two young collections, no middle one). 110 real pods'
RSS did not move with either step (61.1 → 60.9 MB, then 58.8 → 58.3 MB, ``bench_density.py``):
the decoded pods form no reference cycles, so reference counting frees them whatever the threshold.
Go's collector has its own pacing (GOGC); nothing to follow there.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

# mallopt(3) parameters (glibc <malloc.h>)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

Mallopt = Callable[[int, int], int]  # mallopt(param, value) -> 1 on success, 0 on error


@dataclass(frozen=True)
class MallocSetting:
    tunable: str  # glibc.malloc.<tunable> in GLIBC_TUNABLES
    param: int  # the mallopt parameter
    value: int
    env: str  # glibc's older environment variable for the same setting

    def __str__(self) -> str:
        return f"{self.tunable}={self.value}"


AGENT_SETTINGS = (
    MallocSetting("mmap_threshold", M_MMAP_THRESHOLD, 128 * 1024, "MALLOC_MMAP_THRESHOLD_"),
    MallocSetting("trim_threshold", M_TRIM_THRESHOLD, 256 * 1024, "MALLOC_TRIM_THRESHOLD_"),
)


def operator_set(setting: MallocSetting, environ: Mapping[str, str]) -> bool:
    """Whether the environment already sets this threshold (the variable, or the tunable)."""
    if setting.env in environ:
        return True
    tunables = environ.get("GLIBC_TUNABLES", "")
    return any(item.split("=", 1)[0].strip() == f"glibc.malloc.{setting.tunable}"
               for item in tunables.split(":"))


def glibc_mallopt() -> Mallopt | None:
    """glibc's ``mallopt``, or None when the C library is not glibc."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None
    if not version or not version.startswith("glibc"):
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int

    def call(param: int, value: int) -> int:
        return int(fn(param, value))
    return call


def tune_malloc(environ: Mapping[str, str] | None = None, mallopt: Mallopt | None = None,
                settings: tuple[MallocSetting, ...] = AGENT_SETTINGS) -> list[MallocSetting]:
    """Apply the agent's malloc settings the environment leaves open; returns those applied."""
    environ = os.environ if environ is None else environ
    if mallopt is None:
        mallopt = glibc_mallopt()
    if mallopt is None:
        log.info("malloc: not glibc, allocator settings left as they are")
        return []
    applied: list[MallocSetting] = []
    for s in settings:
        if operator_set(s, environ):
            log.info("malloc: %s is set in the environment, not changing it", s.tunable)
        elif mallopt(s.param, s.value) != 1:
            log.warning("malloc: mallopt refused %s, left as it was", s)
        else:
            applied.append(s)
    if applied:
        log.debug("malloc: %s", " ".join(str(s) for s in applied))
    return applied


YOUNG_GENERATION_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)


def tune_gc(threshold: int = YOUNG_GENERATION_THRESHOLD) -> int:
    """Collect once, exempt every object alive now from later collections, and collect the young
    generation less often (see the module docstring); returns how many objects were frozen. Call
    once, after the imports and the configuration."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(threshold, middle, old)
    return gc.get_freeze_count()
