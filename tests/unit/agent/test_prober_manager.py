"""ProbeManager/Worker behaviour with a fake clock and a stub prober (no network, no timing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pykubelet.agent.metrics import REGISTRY
from pykubelet.agent.prober import Outcome, ProbeError, ProbeManager, ProbeType, Result, Worker
from tests.builders import container, pod
from tests.fakes import FakeClock, FakeEventRecorder

S, F, U = Result.SUCCESS, Result.FAILURE, Result.UNKNOWN


class StubProber:
    """Replaces Prober.run: returns scripted outcomes per probe type (taken from the spec's tag)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, list[Any]] = {}
        self.calls: list[str] = []

    async def run(self, spec: dict[str, Any], container: Any, cid: str, pod_ip: str) -> tuple[Outcome, str]:
        tag = spec["tag"]
        self.calls.append(tag)
        queue = self.outcomes.get(tag) or [(Outcome.SUCCESS, "")]
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[no-any-return]

    async def close(self) -> None:
        pass


class ManualManager(ProbeManager):
    """Workers are not spawned; the test drives Worker.step by hand."""

    def _start(self, w: Worker) -> None:
        pass


def probed_pod(uid: str = "u1", **probes: dict[str, Any]) -> dict[str, Any]:
    """Pod "web" whose container "app" has these probes (exec), each tagged with its field name so
    StubProber can script outcomes per probe."""
    app = container("app", **{f: {"exec": {"command": ["true"]}, "tag": f, **spec} for f, spec in probes.items()})
    return pod("web", uid=uid, containers=[app], restart_policy="Always", status={"phase": "Running"})


@pytest.fixture
def env() -> tuple[ManualManager, StubProber, FakeEventRecorder, FakeClock, list[str]]:
    clock = FakeClock()
    rec = FakeEventRecorder()
    changes: list[str] = []
    m = ManualManager(object(), rec, clock=clock, wall_clock=clock, on_change=changes.append)  # type: ignore[arg-type]
    stub = StubProber()
    m.prober = stub  # type: ignore[assignment]
    return m, stub, rec, clock, changes


def worker(m: ProbeManager, t: ProbeType, uid: str = "u1") -> Worker:
    return m._workers[(uid, "app", t)]


async def test_readiness_defaults_and_threshold(env: Any) -> None:
    m, stub, rec, clock, changes = env
    pod = probed_pod(readinessProbe={"successThreshold": 2, "failureThreshold": 2})
    m.add_pod(pod)
    assert m.readiness("u1", "app") is F and m.liveness("u1", "app") is S  # no liveness probe -> success
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "198.18.0.2")
    w = worker(m, ProbeType.READINESS)
    assert await w.step()
    assert m.readiness("u1", "app") is F and not m.is_ready("u1", "app")
    assert await w.step()
    assert m.readiness("u1", "app") is S and m.is_ready("u1", "app")
    assert "u1" in changes
    stub.outcomes["readinessProbe"] = [(Outcome.FAILURE, "nope")]
    await w.step()
    assert m.readiness("u1", "app") is S
    await w.step()
    assert m.readiness("u1", "app") is F
    assert ("Warning", "Unhealthy", "Readiness probe failed: nope") in rec.events


async def test_initial_delay_uses_container_start(env: Any) -> None:
    m, stub, _rec, clock, _ = env
    pod = probed_pod(readinessProbe={"initialDelaySeconds": 10})
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    w = worker(m, ProbeType.READINESS)
    clock.now += 9.9
    await w.step()
    assert stub.calls == []
    clock.now += 0.1
    await w.step()
    assert stub.calls == ["readinessProbe"] and m.readiness("u1", "app") is S


async def test_startup_gates_liveness_and_readiness(env: Any) -> None:
    m, stub, _rec, clock, _ = env
    pod = probed_pod(startupProbe={"failureThreshold": 3}, livenessProbe={}, readinessProbe={})
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    live, ready, start = (worker(m, t) for t in (ProbeType.LIVENESS, ProbeType.READINESS, ProbeType.STARTUP))
    assert m.startup("u1", "app") is U and not m.is_started("u1", "app")
    stub.outcomes["startupProbe"] = [(Outcome.FAILURE, "starting"), (Outcome.SUCCESS, "")]
    await live.step()
    await ready.step()
    assert stub.calls == []  # gated until startup succeeds
    await start.step()
    assert m.startup("u1", "app") is U
    await start.step()
    assert m.startup("u1", "app") is S and m.is_started("u1", "app")
    await start.step()
    assert stub.calls.count("startupProbe") == 2  # startup stops once succeeded
    await live.step()
    await ready.step()
    assert stub.calls[-2:] == ["livenessProbe", "readinessProbe"] and m.is_ready("u1", "app")


async def test_liveness_failure_holds_then_resets_on_restart(env: Any) -> None:
    m, stub, rec, clock, changes = env
    pod = probed_pod(livenessProbe={"failureThreshold": 2, "terminationGracePeriodSeconds": 5})
    pod["spec"]["terminationGracePeriodSeconds"] = 60
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    w = worker(m, ProbeType.LIVENESS)
    stub.outcomes["livenessProbe"] = [(Outcome.FAILURE, "dead")]
    await w.step()
    assert m.liveness("u1", "app") is S and m.kill_decision(pod, "app") is None
    changes.clear()
    await w.step()
    assert m.liveness("u1", "app") is F and changes == ["u1"]
    d = m.kill_decision(pod, "app")
    assert d is not None and d.reason == "LivenessProbe" and d.message == "Container app failed liveness probe"
    assert d.grace_period == 5 and m.kill_grace_period(pod, d) == 5
    assert rec.events.count(("Warning", "Unhealthy", "Liveness probe failed: dead")) == 2
    n = len(stub.calls)
    await w.step()
    assert len(stub.calls) == n  # on hold until the container is replaced
    # restart: new container id resets the worker, old result dropped
    stub.outcomes["livenessProbe"] = [(Outcome.SUCCESS, "")]
    m.update_pod_status(pod, {"app": ("c2", True, clock.now)}, "ip")
    assert m.liveness("u1", "app") is S  # no result for c2 yet: initial value
    await w.step()
    assert m.result_for(ProbeType.LIVENESS, "c1") is None
    assert m.result_for(ProbeType.LIVENESS, "c2") is S and m.kill_decision(pod, "app") is None


async def test_startup_failure_kill_decision_and_pod_grace(env: Any) -> None:
    m, stub, _rec, clock, _ = env
    pod = probed_pod(startupProbe={"failureThreshold": 1})
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    stub.outcomes["startupProbe"] = [(Outcome.FAILURE, "x")]
    await worker(m, ProbeType.STARTUP).step()
    d = m.kill_decision(pod, "app")
    assert d is not None and d.reason == "StartupProbe" and d.grace_period is None
    assert m.kill_grace_period(pod, d) == 30


async def test_warning_counts_as_success_with_event(env: Any) -> None:
    m, stub, rec, clock, _ = env
    pod = probed_pod(readinessProbe={})
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    stub.outcomes["readinessProbe"] = [(Outcome.WARNING, "Probe terminated redirects, Response body: ")]
    await worker(m, ProbeType.READINESS).step()
    assert m.readiness("u1", "app") is S
    assert ("Warning", "ProbeWarning", "Readiness probe warning: Probe terminated redirects, Response body: ") \
        in rec.events


async def test_probe_error_is_discarded(env: Any) -> None:
    m, stub, rec, clock, _ = env
    pod = probed_pod(readinessProbe={})
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    stub.outcomes["readinessProbe"] = [ProbeError("couldn't find port: x")]
    await worker(m, ProbeType.READINESS).step()
    assert m.readiness("u1", "app") is F
    assert rec.events[-1][1] == "Unhealthy" and "errored" in rec.events[-1][2]


async def test_not_running_and_terminal_pods(env: Any) -> None:
    m, _stub, _rec, clock, _ = env
    pod = probed_pod(readinessProbe={})
    pod["spec"]["restartPolicy"] = "Never"
    m.add_pod(pod)
    w = worker(m, ProbeType.READINESS)
    m.update_pod_status(pod, {}, "ip")
    assert await w.step()  # no container status yet: wait
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    await w.step()
    assert m.readiness("u1", "app") is S
    m.update_pod_status(pod, {"app": ("c1", False, clock.now)}, "ip")
    assert not await w.step()  # exited with restartPolicy Never: worker stops
    assert m.readiness("u1", "app") is F
    pod2 = probed_pod("u2", readinessProbe={})
    m.add_pod(pod2)
    pod2["status"]["phase"] = "Succeeded"
    assert not await worker(m, ProbeType.READINESS, "u2").step()


async def test_deleting_pod_liveness_reports_success(env: Any) -> None:
    m, stub, _rec, clock, _ = env
    pod = probed_pod(livenessProbe={"failureThreshold": 1})
    m.add_pod(pod)
    pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    stub.outcomes["livenessProbe"] = [(Outcome.FAILURE, "x")]
    await worker(m, ProbeType.LIVENESS).step()
    assert stub.calls == [] and m.liveness("u1", "app") is S


async def test_remove_and_cleanup_pods(env: Any) -> None:
    m, _stub, _rec, clock, _ = env
    for uid in ("a", "b"):
        pod = probed_pod(uid, readinessProbe={}, livenessProbe={})
        m.add_pod(pod)
        m.update_pod_status(pod, {"app": (f"c-{uid}", True, clock.now)}, "ip")
        await worker(m, ProbeType.READINESS, uid).step()
    assert len(m.workers()) == 4
    m.cleanup_pods({"a"})
    assert {w.uid for w in m.workers()} == {"a"}
    assert m.result_for(ProbeType.READINESS, "c-b") is None
    m.remove_pod("a")
    assert m.workers() == [] and m.result_for(ProbeType.READINESS, "c-a") is None


async def test_metrics_recorded(env: Any) -> None:
    m, _stub, _rec, clock, _ = env
    pod = probed_pod("metrics-uid", readinessProbe={})
    m.add_pod(pod)
    m.update_pod_status(pod, {"app": ("cm", True, clock.now)}, "ip")
    await worker(m, ProbeType.READINESS, "metrics-uid").step()
    v = REGISTRY.get_sample_value("prober_probe_total", {
        "probe_type": "Readiness", "result": "successful", "container": "app", "pod": "web",
        "namespace": "default", "pod_uid": "metrics-uid"})
    assert v == 1.0


class RecordingManager(ProbeManager):
    """Real worker tasks; _wait records the requested delays and advances the fake clock."""

    def __init__(self, *a: Any, stop_after: int, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.delays: list[float] = []
        self.stop_after = stop_after
        self.done = asyncio.Event()

    async def _wait(self, worker: Worker, seconds: float) -> None:
        self.delays.append(seconds)
        self.clock.now += seconds  # type: ignore[attr-defined]
        if len(self.delays) >= self.stop_after:
            self.done.set()
            await asyncio.Event().wait()


@pytest.mark.parametrize("age, expected", [(0.0, [2.5, 5.0, 5.0]), (100.0, [5.0, 5.0, 5.0])])
async def test_period_scheduling_with_first_run_jitter(age: float, expected: list[float]) -> None:
    clock = FakeClock()
    m = RecordingManager(object(), None, clock=clock, wall_clock=clock, rand=lambda: 0.5,  # type: ignore[arg-type]
                         stop_after=3)
    clock.now += age
    stub = StubProber()
    m.prober = stub  # type: ignore[assignment]
    pod = probed_pod(readinessProbe={"periodSeconds": 5})
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    m.add_pod(pod)
    async with asyncio.timeout(5):
        await m.done.wait()
    assert m.delays == expected
    assert stub.calls.count("readinessProbe") == (2 if age == 0.0 else 3)
    await m.stop()
    assert m.workers() == []


async def test_new_container_wakes_worker() -> None:
    clock = FakeClock()
    woke = asyncio.Event()
    m = ProbeManager(object(), None, clock=clock, wall_clock=clock, rand=lambda: 0.0,  # type: ignore[arg-type]
                     on_change=lambda uid: woke.set())
    stub = StubProber()
    m.prober = stub  # type: ignore[assignment]
    pod = probed_pod(readinessProbe={"periodSeconds": 3600})
    m.add_pod(pod)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stub.calls == []  # no status yet; worker waits a (long) period
    m.update_pod_status(pod, {"app": ("c1", True, clock.now)}, "ip")
    async with asyncio.timeout(5):
        while m.readiness("u1", "app") is not S:
            await woke.wait()
            woke.clear()
    await m.stop()


async def test_cleanup_keeps_only_the_workers_of_desired_pods_given_a_set_or_any_iterable(env: Any) -> None:
    m, _stub, _rec, _clock, _ = env
    for uid in ("a", "b", "c"):
        m.add_pod(probed_pod(uid, readinessProbe={}) if uid != "c" else pod("c", uid="c"))
    m.cleanup_pods(frozenset({"a", "b", "x"}) - frozenset({"b"}))  # b: its worker terminated
    assert {w.uid for w in m.workers()} == {"a"}
    m.update_pod_status(pod("c", uid="c"), {}, "ip")
    m.cleanup_pods(u for u in ["a"])
    assert {w.uid for w in m.workers()} == {"a"}
    m.cleanup_pods(set())
    assert m.workers() == []


async def test_workers_due_within_one_grid_slot_wake_together_at_most_half_a_slot_off(env: Any) -> None:
    """The real wait: due times 70 ms apart that round to the same 100 ms slot are woken by one loop
    iteration (their ExecSync calls then go out in one write), each at most half a slot early."""
    from pykubelet.agent.prober import manager as manager_module

    m, *_ = env
    grid = manager_module.WAKE_GRID
    m.add_pod(probed_pod(readinessProbe={}, livenessProbe={}))
    early, late = worker(m, ProbeType.READINESS), worker(m, ProbeType.LIVENESS)
    loop = asyncio.get_running_loop()
    now = loop.time()
    slot = (int(now / grid) + 3) * grid  # a slot boundary 200-300 ms ahead
    woke: dict[str, float] = {}

    async def sleep(w: Worker, due: float) -> None:
        await m._wait(w, due - loop.time())
        woke[w.probe_type.value] = loop.time()

    tasks = [asyncio.ensure_future(sleep(early, slot - 0.3 * grid)), asyncio.ensure_future(sleep(late, slot + 0.4 * grid))]
    async with asyncio.timeout(5):
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 2  # woken in the same loop iteration
    assert all(t >= slot - 0.005 for t in woke.values())  # on the slot: at most 0.4 slot early
    assert early._sleeper is None and late._sleeper is None


async def test_workers_sleeping_until_the_same_slot_share_one_loop_timer(env: Any, monkeypatch: Any) -> None:
    """Three workers due in one 100 ms slot arm one loop timer between them; one of them woken early
    and one cancelled do not keep the third from waking on the slot."""
    from pykubelet.agent.prober import manager as manager_module

    m, *_ = env
    grid = manager_module.WAKE_GRID
    m.add_pod(probed_pod(readinessProbe={}, livenessProbe={}, startupProbe={}))
    ws = [worker(m, t) for t in (ProbeType.READINESS, ProbeType.LIVENESS, ProbeType.STARTUP)]
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting_call_at(when: float, *args: Any) -> Any:
        armed.append(when)
        return call_at(when, *args)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    slot = (int(loop.time() / grid) + 3) * grid
    waits = [asyncio.ensure_future(m._wait(w, slot - loop.time())) for w in ws]
    await asyncio.sleep(0)
    assert len(armed) == 1
    ws[0].wake()
    waits[1].cancel()
    async with asyncio.timeout(5):
        await waits[0]
        assert not waits[2].done()  # still sleeping: only the woken one ended
        await waits[2]
    assert loop.time() >= slot - 0.005
    assert waits[1].cancelled()
    assert m._slots == {}  # the slot's list went with its timer

    # a lone sleeper woken long before its slot takes the slot and its timer with it
    waiting = asyncio.ensure_future(m._wait(ws[0], 3600))
    await asyncio.sleep(0)
    (timer, _sleepers), = m._slots.values()
    ws[0].wake()
    await waiting
    assert m._slots == {} and timer.cancelled()


async def test_a_new_container_is_probed_at_once_not_on_the_grid(env: Any) -> None:
    """``wake()`` (a new container id) ends the wait at once; the grid only shapes timed waits."""
    m, *_ = env
    m.add_pod(probed_pod(readinessProbe={"periodSeconds": 3600}))
    w = worker(m, ProbeType.READINESS)
    waiting = asyncio.ensure_future(m._wait(w, 3600))
    await asyncio.sleep(0)
    w.wake()
    async with asyncio.timeout(1):  # an hour's period: only the wake can end the wait in time
        await waiting
    assert waiting.done() and waiting.exception() is None
