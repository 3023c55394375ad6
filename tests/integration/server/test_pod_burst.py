"""A burst of pod creations and deletions: the agent ends with exactly the pods that exist.

The dev API server, one whole agent (``run_agent``) and the fake CRI runtime run in this process.
Pods bound to the node are created all at once, and three of every four are deleted as soon as
their create returns -- most before the agent has started them, some while it does.  When the
burst settles, as with upstream's kubelet: the API holds exactly the kept pods, all Running, none
stuck Terminating; the runtime has a ready sandbox and a running container for each kept pod and
for nothing else (a deleted pod's sandbox is stopped; removing it is the container GC's business).
The API answers GETs all along (their latency is printed, not asserted: benchmarks measure time).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pykubelet.agent.config import load_options
from pykubelet.agent.main import run_agent
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.cri import CRIClient, pb
from pykubelet.fakecri.server import serve
from pykubelet.server.main import run_server
from tests.builders import container, pod
from tests.fakes import free_port

from .conftest import eventually

PODS = 40
NODE = "burst-node"
PATH = "/api/v1/namespaces/default/pods"


def burst_pod(name: str) -> dict[str, Any]:
    return pod(name, uid="", node_name=NODE, containers=[container(image="busybox:1.36", command=["sleep", "3600"])],
               terminationGracePeriodSeconds=1, automountServiceAccountToken=False)


async def test_a_burst_of_creations_and_deletions_leaves_exactly_the_kept_pods_running(tmp_path: Path) -> None:
    sock = str(tmp_path / "cri.sock")
    grpc_server, _rt = await serve(sock)
    cri = CRIClient(f"unix://{sock}")
    try:
        async with run_server(tmp_path / "data", controllers=False) as srv:
            opts = load_options([
                "--kubeconfig", str(srv.node_kubeconfig(NODE)), "--hostname-override", NODE,
                "--node-ip", "127.0.0.1", "--container-runtime-endpoint", f"unix://{sock}",
                "--root-dir", str(tmp_path / "root"), "--pod-logs-dir", str(tmp_path / "logs"),
                "--cgroups-per-qos=false", "--max-pods", str(PODS + 10),
                "--port", str(free_port()), "--healthz-port", str(free_port()), "--address", "127.0.0.1",
            ])
            stop = asyncio.Event()
            agent = asyncio.create_task(run_agent(opts, stop))
            admin = ApiClient(srv.url, token=srv.admin_token, ca_file=str(srv.ca_file))
            latencies: list[float] = []
            done = asyncio.Event()

            async def keep_getting() -> None:
                while not done.is_set():
                    t = time.monotonic()
                    await admin.get(f"/api/v1/nodes/{NODE}")
                    latencies.append(time.monotonic() - t)
                    await asyncio.sleep(0.05)

            try:
                await eventually(lambda: _node_exists(admin), "the node to register", 30)
                getter = asyncio.create_task(keep_getting())
                names = [f"burst-{i:03d}" for i in range(PODS)]
                kept = sorted(n for i, n in enumerate(names) if i % 4 == 0)
                sem = asyncio.Semaphore(16)

                async def create_then_maybe_delete(name: str) -> None:
                    async with sem:
                        await admin.create(PATH, burst_pod(name))
                        if name not in kept:
                            await admin.delete(f"{PATH}/{name}")

                await asyncio.gather(*(create_then_maybe_delete(n) for n in names))

                async def settled() -> bool:
                    items = (await admin.list(PATH))["items"]
                    return sorted(p["metadata"]["name"] for p in items) == kept and all(
                        (p.get("status") or {}).get("phase") == "Running" for p in items)

                await eventually(settled, "only the kept pods to be left, Running", 60)
                items = (await admin.list(PATH))["items"]
                assert not [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")]
                kept_uids = {p["metadata"]["uid"] for p in items}

                async def runtime_matches() -> bool:
                    ready = [s for s in await cri.list_pod_sandbox() if s.state == pb.SANDBOX_READY]
                    running = [c for c in await cri.list_containers()
                               if c.state == pb.CONTAINER_RUNNING]
                    return (sorted(s.metadata.uid for s in ready) == sorted(kept_uids)
                            and sorted(c.labels.get("io.kubernetes.pod.uid", "") for c in running)
                            == sorted(kept_uids))

                await eventually(runtime_matches, "one ready sandbox and one running container per kept pod", 30)
                done.set()
                await getter
                assert not agent.done()
                print(f"{len(latencies)} GETs during the burst; max latency {max(latencies) * 1000:.0f} ms")
            finally:
                done.set()
                stop.set()
                await asyncio.wait_for(agent, 30)
                await admin.close()
    finally:
        await cri.close()
        await grpc_server.stop(0)


async def _node_exists(api: ApiClient) -> bool:
    try:
        await api.get(f"/api/v1/nodes/{NODE}")
    except ApiError:
        return False
    return True
