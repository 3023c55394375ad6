"""A started pod is reported Ready at once, not at the PLEG's next relist (upstream's Evented PLEG /
the targeted cache update after a sync), on the fake CRI runtime with a relist period far longer
than the test."""

from __future__ import annotations

import asyncio

from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from tests.fakes import eventually
from tests.integration.agent.test_kubelet_on_fake_runtime import Harness, busybox, harness, node_pod

__all__ = ["harness"]  # the fixture


async def test_pods_are_reported_ready_without_waiting_for_the_next_relist(harness: Harness) -> None:
    h = harness
    h.updates = asyncio.Queue()
    k = Kubelet(options=h.options(), api=h.api, runtime=h.runtime,  # type: ignore[arg-type]
                recorder=EventRecorder(None, host="node1"), updates=h.updates, mirror=None,
                pleg_period=3600.0, housekeeping_period=0.3, status_reconcile_period=1.0)
    await k.start()
    h.kubelet = k
    await eventually(lambda: k.pleg.relist_count >= 2)  # the seeding relist and the first periodic one
    relists = k.pleg.relist_count
    pods = [node_pod(f"web-{i}", [busybox("a"), busybox("b")]) for i in range(5)]
    await h.add(*pods)

    def ready(pod: dict[str, object]) -> bool:
        conds = h.api_status(pod).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    await eventually(lambda: all(ready(p) for p in pods), timeout=10)
    assert k.pleg.relist_count == relists  # no relist ran: the targeted updates reported them


async def test_a_started_sidecar_lets_the_app_containers_start_without_waiting_for_a_resync(
        harness: Harness) -> None:
    # The sync that starts a restartable init container (a sidecar) ends there; the app containers
    # start in the next sync, which the sidecar's ContainerStarted must wake: with no relist and
    # no periodic resync within the test, nothing else would.
    h = harness
    h.updates = asyncio.Queue()
    options = h.options()
    options.config.sync_frequency = 3600.0
    k = Kubelet(options=options, api=h.api, runtime=h.runtime,  # type: ignore[arg-type]
                recorder=EventRecorder(None, host="node1"), updates=h.updates, mirror=None,
                pleg_period=3600.0, housekeeping_period=0.3, status_reconcile_period=1.0)
    await k.start()
    h.kubelet = k
    await eventually(lambda: k.pleg.relist_count >= 2)
    pod = node_pod("with-sidecar", [busybox("app")],
                   init_containers=[{**busybox("proxy"), "restartPolicy": "Always"}])
    await h.add(pod)

    def app_running() -> bool:
        statuses = h.api_status(pod).get("containerStatuses") or []
        return any(s["name"] == "app" and "running" in (s.get("state") or {}) for s in statuses)

    await eventually(app_running, timeout=10)
    sidecar = (h.api_status(pod).get("initContainerStatuses") or [{}])[0]
    assert sidecar.get("name") == "proxy" and "running" in (sidecar.get("state") or {})
