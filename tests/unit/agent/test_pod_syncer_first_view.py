"""When the pod syncer may take a pod's runtime view as empty without asking the runtime: only for a
pod this agent never began to sync, on the word of a complete relist that saw nothing of it and
began after the last pod was forgotten (so nothing the agent made can have been missed)."""

from __future__ import annotations

from pykubelet.agent.podsyncer import runtime_has_nothing_of


def test_a_new_pod_a_relist_saw_nothing_of_is_taken_as_absent_from_the_runtime() -> None:
    assert runtime_has_nothing_of(synced_here=False, listed_without_at=100.0, last_forget=0.0)


def test_before_the_first_relist_or_once_a_relist_saw_the_pod_the_runtime_is_asked() -> None:
    # no relist yet (or it saw the pod's containers, e.g. left by the agent before a restart): adopt them
    assert not runtime_has_nothing_of(synced_here=False, listed_without_at=None, last_forget=0.0)


def test_a_pod_this_agent_already_began_to_sync_is_never_taken_as_absent() -> None:
    assert not runtime_has_nothing_of(synced_here=True, listed_without_at=100.0, last_forget=0.0)


def test_a_relist_that_began_before_the_last_forget_is_not_trusted() -> None:
    assert not runtime_has_nothing_of(synced_here=False, listed_without_at=100.0, last_forget=100.5)
    assert runtime_has_nothing_of(synced_here=False, listed_without_at=101.0, last_forget=100.5)
