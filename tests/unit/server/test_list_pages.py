"""List pages read the store as it was at the first page's revision: they start at their continue
key, count what remains, and do not see writes made after the first page."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubelet.server.storage import Compacted, Storage
from tests.builders import pod


def _store(tmp_path: Path, history: int = 10000) -> Storage:
    s = Storage(tmp_path / "pages.db", history=history)
    s.open()
    for ns in ("a", "b", "b-x"):
        for i in range(5):
            s.create("configmaps", ns, f"cm{i}", {"metadata": {"name": f"cm{i}", "namespace": ns}})
    return s


def _names(s: Storage, ns: str | None, rev: int | None = None, start: tuple[str, str] | None = None) -> list[str]:
    return [f"{k[0]}/{k[1]}" for k, _obj, _data in s.snapshot("configmaps", ns, rev).items(start)]


def test_a_page_starts_at_its_continue_key_and_stays_in_its_namespace(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        assert _names(s, "b", start=("b", "cm2\x00")) == ["b/cm3", "b/cm4"]
        assert _names(s, None, start=("a", "cm4\x00"))[:2] == ["b/cm0", "b/cm1"]
        # a continue key that is gone still continues after its place
        s.delete("configmaps", "a", "cm2")
        assert _names(s, "a", start=("a", "cm2\x00")) == ["a/cm3", "a/cm4"]
    finally:
        s.close()


def test_remaining_count_covers_only_the_listed_namespace(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        assert s.snapshot("configmaps", "b").count_from(("b", "cm1\x00")) == 3  # not b-x's five
        assert s.snapshot("configmaps", None).count_from(("b", "cm1\x00")) == 8
        assert s.snapshot("configmaps", "a").count_from(("a", "cm4\x00")) == 0
    finally:
        s.close()


def test_a_snapshot_shows_the_objects_as_they_were_at_its_revision(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        rev = s.revision
        before = {f"{k[0]}/{k[1]}": data for k, _o, data in s.snapshot("configmaps", None).items()}
        s.create("configmaps", "a", "cm22", {"metadata": {"name": "cm22", "namespace": "a"}})  # new
        s.delete("configmaps", "b", "cm0")  # gone
        changed = s.get("configmaps", "a", "cm3")
        assert changed is not None
        changed["data"] = {"k": "v"}
        s.update("configmaps", "a", "cm3", changed)  # changed
        s.delete("configmaps", "a", "cm4")
        s.create("configmaps", "a", "cm4", {"metadata": {"name": "cm4", "namespace": "a"}})  # re-created
        s.create("pods", "a", "p", pod("p", namespace="a"))  # another resource

        snap = s.snapshot("configmaps", None, rev)
        assert snap.rev == rev
        assert {f"{k[0]}/{k[1]}": data for k, _o, data in snap.items()} == before
        assert [f"{k[0]}/{k[1]}" for k, _o, _d in snap.items(("a", "cm2\x00"))][:3] == ["a/cm3", "a/cm4", "b/cm0"]
        assert snap.count_from(("a", "cm2\x00")) == 12  # a/cm3, a/cm4 and b's and b-x's five
        assert s.snapshot("configmaps", "a", rev).count_from(("a", "cm1\x00")) == 3
        # the current state has the writes
        assert "a/cm22" in _names(s, None) and "b/cm0" not in _names(s, None)
    finally:
        s.close()


def test_a_revision_older_than_the_history_is_compacted(tmp_path: Path) -> None:
    s = _store(tmp_path, history=4)
    try:
        rev = s.revision
        for i in range(3):
            s.create("configmaps", "c", f"n{i}", {"metadata": {"name": f"n{i}", "namespace": "c"}})
        assert "c/n0" not in _names(s, None, rev)  # three events later: still held
        for i in range(3, 6):
            s.create("configmaps", "c", f"n{i}", {"metadata": {"name": f"n{i}", "namespace": "c"}})
        with pytest.raises(Compacted):
            s.snapshot("configmaps", None, rev)
        with pytest.raises(ValueError):
            s.snapshot("configmaps", None, s.revision + 1)
    finally:
        s.close()


def test_a_full_page_has_each_objects_current_json_after_updates_creates_and_deletes(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        def listed() -> dict[str, bytes]:
            keys, _objs, data = s.snapshot("configmaps", None).rows(objects=False)
            return {f"{k[0]}/{k[1]}": d for k, d in zip(keys, data, strict=True)}

        def stored() -> dict[str, bytes]:
            return {f"{ns}/{name}": s.encoded("configmaps", ns, name) or b""
                    for (ns, name), _o in s.iter_raw("configmaps")}

        assert listed() == stored()
        cm = s.get("configmaps", "b", "cm1")
        assert cm is not None
        cm["data"] = {"k": "v"}
        s.update("configmaps", "b", "cm1", cm)
        assert b'"k":"v"' in listed()["b/cm1"] and listed() == stored()
        s.create("configmaps", "a", "cm9", {"metadata": {"name": "cm9", "namespace": "a"}})
        s.delete("configmaps", "b-x", "cm0")
        assert listed() == stored() and "a/cm9" in listed() and "b-x/cm0" not in listed()
        assert s.snapshot("configmaps", None).untyped() == 15  # none of these has kind and apiVersion
    finally:
        s.close()
