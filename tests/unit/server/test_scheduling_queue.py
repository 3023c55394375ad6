"""Scheduling queue rules (upstream's activeQ / backoffQ / unschedulablePods)."""

from __future__ import annotations

import asyncio

from pykubelet.server.schedqueue import SchedulingQueue, backoff_duration
from pykubelet.server.scheduler import Scheduler
from tests.builders import container, node, pod
from tests.fakes import FakeApi


def test_backoff_doubles_from_one_second_up_to_ten() -> None:
    assert [backoff_duration(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_new_pods_are_tried_once_in_arrival_order() -> None:
    q = SchedulingQueue()
    for key in ("ns/a", "ns/b", "ns/a"):
        q.add(key)
    assert q.pop_all(0.0) == ["ns/a", "ns/b"]
    assert q.pop_all(0.0) == []


def test_an_unschedulable_pod_waits_for_a_cluster_event_not_a_timer() -> None:
    q = SchedulingQueue()
    q.add("ns/a")
    q.pop_all(0.0)
    q.unschedulable("ns/a", 0.0)
    assert q.is_unschedulable("ns/a")
    assert q.pop_all(60.0) == []  # a minute later, nothing changed: not retried
    q.move_all(61.0)  # e.g. a node was added
    assert q.pop_all(61.0) == ["ns/a"]


def test_a_moved_pod_still_backing_off_waits_for_its_backoff() -> None:
    q = SchedulingQueue()
    q.add("ns/a")
    for attempt in range(3):  # three misfits: backoff 4 s after the third
        q.pop_all(float(attempt))
        q.unschedulable("ns/a", 10.0)
    q.move_all(11.0)
    assert q.pop_all(11.0) == [] and q.backoff_count() == 1
    assert q.next_due(11.0) == 3.0
    assert q.pop_all(14.0) == ["ns/a"]


def test_parked_pods_are_retried_after_five_minutes_without_any_event() -> None:
    q = SchedulingQueue()
    q.add("ns/a")
    q.pop_all(0.0)
    q.unschedulable("ns/a", 0.0)
    assert q.pop_all(299.0) == []
    assert q.pop_all(330.0) == ["ns/a"]  # checked every 30 s, as upstream's leftover flush


def test_an_event_during_an_attempt_sends_the_pod_to_backoff_instead_of_parking_it() -> None:
    q = SchedulingQueue()
    q.add("ns/a")
    q.pop_all(0.0)
    q.move_all(0.5)  # a node changed while ns/a was being tried
    q.unschedulable("ns/a", 0.5)
    assert not q.is_unschedulable("ns/a")
    assert q.pop_all(1.5) == ["ns/a"]


def test_a_deleted_or_bound_pod_leaves_every_queue() -> None:
    q = SchedulingQueue()
    q.add("ns/a")
    q.pop_all(0.0)
    q.unschedulable("ns/a", 0.0)
    q.delete("ns/a")
    assert "ns/a" not in q and q.unschedulable_count() == 0
    q.move_all(1.0)
    assert q.pop_all(400.0) == []
    assert q.next_due(400.0) is None


def test_an_error_retries_after_the_backoff_without_an_event() -> None:
    q = SchedulingQueue()
    q.add("ns/a")
    q.pop_all(0.0)
    q.backoff("ns/a", 0.0)
    assert q.pop_all(0.5) == []
    assert q.pop_all(1.0) == ["ns/a"]


async def test_the_scheduler_retries_unschedulable_pods_only_when_the_cluster_changes() -> None:
    now = [0.0]
    api = FakeApi()
    sched = Scheduler(api, clock=lambda: now[0])  # type: ignore[arg-type]
    sched.on_node_event("ADDED", node("n1", allocatable={"cpu": "2", "memory": "4Gi", "pods": "110"}))
    for i in range(20):
        p = pod(f"big{i}", schedulerName="default-scheduler", status={"phase": "Pending"},
                containers=[container(requests={"cpu": "8"})])
        api.put(f"/api/v1/namespaces/default/pods/big{i}", p)
        sched.on_pod_event("ADDED", p)
    await sched.schedule_pending()
    writes = len(api.calls)
    assert writes > 0 and sched.queue.unschedulable_count() == 20
    for _ in range(6):  # a minute of idle loops: no attempt, no event write
        now[0] += 10.0
        await sched.schedule_pending()
    assert len(api.calls) == writes
    # A node with room appears: every parked pod is tried again (after its 1 s backoff).
    sched.on_node_event("ADDED", node("n2", allocatable={"cpu": "200", "memory": "400Gi", "pods": "110"}))
    now[0] += 1.0
    await sched.schedule_pending()
    await asyncio.gather(*sched._binding, return_exceptions=True)
    assert sum(1 for _, p, _ in api.calls if p.endswith("/binding")) == 20
