"""/proc/meminfo is read in bytes, with counts kept as counts and odd lines skipped."""

from __future__ import annotations

from pathlib import Path

from pykubelet.common.procfs import parse_meminfo, read_meminfo

SAMPLE = """MemTotal:        8000000 kB
MemFree:          100000 kB
MemAvailable:    4000000 kB
HugePages_Total:       4
garbage line
Broken:             n/a kB
"""


def test_meminfo_values_are_bytes_and_unitless_fields_are_counts() -> None:
    info = parse_meminfo(SAMPLE)
    assert info == {
        "MemTotal": 8_000_000 * 1024,
        "MemFree": 100_000 * 1024,
        "MemAvailable": 4_000_000 * 1024,
        "HugePages_Total": 4,
    }


def test_meminfo_is_read_from_the_given_proc_root(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal: 2 kB\n")
    assert read_meminfo(tmp_path) == {"MemTotal": 2048}


def test_unreadable_meminfo_reads_as_empty(tmp_path: Path) -> None:
    assert read_meminfo(tmp_path / "missing") == {}
