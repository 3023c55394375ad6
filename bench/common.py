"""Shared machinery for the agent benchmarks (scripts, not tests).

Every benchmark compares pykubelet against a *baseline measured in the same run on the same
containerd*, so machine noise (2 shared cores, other engineers' test runs) mostly cancels out in
the ratios. The pieces:

- :func:`bench_containerd` — a private containerd (``PrivateContainerd``) in its own temp folder, on
  bridge ``pkbench0`` with pods in ``198.18.200.0/24`` and pod cgroups under ``/pykubelet-bench-<pid>``,
  with the offline busybox/pause images imported. Stopped and cleaned (processes, mounts, cgroups,
  bridge, iptables chains) in ``finally``.
- :func:`pod_manifest` — the benchmark pod: one ``busybox:1.36`` container running ``sleep 3600``
  with ``imagePullPolicy: IfNotPresent`` (BestEffort QoS).
- :class:`RawCRI` — runs that same pod with the bare CRI calls the agent makes for it, built by the
  agent's own pure builders (``kuberuntime.criconfig.sandbox_config``/``container_config``, pod cgroup
  from ``cm.PodCgroupManager``): pod cgroup + log dir, RunPodSandbox, PodSandboxStatus (pod IP),
  ImageStatus (IfNotPresent check), CreateContainer, StartContainer. This is the floor: what any
  kubelet must pay the runtime; everything above it is the agent's (and control plane's) overhead.
- :class:`Cluster` — ``pykubelet server`` and ``pykubelet agent`` as subprocesses against that
  containerd, with the exact command lines ``pykubelet up`` would use (``up.main.server_argv`` and
  ``agent_argv``) on free 127.0.0.1 ports, so their PIDs can be measured individually.
- :func:`wait_pods` — waits for pods through an API *watch* (not polling), recording for each pod
  the wall-clock moment it was first seen ``Running`` with every container running.
- statistics (min/median/p90/max) and ``/proc`` readers for RSS and CPU time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from pykubelet.agent.cm.podcgroups import PodCgroupManager  # noqa: E402
from pykubelet.agent.kuberuntime import criconfig  # noqa: E402
from pykubelet.common.apiclient import ApiClient, ApiError  # noqa: E402
from pykubelet.cri import CRIClient  # noqa: E402
from pykubelet.up.containerd import PrivateContainerd, remove_cgroup_tree  # noqa: E402
from pykubelet.up.images import BUSYBOX_PINNED_IMAGE, bootstrap_images, default_cache_dir  # noqa: E402

POD_CIDR = "198.18.200.0/24"
BRIDGE = "pkbench0"
# One cgroup root per benchmark process: an agent removes the pod cgroups under its root that belong
# to no pod it knows, so two benchmarks sharing a root would each treat the other's live pod cgroups
# as orphans and retry removing them in every housekeeping pass (up to ~10 % of a core measured).
CGROUP_ROOT = f"/pykubelet-bench-{os.getpid()}"
NODE_NAME = "pkbench"
NAMESPACE = "default"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- statistics
@dataclass
class Stats:
    n: int
    min: float
    median: float
    p90: float
    max: float

    def fmt(self, unit: str = "s", scale: float = 1.0, digits: int = 3) -> str:
        f = f"{{:.{digits}f}}"
        vals = [f.format(v * scale) for v in (self.min, self.median, self.p90, self.max)]
        return "/".join(vals) + f" {unit}"


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(values: Iterable[float]) -> Stats:
    v = list(values)
    if not v:
        return Stats(0, float("nan"), float("nan"), float("nan"), float("nan"))
    return Stats(len(v), min(v), statistics.median(v), percentile(v, 90), max(v))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def save_json(path: str | None, data: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2, default=lambda o: o.__dict__) + "\n")
        log(f"results written to {path}")


# ------------------------------------------------------------------------------------------ /proc
def rss_bytes(pid: int) -> int:
    """VmRSS of a process (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process, in seconds (children not included)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -------------------------------------------------------------------------------------- manifests
def pod_manifest(name: str, *, uid: str | None = None, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The benchmark pod (``uid`` only for raw CRI runs; the API server assigns its own)."""
    md: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": "pkbench"}}
    if uid:
        md["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {
            "containers": [
                {
                    "name": "sleep",
                    "image": "busybox:1.36",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                }
            ],
            "restartPolicy": "Always",
        },
    }


def pods_yaml(pods: list[dict[str, Any]]) -> str:
    """A multi-document YAML (JSON documents are valid YAML)."""
    return "".join("---\n" + json.dumps(p, indent=1) + "\n" for p in pods)


# ------------------------------------------------------------------------------------- containerd
@contextlib.asynccontextmanager
async def bench_containerd() -> AsyncIterator[PrivateContainerd]:
    """A private containerd with the offline images; stopped and the host cleaned afterwards."""
    # Short path: containerd's socket lives in the data dir and sun_path is limited to 108 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="pkb-", dir="/tmp"))
    cd = PrivateContainerd(
        tmp / "cd", pod_cidr=POD_CIDR, bridge=BRIDGE, cgroup_parent=CGROUP_ROOT, log=lambda m: log(f"containerd: {m}")
    )
    problems = cd.cleanup()  # leftovers of a crashed earlier bench
    if problems:
        log(f"pre-cleanup problems: {problems}")
    try:
        await cd.start()
        await bootstrap_images(cd.address, cache_dir=default_cache_dir())
        yield cd
    finally:
        with contextlib.suppress(Exception):
            await cd.stop_all_sandboxes()
        await cd.stop()
        problems = await asyncio.to_thread(cd.cleanup)
        if problems:
            log(f"cleanup problems: {problems}")
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------- raw CRI
@dataclass
class RawPod:
    pod: dict[str, Any]
    sandbox_id: str = ""
    container_id: str = ""


class RawCRI:
    """The CRI calls the agent makes to start/stop the benchmark pod, and nothing else."""

    def __init__(self, cd: PrivateContainerd, logs_dir: Path) -> None:
        self.cri = CRIClient(cd.endpoint)
        self.cgroups = PodCgroupManager(CGROUP_ROOT)
        self.logs_dir = logs_dir
        self.memory_capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    async def __aenter__(self) -> RawCRI:
        await self.cri.connect(wait=10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cri.close()

    async def start_pod(self, name: str) -> RawPod:
        pod = pod_manifest(name, uid=str(uuid.uuid4()))
        rp = RawPod(pod)
        await self.cgroups.ensure(pod)
        sb = criconfig.sandbox_config(pod, 0, pod_logs_dir=str(self.logs_dir),
                                      cgroup_parent=self.cgroups.cgroup_parent(pod))
        os.makedirs(sb.log_directory, exist_ok=True)
        rp.sandbox_id = await self.cri.run_pod_sandbox(sb)
        st = await self.cri.pod_sandbox_status(rp.sandbox_id)
        ips = [st.status.network.ip] if st.status.network.ip else []
        img = await self.cri.image_status(BUSYBOX_PINNED_IMAGE)
        if not img.image.id:
            raise RuntimeError(f"{BUSYBOX_PINNED_IMAGE} not present in containerd")
        container = pod["spec"]["containers"][0]
        cfg = await criconfig.container_config(
            pod, container, image_ref=img.image.id, restart_count=0, pod_ips=ips, host_ips=["127.0.0.1"],
            node_name=NODE_NAME, memory_capacity=self.memory_capacity, node_allocatable={"cpu": Decimal(2)},
        )
        os.makedirs(os.path.join(sb.log_directory, container["name"]), exist_ok=True)
        rp.container_id = await self.cri.create_container(rp.sandbox_id, cfg, sb)
        await self.cri.start_container(rp.container_id)
        return rp

    async def stop_pod(self, rp: RawPod) -> None:
        if rp.container_id:
            await self.cri.stop_container(rp.container_id, 0)
        if rp.sandbox_id:
            await self.cri.stop_pod_sandbox(rp.sandbox_id)
            await self.cri.remove_pod_sandbox(rp.sandbox_id)
        await self.cgroups.destroy(rp.pod["metadata"]["uid"])
        shutil.rmtree(criconfig.pod_log_dir(str(self.logs_dir), rp.pod), ignore_errors=True)


async def wait_runtime_empty(cri: CRIClient, within: float = 120) -> None:
    """Wait until the runtime has no pod sandbox left (the agent finished tearing pods down)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not await cri.list_pod_sandbox():
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("pod sandboxes still present in the runtime")


# ---------------------------------------------------------------------------------------- cluster
@dataclass
class Cluster:
    """``pykubelet server`` + ``pykubelet agent`` subprocesses, as ``pykubelet up`` would start them."""

    cd: PrivateContainerd
    data_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api: ApiClient | None = None
    url: str = ""
    agent_args: list[str] = field(default_factory=list)  # more agent flags (e.g. --max-pods above 110)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    async def start(self, ready_within: float = 60) -> None:
        from pykubelet.up import main as up

        self.data_dir.mkdir(parents=True, exist_ok=True)
        secure, kubelet, healthz = free_port(), free_port(), free_port()
        args = up.build_parser().parse_args([
            "--data-dir", str(self.data_dir), "--secure-port", str(secure), "--kubelet-port", str(kubelet),
            "--pod-cidr", POD_CIDR, "--bridge", BRIDGE, "--cgroup-root", CGROUP_ROOT,
            "--node-name", NODE_NAME, f"--agent-arg=--healthz-port={healthz}",
            *(f"--agent-arg={a}" for a in self.agent_args),
        ])
        data_dir = up.prepare_data_dir(str(self.data_dir))
        if up.default_encryption(args):  # as `pykubelet up` does before starting the server
            from pykubelet.server.encryption import ensure_default_config

            await asyncio.to_thread(ensure_default_config, up.encryption_config_path(data_dir))
        self.url = up.server_url(args)
        logs = data_dir / "logs"
        logs.mkdir(exist_ok=True)
        self._spawn("server", up.server_argv(args, data_dir), logs / "server.log")
        admin = data_dir / "kubeconfig"
        deadline = time.monotonic() + ready_within
        while not (admin.exists() and await _port_open(secure)):
            self._check_alive("server")
            if time.monotonic() > deadline:
                raise TimeoutError("server did not become ready")
            await asyncio.sleep(0.2)
        await asyncio.to_thread(up.ensure_node_kubeconfig, data_dir, NODE_NAME, self.url)
        await up.ensure_bootstrap_kubeconfig(data_dir, NODE_NAME)  # the agent joins as `up`'s does
        self._spawn("agent", up.agent_argv(args, data_dir, NODE_NAME, self.cd.endpoint), logs / "agent.log")
        self.api = ApiClient.from_kubeconfig(str(admin))
        while True:  # Ready node = the agent registered and reports a healthy runtime
            self._check_alive("agent")
            with contextlib.suppress(ApiError):
                node = await self.api.get(f"/api/v1/nodes/{NODE_NAME}")
                conds = {c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions", [])}
                if conds.get("Ready") == "True":
                    break
            if time.monotonic() > deadline:
                tail = (self.data_dir / "logs" / "agent.log").read_text(errors="replace")[-3000:]
                raise TimeoutError(f"node did not become Ready; agent log:\n{tail}")
            await asyncio.sleep(0.3)

    def _spawn(self, name: str, argv: list[str], log_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        with open(log_path, "ab") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
        log(f"{name} started (pid {self.procs[name].pid}, log {log_path})")

    def _check_alive(self, name: str) -> None:
        rc = self.procs[name].poll()
        if rc is not None:
            tail = (self.data_dir / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{name} exited with {rc}:\n{tail}")

    async def stop(self) -> None:
        if self.api is not None:
            await self.api.close()
            self.api = None
        for name in ("agent", "server"):  # agent first, like `up`
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait, 15)
            log(f"{name} stopped (pid {proc.pid})")
        left = await asyncio.to_thread(remove_cgroup_tree, CGROUP_ROOT)  # the agent's pod and QoS cgroups
        if left:
            log(f"cgroups left under {CGROUP_ROOT}: {left}")


async def _port_open(port: int) -> bool:
    try:
        _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
    except (OSError, TimeoutError):
        return False
    w.close()
    with contextlib.suppress(OSError):
        await w.wait_closed()
    return True


def pod_running(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") != "Running":
        return False
    cs = st.get("containerStatuses") or []
    return bool(cs) and all("running" in (c.get("state") or {}) for c in cs)


async def pods_path_rv(api: ApiClient) -> str:
    lst = await api.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
    return str((lst.get("metadata") or {}).get("resourceVersion", ""))


async def wait_pods(api: ApiClient, names: set[str], rv: str, *, until: str = "running",
                    within: float = 300) -> dict[str, float]:
    """Watch pods from ``rv`` until every name is Running (or gone, with until="deleted").

    Returns name -> time.monotonic() when the condition was first seen.
    """
    seen: dict[str, float] = {}
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    async def run() -> None:
        nonlocal rv
        while True:
            try:
                async for typ, obj in api.watch(path, resource_version=rv, timeout_seconds=int(within)):
                    md = obj.get("metadata") or {}
                    if typ == "BOOKMARK" or typ == "ERROR":
                        rv = md.get("resourceVersion", rv)
                        continue
                    rv = md.get("resourceVersion", rv)
                    name = md.get("name", "")
                    if name not in names or name in seen:
                        continue
                    if (until == "running" and typ != "DELETED" and pod_running(obj)) or (
                        until == "deleted" and typ == "DELETED"
                    ):
                        seen[name] = time.monotonic()
                        if len(seen) == len(names):
                            return
            except ApiError as e:
                if e.status != 410:
                    raise
                rv = await pods_path_rv(api)  # expired: missed events are re-checked by a list below
                for p in (await api.list(path)).get("items", []):
                    n = p["metadata"]["name"]
                    if n in names and n not in seen and until == "running" and pod_running(p):
                        seen[n] = time.monotonic()
                if len(seen) == len(names):
                    return

    await asyncio.wait_for(run(), within)
    return seen


async def delete_pods(api: ApiClient, names: Iterable[str]) -> None:
    """Graceful delete with gracePeriodSeconds=1 (``sleep`` as PID 1 ignores SIGTERM), wait until gone.

    The agent kills the containers (SIGKILL after 1 s) and then confirms the deletion, as upstream.
    """
    names = set(names)
    rv = await pods_path_rv(api)
    present = {p["metadata"]["name"] for p in (await api.list(f"/api/v1/namespaces/{NAMESPACE}/pods")).get("items", [])}
    names &= present
    if not names:
        return
    waiter = asyncio.create_task(wait_pods(api, names, rv, until="deleted"))
    await asyncio.gather(*(
        api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{n}", body={"gracePeriodSeconds": 1}) for n in names
    ))
    await waiter


async def create_pods(api: ApiClient, names: list[str]) -> tuple[float, dict[str, float]]:
    """Create pods at once; returns (t0, name -> Running time) measured through a watch."""
    rv = await pods_path_rv(api)
    waiter = asyncio.create_task(wait_pods(api, set(names), rv))
    await asyncio.sleep(0)
    t0 = time.monotonic()
    await asyncio.gather(*(api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_manifest(n)) for n in names))
    return t0, await waiter


# ----------------------------------------------------------------------------------------- podman
class Podman:
    """``podman kube play`` as the peer a user would pick instead of a one-machine cluster.

    Private configuration only (``CONTAINERS_CONF``/``CONTAINERS_STORAGE_CONF`` in a temp folder, see
    /work/shared/notes/podman-peer.md): lowered default ulimits (this VM lacks CAP_SYS_RESOURCE), the
    cgroupfs manager, a file events logger, the same offline busybox and pause images loaded from the
    archives containerd gets (pause as infra image) and ``--network none``. ``close`` removes every pod,
    the storage (``podman system reset``), the temp folder and the ``libpod_parent`` cgroups it made.
    """

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pkbp-", dir="/tmp"))
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.dir / "containers.conf"),
                    "CONTAINERS_STORAGE_CONF": str(self.dir / "storage.conf")}
        self.cgroup_existed = Path("/sys/fs/cgroup/memory/libpod_parent").exists()

    @staticmethod
    def available() -> str | None:
        """None when usable, else why not."""
        return None if shutil.which("podman") else "podman not installed (apt-get install -y podman)"

    def _run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                             check=False)
        if res.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} exited {res.returncode}: {res.stderr[-2000:]}")
        return res

    def setup(self) -> None:
        from pykubelet.up.images import PAUSE_IMAGE, archive_for

        d = self.dir
        (d / "containers.conf").write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            "[engine]\n"
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{d}/events.log"\n'
            f'infra_image = "{PAUSE_IMAGE}"\n'
            'infra_command = "/pause"\n'
            'runtime = "runc"\n'
            f'tmp_dir = "{d}/tmp"\n'
        )
        (d / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{d}/graph"\nrunroot = "{d}/run"\n'
        )
        self._run("load", "-q", "-i", str(archive_for(PAUSE_IMAGE).archive))
        busybox = archive_for(BUSYBOX_PINNED_IMAGE).archive
        self._run("pull", "-q", f"oci-archive:{busybox}:1.36")

    def play(self, yaml_path: Path) -> None:
        self._run("kube", "play", "--network", "none", str(yaml_path))

    def down(self, yaml_path: Path) -> None:
        self._run("kube", "down", str(yaml_path))

    def running_containers(self) -> int:
        out = self._run("ps", "-q", "--filter", "status=running").stdout
        return len(out.split())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pod", "rm", "-a", "-f", "-t", "0")
        with contextlib.suppress(Exception):
            self._run("system", "reset", "-f")
        shutil.rmtree(self.dir, ignore_errors=True)
        for ctrl in Path("/sys/fs/cgroup").iterdir():
            top = ctrl / "libpod_parent"
            if top.is_dir():
                for sub in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    with contextlib.suppress(OSError):
                        sub.rmdir()
                if not self.cgroup_existed:
                    with contextlib.suppress(OSError):
                        top.rmdir()
