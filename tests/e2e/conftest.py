"""Shared fixtures for end-to-end tests (real containerd, real kubectl, root).

Several developers (and pytest-xdist workers) may run e2e sessions on the same machine at the same time,
so each session takes a *slot* -- an exclusive flock on /run/pykubelet-e2e/slot-N.lock held for the
whole session -- and derives everything host-global from it: the CNI bridge name ``pke<N>``, the pod
CIDR ``198.19.<N>.0/24`` (inside 198.18.0.0/15, away from ``pykubelet up``'s default 198.18.0.0/24)
and the cgroup parent ``/pykubelet-e2e<N>``. The ``cluster`` fixture gets a containerd of its own
(``pkc<N>``, ``198.19.<100+N>.0/24``, ``/pykubelet-cluster<N>``): its agent removes every container of
a pod it does not know, exactly like upstream's kubelet, so raw-CRI tests must not share its runtime. Before starting, a cleanup pass for that slot removes
what a crashed earlier session in the same slot may have left; at the end the stack is stopped and
cleaned (no process, mount, cgroup, bridge or iptables chain remains).

The tests are grouped by the layer they drive (these fixtures serve all three):
- ``cri/``: the private containerd and offline images, driven straight through CRI (no agent);
- ``agent/``: the agent (in-process engine or ``pykubelet agent``) on containerd, no cluster;
- ``cluster/``: a whole ``pykubelet up`` cluster, driven like a user does with kubectl.

Every test under tests/e2e is marked ``e2e`` automatically.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pykubelet.up.containerd import PrivateContainerd, preflight
from pykubelet.up.images import bootstrap_images
from tests.fakes import free_port

SLOT_DIR = Path("/run/pykubelet-e2e")
MAX_SLOTS = 50  # slot N owns 198.19.N.0/24, 198.19.(100+N).0/24, 198.19.(150+N).0/24, 198.19.(200+N).0/24
# and, for the shared cluster's Services, 198.19.(50+N).0/24


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def _skip(reason: str) -> None:
    print(f"\nSKIP e2e: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def require_root_containerd() -> None:
    """Skip (with the reason printed) unless root, containerd/runc/CNI and cgroups are available."""
    reason = preflight()
    if reason:
        _skip(reason)


@pytest.fixture(scope="session")
def e2e_slot(require_root_containerd: None) -> Iterator[int]:
    """A machine-wide unique small integer for this session (held by flock until the end)."""
    SLOT_DIR.mkdir(parents=True, exist_ok=True)
    for n in range(MAX_SLOTS):
        fd = os.open(SLOT_DIR / f"slot-{n}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield n
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    _skip("no free e2e slot")


@pytest.fixture(scope="session")
def image_cache_dir() -> Path:
    """Built image archives are shared by all sessions (writes are atomic)."""
    from pykubelet.up.images import default_cache_dir

    return default_cache_dir()


@pytest.fixture(scope="session")
def containerd(
    e2e_slot: int, tmp_path_factory: pytest.TempPathFactory, image_cache_dir: Path
) -> Iterator[PrivateContainerd]:
    """A running private containerd with the offline images imported.

    Useful attributes: .address (socket path), .endpoint ("unix://..."), .pod_cidr, .bridge,
    .cgroup_parent (use it as the parent of pod cgroups so cleanup finds them), .data_dir,
    .registry_config_dir (drop hosts.toml files here for a LocalRegistry).
    """
    cd = start_containerd(tmp_path_factory.mktemp("containerd"), e2e_slot, "pke", f"198.19.{e2e_slot}.0/24",
                          f"/pykubelet-e2e{e2e_slot}", image_cache_dir)
    try:
        yield cd
    finally:
        stop_containerd(cd)


def start_containerd(data_dir: Path, slot: int, bridge_prefix: str, cidr: str, cgroup_parent: str,
                     image_cache_dir: Path, also_unmount: list[Path] | None = None) -> PrivateContainerd:
    cd = PrivateContainerd(
        data_dir,
        pod_cidr=cidr,
        bridge=f"{bridge_prefix}{slot}",
        cgroup_parent=cgroup_parent,
        also_unmount=also_unmount or (),
        log=lambda m: print(f"[containerd {bridge_prefix}{slot}] {m}", file=sys.stderr),
    )
    cd.cleanup()  # leftovers of a crashed session in the same slot
    try:
        asyncio.run(cd.start())
        asyncio.run(bootstrap_images(cd.address, cache_dir=image_cache_dir))
    except Exception:
        asyncio.run(cd.shutdown())
        raise
    return cd


def stop_containerd(cd: PrivateContainerd) -> None:
    asyncio.run(cd.shutdown())
    # The image store is large-ish and useless after the session; keep config and logs.
    shutil.rmtree(cd.root, ignore_errors=True)


KubectlRunner = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str | os.PathLike[str]], KubectlRunner]:
    """kubectl(kubeconfig) -> run(*args, check=True, input=None, timeout=60) -> CompletedProcess.

    Uses the real /usr/bin/kubectl with a fresh --cache-dir per call (no discovery cache surprises).
    """
    binary = shutil.which("kubectl") or "/usr/bin/kubectl"
    if not Path(binary).exists():
        _skip("kubectl not installed")
    base = tmp_path_factory.mktemp("kubectl")
    counter = itertools.count()

    def factory(kubeconfig: str | os.PathLike[str]) -> KubectlRunner:
        def run(
            *args: str, check: bool = True, input: str | None = None, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
            cache = base / f"cache-{next(counter)}"
            cmd = [binary, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}", *args]
            res = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
            if check and res.returncode != 0:
                raise AssertionError(
                    f"{' '.join(cmd)} exited {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
                )
            return res

        return run

    return factory


# ---------------------------------------------------------------------------------------------
# `cluster`: `pykubelet up` (server + scheduler + agent) on a containerd of its own.
# ---------------------------------------------------------------------------------------------


class Cluster:
    """A running `pykubelet up` (control plane + agent) on the session's private containerd."""

    def __init__(self, data_dir: Path, node_name: str, proc: subprocess.Popen[bytes], run_kubectl: KubectlRunner,
                 containerd: PrivateContainerd, kubelet_port: int) -> None:
        self.data_dir = data_dir
        self.kubeconfig = data_dir / "kubeconfig"
        self.node_name = node_name
        self.proc = proc
        self.kubectl = run_kubectl
        self.containerd = containerd
        self.kubelet_port = kubelet_port

    def api(self):  # type: ignore[no-untyped-def]
        from pykubelet.common.apiclient import ApiClient

        return ApiClient.from_kubeconfig(self.kubeconfig)

    def logs(self) -> str:
        """What a failed wait shows: the pods, the latest events and the tails of both logs."""
        out = []
        for title, args in (("pods", ("get", "pods", "-A", "-o", "wide")),
                            ("events (latest)", ("get", "events", "-A", "--sort-by=.lastTimestamp"))):
            try:
                res = self.kubectl(*args, check=False, timeout=15)
                text = "\n".join((res.stdout + res.stderr).splitlines()[-40:])
            except subprocess.TimeoutExpired:
                text = "(kubectl timed out)"
            out.append(f"----- {title} -----\n{text}")
        for name in ("server", "agent"):
            p = self.data_dir / "logs" / f"{name}.log"
            if p.exists():
                out.append(f"----- {name}.log (tail) -----\n" + "\n".join(p.read_text(errors="replace").splitlines()[-80:]))
        return "\n".join(out)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 60.0, interval: float = 0.5) -> None:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def jsonpath(self, *args: str) -> str:
        return self.kubectl(*args, check=False).stdout.strip()


def start_up(data_dir: Path, node_name: str, extra: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "pykubelet", "up", "--data-dir", str(data_dir), "--node-name", node_name, *extra]
    log = open(log_path, "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(10)
    return int(proc.returncode)


@pytest.fixture(scope="session")
def cluster(
    e2e_slot: int,
    tmp_path_factory: pytest.TempPathFactory,
    kubectl: Callable[[str | os.PathLike[str]], KubectlRunner],
    image_cache_dir: Path,
) -> Iterator[Cluster]:
    """`pykubelet up` on a containerd of its own: API server + scheduler + agent, node Ready."""
    data_dir = tmp_path_factory.mktemp("cluster")
    # pods still on the node at the end keep their volume mounts (the agent stops, its pods do not, as
    # upstream): the runtime's cleanup takes them down with the sandboxes
    containerd = start_containerd(tmp_path_factory.mktemp("cluster-containerd"), e2e_slot, "pkc",
                                  f"198.19.{100 + e2e_slot}.0/24", f"/pykubelet-cluster{e2e_slot}", image_cache_dir,
                                  also_unmount=[data_dir / "agent" / "pods"])
    node = f"pk-e2e-{e2e_slot}"
    kubelet_port = free_port()
    extra = [
        "--container-runtime-endpoint", containerd.endpoint,
        "--secure-port", str(free_port()),
        "--kubelet-port", str(kubelet_port),
        "--pod-cidr", containerd.pod_cidr,
        "--cgroup-root", containerd.cgroup_parent,
        f"--agent-arg=--healthz-port={free_port()}",
        # Services of this slot's cluster (disjoint from every slot's pod CIDRs), no DNS forwarding
        f"--server-arg=--service-cluster-ip-range=198.19.{50 + e2e_slot}.0/24",
        "--server-arg=--cluster-dns-upstream=none",
    ]
    try:
        proc = start_up(data_dir, node, extra, data_dir / "up.log")
    except Exception:
        stop_containerd(containerd)
        raise
    c = Cluster(data_dir, node, proc, kubectl(data_dir / "kubeconfig"), containerd, kubelet_port)
    try:
        c.wait_for("the admin kubeconfig", lambda: c.kubeconfig.exists() or proc.poll() is not None, 90)
        assert proc.poll() is None, (data_dir / "up.log").read_text()
        c.wait_for(
            f"node {node} Ready",
            lambda: c.jsonpath("get", "node", node, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Ready')].status}") == "True",
            90,
        )
        yield c
    finally:
        rc = stop_process(proc)
        print(f"[cluster] pykubelet up exited {rc}", file=sys.stderr)
        stop_containerd(containerd)
