"""Eviction thresholds, node conditions and pod ranking as upstream's eviction manager decides them."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.agent.eviction import EvictionConfig, EvictionManager, Observation, Signal, parse_thresholds
from pykubelet.agent.eviction.ranking import ContainerUsage, PodUsage, local_storage_violation, rank
from pykubelet.agent.eviction.thresholds import ThresholdError
from pykubelet.agent.interfaces import PodAdmitAttributes
from tests.builders import container, pod
from tests.fakes import FakeClock, FakeEventRecorder

Mi = 1024 * 1024


class Evictor:
    def __init__(self) -> None:
        self.evicted: list[tuple[str, str, int]] = []

    async def evict_pod(self, p: dict[str, Any], message: str, grace: int) -> bool:
        self.evicted.append((p["metadata"]["name"], message, grace))
        return True


class Reclaimer:
    def __init__(self, freed: int) -> None:
        self.freed = freed
        self.calls: list[str] = []

    async def reclaim(self, resource: str) -> int:
        self.calls.append(resource)
        return self.freed


def manager(pods: list[dict[str, Any]], *, hard: dict[str, str] | None = None, soft: dict[str, str] | None = None,
            grace: dict[str, str] | None = None, signals: dict[str, int] | None = None,
            reclaimers: list[Reclaimer] | None = None, transition: float = 300.0,
            max_grace: int = 0) -> tuple[EvictionManager, Evictor, FakeClock, dict[str, int]]:
    sig = dict(signals or {})
    clock = FakeClock()
    ev = Evictor()
    cfg = EvictionConfig(parse_thresholds(hard or {}, soft, grace), pressure_transition_period=transition,
                         max_pod_grace_period=max_grace)
    m = EvictionManager(cfg, read_signals=lambda: (dict(sig), {}), summary=None, active_pods=lambda: pods,
                        evictor=ev, recorder=FakeEventRecorder(), reclaimers=reclaimers or [], clock=clock)
    return m, ev, clock, sig


def mem(available: int, capacity: int = 4096 * Mi) -> dict[Signal, Observation]:
    return {Signal.MEMORY_AVAILABLE: Observation(available, capacity)}


def test_a_percentage_threshold_is_a_share_of_the_signals_capacity() -> None:
    (t,) = parse_thresholds({"nodefs.available": "10%"})
    assert t.value(1000) == 100
    assert t.value(None) is None


def test_a_soft_threshold_without_grace_period_is_a_configuration_error() -> None:
    with pytest.raises(ThresholdError, match=r"evictionSoftGracePeriod\[memory.available\]"):
        parse_thresholds({}, {"memory.available": "1Gi"})


def test_a_zero_threshold_disables_the_signal() -> None:
    assert parse_thresholds({"memory.available": "0", "nodefs.available": "0%"}) == []


async def test_hard_memory_threshold_evicts_the_burstable_pod_over_its_request_not_the_guaranteed_one() -> None:
    hog = pod("hog", containers=[container("x", requests={"cpu": "10m"})])
    guaranteed = pod("g", containers=[container("c", requests={"cpu": "1", "memory": "500Mi"},
                                                limits={"cpu": "1", "memory": "500Mi"})])
    m, ev, _, _ = manager([guaranteed, hog], hard={"memory.available": "100Mi"})
    usage = {"uid-hog": PodUsage(300 * Mi, {"x": ContainerUsage(memory=300 * Mi)}),
             "uid-g": PodUsage(400 * Mi, {"c": ContainerUsage(memory=400 * Mi)})}
    result = await m.decide_and_act(mem(50 * Mi), [guaranteed, hog], usage)
    assert result.evicted == ("uid-hog",)
    assert ev.evicted == [("hog", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
                                  "Container x was using 300Mi, request is 0, has larger consumption of memory. ", 0)]
    assert m.pressure_conditions() == {"MemoryPressure": True, "DiskPressure": False, "PIDPressure": False}


async def test_one_pod_is_evicted_per_pass() -> None:
    pods = [pod(f"p{i}") for i in range(3)]
    m, ev, _, _ = manager(pods, hard={"memory.available": "100Mi"})
    await m.decide_and_act(mem(10 * Mi), pods, {})
    assert len(ev.evicted) == 1


async def test_critical_pods_are_never_evicted() -> None:
    static = pod("static", annotations={"kubernetes.io/config.source": "file"})
    critical = pod("crit", priority=2000001000)
    m, ev, _, _ = manager([static, critical], hard={"memory.available": "100Mi"})
    result = await m.decide_and_act(mem(10 * Mi), [static, critical], {})
    assert result.evicted == () and ev.evicted == []


async def test_soft_threshold_waits_for_its_grace_period_and_uses_the_max_pod_grace_period() -> None:
    p = pod("p")
    m, ev, clock, _ = manager([p], soft={"memory.available": "1Gi"}, grace={"memory.available": "30s"}, max_grace=7)
    await m.decide_and_act(mem(500 * Mi), [p], {})
    assert ev.evicted == []
    assert m.pressure_conditions() == {"MemoryPressure": True, "DiskPressure": False, "PIDPressure": False}
    clock.now += 31
    await m.decide_and_act(mem(500 * Mi), [p], {})
    assert [(n, g) for n, _, g in ev.evicted] == [("p", 7)]


async def test_pressure_condition_stays_for_the_transition_period_after_recovery() -> None:
    m, _, clock, _ = manager([], hard={"memory.available": "100Mi"}, transition=60)
    await m.decide_and_act(mem(10 * Mi), [], {})
    clock.now += 10
    await m.decide_and_act(mem(1000 * Mi), [], {})
    assert (m.pressure_conditions() or {})["MemoryPressure"] is True
    clock.now += 61
    await m.decide_and_act(mem(1000 * Mi), [], {})
    assert (m.pressure_conditions() or {})["MemoryPressure"] is False


async def test_minimum_reclaim_keeps_a_met_threshold_until_that_much_more_is_available() -> None:
    cfg_pods: list[dict[str, Any]] = []
    m, _, _, _ = manager(cfg_pods, hard={"memory.available": "100Mi"})
    m.config.thresholds = parse_thresholds({"memory.available": "100Mi"}, min_reclaim={"memory.available": "50Mi"})
    await m.decide_and_act(mem(90 * Mi), [], {})
    await m.decide_and_act(mem(120 * Mi), [], {})
    assert [t.signal for t in m.thresholds_met] == [Signal.MEMORY_AVAILABLE]
    await m.decide_and_act(mem(160 * Mi), [], {})
    assert m.thresholds_met == []


async def test_disk_pressure_reclaims_images_first_and_evicts_nobody_when_that_is_enough() -> None:
    p = pod("p")
    r = Reclaimer(freed=10 * Mi)
    m, ev, _, sig = manager([p], hard={"nodefs.available": "100Mi"}, reclaimers=[r])
    sig["nodefs.available"] = 500 * Mi  # what the re-observation after the reclaim sees
    result = await m.decide_and_act({Signal.NODEFS_AVAILABLE: Observation(50 * Mi, 1000 * Mi)}, [p], {})
    assert r.calls == ["nodefs.available"] and result.reclaimed and ev.evicted == []


async def test_disk_pressure_evicts_the_top_consumer_when_reclaiming_is_not_enough() -> None:
    small, big = pod("small"), pod("big")
    m, ev, _, _ = manager([small, big], hard={"nodefs.available": "100Mi"}, reclaimers=[Reclaimer(0)])
    usage = {"uid-small": PodUsage(containers={"c": ContainerUsage(rootfs=1 * Mi)}),
             "uid-big": PodUsage(containers={"c": ContainerUsage(rootfs=50 * Mi)})}
    await m.decide_and_act({Signal.NODEFS_AVAILABLE: Observation(50 * Mi, 1000 * Mi)}, [small, big], usage)
    assert [n for n, _, _ in ev.evicted] == ["big"]
    assert ev.evicted[0][1].startswith("The node was low on resource: ephemeral-storage. ")


def test_memory_ranking_puts_pods_over_requests_first_then_lower_priority_then_bigger_excess() -> None:
    a = pod("a", containers=[container("c", requests={"memory": "1Gi"})])  # under request
    b = pod("b", priority=10)
    c = pod("c")
    usage = {"uid-a": PodUsage(500 * Mi), "uid-b": PodUsage(900 * Mi), "uid-c": PodUsage(100 * Mi)}
    assert [p["metadata"]["name"] for p in rank(Signal.MEMORY_AVAILABLE, [a, b, c], usage)] == ["c", "b", "a"]


def test_emptydir_over_its_size_limit_is_a_local_storage_violation() -> None:
    p = pod("p", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])
    assert local_storage_violation(p, PodUsage(volumes={"scratch": 2 * Mi})) == \
        'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    assert local_storage_violation(p, PodUsage(volumes={"scratch": Mi // 2})) is None


def test_container_over_its_ephemeral_storage_limit_is_a_local_storage_violation() -> None:
    p = pod("p", containers=[container("c", limits={"ephemeral-storage": "1Mi"}), container("d")])
    assert local_storage_violation(p, PodUsage(containers={"c": ContainerUsage(rootfs=2 * Mi)})) == \
        'Container c exceeded its local ephemeral storage limit "1Mi". '


async def test_local_storage_violations_are_evicted_without_any_threshold() -> None:
    p = pod("p", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])
    m, ev, _, _ = manager([p])
    await m.decide_and_act({}, [p], {"uid-p": PodUsage(volumes={"scratch": 5 * Mi})})
    assert [(n, g) for n, _, g in ev.evicted] == [("p", 0)]


async def test_under_memory_pressure_only_best_effort_pods_are_refused() -> None:
    m, _, _, _ = manager([], hard={"memory.available": "100Mi"})
    await m.decide_and_act(mem(10 * Mi), [], {})
    best_effort = m.admit(PodAdmitAttributes(pod("be"), []))
    assert (best_effort.admit, best_effort.reason, best_effort.message) == \
        (False, "Evicted", "The node had condition: [MemoryPressure]. ")
    assert m.admit(PodAdmitAttributes(pod("b", containers=[container("c", requests={"memory": "1Mi"})]), [])).admit
    tolerating = pod("t", tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists"}])
    assert m.admit(PodAdmitAttributes(tolerating, [])).admit


async def test_under_disk_pressure_all_but_critical_pods_are_refused() -> None:
    m, _, _, _ = manager([], hard={"nodefs.available": "100Mi"})
    await m.decide_and_act({Signal.NODEFS_AVAILABLE: Observation(10 * Mi, 1000 * Mi)}, [], {})
    assert not m.admit(PodAdmitAttributes(pod("b", containers=[container("c", requests={"memory": "1Mi"})]), [])).admit
    assert m.admit(PodAdmitAttributes(pod("crit", priority=2000000000), [])).admit


async def test_synchronize_reads_the_signals_and_reports_no_condition_before_the_first_pass() -> None:
    m, _, _, _ = manager([], hard={"memory.available": "100Mi"}, signals={"memory.available": 50 * Mi})
    assert m.pressure_conditions() is None
    await m.synchronize()
    assert (m.pressure_conditions() or {})["MemoryPressure"] is True


async def test_soft_eviction_uses_the_pods_own_grace_period_when_shorter() -> None:
    p = pod("p", terminationGracePeriodSeconds=3)
    m, ev, clock, _ = manager([p], soft={"memory.available": "1Gi"}, grace={"memory.available": "1s"}, max_grace=30)
    await m.decide_and_act(mem(500 * Mi), [p], {})
    clock.advance(2)
    await m.decide_and_act(mem(500 * Mi), [p], {})
    assert [g for _, _, g in ev.evicted] == [3]
