"""Group commit (``Storage.group_commits``, the API server's store): the writes made in one turn of
the event loop are committed in one SQLite transaction, :meth:`Storage.durable` returns once they
are in the database, and a group that fails to commit is undone in memory, its writers get the
error and every watch ends."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.storage import Storage, StorageError


def _obj(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": {}}


def _rows(path: Path) -> dict[str, str]:
    """name -> rv of the ConfigMaps in the database as another connection sees it."""
    with sqlite3.connect(path) as c:
        return {name: str(rv) for name, rv in c.execute("SELECT name, rv FROM objects WHERE resource='configmaps'")}


def _meta_revision(path: Path) -> int:
    with sqlite3.connect(path) as c:
        row = c.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
        return int(row[0]) if row else 0


def _grouped(path: Path) -> tuple[Storage, list[str]]:
    s = Storage(path)
    s.open()
    s.group_commits()
    commits: list[str] = []
    assert s._db is not None
    s._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    return s, commits


async def test_writes_of_one_loop_turn_are_committed_together_and_durable_after_durable(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s, commits = _grouped(db)
    s.create("configmaps", "ns", "a", _obj("a"))
    s.create("configmaps", "ns", "b", _obj("b"))
    s.update("configmaps", "ns", "a", _obj("a"))
    s.delete("configmaps", "ns", "b")
    assert s.pending and _rows(db) == {}  # not committed yet, so not to be acknowledged yet
    await s.durable()
    assert not s.pending
    assert commits == ["COMMIT"]
    assert _rows(db) == {"a": "3"} and _meta_revision(db) == 4
    s.create("configmaps", "ns", "c", _obj("c"))
    await s.durable()
    assert commits == ["COMMIT", "COMMIT"] and _rows(db) == {"a": "3", "c": "5"}
    s.close()


async def test_writes_from_concurrent_tasks_share_a_commit_and_each_waits_for_it(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s, commits = _grouped(db)
    seen: list[dict[str, str]] = []

    async def writer(name: str) -> None:
        s.create("configmaps", "ns", name, _obj(name))
        await s.durable()
        seen.append(_rows(db))

    await asyncio.gather(*(writer(f"w{i}") for i in range(5)))
    assert commits == ["COMMIT"]
    assert all(len(rows) == 5 for rows in seen)  # each writer returned with its row in the file
    s.close()


def test_without_a_running_loop_each_write_commits_at_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s, commits = _grouped(db)
    s.create("configmaps", "ns", "a", _obj("a"))
    assert not s.pending and _rows(db) == {"a": "1"} and commits == ["COMMIT"]
    s.close()


async def test_close_commits_the_open_group_and_a_restart_reads_it(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s, _ = _grouped(db)
    s.create("configmaps", "ns", "a", _obj("a"))
    s.close()
    s2 = Storage(db)
    s2.open()
    assert s2.get("configmaps", "ns", "a") is not None and s2.revision == 1
    s2.close()


async def test_a_row_that_fails_fails_its_write_alone(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s, _ = _grouped(db)
    s.create("configmaps", "ns", "a", _obj("a"))
    real = s._db
    assert real is not None

    def refuse(sql: str, args: Any = ()) -> Any:
        if sql.startswith("INSERT OR REPLACE INTO objects") and args[2] == "bad":
            raise sqlite3.IntegrityError("refused")
        return real.execute(sql, args)

    s._db = type("Refusing", (), {"execute": staticmethod(refuse), "in_transaction": property(
        lambda _self: real.in_transaction)})()  # type: ignore[assignment]
    with pytest.raises(sqlite3.IntegrityError):
        s.create("configmaps", "ns", "bad", _obj("bad"))
    assert s.get("configmaps", "ns", "bad") is None
    s._db = real
    s.create("configmaps", "ns", "c", _obj("c"))
    await s.durable()
    assert _rows(db) == {"a": "1", "c": "3"}
    s.close()


class _FailingCommit:
    """The store's connection, with COMMIT failing as on a full disk."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


async def test_a_group_that_fails_to_commit_is_undone_its_writers_fail_and_watches_end(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s, _ = _grouped(db)
    s.create("configmaps", "ns", "kept", _obj("kept"))
    await s.durable()
    w = s.watch("configmaps", None, s.revision)
    real = s._db
    assert real is not None
    s._db = _FailingCommit(real)  # type: ignore[assignment]
    s.create("configmaps", "ns", "lost", _obj("lost"))
    s.update("configmaps", "ns", "kept", _obj("kept") | {"data": {"k": "v"}})
    with pytest.raises(StorageError, match="disk is full"):
        await s.durable()
    assert s.get("configmaps", "ns", "lost") is None  # undone: memory is the database again
    kept = s.get("configmaps", "ns", "kept")
    assert kept is not None and kept["data"] == {} and kept["metadata"]["resourceVersion"] == "1"
    assert s.revision == 3  # revisions handed out are never reused
    events = [w.queue.get_nowait() for _ in range(w.queue.qsize())]
    assert events[-1] is None and w.terminated  # the watch ended: its client lists again
    with pytest.raises(Exception, match="too old resource version"):
        s.watch("configmaps", None, 2)
    s._db = real
    s.create("configmaps", "ns", "after", _obj("after"))
    await s.durable()
    assert _rows(db) == {"kept": "1", "after": "4"} and _meta_revision(db) == 4
    s.close()
