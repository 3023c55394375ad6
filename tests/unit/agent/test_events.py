"""Events the agent records (upstream client-go record.EventRecorder with the kubelet's correlator):
a repeated event is one Event whose count grows (a PATCH), not a stream of new Events."""

from __future__ import annotations

import logging
import time

import pytest

from pykubelet.agent.events import EventRecorder, _WriteLimiter
from tests.builders import pod
from tests.fakes import FakeApi


async def test_event_recorder_aggregates() -> None:
    api = FakeApi()
    rec = EventRecorder(api, host="node1")
    p = pod("web", namespace="ns1", uid="uid-1")
    rec.event(p, "Warning", "BackOff", "Back-off restarting failed container a")
    rec.event(p, "Warning", "BackOff", "Back-off restarting failed container a")
    rec.event(p, "Normal", "Started", "Started container a")
    await rec.flush()
    await rec.close()
    assert len(api.created) == 2
    ev = api.created[0]
    assert ev["involvedObject"]["uid"] == "uid-1" and ev["source"] == {"component": "kubelet", "host": "node1"}
    assert ev["count"] == 1 and ev["reason"] == "BackOff"
    assert len(api.patched) == 1 and api.patched[0][1]["count"] == 2
    assert api.patched[0][0].startswith("/api/v1/namespaces/ns1/events/web.")


async def test_repeated_event_is_one_event_with_growing_count() -> None:
    api = FakeApi()
    rec = EventRecorder(api, host="node1")
    p = pod(namespace="ns", uid="u1")
    for _ in range(5):
        rec.event(p, "Warning", "BackOff", "Back-off restarting failed container c in pod p_ns(u1)")
    rec.event(p, "Normal", "Pulled", "other")
    await rec.flush()
    await rec.close()
    assert [e["reason"] for e in api.created] == ["BackOff", "Pulled"]
    assert api.created[0]["count"] == 1 and api.created[0]["source"] == {"component": "kubelet", "host": "node1"}
    counts = [b["count"] for _p, b in api.patched]
    assert counts == [2, 3, 4, 5]
    assert all(p.endswith("/events/" + api.created[0]["metadata"]["name"]) for p, _b in api.patched)


async def test_a_full_event_queue_drops_events_with_one_warning_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    rec = EventRecorder(FakeApi(), host="node1")
    rec._ensure_task = lambda: None  # type: ignore[method-assign]  # nothing writes: the queue fills
    p = pod("web", namespace="ns1", uid="uid-1")
    with caplog.at_level(logging.DEBUG, logger="pykubelet.agent.events"):
        for i in range(1010):
            rec._buckets.clear()  # past the spam filter: only the queue's bound drops
            rec.event(p, "Normal", "Started", f"Started container c{i}")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert rec.dropped == 10 and rec._queue.qsize() == 1000
    assert warnings == ["event queue full (1000 queued): dropped 1 event(s) since the last report, "
                        "the last Started Started container c1000"]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 1010  # each event, at debug level


async def test_events_written_to_the_api_are_not_also_kept_in_memory() -> None:
    api = FakeApi()
    rec = EventRecorder(api, host="node1")
    p = pod("web", namespace="ns1", uid="uid-1")
    for i in range(5):
        rec.event(p, "Normal", "Started", f"Started container c{i}")
    await rec.flush()
    await rec.close()
    assert [e["message"] for e in api.created] == [f"Started container c{i}" for i in range(5)]
    assert not rec.recorded  # the Events are in the API; only a recorder without one keeps them

    offline = EventRecorder(None, host="node1")
    offline.event(p, "Normal", "Started", "Started container a")
    assert offline.reasons_for("web") == ["Started"]


async def test_events_beyond_the_burst_are_written_at_the_event_qps() -> None:
    api = FakeApi()
    rec = EventRecorder(api, host="node1", qps=10, burst=2)  # a write every 100 ms after two at once
    p = pod("web", namespace="ns1", uid="uid-1")
    for reason in ("Pulled", "Created", "Started"):
        rec.event(p, "Normal", reason, f"{reason} container c")
    await rec.flush(wait=0.05)
    assert [e["reason"] for e in api.created] == ["Pulled", "Created"]
    await rec.flush()
    await rec.close()
    assert [e["reason"] for e in api.created] == ["Pulled", "Created", "Started"]


def test_an_event_qps_of_zero_writes_without_waiting() -> None:
    limiter = _WriteLimiter(0, 0)
    assert [limiter.delay(100.0) for _ in range(1000)] == [0.0] * 1000
    limiter = _WriteLimiter(50, 100)
    now = time.monotonic()
    assert [limiter.delay(now) for _ in range(100)] == [0.0] * 100
    assert limiter.delay(now) == pytest.approx(0.02) and limiter.delay(now) == pytest.approx(0.04)
    assert limiter.delay(now + 10.0) == 0.0  # refilled, never beyond the burst
