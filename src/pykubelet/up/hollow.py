"""``pykubelet hollow``: many hollow nodes in one process, to scale-test a control plane (kubemark).

Upstream's kubemark runs hundreds of "hollow" kubelets against one control plane: each is the real
kubelet code wired to a fake container runtime, so the API server, the scheduler and the controllers
see real nodes (registration, Lease, node status, pod status, events) while nothing is executed.
This module does the same with pykubelet's own agent:

* **one agent per node, several per process.** Each hollow node is a full
  :func:`pykubelet.agent.main.run_agent` (sync loop, pod workers, PLEG, probes, status manager,
  node status and Lease, API pod source) with its own node name, its own ``stop`` event and its own
  directories; ``install_signals=False`` lets this module own SIGTERM/SIGINT and stop them all.
  Sharing one event loop is what makes 100 nodes fit on a 2-core machine: an idle agent mostly
  waits, and a process per node would pay ~65 MB of interpreter and imports each.
* **its own fake runtime.** Each node gets an in-memory :class:`~pykubelet.fakecri.FakeRuntime`
  handing out pod IPs from its own range carved out of ``--pod-cidr`` (inside 198.18.0.0/15; no
  traffic ever goes there). By default the agent reaches it through
  :class:`~pykubelet.fakecri.inprocess.InProcessCRIClient` — the real ``CRIClient`` (operation
  names, deadlines, metrics, error mapping) with the gRPC stubs replaced by direct calls — because
  over gRPC both ends of every call are paid in this one process: for 100 idle nodes that was about
  half the process's CPU. ``--cri grpc`` serves each runtime on its own unix socket instead (as
  kubemark's hollow kubelet talks to its fake remote runtime), to exercise the wire path too.
* **nothing global.** The agents share one generated KubeletConfiguration: no kubelet HTTP server
  (``enableServer: false``, so no port clashes; ``--kubelet-port-base P`` serves node *i* on P+i
  instead, with one shared self-signed certificate, for ``kubectl logs`` through the API server),
  no pod cgroups (``cgroupsPerQOS: false``), pod volumes as plain folders (secret and token
  volumes are never tmpfs mounts on the host, like kubemark's fake mounter), root and pod-log
  folders under ``<data-dir>/<node>/``. The sockets live in a short temporary folder (``sun_path`` is 108 bytes).
* **a crash never takes the others down.** An agent that fails is logged and started again after a
  back-off (the supervisor's policy); its fake runtime keeps its state, so the restarted agent
  re-adopts its pods from CRI labels like a restarted kubelet.

``--processes P`` spreads the nodes over P child processes (contiguous slices, ``--shard i/P``;
node names, pod ranges and kubelet ports are those of the whole set), so that the agents use more
than one core: one event loop for 100 agents is a single core's worth of work at best, and
its turns grow long. The parent only makes the shared serving certificate (``--kubelet-port-base``),
then starts, supervises (the same restart back-off) and stops the children, and exits 1 when one
refuses its settings; each child costs one interpreter (~65 MB) more. The children share the data
folder's generated configuration, each replacing it whole.

Log lines carry the node name: a ``ContextVar`` is set before each agent's task is created, and
asyncio copies the context into every task and thread that agent starts. The agents' Prometheus
metrics are process-wide and so aggregate over all hollow nodes here.

Credentials: ``--kubeconfig`` is shared by every node (kubemark's way; it must be allowed to act for
all of them, e.g. an admin kubeconfig), ``--kubeconfig-dir`` uses ``DIR/<node>.kubeconfig`` per node
(what ``pykubelet up --hollow-nodes`` writes, so the Node authorizer sees real node identities).
Stopping ends the agents only: like a stopped kubelet, the nodes stay registered and go NotReady.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import ipaddress
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pykubelet.common import aio
from pykubelet.up.supervisor import Backoff

if TYPE_CHECKING:  # imported when used: `pykubelet up` imports this module, and should not pay for grpc
    from pykubelet.agent.config import AgentOptions
    from pykubelet.fakecri import FakeRuntime
    from pykubelet.fakecri.server import FakeCRIServer

log = logging.getLogger("pykubelet.hollow")

DEFAULT_PREFIX = "hollow-"
DEFAULT_POD_CIDR = "198.19.0.0/16"
POD_NETWORK = ipaddress.ip_network("198.18.0.0/15")
HOLLOW_LABEL = "pykubelet.io/hollow"
# each hollow process's folder of fake-runtime sockets under /tmp (short: sun_path holds 108 bytes)
SOCK_DIR_PREFIX = "pkh-"

_node: contextvars.ContextVar[str] = contextvars.ContextVar("hollow_node", default="-")


class HollowError(ValueError):
    """Invalid hollow-node settings; the message names the flag."""


# ------------------------------------------------------------------------------------ pure parts
def node_names(prefix: str, count: int) -> list[str]:
    """``hollow-0`` … ``hollow-<count-1>``."""
    return [f"{prefix}{i}" for i in range(count)]


def pod_cidrs(base: str, count: int, max_pods: int) -> list[str]:
    """One pod range per node carved from ``base``, large enough for ``max_pods`` plus the network,
    gateway and broadcast addresses (a /25 for the default 110 pods)."""
    try:
        net = ipaddress.ip_network(base)
    except ValueError as e:
        raise HollowError(f"--pod-cidr: {e}") from None
    if not isinstance(net, ipaddress.IPv4Network) or not net.subnet_of(POD_NETWORK):  # type: ignore[arg-type]
        raise HollowError(f"--pod-cidr: {base} is not inside {POD_NETWORK}")
    prefix = 32 - max(2, math.ceil(math.log2(max_pods + 3)))
    if prefix < net.prefixlen:
        raise HollowError(f"--pod-cidr: {base} is too small for one node of {max_pods} pods")
    fit = 2 ** (prefix - net.prefixlen)
    if count > fit:
        raise HollowError(f"--pod-cidr: {base} holds {fit} ranges of /{prefix} ({max_pods} pods each), "
                          f"not {count}; give a larger range or a smaller --max-pods")
    subnets = net.subnets(new_prefix=prefix)
    return [str(next(subnets)) for _ in range(count)]


def hollow_config(*, kubelet_server: bool, tls: tuple[str, str] | None = None,
                  client_ca: str | None = None) -> dict[str, Any]:
    """The KubeletConfiguration every hollow agent shares (flags add the per-node parts)."""
    cfg: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "enableServer": kubelet_server,
        "healthzPort": 0,
        "cgroupsPerQOS": False,
        "failSwapOn": False,
    }
    if tls is not None:
        cfg["tlsCertFile"], cfg["tlsPrivateKeyFile"] = tls
    if client_ca:
        cfg["authentication"] = {"x509": {"clientCAFile": client_ca}}
    return cfg


@dataclass
class HollowNode:
    """One hollow node: its name, pod range, folders, fake runtime socket and agent task."""

    name: str
    index: int
    pod_cidr: str
    dir: Path
    socket: Path
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    runtime: FakeRuntime | None = None
    server: FakeCRIServer | None = None  # with --cri grpc
    task: asyncio.Task[None] | None = None
    restarts: int = 0

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"


def agent_flags(node: HollowNode, *, kubeconfig: str, config_path: Path, node_ip: str, max_pods: int,
                kubelet_port: int | None, labels: str, extra: Sequence[str] = ()) -> list[str]:
    """The ``pykubelet agent`` flags of one hollow node (parsed with the agent's own ``load_options``)."""
    flags = [
        "--config", str(config_path),
        "--kubeconfig", kubeconfig,
        "--hostname-override", node.name,
        "--node-ip", node_ip,
        "--container-runtime-endpoint", node.endpoint,
        "--root-dir", str(node.dir / "root"),
        "--pod-logs-dir", str(node.dir / "pod-logs"),
        "--pod-cidr", node.pod_cidr,
        "--max-pods", str(max_pods),
        "--node-labels", ",".join(x for x in (f"{HOLLOW_LABEL}=true", labels) if x),
    ]
    if kubelet_port is not None:
        flags += ["--port", str(kubelet_port)]
    return [*flags, *extra]


def shard_range(shard: str | None, count: int) -> tuple[int, int]:
    """``(first index, how many)`` of the nodes the process ``--shard i/P`` runs: contiguous slices,
    the first ``count % P`` one node longer. No shard: all of them."""
    if not shard:
        return 0, count
    try:
        i, p = (int(x) for x in shard.split("/"))
    except ValueError:
        raise HollowError(f"--shard: {shard!r} is not INDEX/PROCESSES") from None
    if not 0 <= i < p:
        raise HollowError(f"--shard: index {i} is not in 0..{p - 1}")
    size, extra = divmod(count, p)
    first = i * size + min(i, extra)
    return first, size + (1 if i < extra else 0)


def shard_argv(argv: Sequence[str], index: int, processes: int, data_dir: Path) -> list[str]:
    """One child's ``pykubelet hollow`` command line: the parent's flags without ``--processes``
    (and ``--data-dir``, replaced by the parent's folder, made or given), plus its ``--shard``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--processes", "--data-dir"):
            skip = True
            continue
        if arg.startswith(("--processes=", "--data-dir=")):
            continue
        out.append(arg)
    return [sys.executable, "-m", "pykubelet", "hollow", *out, "--data-dir", str(data_dir),
            "--shard", f"{index}/{processes}"]


# ------------------------------------------------------------------------ `pykubelet up` helpers
def real_node_unavailable(runtime_endpoint: str | None) -> str | None:
    """Why ``pykubelet up --hollow-nodes`` cannot also run its real node here (None: it can).

    The real node needs a CRI runtime: the one named by ``--container-runtime-endpoint`` (a socket),
    or a private containerd, which needs root and the ``containerd`` binary.
    """
    if runtime_endpoint:
        path = runtime_endpoint.removeprefix("unix://")
        return None if os.path.exists(path) else f"{runtime_endpoint} does not exist"
    if os.geteuid() != 0:
        return "a private containerd needs root"
    if shutil.which("containerd") is None:
        return "containerd is not installed"
    return None


def up_argv(data_dir: Path, count: int, *, node_ip: str, extra: Sequence[str] = ()) -> list[str]:
    """The ``pykubelet hollow`` command line ``pykubelet up --hollow-nodes`` supervises: per-node
    kubeconfigs written by the server's auth module, state under ``<data-dir>/hollow``."""
    return [
        sys.executable, "-m", "pykubelet", "hollow",
        "--kubeconfig-dir", str(data_dir / "nodes"),
        "--nodes", str(count),
        "--data-dir", str(data_dir / "hollow"),
        "--node-ip", node_ip,
        "--client-ca-file", str(data_dir / "pki" / "ca.crt"),
        "-v", "1",
        *extra,
    ]


def up_node_names(extra: Sequence[str], count: int) -> list[str]:
    """The node names ``up_argv`` will run (honouring a ``--name-prefix`` among ``extra``)."""
    ns, _ = build_parser().parse_known_args(["--kubeconfig", "-", "--nodes", str(count), *extra])
    return node_names(ns.name_prefix, count)


# ----------------------------------------------------------------------------------------- run
class _NodeField(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.node = _node.get()
        return True


def setup_logging(verbosity: int, log_file: str | None) -> None:
    """One stream for every node; each line says which node it is about."""
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.addFilter(_NodeField())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s [%(node)s] %(name)s] %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO if verbosity >= 1 else logging.WARNING)
    log.setLevel(logging.INFO)
    for noisy in ("aiohttp.access", "grpc", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Hollow volumes are plain folders on purpose (no tmpfs on the host): not worth a warning per pod.
    logging.getLogger("pykubelet.agent.volumemanager.mounter").setLevel(logging.ERROR)


class HollowNodes:
    """Start, supervise and stop N hollow nodes in this event loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.nodes: list[HollowNode] = []
        self._own_data_dir = not args.data_dir
        self.data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="pykubelet-hollow-")).absolute()
        self.sock_dir = Path(tempfile.mkdtemp(prefix=SOCK_DIR_PREFIX, dir="/tmp"))
        self.config_path = self.data_dir / "kubelet-config.yaml"

    def kubeconfig_for(self, name: str) -> str:
        if self.args.kubeconfig_dir:
            return str(Path(self.args.kubeconfig_dir) / f"{name}.kubeconfig")
        return str(self.args.kubeconfig)

    def _prepare(self) -> None:
        """Folders, the shared configuration (and certificate); raises HollowError on bad settings."""
        a = self.args
        names = node_names(a.name_prefix, a.nodes)
        cidrs = pod_cidrs(a.pod_cidr, a.nodes, a.max_pods)
        first, count = shard_range(a.shard, a.nodes)
        if a.kubeconfig_dir:
            missing = [n for n in names if not Path(self.kubeconfig_for(n)).is_file()]
            if missing:
                raise HollowError(f"--kubeconfig-dir: no {missing[0]}.kubeconfig in {a.kubeconfig_dir}"
                                  + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        elif not Path(a.kubeconfig).is_file():
            raise HollowError(f"--kubeconfig: {a.kubeconfig} is not a file")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tls = None
        if a.kubelet_port_base:
            if a.kubelet_port_base + a.nodes - 1 > 65535:
                raise HollowError(f"--kubelet-port-base: {a.kubelet_port_base} + {a.nodes} nodes exceeds 65535")
            from pykubelet.agent.server.app import ensure_self_signed  # one certificate for all nodes

            tls = ensure_self_signed(self.data_dir, "hollow", [a.node_ip])
        cfg = hollow_config(kubelet_server=bool(a.kubelet_port_base), tls=tls, client_ca=a.client_ca_file)
        # With --processes every child writes this same file while its siblings may be reading it:
        # replaced whole, never seen half-written.
        tmp = self.config_path.with_name(f".{self.config_path.name}.{os.getpid()}")
        tmp.write_text(yaml.safe_dump(cfg, sort_keys=False))
        os.replace(tmp, self.config_path)
        for i, (name, cidr) in enumerate(zip(names, cidrs, strict=True)):
            if not first <= i < first + count:
                continue  # another process's node (--shard)
            d = self.data_dir / name
            (d / "root").mkdir(parents=True, exist_ok=True)
            (d / "pod-logs").mkdir(parents=True, exist_ok=True)
            self.nodes.append(HollowNode(name=name, index=i, pod_cidr=cidr, dir=d,
                                         socket=self.sock_dir / f"{i}.sock"))

    def options_for(self, node: HollowNode) -> AgentOptions:
        from pykubelet.agent.config import load_options

        a = self.args
        port = a.kubelet_port_base + node.index if a.kubelet_port_base else None
        return load_options(agent_flags(
            node, kubeconfig=self.kubeconfig_for(node.name), config_path=self.config_path, node_ip=a.node_ip,
            max_pods=a.max_pods, kubelet_port=port, labels=a.node_labels, extra=a.agent_arg))

    async def start(self) -> None:
        from pykubelet.agent.config import ConfigError
        from pykubelet.fakecri import DEFAULT_IMAGES, FakeRuntime, serve

        self._prepare()
        try:
            options = [self.options_for(n) for n in self.nodes]  # every flag checked before anything runs
        except ConfigError as e:
            raise HollowError(f"agent flags: {e}") from None
        for node, opts in zip(self.nodes, options, strict=True):
            node.runtime = FakeRuntime(images=DEFAULT_IMAGES, pod_cidr=node.pod_cidr)
            if self.args.cri == "grpc":
                node.server, _ = await serve(node.endpoint, node.runtime)
            token = _node.set(node.name)
            try:  # the task (and all it starts) inherits the node name for log lines
                node.task = asyncio.create_task(self._supervise(node, opts), name=f"hollow-{node.name}")
            finally:
                _node.reset(token)
            # Spread the agents' periodic loops (PLEG, Lease, status) instead of firing in lockstep.
            await asyncio.sleep(self.args.start_interval)
        log.info("%d hollow nodes started (%s … %s), data in %s", len(self.nodes), self.nodes[0].name,
                 self.nodes[-1].name, self.data_dir)

    async def _supervise(self, node: HollowNode, options: AgentOptions) -> None:
        from pykubelet.agent import metrics
        from pykubelet.agent.main import run_agent
        from pykubelet.agent.volumemanager.mounter import SystemMounter, TmpfsMode
        from pykubelet.fakecri.inprocess import InProcessCRIClient

        backoff = Backoff()
        while not node.stop.is_set():
            started = time.monotonic()
            runtime = None
            if node.server is None and node.runtime is not None:  # a fresh client per run: the agent closes it
                runtime = InProcessCRIClient(node.runtime, node.endpoint, observer=metrics.cri_observer,
                                             timeout=options.config.runtime_request_timeout)
            try:
                # like kubemark's fake mounter: a hollow node never mounts tmpfs on the host (its
                # secret and token volumes are plain directories, nothing is left after it stops)
                rc = await run_agent(options, node.stop, install_signals=False, runtime=runtime,
                                     volume_mounter=SystemMounter(TmpfsMode.PLAIN_DIRS))
                if node.stop.is_set():
                    return
                why = f"exited with code {rc}"
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("agent of %s crashed", node.name)
                why = f"crashed: {type(e).__name__}: {e}"
            delay = backoff.next_delay(time.monotonic() - started)
            node.restarts += 1
            log.warning("hollow node %s %s; restarting in %.0f s (restart #%d)", node.name, why, delay,
                        node.restarts)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(node.stop.wait(), delay)

    async def stop(self) -> None:
        for node in self.nodes:
            node.stop.set()
        tasks = [n.task for n in self.nodes if n.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=30)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(n.server.stop(0) for n in self.nodes if n.server is not None),
                             return_exceptions=True)
        shutil.rmtree(self.sock_dir, ignore_errors=True)
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> list[signal.Signals]:
    """Set ``stop`` on SIGTERM/SIGINT; the signals whose handlers were installed (to remove later)."""
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    return installed


async def run(args: argparse.Namespace, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = _stop_on_signals(loop, stop)
    hollow = HollowNodes(args)
    try:
        await hollow.start()
        print(f"{len(hollow.nodes)} hollow nodes running; Ctrl-C to stop", file=sys.stderr, flush=True)
        await stop.wait()
        return 0
    except HollowError as e:
        print(f"pykubelet hollow: {e}", file=sys.stderr)
        return 1
    finally:
        await hollow.stop()
        for sig in installed:
            loop.remove_signal_handler(sig)


async def run_processes(args: argparse.Namespace, argv: Sequence[str], data_dir: Path,
                        stop: asyncio.Event | None = None) -> int:
    """``--processes P``: run P children, each a ``--shard`` of the nodes; restart one that exits
    (after the supervisor's back-off) until stopped; SIGTERM them all on SIGTERM/SIGINT. 1 when a
    child refused its settings."""
    own_dir = not args.data_dir
    if args.kubelet_port_base:
        # the one serving certificate all nodes share, made here once: children making it at the
        # same time could leave one's key next to another's certificate
        from pykubelet.agent.server.app import ensure_self_signed

        try:
            await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(ensure_self_signed, data_dir, "hollow", [args.node_ip])
        except (OSError, RuntimeError) as e:
            print(f"pykubelet hollow: {e}", file=sys.stderr)
            if own_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
            return 1
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = _stop_on_signals(loop, stop)
    procs: dict[int, asyncio.subprocess.Process] = {}
    refused = False

    async def child(i: int) -> None:
        nonlocal refused
        backoff = Backoff()
        while not stop.is_set():
            started = time.monotonic()
            proc = procs[i] = await asyncio.create_subprocess_exec(*shard_argv(argv, i, args.processes, data_dir))
            rc = await proc.wait()
            if stop.is_set():
                return
            if rc in (1, 2):  # bad settings: every restart would fail the same way
                log.error("hollow process %d/%d refused its settings (exit code %d)", i, args.processes, rc)
                refused = True
                stop.set()
                return
            delay = backoff.next_delay(time.monotonic() - started)
            log.warning("hollow process %d/%d exited with code %s; restarting in %.0f s", i, args.processes, rc, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    tasks = [asyncio.create_task(child(i)) for i in range(args.processes)]
    try:
        print(f"{args.nodes} hollow nodes in {args.processes} processes; Ctrl-C to stop", file=sys.stderr, flush=True)
        await stop.wait()
        return 1 if refused else 0
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        _, pending = await asyncio.wait(tasks, timeout=60)
        for proc in procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sig in installed:
            loop.remove_signal_handler(sig)
        if own_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pykubelet hollow",
        description="Run N hollow nodes (real agents on in-memory fake runtimes) in one process, "
                    "to scale-test a control plane like kubemark.")
    creds = p.add_mutually_exclusive_group(required=True)
    creds.add_argument("--kubeconfig", help="kubeconfig every node uses (must be allowed to act for all of them)")
    creds.add_argument("--kubeconfig-dir", help="per-node kubeconfigs: DIR/<node>.kubeconfig")
    p.add_argument("--nodes", type=int, required=True, help="how many hollow nodes")
    p.add_argument("--name-prefix", default=DEFAULT_PREFIX, help=f"node names are PREFIX0..PREFIX<N-1> "
                                                                 f"(default {DEFAULT_PREFIX})")
    p.add_argument("--max-pods", "--pods-per-node", dest="max_pods", type=int, default=110,
                   help="pods each node admits and reports as capacity (default 110)")
    p.add_argument("--pod-cidr", default=DEFAULT_POD_CIDR,
                   help=f"range the per-node pod ranges are carved from (default {DEFAULT_POD_CIDR})")
    p.add_argument("--node-ip", default="127.0.0.1", help="InternalIP every hollow node reports")
    p.add_argument("--node-labels", default="", help=f"extra labels k=v,... (every node has {HOLLOW_LABEL}=true)")
    p.add_argument("--data-dir", default=None, help="folder for the nodes' state (default: a temporary folder "
                                                    "removed on exit)")
    p.add_argument("--cri", choices=("inprocess", "grpc"), default="inprocess",
                   help="how agents reach their fake runtime: direct calls (default, cheaper) or CRI gRPC "
                        "on a unix socket per node")
    p.add_argument("--kubelet-port-base", type=int, default=0,
                   help="serve node i's kubelet API on PORT+i (default 0: no kubelet server)")
    p.add_argument("--client-ca-file", default=None, help="CA of client certificates the kubelet API accepts")
    p.add_argument("--start-interval", type=float, default=0.05,
                   help="seconds between starting two nodes (spreads their periodic work)")
    p.add_argument("--agent-arg", action="append", default=[], help="extra agent flag for every node (repeatable)")
    p.add_argument("--processes", type=int, default=1,
                   help="spread the nodes over this many processes (default 1), to use several cores")
    p.add_argument("--shard", default=None, help=argparse.SUPPRESS)  # INDEX/PROCESSES: set by --processes
    p.add_argument("--log-file", default=None, help="write logs here instead of stderr (appended to)")
    p.add_argument("-v", "--v", dest="verbosity", type=int, default=0,
                   help="0: warnings only, 1-3: info, 4+: debug")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.nodes < 1:
        print("pykubelet hollow: --nodes must be at least 1", file=sys.stderr)
        return 2
    if not 1 <= args.processes <= args.nodes:
        print("pykubelet hollow: --processes must be between 1 and --nodes", file=sys.stderr)
        return 2
    setup_logging(args.verbosity, args.log_file)
    try:
        if args.processes > 1:
            data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="pykubelet-hollow-")).absolute()
            return aio.run(run_processes(args, argv, data_dir))
        return aio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
