"""Fault benchmark: how a `pykubelet up` cluster recovers from killed and paused components.

Starts `pykubelet up` (private containerd, control plane, agent; default settings, so the numbers are
those of `make up`) in a private data dir, runs ``--pods`` load pods (busybox ``sleep``), then injects
one fault after the other, each once:

- ``kill -9 agent``, ``kill -9 server``, ``kill -9 containerd``: SIGKILL by PID; `up`'s supervisor
  restarts the component. The fault *ends* at the kill: restarting is part of the recovery.
- ``API paused 60s``: SIGSTOP of the server (API server and controllers) for 60 s, then SIGCONT.
- ``agent paused 20s + delete``: SIGSTOP of the agent for 20 s; one load pod is deleted right after
  the SIGSTOP. The fault ends at SIGCONT.

After the fault ends a new pod is created and the cluster is watched (0.5 s polls) until it has
recovered and stayed so for ``--settle`` seconds (longer than one node-status update period, so a
late NotReady is not missed): node Ready with no taints, the new pod Running, the deleted pod gone
from the API and from containerd, the load pods Ready. Columns:

- *node Ready*: seconds after the fault ended when the node was first seen Ready and untainted
  again (after the last poll that saw it not Ready or tainted; 0.0 = it never was either);
  *new pod Running*: when the pod created at the fault's end was first seen Running; *deleted pod
  gone*: when the pod deleted during the agent pause was gone from the API and from containerd.
  Polls are 0.5 s apart (plus the time the polls take), which bounds the resolution;
- *component back* (kill faults): until the restarted containerd answers CRI, the server answers
  ``/version``, or the agent's ``/healthz`` says ok, from a new PID;
- *restarts*: container restarts of the load pods (restartCount increments plus replaced containers);
- *leftovers*: after recovery, CRI sandboxes or containers of no API pod, and pods stuck Terminating.

Everything started is stopped by PID and the host cleaned (`up`'s own shutdown, then
``PrivateContainerd.cleanup`` in case `up` died). Needs root, containerd, runc and the CNI plugins.
Uses bridge ``pkfault0``, pods in ``198.18.202.0/24`` and pod cgroups under ``/pykubelet-faults``.

``--scale`` runs, instead, bad input at scale on the fake runtime (no root, no containerd;
``pykubelet server``, ``pykubelet fakecri``, ``pykubelet agent`` and ``pykubelet hollow`` as processes):

- *burst*: ``--scale-pods`` (1,000) pods bound to one agent are created, 32 requests in flight, and
  three of four deleted right after their create, while a raw TLS pod watch with a 4 KiB receive
  buffer never reads and a GET every 100 ms records the API's latency: seconds until the API holds
  exactly the kept pods (Running, none Terminating) and the runtime runs exactly those, server and
  agent CPU-seconds, server max RSS, whether the stalled watch was closed and logged;
- *node loss*: two hollow nodes, ``--scale-pods`` pods on ``lost-0`` and 50 on ``kept-0``; ``lost-0``'s
  process is killed: seconds until the unreachable taint, every pod Ready=False, every pod evicted;
  then the Node is deleted: seconds until pod GC deleted them; ``kept-0`` is checked untouched on
  every poll. ``--toleration`` sets the server's default tolerationSeconds (30; upstream 300).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import grpc  # noqa: E402
from common import cpu_seconds, free_port, rss_bytes  # noqa: E402
from cri_api.v1 import api_pb2 as pb  # noqa: E402
from cri_api.v1 import api_pb2_grpc as pbg  # noqa: E402

from pykubelet.common.apiclient import ApiClient, ApiError  # noqa: E402
from pykubelet.up.containerd import PrivateContainerd  # noqa: E402
from pykubelet.up.hollow import SOCK_DIR_PREFIX  # noqa: E402

NODE = "pkfaults"
POD_CIDR = "198.18.202.0/24"
BRIDGE = "pkfault0"
CGROUP_ROOT = "/pykubelet-faults"
PODS = "/api/v1/namespaces/default/pods"
Obj = dict[str, Any]


def log(msg: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pod(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "100000"]}],
        },
    }


def condition(obj: Obj, ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


@dataclass
class Result:
    fault: str
    back_s: float | None = None  # kill faults: until the restarted component answers again
    node_ready_s: float | None = None  # last time seen not Ready/tainted, after the fault ended
    new_pod_running_s: float | None = None
    deleted_gone_s: float | None = None
    restarts: int = 0
    leftovers: list[str] = field(default_factory=list)
    recovered: bool = False


class UpCluster:
    """`pykubelet up` in a private data dir, driven through its API and its containerd socket."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir.parent / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cd = PrivateContainerd(data_dir / "containerd", pod_cidr=POD_CIDR, bridge=BRIDGE,
                                    cgroup_parent=CGROUP_ROOT)
        self.paused: set[int] = set()
        self.healthz_port = free_port()

    def start(self) -> None:
        cmd = [
            sys.executable, "-m", "pykubelet", "up", "--data-dir", str(self.data_dir), "--node-name", NODE,
            "--pod-cidr", POD_CIDR, "--bridge", BRIDGE, "--cgroup-root", CGROUP_ROOT,
            "--secure-port", str(free_port()), "--kubelet-port", str(free_port()),
            f"--agent-arg=--healthz-port={self.healthz_port}",
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log(f"started pykubelet up (pid {self.proc.pid}), data dir {self.data_dir}")

    def api(self) -> ApiClient:
        return ApiClient.from_kubeconfig(self.data_dir / "kubeconfig")

    def pid(self, component: str) -> int:
        if component == "containerd":
            return int((self.data_dir / "containerd" / "containerd.pid").read_text())
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"pykubelet" in argv and component.encode() in argv and str(self.data_dir).encode() in b" ".join(argv):
                return int(entry.name)
        raise RuntimeError(f"no {component} process running")

    def signal(self, pid: int, sig: signal.Signals) -> None:
        os.kill(pid, sig)
        if sig == signal.SIGSTOP:
            self.paused.add(pid)
        elif sig == signal.SIGCONT:
            self.paused.discard(pid)

    def stop(self) -> None:
        for pid in list(self.paused):  # a stopped process cannot act on SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                log("pykubelet up did not stop in 120 s; killing its process group")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            log(f"pykubelet up exited {self.proc.returncode}")
        problems = self.cd.cleanup()
        if problems:
            log(f"cleanup problems: {problems}")

    async def answers(self, component: str, api: ApiClient) -> bool:
        """Does the component answer: CRI Version, GET /version, or the agent's /healthz?"""
        if component == "containerd":
            return await self.cd.ready()
        if component == "server":
            await api.request("GET", "/version", timeout=1)
            return True
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.healthz_port), 1)
        try:
            writer.write(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            reply = await asyncio.wait_for(reader.read(), 1)
        finally:
            writer.close()
        return reply.startswith(b"HTTP/1.1 200") or reply.startswith(b"HTTP/1.0 200")

    async def cri_pods(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """(sandbox id -> pod uid, [(container id, pod uid)]) as containerd has them."""
        async with grpc.aio.insecure_channel(self.cd.endpoint) as ch:
            rt = pbg.RuntimeServiceStub(ch)
            sbs = await rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10)
            cts = await rt.ListContainers(pb.ListContainersRequest(), timeout=10)
        sandboxes = {s.id: s.metadata.uid for s in sbs.items}
        containers = [(c.id, c.labels.get("io.kubernetes.pod.uid", "")) for c in cts.containers]
        return sandboxes, containers


async def until(what: str, check: Callable[[], Awaitable[bool]], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiError, grpc.aio.AioRpcError, OSError):
            if await check():
                return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"timed out after {limit:.0f}s waiting for {what}")


async def load_state(api: ApiClient) -> dict[str, tuple[str, int, str | None]]:
    out = {}
    for p in (await api.request("GET", PODS, params={"labelSelector": "load=1"}, timeout=5))["items"]:
        [cs] = (p.get("status") or {}).get("containerStatuses") or [{}]
        out[p["metadata"]["name"]] = (cs.get("containerID", ""), int(cs.get("restartCount", 0)), condition(p, "Ready"))
    return out


def count_restarts(before: dict[str, tuple[str, int, str | None]], after: dict[str, tuple[str, int, str | None]]) -> int:
    n = 0
    for name, (cid, restarts, _) in before.items():
        if name not in after:
            continue
        now_cid, now_restarts, _ = after[name]
        n += max(0, now_restarts - restarts)
        if now_cid and now_cid != cid and now_restarts == restarts:
            n += 1  # replaced without the count going up (re-created pod sandbox)
    return n


async def leftovers(up: UpCluster, api: ApiClient) -> list[str]:
    pods = (await api.request("GET", PODS, timeout=5))["items"]
    uids = {p["metadata"]["uid"] for p in pods}
    found = [f"pod {p['metadata']['name']} Terminating" for p in pods if p["metadata"].get("deletionTimestamp")]
    sandboxes, containers = await up.cri_pods()
    found += [f"sandbox {sid[:12]} (pod uid {uid})" for sid, uid in sandboxes.items() if uid not in uids]
    found += [f"container {cid[:12]} (pod uid {uid})" for cid, uid in containers if uid not in uids]
    return found


async def observe(up: UpCluster, api: ApiClient, result: Result, ended: float, canary: str,
                  deleted: tuple[str, str] | None, settle: float, limit: float = 240.0) -> None:
    """Poll until every criterion holds and has held for ``settle`` seconds (or ``limit`` passes)."""
    last_bad: dict[str, float] = {}
    recovered_at: dict[str, float] = {}  # first poll seen good after the last poll seen bad
    good_since: float | None = None
    while True:
        now = time.monotonic() - ended
        ok: dict[str, bool] = {}
        try:
            node = await api.request("GET", f"/api/v1/nodes/{NODE}", timeout=2)
            ok["node"] = condition(node, "Ready") == "True" and not (node.get("spec") or {}).get("taints")
        except ApiError:
            ok["node"] = False
        try:
            p = await api.request("GET", f"{PODS}/{canary}", timeout=2)
            ok["canary"] = (p.get("status") or {}).get("phase") == "Running"
        except ApiError:
            ok["canary"] = False
        if deleted is not None:
            name, uid = deleted
            try:
                await api.request("GET", f"{PODS}/{name}", timeout=2)
                ok["deleted"] = False
            except ApiError as e:
                ok["deleted"] = e.status == 404
            if ok["deleted"]:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    sandboxes, containers = await up.cri_pods()
                    ok["deleted"] = uid not in sandboxes.values() and uid not in {u for _, u in containers}
        try:
            ok["load"] = all(r == "True" for _, _, r in (await load_state(api)).values())
        except ApiError:
            ok["load"] = False
        for key, value in ok.items():
            if not value:
                last_bad[key] = now
                recovered_at.pop(key, None)
            else:
                recovered_at.setdefault(key, now)
        if all(ok.values()):
            good_since = good_since if good_since is not None else now
            if now - good_since >= settle:
                result.recovered = True
                break
        else:
            good_since = None
        if now > limit:
            log(f"{result.fault}: not recovered after {limit:.0f}s: {ok}")
            break
        await asyncio.sleep(0.5)
    def at(key: str) -> float | None:
        t = recovered_at.get(key)
        return None if t is None else round(t, 1)

    result.node_ready_s = at("node") if "node" in last_bad else 0.0
    result.new_pod_running_s = at("canary")
    if deleted is not None:
        result.deleted_gone_s = at("deleted")


async def run_fault(up: UpCluster, fault: str, settle: float, index: int) -> Result:
    result = Result(fault)
    async with up.api() as api:
        before = await load_state(api)
        deleted: tuple[str, str] | None = None
        log(f"fault: {fault}")
        if fault.startswith("kill -9 "):
            component = fault.removeprefix("kill -9 ")
            old = up.pid(component)
            up.signal(old, signal.SIGKILL)
            killed = time.monotonic()

            async def back() -> bool:
                try:
                    pid = up.pid(component)
                except (RuntimeError, OSError, ValueError):
                    return False
                return pid != old and await up.answers(component, api)

            await until(f"{component} to answer again", back, 120)
            result.back_s = round(time.monotonic() - killed, 1)
        elif fault == "API paused 60s":
            pid = up.pid("server")
            up.signal(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(60)
            finally:
                up.signal(pid, signal.SIGCONT)
        elif fault == "agent paused 20s + delete":
            victim = sorted(before)[0]
            uid = (await api.get(f"{PODS}/{victim}"))["metadata"]["uid"]
            pid = up.pid("agent")
            up.signal(pid, signal.SIGSTOP)
            try:
                await api.delete(f"{PODS}/{victim}")
                deleted = (victim, uid)
                before.pop(victim)
                await asyncio.sleep(20)
            finally:
                up.signal(pid, signal.SIGCONT)
        else:
            raise ValueError(fault)
        ended = killed if fault.startswith("kill -9 ") else time.monotonic()
        canary = f"canary{index}"

        async def create_canary() -> bool:
            try:
                await api.request("POST", PODS, body=pod(canary), timeout=2)
            except ApiError as e:
                if e.status != 409:  # 409: an earlier attempt that timed out did create it
                    raise
            return True

        await until("the API server to take a new pod", create_canary, 120)
        await observe(up, api, result, ended, canary, deleted, settle)
        after = await load_state(api)
        result.restarts = count_restarts(before, after) + sum(1 for n in before if n not in after)
        result.leftovers = await leftovers(up, api)
        await api.delete(f"{PODS}/{canary}")

        async def canary_gone() -> bool:
            try:
                await api.request("GET", f"{PODS}/{canary}", timeout=2)
            except ApiError as e:
                return e.status == 404
            return False

        await until("the canary pod to go", canary_gone, 60)
    log(f"{fault}: {asdict(result)}")
    return result


def table(results: list[Result], pods: int) -> str:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    def worst(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    lines = [
        f"| fault ({pods} pods running) | runs | component back | node Ready + untainted | new pod Running "
        "| deleted pod gone | container restarts | leftovers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    faults = list(dict.fromkeys(r.fault for r in results))
    for fault in faults:
        rs = [r for r in results if r.fault == fault]
        left = [x for r in rs for x in r.leftovers]
        left_s = str(len(left)) + (f" ({'; '.join(left)})" if left else "")
        note = "" if all(r.recovered for r in rs) else " (not recovered)"
        lines.append(
            f"| {fault}{note} | {len(rs)} | {s(worst([r.back_s for r in rs]))} "
            f"| {s(worst([r.node_ready_s for r in rs]))} | {s(worst([r.new_pod_running_s for r in rs]))} "
            f"| {s(worst([r.deleted_gone_s for r in rs]))} | {sum(r.restarts for r in rs)} | {left_s} |"
        )
    return "\n".join(lines)


FAULTS = ["kill -9 agent", "kill -9 server", "kill -9 containerd", "API paused 60s", "agent paused 20s + delete"]


async def drive(up: UpCluster, args: argparse.Namespace, results: list[Result]) -> None:
    async def kubeconfig() -> bool:
        if up.proc is not None and up.proc.poll() is not None:
            raise RuntimeError(f"pykubelet up exited {up.proc.returncode}; see {up.log_path}")
        return (up.data_dir / "kubeconfig").exists()

    await until("the admin kubeconfig", kubeconfig, 120)
    async with up.api() as api:

        async def node_ready() -> bool:
            node = await api.request("GET", f"/api/v1/nodes/{NODE}", timeout=5)
            return condition(node, "Ready") == "True"

        await until("node Ready", node_ready, 120)
        for i in range(args.pods):
            await api.create(PODS, pod(f"load{i}", {"load": "1"}))

        async def all_ready() -> bool:
            got = await load_state(api)
            return len(got) == args.pods and all(r == "True" for _, _, r in got.values())

        await until(f"{args.pods} load pods Ready", all_ready, 300)
    # Rounds of every fault rather than the same fault back to back: each fault then starts from a
    # cluster that had minutes to settle (client back-offs reset, as after a real, rare fault).
    index = 0
    for _ in range(args.repeat):
        for fault in args.faults or FAULTS:
            results.append(await run_fault(up, fault, args.settle, index))
            index += 1


# ------------------------------------------------------------------ bad input at scale (fake CRI, no root)
# `--scale`: the faults of issue 17 at 1,000 pods, on the fake runtime (see docs/faults.md):
# a burst of creations and deletions on one agent, a watch client that never reads meanwhile, and a
# node lost with its pods. Numbers are wall seconds on a shared machine (load average recorded) and
# CPU-seconds of the server process.
STALLED_UA = "bench-stalled-watcher/1.0"


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" 1")[0].strip()


def bound_pod(name: str, node: str) -> Obj:
    p = pod(name)
    p["spec"]["nodeName"] = node
    p["spec"]["automountServiceAccountToken"] = False  # no token volumes: nothing to mount
    return p


class LatencyProbe:
    """GET one object every 100 ms; latencies in ms."""

    def __init__(self, api: ApiClient, path: str) -> None:
        self.api, self.path = api, path
        self.ms: list[float] = []
        self.errors = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LatencyProbe:
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        while True:
            t = time.monotonic()
            try:
                await self.api.request("GET", self.path, timeout=30)
                self.ms.append((time.monotonic() - t) * 1000)
            except Exception:
                self.errors += 1
            await asyncio.sleep(0.1)

    async def stop(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        ms = sorted(self.ms) or [0.0]
        return {"gets": len(self.ms), "errors": self.errors, "median_ms": round(ms[len(ms) // 2], 1),
                "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1), "max_ms": round(ms[-1], 1)}


class StalledWatch:
    """A raw TLS pod watch with a 4 KiB receive buffer whose client never reads."""

    def __init__(self, url: str, kubeconfig: Path) -> None:
        import yaml

        cfg = yaml.safe_load(kubeconfig.read_text())
        self.token = str(cfg["users"][0]["user"]["token"])
        host, port = url.removeprefix("https://").split(":")
        self.addr = (host, int(port))
        self.sock: ssl.SSLSocket | None = None

    def open(self) -> None:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.settimeout(10)
        raw.connect(self.addr)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # loopback, our own server: only the flow control matters here
        self.sock = ctx.wrap_socket(raw)
        self.sock.sendall((f"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: {self.addr[0]}\r\n"
                           f"Authorization: Bearer {self.token}\r\nUser-Agent: {STALLED_UA}\r\n\r\n").encode())

    def ended(self) -> bool:
        """Did the server end the connection (EOF or reset) within 10 s of reading it out?"""
        assert self.sock is not None
        try:
            while self.sock.recv(65536):
                pass
            return True
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], limit: float, t0: float) -> float:
    """Poll every 0.5 s; seconds after ``t0`` when ``check`` first held."""
    await until(what, check, limit)
    return round(time.monotonic() - t0, 1)


async def burst(api: ApiClient, url: str, kubeconfig: Path, sock: Path, server_pid: int, agent_pid: int,
                n: int, server_log: Path) -> dict[str, Any]:
    from pykubelet.cri import CRIClient

    node = "burst"
    names = [f"burst-{i:04d}" for i in range(n)]
    kept = sorted(x for i, x in enumerate(names) if i % 4 == 0)
    stalled = StalledWatch(url, kubeconfig)
    await asyncio.to_thread(stalled.open)
    probe = LatencyProbe(api, f"/api/v1/nodes/{node}").start()
    cpu0 = {"server": cpu_seconds(server_pid), "agent": cpu_seconds(agent_pid)}
    rss_max = 0
    out: dict[str, Any] = {"loadavg_before": loadavg()}
    cri = CRIClient(f"unix://{sock}")
    t0 = time.monotonic()
    sem = asyncio.Semaphore(32)

    async def one(name: str) -> None:
        nonlocal rss_max
        async with sem:
            await api.create(PODS, bound_pod(name, node))
            if name not in kept:
                await api.delete(f"{PODS}/{name}")
            rss_max = max(rss_max, rss_bytes(server_pid))

    try:
        await asyncio.gather(*(one(x) for x in names))
        out["requests_done_s"] = round(time.monotonic() - t0, 1)

        async def settled() -> bool:
            items = (await api.list(PODS))["items"]
            return sorted(p["metadata"]["name"] for p in items) == kept and all(
                (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                for p in items)

        out["api_settled_s"] = await wait_for("only the kept pods, Running", settled, 600, t0)

        async def runtime_is(uids: set[str]) -> bool:
            ready = {s.metadata.uid for s in await cri.list_pod_sandbox() if s.state == pb.SANDBOX_READY}
            running = [c.labels.get("io.kubernetes.pod.uid", "") for c in await cri.list_containers()
                       if c.state == pb.CONTAINER_RUNNING]
            return ready == uids and sorted(running) == sorted(uids)

        uids = {p["metadata"]["uid"] for p in (await api.list(PODS))["items"]}
        out["runtime_settled_s"] = await wait_for("the runtime to run exactly the kept pods",
                                                  lambda: runtime_is(uids), 300, t0)
        out["getter"] = await probe.stop()
        out["server_cpu_s"] = round(cpu_seconds(server_pid) - cpu0["server"], 1)
        out["agent_cpu_s"] = round(cpu_seconds(agent_pid) - cpu0["agent"], 1)
        out["server_rss_max_mb"] = round(rss_max / 2**20, 1)
        out["stalled_watch_closed"] = await asyncio.to_thread(stalled.ended)
        text = await asyncio.to_thread(server_log.read_text, errors="replace")
        out["stalled_watch_logged"] = any("unresponsiveness" in line and STALLED_UA in line
                                          for line in text.splitlines())
        # then the kept pods go too: the node must end empty
        t1 = time.monotonic()
        await asyncio.gather(*(api.delete(f"{PODS}/{x}") for x in kept))

        async def empty() -> bool:
            return not (await api.list(PODS))["items"]

        out["kept_deleted_api_s"] = await wait_for("no pods left", empty, 300, t1)
        out["kept_deleted_runtime_s"] = await wait_for("no ready sandbox left", lambda: runtime_is(set()), 300, t1)
        out["loadavg_after"] = loadavg()
    finally:
        await probe.stop()
        stalled.close()
        await cri.close()
    return out


async def node_loss(api: ApiClient, kubeconfig: Path, tmp: Path, server_pid: int, n: int, kept_n: int,
                    toleration: int) -> dict[str, Any]:
    from scale_common import spawn, stop_process

    out: dict[str, Any] = {"loadavg_before": loadavg(), "toleration_s": toleration}

    def hollow(prefix: str, max_pods: int) -> subprocess.Popen[bytes]:
        return spawn([sys.executable, "-m", "pykubelet", "hollow", "--kubeconfig", str(kubeconfig), "--nodes", "1",
                      "--name-prefix", prefix, "--max-pods", str(max_pods), "--pod-cidr",
                      "198.19.0.0/16" if prefix == "lost-" else "198.18.128.0/17",
                      "--data-dir", str(tmp / prefix)], tmp / f"{prefix}hollow.log")

    sock_glob = f"/tmp/{SOCK_DIR_PREFIX}*"  # each hollow process's socket folder
    sock_dirs = set(glob.glob(sock_glob))
    lost_proc = hollow("lost-", n + 100)
    kept_proc = hollow("kept-", kept_n + 100)
    probe: LatencyProbe | None = None
    try:
        async def nodes_ready() -> bool:
            items = (await api.list("/api/v1/nodes"))["items"]
            return sum(1 for x in items if x["metadata"]["name"] in ("lost-0", "kept-0")
                       and condition(x, "Ready") == "True") == 2

        await until("the two hollow nodes Ready", nodes_ready, 120)
        sem = asyncio.Semaphore(32)

        async def one(name: str, node: str) -> None:
            async with sem:
                await api.create(PODS, bound_pod(name, node))

        lost = [f"lost-{i:04d}" for i in range(n)]
        kept = [f"kept-{i:03d}" for i in range(kept_n)]
        await asyncio.gather(*(one(x, "lost-0") for x in lost), *(one(x, "kept-0") for x in kept))

        async def all_running() -> bool:
            items = (await api.list(PODS))["items"]
            return sum(1 for p in items if condition(p, "Ready") == "True") == n + kept_n

        await until("every pod Ready", all_running, 600)
        probe = LatencyProbe(api, "/api/v1/nodes/kept-0").start()
        cpu0 = cpu_seconds(server_pid)
        violations: list[str] = []

        async def kept_fine() -> None:  # the other node and its pods are never touched
            node = await api.get("/api/v1/nodes/kept-0")
            if condition(node, "Ready") != "True" or (node.get("spec") or {}).get("taints"):
                violations.append("kept-0 not Ready or tainted")
            items = (await api.list(PODS, params={"fieldSelector": "spec.nodeName=kept-0"}))["items"]
            if len(items) != kept_n or any(condition(p, "Ready") != "True" for p in items):
                violations.append("a kept pod gone or not Ready")

        t0 = time.monotonic()
        lost_proc.kill()  # the agent is gone, no goodbye
        await asyncio.to_thread(lost_proc.wait, 30)
        log("lost-0's agent killed (SIGKILL)")

        async def lost_pods() -> list[Obj]:
            await kept_fine()
            return list((await api.list(PODS, params={"fieldSelector": "spec.nodeName=lost-0"}))["items"])

        async def tainted() -> bool:
            node = await api.get("/api/v1/nodes/lost-0")
            taints = {(t.get("key"), t.get("effect")) for t in (node.get("spec") or {}).get("taints") or []}
            return ("node.kubernetes.io/unreachable", "NoExecute") in taints

        out["unreachable_taint_s"] = await wait_for("the unreachable taint", tainted, 300, t0)

        async def all_not_ready() -> bool:
            return all(condition(p, "Ready") == "False" for p in await lost_pods())

        out["all_pods_not_ready_s"] = await wait_for("every lost pod Ready=False", all_not_ready, 300, t0)

        async def all_evicted() -> bool:
            return all(p["metadata"].get("deletionTimestamp") for p in await lost_pods())

        out["all_pods_evicted_s"] = await wait_for("every lost pod evicted (Terminating)", all_evicted, 600, t0)
        t1 = time.monotonic()
        await api.delete("/api/v1/nodes/lost-0")

        async def collected() -> bool:
            return not await lost_pods()

        out["node_deleted_pods_gone_s"] = await wait_for("pod GC to delete the lost pods", collected, 600, t1)
        await kept_fine()
        out["server_cpu_s"] = round(cpu_seconds(server_pid) - cpu0, 1)
        out["getter"] = await probe.stop()
        out["kept_node_violations"] = sorted(set(violations))
        out["loadavg_after"] = loadavg()
    finally:
        if probe is not None:
            await probe.stop()
        await stop_process(lost_proc, "lost hollow node")
        await stop_process(kept_proc, "kept hollow node")
        # the SIGKILLed process could not remove its socket folder; the stopped one removed its own
        for d in set(glob.glob(sock_glob)) - sock_dirs:
            shutil.rmtree(d, ignore_errors=True)
    return out


async def scale_faults(args: argparse.Namespace) -> dict[str, Any]:
    from scale_common import ControlPlane, remove_data_dir, start_fakecri, stop_process

    tmp = Path(tempfile.mkdtemp(prefix="pkfs-", dir="/tmp"))
    cp = ControlPlane(tmp / "data", extra=[
        "--default-unreachable-toleration-seconds", str(args.toleration),
        "--default-not-ready-toleration-seconds", str(args.toleration)])
    result: dict[str, Any] = {"pods": args.scale_pods}
    fake = agent = None
    try:
        fake = await start_fakecri(tmp / "fake.sock", tmp / "fakecri.log")
        api = await cp.start()
        if "burst" in args.scenarios:
            agent = await cp.start_agent(f"unix://{tmp / 'fake.sock'}", "burst",
                                         [f"--max-pods={args.scale_pods + 100}", "--cgroups-per-qos=false"])
            result["burst"] = await burst(api, cp.url, cp.kubeconfig, tmp / "fake.sock", cp.pid, agent.pid,
                                          args.scale_pods, cp.data_dir / "server.log")
            log(f"burst: {result['burst']}")
            await stop_process(agent, "agent")
            agent = None
        if "node-loss" in args.scenarios:
            result["node_loss"] = await node_loss(api, cp.kubeconfig, tmp, cp.pid, args.scale_pods, 50,
                                                  args.toleration)
            log(f"node loss: {result['node_loss']}")
    finally:
        await stop_process(agent, "agent")
        await cp.stop()
        await stop_process(fake, "fakecri")
        await remove_data_dir(tmp, args.keep)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=30, help="load pods running during the faults (default 30)")
    p.add_argument("--settle", type=float, default=15.0,
                   help="seconds everything must stay recovered (default 15, > nodeStatusUpdateFrequency)")
    p.add_argument("--fault", dest="faults", action="append", choices=FAULTS, help="run only these (repeatable)")
    p.add_argument("--repeat", type=int, default=1, help="inject each fault this many times; the table shows "
                   "the worst time of the runs and the sum of restarts and leftovers (default 1)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--keep", action="store_true", help="keep the data dir (logs) afterwards")
    p.add_argument("--scale", action="store_true",
                   help="instead: the faults at scale on the fake runtime (no root): a burst of pod creations and "
                        "deletions with a watch client that never reads, then a node lost with its pods")
    p.add_argument("--scale-pods", type=int, default=1000, help="pods of the --scale scenarios (default 1000)")
    p.add_argument("--scenario", dest="scenarios", action="append", choices=["burst", "node-loss"],
                   help="--scale: run only these (repeatable)")
    p.add_argument("--toleration", type=int, default=30, help="--scale: the server's default not-ready/"
                   "unreachable tolerationSeconds (upstream 300; default 30 to keep the run short)")
    args = p.parse_args(argv)
    if args.scale:
        args.scenarios = args.scenarios or ["burst", "node-loss"]
        r = asyncio.run(scale_faults(args))
        print(json.dumps(r, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
        b, nl = r.get("burst") or {}, r.get("node_loss") or {}
        ok = ("burst" not in args.scenarios or "kept_deleted_runtime_s" in b) and (
            "node-loss" not in args.scenarios or ("node_deleted_pods_gone_s" in nl and not nl["kept_node_violations"]))
        return 0 if ok else 1
    if os.geteuid() != 0:
        print("bench_faults: needs root (a private containerd)", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="pkf-", dir="/tmp"))
    up = UpCluster(tmp / "d")
    results: list[Result] = []
    try:
        up.cd.cleanup()  # leftovers of a crashed earlier run
        up.start()
        asyncio.run(drive(up, args, results))
    finally:
        up.stop()
        if args.keep:
            log(f"data dir and logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(results, args.pods))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0 if all(r.recovered and not r.leftovers and not r.restarts for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
