"""Writes that reach the server together are committed together (``Storage.group_commits``), and
still no answer and no watch event goes out before its write is in the database file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from pykubelet.server.main import ServerHandle
from tests.builders import pod

from .conftest import Http

PODS = "/api/v1/namespaces/default/pods"


def _stored(server: ServerHandle) -> dict[str, str]:
    """name -> resourceVersion of the pods in the database file, read by another connection."""
    with sqlite3.connect(Path(server.store._path)) as c:
        return {name: str(rv) for name, rv in c.execute("SELECT name, rv FROM objects WHERE resource='pods'")}


async def test_each_answered_write_is_in_the_database_when_its_answer_arrives(
        http33: Http, server33: ServerHandle) -> None:
    commits: list[str] = []
    db = server33.store._db
    assert db is not None
    db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    answered: list[tuple[str, str, dict[str, str]]] = []

    async def create(i: int) -> None:
        st, body = await http33.req("POST", PODS, pod(f"g{i}"))
        assert st == 201, body
        answered.append((body["metadata"]["name"], body["metadata"]["resourceVersion"], _stored(server33)))

    await asyncio.gather(*(create(i) for i in range(30)))
    db.set_trace_callback(None)
    for name, rv, on_disk in answered:
        assert on_disk.get(name) == rv  # durable before acknowledged
    assert 1 <= len(commits) <= 30


async def test_watch_events_follow_their_commit(http33: Http, server33: ServerHandle) -> None:
    st, listed = await http33.req("GET", PODS)
    assert st == 200
    rv = listed["metadata"]["resourceVersion"]
    url = f"{server33.url}{PODS}?watch=true&resourceVersion={rv}"
    seen: list[tuple[str, str, dict[str, str]]] = []
    async with http33.session.get(url, headers={"Authorization": f"Bearer {http33.token}"}) as r:
        await asyncio.gather(*(http33.req("POST", PODS, pod(f"w{i}")) for i in range(10)))
        while len(seen) < 10:
            line = await asyncio.wait_for(r.content.readline(), 10)
            ev = json.loads(line)
            meta = ev["object"]["metadata"]
            seen.append((meta["name"], meta["resourceVersion"], _stored(server33)))
    for name, erv, on_disk in seen:
        assert on_disk.get(name) == erv
