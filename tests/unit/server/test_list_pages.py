"""Paged lists start at their continue key: the keys after it, in order, and how many remain."""

from __future__ import annotations

from pathlib import Path

from pykubelet.server.storage import Storage


def _store(tmp_path: Path) -> Storage:
    s = Storage(tmp_path / "pages.db")
    s.open()
    for ns in ("a", "b", "b-x"):
        for i in range(5):
            s.create("configmaps", ns, f"cm{i}", {"metadata": {"name": f"cm{i}", "namespace": ns}})
    return s


def test_a_continued_walk_starts_right_after_the_continue_key(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        assert [k for k, _ in s.iter_raw("configmaps", "b", after=("b", "cm2"))] == [("b", "cm3"), ("b", "cm4")]
        assert [k for k, _ in s.iter_raw("configmaps", None, after=("a", "cm4"))][:2] == [("b", "cm0"), ("b", "cm1")]
        # a continue key that is gone still continues after its place
        s.delete("configmaps", "a", "cm2")
        assert [k[1] for k, _ in s.iter_raw("configmaps", "a", after=("a", "cm2"))] == ["cm3", "cm4"]
    finally:
        s.close()


def test_remaining_count_covers_only_the_listed_namespace(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        assert s.count_after("configmaps", "b", ("b", "cm1")) == 3  # not b-x's five
        assert s.count_after("configmaps", None, ("b", "cm1")) == 8
        assert s.count_after("configmaps", "a", ("a", "cm4")) == 0
    finally:
        s.close()
