"""A `pykubelet up` cluster under faults: containerd killed, API server paused, runtime down long
enough for taint-based eviction.

What a user of `make up` expects (and what upstream gives with systemd and a real control plane):
- containerd killed with ``kill -9`` under load is restarted by `up`'s supervisor; the running pods'
  containers are adopted again (same container ids, restartCount unchanged) and the node is Ready
  again within 15 s of containerd being back;
- the API server paused for a minute (SIGSTOP/SIGCONT) does not leave the node Unknown and tainted
  afterwards: within 15 s of its return the node is Ready, untainted, and new pods schedule;
- a pod evicted by the taint manager while the runtime is down (its NoExecute toleration ran out)
  is deleted for good once the runtime is back -- nothing stays Terminating.

The cluster is one `pykubelet up` (its own private containerd) per module, on the session's slot:
bridge ``pkf<N>``, pods in ``198.19.(200+N).0/24``, pod cgroups under ``/pykubelet-faults<N>``; the
node-monitor grace period is 20 s and the controller checks every second, so faults show quickly.
Processes are signalled by PID only, and every SIGSTOP is undone in ``finally``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.up.containerd import PrivateContainerd
from tests.fakes import free_port

from ..conftest import stop_process

LOAD_PODS = 10
NODE = "pk-faults"
Obj = dict[str, Any]


@dataclass
class UpCluster:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path

    def api(self) -> ApiClient:
        return ApiClient.from_kubeconfig(self.data_dir / "kubeconfig")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logs(self) -> str:
        out = [f"----- up -----\n{self.log()[-4000:]}"]
        for name in ("server", "agent"):
            p = self.data_dir / "logs" / f"{name}.log"
            if p.exists():
                out.append(f"----- {name}.log (tail) -----\n{p.read_text(errors='replace')[-4000:]}")
        return "\n".join(out)

    def containerd_pid(self) -> int:
        return int((self.data_dir / "containerd" / "containerd.pid").read_text())

    def component_pid(self, component: str) -> int:
        """PID of the `pykubelet server|agent` child of this cluster (found by its command line)."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"pykubelet" in argv and component.encode() in argv and str(self.data_dir).encode() in b" ".join(argv):
                return int(entry.name)
        raise AssertionError(f"no {component} process for {self.data_dir}\n{self.logs()}")


def _pod(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "100000"]}],
            **spec,
        },
    }


def _condition(obj: Obj, ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


async def _until(what: str, check: Callable[[], Awaitable[bool]], limit: float, cluster: UpCluster) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if await check():
                return
        except ApiError:
            pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out after {limit:.0f}s waiting for {what}\n{cluster.logs()}")


async def _node_ready_untainted(api: ApiClient) -> bool:
    node = await api.request("GET", f"/api/v1/nodes/{NODE}", timeout=5)
    return _condition(node, "Ready") == "True" and not (node.get("spec") or {}).get("taints")


async def _ready_within(api: ApiClient, seconds: float, cluster: UpCluster) -> float:
    """Watch the node for ``seconds`` from now; it must end Ready and untainted. Returns when it
    last was not (0.0 if it always was), so flaps inside the window are seen, not skipped."""
    start = time.monotonic()
    last_bad = -1.0
    while True:
        now = time.monotonic()
        try:
            ok = await _node_ready_untainted(api)
        except ApiError:
            ok = False
        if not ok:
            last_bad = now - start
        if now - start >= seconds:
            break
        await asyncio.sleep(0.5)
    assert ok, f"node not Ready and untainted {seconds:.0f}s after the fault ended\n{cluster.logs()}"
    return max(last_bad, 0.0)


async def _containers(api: ApiClient) -> dict[str, tuple[str, int, str | None]]:
    """name -> (container id, restartCount, pod Ready) of the load pods."""
    out = {}
    for p in (await api.list("/api/v1/namespaces/default/pods", {"labelSelector": "load=1"}))["items"]:
        [cs] = (p.get("status") or {}).get("containerStatuses") or [{}]
        out[p["metadata"]["name"]] = (cs.get("containerID", ""), int(cs.get("restartCount", 0)), _condition(p, "Ready"))
    return out


async def _load_unchanged(api: ApiClient, before: dict[str, tuple[str, int, str | None]], cluster: UpCluster) -> None:
    """Every load pod Ready again with the very same container and restart count."""

    async def same() -> bool:
        return await _containers(api) == before

    await _until("the load pods Ready with the same containers", same, 30, cluster)


@pytest.fixture(scope="module")
def faulty(e2e_slot: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    data_dir = tmp_path_factory.mktemp("faults") / "d"
    log_path = data_dir.parent / "up.log"
    bridge, cidr, cgroup = f"pkf{e2e_slot}", f"198.19.{200 + e2e_slot}.0/24", f"/pykubelet-faults{e2e_slot}"
    cmd = [
        sys.executable, "-m", "pykubelet", "up", "--data-dir", str(data_dir), "--node-name", NODE,
        "--pod-cidr", cidr, "--bridge", bridge, "--cgroup-root", cgroup,
        "--secure-port", str(free_port()), "--kubelet-port", str(free_port()),
        f"--agent-arg=--healthz-port={free_port()}",
        "--server-arg=--node-monitor-grace-period=20s", "--server-arg=--node-monitor-period=1s",
    ]
    with log_path.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = UpCluster(proc, data_dir, log_path)
    try:
        asyncio.run(_start_load(cluster))
        yield cluster
    finally:
        # Whatever a failed test left paused must run again before it can stop.
        with_pid = [proc.pid]
        for component in ("server", "agent"):
            try:
                with_pid.append(cluster.component_pid(component))
            except AssertionError:
                pass
        for pid in with_pid:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        rc = stop_process(proc, timeout=120)
        print(f"[faults] pykubelet up exited {rc}", file=sys.stderr)
        # Belt and braces after a crash of `up` itself: the same cleanup `up` runs on exit.
        PrivateContainerd(data_dir / "containerd", pod_cidr=cidr, bridge=bridge, cgroup_parent=cgroup).cleanup()


async def _start_load(cluster: UpCluster) -> None:
    kubeconfig = cluster.data_dir / "kubeconfig"
    deadline = time.monotonic() + 120
    while not kubeconfig.exists():
        assert cluster.proc.poll() is None and time.monotonic() < deadline, cluster.logs()
        await asyncio.sleep(0.5)
    async with cluster.api() as api:
        await _until("node Ready", lambda: _node_ready_untainted(api), 90, cluster)
        for i in range(LOAD_PODS):
            pod = _pod(f"load{i}")
            pod["metadata"]["labels"] = {"load": "1"}
            await api.create("/api/v1/namespaces/default/pods", pod)

        async def all_ready() -> bool:
            got = await _containers(api)
            return len(got) == LOAD_PODS and all(ready == "True" for _, _, ready in got.values())

        await _until(f"{LOAD_PODS} pods Ready", all_ready, 120, cluster)


async def test_containerd_killed_under_load_is_restarted_and_no_container_restarts(faulty: UpCluster) -> None:
    async with faulty.api() as api:
        before = await _containers(api)
        old = faulty.containerd_pid()
        readies = faulty.log().count("containerd is ready again")
        os.kill(old, signal.SIGKILL)

        async def back() -> bool:
            return faulty.log().count("containerd is ready again") > readies

        await _until("the supervisor to restart containerd", back, 60, faulty)
        assert faulty.containerd_pid() != old
        assert "containerd was killed by SIGKILL" in faulty.log()
        await _ready_within(api, 15, faulty)
        await _load_unchanged(api, before, faulty)


async def test_api_server_paused_for_a_minute_leaves_the_node_ready_and_untainted(faulty: UpCluster) -> None:
    async with faulty.api() as api:
        before = await _containers(api)
        server = faulty.component_pid("server")
        os.kill(server, signal.SIGSTOP)
        try:
            await asyncio.sleep(60)
        finally:
            os.kill(server, signal.SIGCONT)
        await _ready_within(api, 15, faulty)
        # New pods schedule (no "untolerated taint") and run.
        await api.create("/api/v1/namespaces/default/pods", _pod("after-pause"))

        async def running() -> bool:
            p = await api.get("/api/v1/namespaces/default/pods/after-pause")
            return (p.get("status") or {}).get("phase") == "Running"

        await _until("a new pod Running after the pause", running, 60, faulty)
        await _load_unchanged(api, before, faulty)
        await api.delete("/api/v1/namespaces/default/pods/after-pause")


async def test_a_pod_evicted_while_the_runtime_is_down_is_deleted_once_it_is_back(faulty: UpCluster) -> None:
    short = [
        {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}
        for k in ("not-ready", "unreachable")
    ]
    path = "/api/v1/namespaces/default/pods/evicted"
    async with faulty.api() as api:
        await api.create("/api/v1/namespaces/default/pods", _pod("evicted", tolerations=short))

        async def running() -> bool:
            return ((await api.get(path)).get("status") or {}).get("phase") == "Running"

        await _until("the pod to evict Running", running, 60, faulty)
        before = await _containers(api)
        readies = faulty.log().count("containerd is ready again")
        # Pause the supervisor so the killed containerd stays down until we let it restart.
        os.kill(faulty.proc.pid, signal.SIGSTOP)
        try:
            os.kill(faulty.containerd_pid(), signal.SIGKILL)

            async def evicted() -> bool:
                return bool((await api.get(path))["metadata"].get("deletionTimestamp"))

            await _until("the taint manager to evict the pod (node NotReady)", evicted, 60, faulty)
            node = await api.get(f"/api/v1/nodes/{NODE}")
            assert _condition(node, "Ready") == "False"
            assert ("node.kubernetes.io/not-ready", "NoExecute") in {
                (t.get("key"), t.get("effect")) for t in node["spec"].get("taints") or []
            }
        finally:
            os.kill(faulty.proc.pid, signal.SIGCONT)

        async def back() -> bool:
            return faulty.log().count("containerd is ready again") > readies

        await _until("the supervisor to restart containerd", back, 60, faulty)

        async def gone() -> bool:
            try:
                await api.get(path)
            except ApiError as e:
                return e.status == 404
            return False

        await _until("the evicted pod to be deleted", gone, 30, faulty)
        await _ready_within(api, 15, faulty)
        await _load_unchanged(api, before, faulty)
