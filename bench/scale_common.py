"""Shared machinery for the scale benchmarks (scripts, not tests): see docs/benchmarks-scale.md.

The agent benchmarks' ``common`` module starts one control plane plus one agent on a containerd;
the scale benchmarks need a few more pieces, all without containerd:

- :func:`start_fakecri` — ``pykubelet fakecri`` as its own process (so its CPU is not the agent's);
- :class:`ControlPlane` — ``pykubelet server`` with its defaults on a free port, with an admin
  :class:`ApiClient`; :meth:`ControlPlane.start_agent` adds one ``pykubelet agent`` with the command
  line ``pykubelet up`` builds (``up.main.agent_argv``, node kubeconfig from the server's auth module);
- :func:`watch_until` — waits for pods through one API *watch* until a predicate holds for each
  (Running, Ready), recording when each pod first satisfied it;
- :class:`Sampler` — CPU (utime+stime from ``/proc/<pid>/stat``, as % of one core over the window)
  and RSS (VmRSS every second, max) of several processes at once;
- :class:`Timeline` — the same processes' CPU and the whole machine's busy share every 100 ms, to
  see which process is the bottleneck in each stage of a run;
- :func:`py_spy` / :func:`summarize_profile` — a py-spy sampling profile of a running process and its
  top functions by self and inclusive share of one core (py-spy is a developer tool, not a project
  dependency: ``.venv/bin/pip install py-spy``; without it profiling is skipped, saying why).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SRC, ApiClient, ApiError, _port_open, cpu_seconds, free_port, log, rss_bytes

from pykubelet.common.aio import cancel_and_wait

MB = 1024 * 1024
Pod = dict[str, Any]


def pod_ready(pod: Pod) -> bool:
    conds = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True"


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC)}


def spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True)


async def stop_process(proc: subprocess.Popen[bytes] | None, name: str, grace: float = 30) -> None:
    """SIGTERM by PID, SIGKILL after ``grace`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(proc.wait, grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        await asyncio.to_thread(proc.wait, 15)
    log(f"{name} stopped (pid {proc.pid})")


def make_data_dir(prefix: str, on_disk: bool = False) -> tuple[Path, bool]:
    """The run's folder under /tmp, with a private tmpfs mounted on it unless ``on_disk``; whether
    it is on that tmpfs.

    Why a tmpfs: the agent makes about ten inodes per pod (the pod's folders, its log folders, the
    etc-hosts file, the log symlink), as upstream's kubelet does. On this VM's root filesystem an
    inode made under /tmp costs 200-700 us of kernel CPU, depending on how many inodes nearby were
    deleted in the last seconds (ext4 skips recently deleted inodes one by one when it allocates:
    ``recently_deleted`` in ``find_inode_bit``), so a run that follows another run's cleanup paid up
    to 7 CPU-s more for 1,000 pods, the "slow state" of earlier sessions. On tmpfs an inode costs
    ~6 us whatever ran before. ``--data-on-disk`` keeps the old placement to measure that cost."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    if not on_disk:
        from pykubelet.agent.volumemanager.mounter import SystemMounter

        try:
            SystemMounter().mount_tmpfs(str(tmp), None)
            log(f"data dir {tmp} on a tmpfs of its own")
            return tmp, True
        except OSError as e:
            log(f"data dir {tmp} on disk: no tmpfs ({e})")
    return tmp, False


def unmount_under(root: Path) -> int:
    """Unmount every mount below ``root``, deepest first; returns how many. An agent stopped with its
    pods still running keeps their volumes mounted (secret and service-account token tmpfs, as
    upstream), so a benchmark that ends without deleting its pods calls this before removing its folder."""
    from pykubelet.agent.volumemanager.mounter import SystemMounter, read_mountinfo

    prefix = str(root.resolve()) + os.sep
    targets = sorted({m.path for m in read_mountinfo() if m.path.startswith(prefix)}, key=len, reverse=True)
    mounter = SystemMounter()
    for t in targets:
        with contextlib.suppress(OSError):
            mounter.unmount(t)
    return len(targets)


async def remove_data_dir(tmp: Path, keep: bool = False) -> None:
    """The end of every run: unmount what the pods left mounted, then remove (or keep) the folder."""
    n = await asyncio.to_thread(unmount_under, tmp)
    if n:
        log(f"unmounted {n} pod volumes")
    if keep:
        log(f"data dir and logs kept in {tmp}")
        return
    if await asyncio.to_thread(os.path.ismount, tmp):  # make_data_dir's tmpfs
        from pykubelet.agent.volumemanager.mounter import SystemMounter

        with contextlib.suppress(OSError):
            await asyncio.to_thread(SystemMounter().unmount, str(tmp))
    shutil.rmtree(tmp, ignore_errors=True)


async def start_fakecri(sock: Path, log_path: Path) -> subprocess.Popen[bytes]:
    proc = spawn([sys.executable, "-m", "pykubelet", "fakecri", "--listen", f"unix://{sock}"], log_path)
    for _ in range(200):
        if await asyncio.to_thread(os.path.exists, sock):
            return proc
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    tail = await asyncio.to_thread(log_path.read_text, errors="replace")
    raise RuntimeError(f"fakecri did not start: {tail[-2000:]}")


@dataclass
class ControlPlane:
    """``pykubelet server`` as a subprocess on a free port, with an admin API client."""

    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    api: ApiClient | None = None
    url: str = ""
    extra: list[str] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, within: float = 60) -> ApiClient:
        port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.url = f"https://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "pykubelet", "server", "--data-dir", str(self.data_dir),
                "--bind-address", "127.0.0.1", "--secure-port", str(port), *self.extra]
        self.proc = spawn(argv, self.data_dir / "server.log")
        log(f"server started (pid {self.proc.pid}, log {self.data_dir / 'server.log'})")
        deadline = time.monotonic() + within
        while not (await asyncio.to_thread(self.kubeconfig.exists) and await _port_open(port)):
            if self.proc.poll() is not None:
                tail = await asyncio.to_thread((self.data_dir / "server.log").read_text)
                raise RuntimeError(f"server exited: {tail[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError("server did not become ready")
            await asyncio.sleep(0.2)
        self.api = ApiClient.from_kubeconfig(str(self.kubeconfig))
        return self.api

    async def start_agent(self, endpoint: str, node_name: str, agent_args: list[str],
                          within: float = 60) -> subprocess.Popen[bytes]:
        """``pykubelet agent`` as ``pykubelet up`` would start it; returns once its node is Ready."""
        from pykubelet.up import main as up

        assert self.api is not None
        args = up.build_parser().parse_args([
            "--data-dir", str(self.data_dir), "--kubelet-port", str(free_port()), "--node-name", node_name,
            f"--agent-arg=--healthz-port={free_port()}", *(f"--agent-arg={a}" for a in agent_args)])
        await asyncio.to_thread(up.ensure_node_kubeconfig, self.data_dir, node_name, self.url)
        await up.ensure_bootstrap_kubeconfig(self.data_dir, node_name)  # the agent joins as `up`'s does
        proc = spawn(up.agent_argv(args, self.data_dir, node_name, endpoint), self.data_dir / "agent.log")
        log(f"agent started (pid {proc.pid}, log {self.data_dir / 'agent.log'})")
        deadline = time.monotonic() + within
        while True:
            if proc.poll() is not None:
                tail = await asyncio.to_thread((self.data_dir / "agent.log").read_text)
                raise RuntimeError(f"agent exited: {tail[-2000:]}")
            with contextlib.suppress(ApiError):
                node = await self.api.get(f"/api/v1/nodes/{node_name}")
                if pod_ready(node):  # same condition shape: Ready=True
                    return proc
            if time.monotonic() > deadline:
                raise TimeoutError("node did not become Ready")
            await asyncio.sleep(0.3)

    async def stop(self) -> None:
        if self.api is not None:
            await self.api.close()
            self.api = None
        await stop_process(self.proc, "server")


async def list_rv(api: ApiClient, path: str) -> str:
    lst = await api.list(path, params={"limit": "1"})
    return str((lst.get("metadata") or {}).get("resourceVersion", ""))


async def watch_until(api: ApiClient, path: str, names: set[str], rv: str, done: Callable[[Pod], bool],
                      *, within: float = 600, progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Watch ``path`` from ``rv`` until ``done(pod)`` held once for every name; name -> monotonic time.

    An expired watch (410) relists, checking every listed pod, and resumes from the list.
    """
    seen: dict[str, float] = {}

    def check(pod: Pod) -> None:
        name = (pod.get("metadata") or {}).get("name", "")
        if name in names and name not in seen and done(pod):
            seen[name] = time.monotonic()
            if progress is not None:
                progress(len(seen))

    async def run() -> None:
        nonlocal rv
        while len(seen) < len(names):
            try:
                async for typ, obj in api.watch(path, resource_version=rv, timeout_seconds=int(within)):
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if typ in ("ADDED", "MODIFIED"):
                        check(obj)
                        if len(seen) == len(names):
                            return
            except ApiError as e:
                if e.status != 410:
                    raise
                lst = await api.list(path)
                rv = lst["metadata"]["resourceVersion"]
                for p in lst.get("items", []):
                    check(p)

    await asyncio.wait_for(run(), within)
    return seen


class Sampler:
    """CPU % of one core over a window and max RSS (sampled every second) of named processes."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.rss: dict[str, list[float]] = {k: [] for k in pids}
        self._task: asyncio.Task[None] | None = None
        self.t0 = 0.0
        self.cpu0: dict[str, float] = {}

    def start(self) -> Sampler:
        self.t0 = time.monotonic()
        self.cpu0 = {k: cpu_seconds(p) for k, p in self.pids.items()}
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        while True:
            for k, p in self.pids.items():
                self.rss[k].append(rss_bytes(p) / MB)
            await asyncio.sleep(1.0)

    async def stop(self) -> dict[str, dict[str, float]]:
        wall = time.monotonic() - self.t0
        cpu1 = {k: cpu_seconds(p) for k, p in self.pids.items()}
        await cancel_and_wait(self._task)
        for k, p in self.pids.items():
            self.rss[k].append(rss_bytes(p) / MB)
        return {k: {"cpu_pct": round(100 * (cpu1[k] - self.cpu0[k]) / wall, 2),
                    "rss_max_mb": round(max(self.rss[k]), 1), "seconds": round(wall, 1)} for k in self.pids}


class Timeline:
    """CPU of named processes (ms per ``period``) and the share of all cores busy (``/proc/stat``),
    sampled every ``period`` seconds until :meth:`stop`. A row per sample: seconds since
    :meth:`start`, the machine's busy %, then each process's CPU ms in the order of ``pids``."""

    def __init__(self, pids: dict[str, int], period: float = 0.1) -> None:
        self.pids = pids
        self.period = period
        self.rows: list[tuple[float, ...]] = []
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def _machine() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    def start(self) -> Timeline:
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        t0 = time.monotonic()
        cpu = [cpu_seconds(p) for p in self.pids.values()]
        total, idle = self._machine()
        while True:
            await asyncio.sleep(self.period)
            now = [cpu_seconds(p) for p in self.pids.values()]
            total2, idle2 = self._machine()
            busy = 100.0 * (1 - (idle2 - idle) / max(total2 - total, 1))
            self.rows.append((round(time.monotonic() - t0, 2), round(busy),
                              *(round(1000 * (b - a)) for a, b in zip(cpu, now, strict=True))))
            cpu, total, idle = now, total2, idle2

    async def stop(self) -> list[tuple[float, ...]]:
        await cancel_and_wait(self._task)
        return self.rows


# ------------------------------------------------------------------------------------- profiling
def py_spy_path() -> str | None:
    venv = Path(sys.executable).parent / "py-spy"
    return str(venv) if venv.exists() else shutil.which("py-spy")


async def start_py_spy(pid: int, out: Path, rate: int = 100) -> asyncio.subprocess.Process | None:
    """Start sampling ``pid`` (GIL-holding samples only: the process's Python CPU) until
    :func:`stop_py_spy`; None when py-spy is missing. Blocking mode (the process is paused for each
    sample): ``--nonblocking`` with ``--gil`` was seen to miss two thirds of the samples."""
    exe = py_spy_path()
    if exe is None:
        log("py-spy not installed (.venv/bin/pip install py-spy); no profile")
        return None
    proc = await asyncio.create_subprocess_exec(
        exe, "record", "-p", str(pid), "-r", str(rate), "--gil", "-f", "raw", "-o", str(out),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    await asyncio.sleep(0.5)  # attached
    return proc


async def stop_py_spy(proc: asyncio.subprocess.Process | None, out: Path) -> Path | None:
    if proc is None:
        return None
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    _, err = await proc.communicate()
    if not await asyncio.to_thread(os.path.exists, out):
        log(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
        return None
    return out


async def py_spy(pid: int, seconds: float, out: Path, rate: int = 100) -> Path | None:
    """``seconds`` of ``pid`` sampled with py-spy (collapsed stacks); None when py-spy is missing."""
    proc = await start_py_spy(pid, out, rate)
    await asyncio.sleep(seconds)
    return await stop_py_spy(proc, out)


def _short(frame: str) -> str:
    """``func (path/to/file.py:123)`` → ``func (file-relative-to-src-or-site-packages)``."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("/src/", "/site-packages/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/lib/python3.":
                path = path.split("/", 1)[-1]
            break
    return f"{name} ({path})" if where else name


_PLUMBING = ("(asyncio/runners.py)", "(asyncio/base_events.py)", "(asyncio/events.py)", "(<frozen runpy>)",
             "(pykubelet/__main__.py)", "(pykubelet/cli.py)", "(threading.py)", "main (pykubelet/")


def _plumbing(frame: str) -> bool:
    """Frames on (nearly) every stack: the interpreter, the event loop, ``main``."""
    return any(p in frame for p in _PLUMBING)


def summarize_profile(path: Path, seconds: float, rate: int = 100, top: int = 25, *,
                      share: bool = False) -> dict[str, Any]:
    """Top functions by self and by inclusive time: % of one core over ``seconds`` (py-spy keeps
    only samples where a thread held the GIL), or with ``share`` % of all samples (where the
    process's Python CPU went, whatever its level)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += int(count)
        for f in set(frames):
            if not _plumbing(f):
                incl[f] += int(count)
    cap = (total if share else seconds * rate) / 100.0 or 1.0
    return {"unit": "% of samples" if share else "% of one core",
            "total": round(total / (seconds * rate / 100.0), 1),
            "self": [(k, round(n / cap, 2)) for k, n in own.most_common(top)],
            "inclusive": [(k, round(n / cap, 2)) for k, n in incl.most_common(top)]}


def print_profile(summary: dict[str, Any]) -> None:
    unit = summary.get("unit", "% of one core")
    print(f"  Python CPU while sampled: {summary.get('total', 0):.1f} % of one core")
    for kind in ("self", "inclusive"):
        print(f"  top functions by {kind} time ({unit}):")
        for name, pct in summary[kind]:
            print(f"    {pct:6.2f} %  {name}")
