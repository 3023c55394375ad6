"""A node's pod watch (``fieldSelector=spec.nodeName=<node>``) is queued only its node's pods' events."""

from pathlib import Path

from pykubelet.server.storage import Storage


def _pod(name: str, node: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node} if node else {}}


def _drain(w) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(e.type, e.name) for e in (w.queue.get_nowait() for _ in range(w.queue.qsize())) if e is not None]


async def test_a_node_watch_sees_its_pods_arrive_and_leave_and_no_other_pods(tmp_path: Path) -> None:
    s = Storage(tmp_path / "n.db")
    s.open()
    n1 = s.watch("pods", None, s.revision, index=("spec.nodeName", "n1"))
    n2 = s.watch("pods", None, s.revision, index=("spec.nodeName", "n2"))
    unbound = s.watch("pods", None, s.revision, index=("spec.nodeName", ""))
    everyone = s.watch("pods", None, s.revision)
    s.create("pods", "default", "a", _pod("a"))
    s.update("pods", "default", "a", _pod("a", "n1"))  # bound: leaves the unbound watch, enters n1's
    s.create("pods", "default", "b", _pod("b", "n2"))
    s.delete("pods", "default", "a")
    assert _drain(n1) == [("MODIFIED", "a"), ("DELETED", "a")]
    assert _drain(n2) == [("ADDED", "b")]
    assert _drain(unbound) == [("ADDED", "a"), ("MODIFIED", "a")]
    assert len(_drain(everyone)) == 4
    assert len(s.watchers("pods")) == 4
    s.unwatch(n1)
    assert n1 not in s.watchers("pods")
    s.close()
    assert n2.queue.get_nowait() is None  # closing the store ends indexed watches too
