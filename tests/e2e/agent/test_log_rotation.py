"""Container log rotation and /var/log/containers symlinks on a real containerd.

Runs the engine in-process (as test_pods_on_containerd.py does) with
containerLogMaxSize=20Ki, containerLogMaxFiles=3 and a 1 s monitor interval; a busybox container
writes ~2 KiB lines in a loop. Checks: rotated files appear (older ones gzipped), there are never
more than 3 log files, the live log fills again after a rotation (containerd honoured
ReopenContainerLog), and the legacy symlink points at the live log and goes away with the pod.
"""

from __future__ import annotations

import asyncio
import copy
import os
from pathlib import Path
from typing import Any

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.logs import legacy_log_symlink
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient
from tests.builders import pod_path
from tests.fakes import FakeApi, eventually

from .test_pods_on_containerd import api_pod, busybox

WRITER = "l=$(head -c 2000 /dev/zero | tr '\\0' x); while true; do echo $l; sleep 0.05; done"


def _log_files(d: Path) -> set[str]:
    """Distinct log files: the live one and each rotation (x, x.gz and x.gz.tmp are one file)."""
    return {n.removesuffix(".tmp").removesuffix(".gz") for n in os.listdir(d) if n.startswith("0.log")}


def _link_target(link: str) -> str | None:
    """Where ``link`` points if it is a symlink to an existing file, else None."""
    return os.readlink(link) if os.path.islink(link) and os.path.exists(link) else None


async def _scenario(containerd: Any, tmp_path: Path) -> str:
    cfg = KubeletConfiguration()
    cfg.cgroup_root = containerd.cgroup_parent
    cfg.pod_logs_dir = str(tmp_path / "pods")
    cfg.container_log_max_size = "20Ki"
    cfg.container_log_max_files = 3
    cfg.container_log_monitor_interval = 1.0
    opts = AgentOptions(config=cfg, node_name="e2e-logs", node_ip="127.0.0.1", root_dir=tmp_path / "root")
    api = FakeApi()
    runtime = CRIClient(containerd.endpoint, timeout=30)
    await runtime.connect(wait=10)
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    k = Kubelet(options=opts, api=api, runtime=runtime, recorder=EventRecorder(None), updates=updates,
                pleg_period=0.5, housekeeping_period=0.5)
    pod = api_pod("chatty", busybox("w", ["sh", "-c", WRITER]))
    md = pod["metadata"]
    path = pod_path(pod)
    await k.start()
    link = ""
    try:
        api.put(path, pod)
        await updates.put(PodUpdate(PodOp.ADD, "api", [copy.deepcopy(pod)]))
        k.mark_source_ready("api")
        st = await eventually(lambda: (api.objects[path].get("status") or {}).get("phase") == "Running"
                              and api.objects[path]["status"])
        cid = st["containerStatuses"][0]["containerID"].split("://", 1)[1]
        log_dir = tmp_path / "pods" / f"default_chatty_{md['uid']}" / "w"
        live = log_dir / "0.log"

        link = legacy_log_symlink(str(tmp_path / "containers"), "chatty", "default", "w", cid)
        assert await asyncio.to_thread(_link_target, link) == str(live)

        seen: set[str] = set()
        async with asyncio.timeout(90):
            while True:
                files = await asyncio.to_thread(_log_files, log_dir)
                assert len(files) <= 3, files
                seen |= files - {"0.log"}
                gz = [n for n in os.listdir(log_dir) if n.endswith(".gz")]
                if len(seen) >= 3 and gz:
                    break
                await asyncio.sleep(0.1)

        # the runtime writes into the fresh file after a rotation
        r0 = k.log_manager.rotations
        await eventually(lambda: k.log_manager.rotations > r0, 60)
        await eventually(lambda: live.exists() and live.stat().st_size >= 4096, 30)
        assert live.read_text().splitlines()[-1].endswith("x" * 100)
        assert await asyncio.to_thread(_link_target, link) == str(live)
    finally:
        await updates.put(PodUpdate(PodOp.REMOVE, "api", [copy.deepcopy(pod)]))
        async with asyncio.timeout(60):
            while md["uid"] in {s.labels.get("io.kubernetes.pod.uid") for s in await runtime.list_pod_sandbox()}:  # noqa: ASYNC110 - polling the runtime under test
                await asyncio.sleep(0.2)
        await k.stop()
        await runtime.close()
    return link


def test_log_rotation_and_symlinks(containerd: Any, tmp_path: Path) -> None:
    link = asyncio.run(_scenario(containerd, tmp_path))
    assert link and not os.path.lexists(link)  # removed with the pod's container
