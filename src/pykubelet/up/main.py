"""`pykubelet up`: a one-machine cluster in one command, and nothing left behind on exit.

The equivalent of `kind`/`k3s server` for this project: a private containerd (unless an existing CRI
socket is given), the offline images, the dev control plane and the agent, supervised as one unit
(see :mod:`pykubelet.up.supervisor`). Everything lives under ``--data-dir`` (default ``./.pykubelet``):
the server uses it directly, so ``<data-dir>/kubeconfig`` is the admin kubeconfig and running `up`
again on the same folder resumes the same cluster (same objects, same PKI, images already present).

Shutdown order matters and follows how a node is drained by hand: the agent is stopped first (so it
does not fight back by restarting containers), then every pod sandbox is stopped and removed through
CRI (so CNI tears down networking properly), then the server, then containerd, and finally the host
cleanup pass of :class:`~pykubelet.up.containerd.PrivateContainerd` removes any leftover process,
mount, cgroup, bridge, iptables chain or IPAM reservation. With an external runtime only the agent and
the server are stopped: the user's containerd and its other pods are not ours to touch.

Secrets are encrypted at rest by default, as a hardened kube-apiserver is set up: on first start
``<data-dir>/pki/encryption-config.yaml`` (mode 0600) is written with a new random 32-byte AES-GCM key
first and ``identity`` second (so Secrets of a cluster made before this still read, and are
encrypted on their next write), and the server gets ``--encryption-provider-config``.  The file is
never replaced: it holds the key the existing data needs.  A ``--server-arg
--encryption-provider-config=FILE`` of the user's own takes its place.

With the private containerd, `up` also runs the node's local registry (:mod:`pykubelet.up.registry`:
Debian's ``docker-registry`` on 127.0.0.1, storage under ``<data-dir>/registry``, supervised like
the rest) holding the offline images, and makes it containerd's mirror for ``docker.io``,
``registry.k8s.io`` and every ``--mirror-registry`` (upstream stays the fallback): an untagged
``image: busybox`` (pull policy Always) then pulls offline with the digest that was imported. The
registry starts while containerd does, and images are copied in only when their digest changed,
so it adds little to the start-up time. ``pykubelet images load`` finds it through
``<data-dir>/images.json``.

``--hollow-nodes N`` adds N hollow nodes (:mod:`pykubelet.up.hollow`: real agents on in-memory fake
runtimes, one supervised ``pykubelet hollow`` process, per-node kubeconfigs) to scale-test the control
plane like kubemark. The real node runs next to them when it can (an existing CRI socket, or root and
containerd for the private one); otherwise `up` says why and runs the control plane and the hollow
nodes only, which needs neither root nor containerd.

Component command lines are built by pure functions and can be overridden (``--server-command``,
``--agent-command``, hidden) so the orchestration is testable before/without the real components.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import shlex
import signal
import socket
import stat
import sys
import time
from pathlib import Path

from pykubelet.agent.proxy.proxier import proxy_unavailable, remove_rules
from pykubelet.common import aio
from pykubelet.up import hollow
from pykubelet.up.containerd import DEFAULT_CGROUP_PARENT, PrivateContainerd, validate_pod_cidr
from pykubelet.up.images import ImageError, bootstrap_images, build_all
from pykubelet.up.images_cli import write_state
from pykubelet.up.registry import DEFAULT_MIRRORED, LocalRegistry, RegistryError, write_mirror_hosts_toml
from pykubelet.up.supervisor import ComponentFailed, ComponentSpec, Supervisor


def _progress(msg: str) -> None:
    print(f"[up {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pykubelet up",
        description="Run a one-node cluster: private containerd, control plane and agent.",
    )
    p.add_argument("--data-dir", default="./.pykubelet", help="state folder (default ./.pykubelet)")
    p.add_argument(
        "--container-runtime-endpoint",
        default=None,
        help="use this existing CRI socket instead of starting a private containerd",
    )
    p.add_argument("--node-ip", default="127.0.0.1")
    p.add_argument("--bind-address", default="127.0.0.1", help="address the server and the agent listen on")
    p.add_argument("--pod-cidr", default="198.18.0.0/24", help="inside 198.18.0.0/15")
    p.add_argument("--node-name", default=None, help="default: the host name")
    p.add_argument("--secure-port", type=int, default=6443)
    p.add_argument("--kubelet-port", type=int, default=10250)
    p.add_argument("--bridge", default="pkl0", help="CNI bridge device of the private containerd")
    p.add_argument("--cgroup-root", default=DEFAULT_CGROUP_PARENT, help="parent cgroup of all pods")
    p.add_argument("--server-arg", action="append", default=[], help="extra flag for the server (repeatable)")
    p.add_argument("--agent-arg", action="append", default=[], help="extra flag for the agent (repeatable)")
    p.add_argument("--mirror-registry", action="append", default=[], metavar="HOST",
                   help="also mirror this registry in the local registry (docker.io and registry.k8s.io always are)")
    p.add_argument("--registry-port", type=int, default=0, help="port of the local registry (default: any free one)")
    p.add_argument("--no-registry", action="store_true", help="do not run the local registry mirror")
    p.add_argument("--hollow-nodes", type=int, default=0, metavar="N",
                   help="also run N hollow nodes (agents on fake runtimes) to scale-test the control plane")
    p.add_argument("--hollow-arg", action="append", default=[], help="extra flag for `pykubelet hollow` (repeatable)")
    # For tests: replace a component's whole command line (shell-split).
    p.add_argument("--server-command", default=None, help=argparse.SUPPRESS)
    p.add_argument("--agent-command", default=None, help=argparse.SUPPRESS)
    return p


def default_node_name() -> str:
    return socket.gethostname().strip().lower() or "localhost"


def server_url(args: argparse.Namespace) -> str:
    host = args.bind_address
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{args.secure_port}"


def encryption_config_path(data_dir: Path) -> Path:
    return data_dir / "pki" / "encryption-config.yaml"


def default_encryption(args: argparse.Namespace) -> bool:
    """Whether `up` provides the encryption config (not when the user passes one or the command)."""
    own = any(a.split("=", 1)[0] == "--encryption-provider-config" for a in args.server_arg)
    return not own and not args.server_command


def pod_gateway(args: argparse.Namespace) -> str:
    """The node's address on the pod network (the CNI bridge's, first host of the pod CIDR): where
    pods reach the API server and the cluster DNS (see docs/services.md)."""
    return str(ipaddress.ip_network(args.pod_cidr, strict=False).network_address + 1)


def proxy_chain_prefix(args: argparse.Namespace) -> str:
    """``PYK`` for the default pod CIDR, else ``PYK`` + 4 characters of its hash: clusters on
    different pod networks of one host (tests) never share iptables chains."""
    if args.pod_cidr == "198.18.0.0/24":
        return "PYK"
    import base64
    import hashlib

    return "PYK" + base64.b32encode(hashlib.sha256(args.pod_cidr.encode()).digest())[:4].decode()


def server_argv(args: argparse.Namespace, data_dir: Path) -> list[str]:
    if args.server_command:
        return shlex.split(args.server_command)
    encryption = (["--encryption-provider-config", str(encryption_config_path(data_dir))]
                  if default_encryption(args) else [])
    return [
        sys.executable,
        "-m",
        "pykubelet",
        "server",
        "--data-dir",
        str(data_dir),
        "--bind-address",
        args.bind_address,
        "--secure-port",
        str(args.secure_port),
        "--advertise-address", pod_gateway(args),
        "--cluster-dns-address", pod_gateway(args),
        *encryption,
        *args.server_arg,
    ]


def node_kubeconfig_path(data_dir: Path, node_name: str) -> Path:
    return data_dir / "nodes" / f"{node_name}.kubeconfig"


def bootstrap_kubeconfig_path(data_dir: Path, node_name: str) -> Path:
    return data_dir / "nodes" / f"{node_name}.bootstrap-kubeconfig"


async def ensure_bootstrap_kubeconfig(data_dir: Path, node_name: str) -> Path:
    """A fresh bootstrap token (24 h) and a bootstrap kubeconfig with it: the node's agent gets its
    client certificate by TLS bootstrap, as a second machine would (``pykubelet token create``)."""
    from pykubelet.common.apiclient import ApiClient
    from pykubelet.server import bootstrap_tokens
    from pykubelet.server.tokencli import _write_bootstrap

    tid, secret = bootstrap_tokens.generate()
    async with ApiClient.from_kubeconfig(data_dir / "kubeconfig", user_agent="pykubelet-up") as api:
        await api.create(f"/api/v1/namespaces/{bootstrap_tokens.NAMESPACE}/secrets",
                         bootstrap_tokens.token_secret(tid, secret, description=f"pykubelet up: node {node_name}"))
    path = bootstrap_kubeconfig_path(data_dir, node_name)
    await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(_write_bootstrap, data_dir / "kubeconfig", path, None, f"{tid}.{secret}")
    return path


def agent_argv(args: argparse.Namespace, data_dir: Path, node_name: str, endpoint: str) -> list[str]:
    if args.agent_command:
        return shlex.split(args.agent_command)
    return [
        sys.executable,
        "-m",
        "pykubelet",
        "agent",
        "--kubeconfig",
        str(node_kubeconfig_path(data_dir, node_name)),
        "--bootstrap-kubeconfig",
        str(bootstrap_kubeconfig_path(data_dir, node_name)),
        "--cert-dir",
        str(data_dir / "agent" / "pki"),
        "--rotate-certificates",
        "true",
        "--hostname-override",
        node_name,
        "--node-ip",
        args.node_ip,
        "--container-runtime-endpoint",
        endpoint,
        "--root-dir",
        str(data_dir / "agent"),
        "--pod-manifest-path",
        str(data_dir / "manifests"),
        "--pod-logs-dir",
        str(data_dir / "pod-logs"),
        "--cgroup-root",
        args.cgroup_root,
        "--pod-cidr",
        args.pod_cidr,
        "--port",
        str(args.kubelet_port),
        "--address",
        args.bind_address,
        "--client-ca-file",
        str(data_dir / "pki" / "ca.crt"),
        # a development machine often has swap on; kind and minikube run their kubelets the same way
        "--fail-swap-on=false",
        "--cluster-dns", pod_gateway(args),
        "--cluster-domain", "cluster.local",
        "--service-proxy=true",
        f"--service-proxy-chain-prefix={proxy_chain_prefix(args)}",
        *args.agent_arg,
    ]


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def external_endpoint(value: str | None) -> str | None:
    """The CRI endpoint to use as is, when the user named an existing socket."""
    if not value:
        return None
    path = value.removeprefix("unix://")
    return "unix://" + path if _is_socket(path) else None


async def _port_open(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def ensure_node_kubeconfig(data_dir: Path, node_name: str, url: str) -> Path:
    """Reuse the node kubeconfig of an earlier run, or have the server's auth module write one."""
    path = node_kubeconfig_path(data_dir, node_name)
    if path.exists():
        return path
    from pykubelet.server.auth import node_kubeconfig

    return Path(node_kubeconfig(data_dir, node_name, url))


def prepare_data_dir(value: str) -> Path:
    data_dir = Path(value).absolute()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the server tightens an existing one
    (data_dir / "manifests").mkdir(exist_ok=True)
    return data_dir


async def run(args: argparse.Namespace, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    data_dir = prepare_data_dir(args.data_dir)
    node_name = args.node_name or default_node_name()
    validate_pod_cidr(args.pod_cidr)
    ipaddress.ip_address(args.node_ip)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    cd: PrivateContainerd | None = None
    reg: LocalRegistry | None = None
    sup: Supervisor | None = None
    rc = 0
    try:
        why_no_real_node = hollow.real_node_unavailable(args.container_runtime_endpoint) if args.hollow_nodes else None
        if why_no_real_node:
            _progress(f"no real node ({why_no_real_node}): control plane and {args.hollow_nodes} hollow nodes only")
        endpoint = external_endpoint(args.container_runtime_endpoint)
        if args.container_runtime_endpoint and endpoint is None and not why_no_real_node:
            _progress(f"{args.container_runtime_endpoint} is not a socket; starting a private containerd")
        if endpoint is None and not why_no_real_node:
            cd = PrivateContainerd(
                data_dir / "containerd",
                pod_cidr=args.pod_cidr,
                bridge=args.bridge,
                cgroup_parent=args.cgroup_root,
                log=_progress,
                also_unmount=[data_dir / "agent" / "pods"],  # the agent's --root-dir: pod volumes
            )
            cd.cleanup()  # leftovers of a run that was killed
            reg = _start_registry(args, data_dir)  # starts while containerd does
            await cd.start()
            endpoint = cd.endpoint
        if endpoint is not None:
            _progress("bootstrapping offline images (busybox, pause)")
            try:
                imported, _ = await asyncio.gather(bootstrap_images(endpoint.removeprefix("unix://"), log=_progress),
                                                   _fill_mirror(reg, cd, args, data_dir))
                _progress(f"images ready ({len(imported)} imported)")
            except ImageError as e:
                if cd is not None:
                    raise
                _progress(f"warning: could not import images into {endpoint}: {e}")

        if default_encryption(args):
            from pykubelet.server.encryption import ensure_default_config

            enc = await asyncio.to_thread(ensure_default_config, encryption_config_path(data_dir))
            _progress(f"Secrets are encrypted at rest with the key in {enc} (keep it with the data dir)")
        url = server_url(args)
        admin = data_dir / "kubeconfig"
        probe_host = url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")

        async def server_ready() -> bool:
            return admin.exists() and await _port_open(probe_host, args.secure_port)

        logs = data_dir / "logs"
        specs = [
            ComponentSpec("server", server_argv(args, data_dir), log_path=logs / "server.log", ready=server_ready),
        ]
        if endpoint is not None:
            specs.append(ComponentSpec("agent", agent_argv(args, data_dir, node_name, endpoint),
                                       log_path=logs / "agent.log"))
        if args.hollow_nodes:
            specs.append(ComponentSpec("hollow", hollow.up_argv(data_dir, args.hollow_nodes, node_ip=args.node_ip,
                                                                extra=args.hollow_arg),
                                       log_path=logs / "hollow.log", stop_grace=60.0))
        if reg is not None and reg.process is not None:
            specs.insert(0, ComponentSpec("registry", ["docker-registry", "serve", str(reg.dir / "config.yml")],
                                          log_path=reg.log_path, ready=reg.ready, spawn=reg.spawn, stop_grace=5.0))
        if cd is not None and cd.process is not None:  # restarted like the others if it dies
            specs.insert(0, cd.supervised_spec())
        sup = Supervisor(specs, log=_progress)
        if cd is not None and cd.process is not None:
            sup["containerd"].adopt(cd.process)
        if reg is not None and reg.process is not None:
            sup["registry"].adopt(reg.process)
        _progress(f"starting the control plane on {url} (log {logs / 'server.log'})")
        await sup["server"].start()
        if endpoint is not None:
            if not args.agent_command:
                await ensure_bootstrap_kubeconfig(data_dir, node_name)
            _progress(f"starting the agent for node {node_name} (log {logs / 'agent.log'})")
            await sup["agent"].start()
        if args.hollow_nodes:
            names = hollow.up_node_names(args.hollow_arg, args.hollow_nodes)
            await asyncio.to_thread(lambda: [ensure_node_kubeconfig(data_dir, n, url) for n in names])
            _progress(f"starting {len(names)} hollow nodes {names[0]} … {names[-1]} (log {logs / 'hollow.log'})")
            await sup["hollow"].start()
        _progress("cluster is up; Ctrl-C to stop")
        print(f"export KUBECONFIG={admin}", flush=True)
        await stop.wait()
        _progress("shutting down")
    except ComponentFailed as e:
        _progress(f"error: {e}")
        rc = 1
    except (RuntimeError, ImageError, ValueError, OSError) as e:
        _progress(f"error: {e}")
        rc = 1
    finally:
        rc = await _shutdown(sup, cd, rc, "" if args.agent_command else proxy_chain_prefix(args))
        if reg is not None:
            await asyncio.to_thread(reg.stop)  # when the supervisor did not take it over yet
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    return rc


def _start_registry(args: argparse.Namespace, data_dir: Path) -> LocalRegistry | None:
    """Spawn the local registry (readiness is awaited later, in parallel with containerd's start)."""
    if args.no_registry:
        return None
    reg = LocalRegistry(data_dir / "registry", port=args.registry_port)
    try:
        reg.stop_stale()
        reg._write_config()
        reg.spawn()
    except (RegistryError, OSError) as e:
        _progress(f"warning: no local registry mirror ({e}); untagged images (pull policy Always) need internet")
        return None
    return reg


async def _fill_mirror(reg: LocalRegistry | None, cd: PrivateContainerd | None, args: argparse.Namespace,
                       data_dir: Path) -> None:
    """Point containerd at the mirror and copy in the offline images whose digest changed."""
    if reg is None or cd is None:
        return
    for registry in dict.fromkeys([*DEFAULT_MIRRORED, *args.mirror_registry]):
        write_mirror_hosts_toml(cd.registry_config_dir, registry, reg.host)  # a bad name fails `up`
    write_state(data_dir, reg.host, cd.address, cd.registry_config_dir)
    try:
        await reg.wait_ready()
        built = await asyncio.to_thread(build_all)
        copied = await asyncio.to_thread(reg.mirror_offline_images, built)
    except RegistryError as e:  # the mirror is an addition: the node still works without it
        _progress(f"warning: the local registry is not serving the offline images ({e}); "
                  f"see {reg.log_path}")
        return
    _progress(f"local registry {reg.host} mirrors {', '.join(dict.fromkeys([*DEFAULT_MIRRORED, *args.mirror_registry]))}"
              f" ({len(copied)} image(s) copied)")


async def _shutdown(sup: Supervisor | None, cd: PrivateContainerd | None, rc: int, proxy_prefix: str = "") -> int:
    if sup is not None:
        with contextlib.suppress(KeyError):
            await sup["agent"].stop()
    if proxy_prefix and os.geteuid() == 0 and not proxy_unavailable():
        # the agent removes its service proxy rules when it stops; this covers a killed agent
        await asyncio.to_thread(remove_rules, proxy_prefix)
    if cd is not None and cd.running:
        with contextlib.suppress(Exception):
            await cd.stop_all_sandboxes()
    if sup is not None:
        await sup.stop()  # server, then the supervised containerd
    if cd is not None:
        await cd.stop()
        problems = await asyncio.to_thread(cd.cleanup)
        if problems:
            rc = rc or 1
        else:
            _progress("stopped; host cleaned up")
    return rc


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.geteuid() != 0 and not args.container_runtime_endpoint and not args.hollow_nodes:
        print("pykubelet up: a private containerd needs root (or pass --container-runtime-endpoint)", file=sys.stderr)
        return 1
    try:
        return aio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
