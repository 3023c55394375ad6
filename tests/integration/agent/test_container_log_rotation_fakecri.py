"""Container log rotation through the whole agent on the fake CRI runtime: the log of a container the
agent starts is rotated at ``containerLogMaxSize`` without the runtime being asked its log path (the
agent built it), and the log of a container adopted after an agent restart is still found and rotated."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from pykubelet.cri import pb
from tests.fakes import eventually
from tests.integration.agent.test_kubelet_on_fake_runtime import Harness, busybox, harness, node_pod
from tests.integration.agent.test_pod_start_runtime_calls import CountingRuntime, ready

__all__ = ["harness"]  # the fixture

MAX_SIZE = 1024


async def start_kubelet(h: Harness, runtime: Any) -> Kubelet:
    opts = h.options()
    opts.config.container_log_max_size = "1Ki"
    opts.config.container_log_max_files = 3
    opts.config.container_log_monitor_interval = 0.1
    h.updates = asyncio.Queue()
    # relists far apart: after the first ones, the pod start's re-read is the only ContainerStatus
    k = Kubelet(options=opts, api=h.api, runtime=runtime, recorder=EventRecorder(None, host="node1"),
                updates=h.updates, mirror=None, pleg_period=3600.0, housekeeping_period=0.3,
                status_reconcile_period=1.0)
    await k.start()
    h.kubelet = k
    return k


async def log_paths(h: Harness) -> dict[str, str]:
    """Running container id -> its log path, as the runtime reports it."""
    running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    out = {}
    for c in await h.runtime.list_containers(running):
        out[c.id] = (await h.runtime.container_status(c.id)).status.log_path
    return out


def rotated(path: str) -> list[str]:
    d, base = os.path.split(path)
    return [n for n in os.listdir(d) if n.startswith(base + ".")]


def rotated_sizes(path: str) -> list[int]:
    d = os.path.dirname(path)
    return [os.path.getsize(os.path.join(d, n)) for n in rotated(path)]


def grow(path: str) -> None:
    with open(path, "ab") as f:
        f.write(b"x" * (2 * MAX_SIZE))


async def test_a_new_container_log_is_rotated_at_the_max_size_without_asking_the_runtime(harness: Harness) -> None:
    h = harness
    runtime = CountingRuntime(h.runtime)
    k = await start_kubelet(h, runtime)
    await eventually(lambda: k.pleg.relist_count >= 2)
    pods = [node_pod(f"chatty-{i}", [busybox("a"), busybox("b")]) for i in range(2)]
    await h.add(*pods)
    await eventually(lambda: all(ready(h, p) for p in pods), timeout=10)
    paths = await log_paths(h)
    assert len(paths) == 4 and all(p.startswith(str(h.tmp / "logs")) for p in paths.values())
    status_calls = runtime.calls["container_status"]  # the start's re-read: one per container
    for p in paths.values():
        await asyncio.to_thread(grow, p)
    await eventually(lambda: k.log_manager.rotations >= 4, timeout=10)
    for p in paths.values():  # each live log became one rotated file, all it had (the runtime's lines and ours)
        sizes = await asyncio.to_thread(rotated_sizes, p)
        assert len(sizes) == 1 and sizes[0] >= 2 * MAX_SIZE
    assert status_calls == 4 and runtime.calls["container_status"] == status_calls  # none for the log paths
    assert runtime.calls["reopen_container_log"] >= 4


async def test_an_adopted_container_log_is_still_rotated_after_an_agent_restart(harness: Harness) -> None:
    h = harness
    await h.start()
    pod = node_pod("steady", [busybox("a")])
    await h.add(pod)
    await eventually(lambda: ready(h, pod), timeout=10)
    assert h.kubelet is not None
    await h.kubelet.stop()
    h.kubelet = None
    k2 = await start_kubelet(h, h.runtime)  # knows the container only from the runtime
    (cid, path), = (await log_paths(h)).items()
    await asyncio.to_thread(grow, path)
    await eventually(lambda: k2.log_manager.rotations >= 1, timeout=10)
    assert len(rotated(path)) == 1 and cid in k2.log_manager._paths
