"""Readers for Linux procfs files used by more than one component.

Design: a pure parser per file plus a reader that takes the procfs root (``/proc`` by default, a
fake tree in tests) and never raises: an unreadable file reads as empty, and callers decide what a
missing value means. Reads are tiny, in-memory kernel files, so they are done synchronously.

``/proc/meminfo`` (proc(5)): ``Name:   <value> [kB]`` per line. Values with the ``kB`` unit are
KiB (the kernel's "kB" is 1024 bytes) and are returned in bytes, as cAdvisor's
``GetMachineMemoryCapacity`` and the eviction manager's ``MemAvailable`` reading do; unit-less
values (``HugePages_Total`` …) are counts and returned as they are. Lines that do not parse are
skipped.
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` text → field name → bytes (or count for unit-less fields)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def read_meminfo(proc: Path = PROC) -> dict[str, int]:
    """Parsed ``<proc>/meminfo``; empty when it cannot be read."""
    try:
        return parse_meminfo((proc / "meminfo").read_text())
    except (OSError, UnicodeDecodeError):
        return {}
