"""What a running pod keeps alive in the agent (goal: 110 pods within the agent's 60 MB), on the fake CRI.

An idle pod worker is no task (upstream's pod worker goroutine sleeps on its channel; here the worker
ends when its slot is empty), and of the statuses generated for a pod only the status manager's
current one stays alive: the prober keeps the pod with the status's phase alone.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from pykubelet.agent import podsyncer
from pykubelet.agent.status.generate import generate_api_status
from tests.fakes import eventually
from tests.integration.agent.test_kubelet_on_fake_runtime import Harness, busybox, harness, node_pod

__all__ = ["harness"]  # the fixture, shared with the kubelet tests


def _referenced_elsewhere(objs: list[Any]) -> list[Any]:
    """The objects of ``objs`` that something besides that list holds."""
    gc.collect()
    kept = []
    for o in objs:
        if sys.getrefcount(o) > 3:  # the list, ``o`` and getrefcount's argument
            kept.append(o)
    return kept


async def test_running_pods_keep_one_status_each_and_no_worker_task(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    generated: list[Any] = []  # every status the pod syncer generated

    def generate(*args: Any, **kwargs: Any) -> Any:
        generated.append(status := generate_api_status(*args, **kwargs))
        return status

    monkeypatch.setattr(podsyncer, "generate_api_status", generate)
    harness.sync_frequency = 60.0  # no periodic resync in the test: what the pods' start left behind
    k = await harness.start()
    pods = [node_pod(f"web{i}", [busybox("a")]) for i in range(3)]
    await harness.add(*pods)
    await eventually(lambda: all(harness.api_status(p).get("phase") == "Running" for p in pods))
    uids = [p["metadata"]["uid"] for p in pods]
    await eventually(lambda: all((st := k.pod_workers.get(u)) is not None and st.task is None for u in uids))
    current = [k.status_manager.peek_pod_status(u) for u in uids]
    kept = _referenced_elsewhere(generated)
    assert len(kept) == len(uids) and all(any(s is c for c in current) for s in kept), \
        [s.get("phase") for s in kept]
