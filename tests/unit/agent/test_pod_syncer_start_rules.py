"""The pod syncer's rules for a start: when a pod's runtime view may be taken as empty without asking
the runtime (only for a pod this agent never began to sync, on the word of a complete relist that saw
nothing of it and began after the last pod was forgotten, so nothing the agent made can have been
missed), and which events of its own report after a start need no second sync."""

from __future__ import annotations

from pykubelet.agent.pleg import PodLifecycleEventType
from pykubelet.agent.podsyncer import reported_by_its_sync, runtime_has_nothing_of


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


def test_only_the_containers_a_clean_start_reports_running_wake_no_second_sync() -> None:
    t = PodLifecycleEventType
    assert reported_by_its_sync(t.CONTAINER_STARTED, clean_start_report=True)
    # a container already dead when re-read, or created but not started: the pod is synced again
    assert not reported_by_its_sync(t.CONTAINER_DIED, clean_start_report=True)
    assert not reported_by_its_sync(t.CONTAINER_CHANGED, clean_start_report=True)
    # a start with an error or a back-off, or a change the relist found: synced again
    assert not reported_by_its_sync(t.CONTAINER_STARTED, clean_start_report=False)
