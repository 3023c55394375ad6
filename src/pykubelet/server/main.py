"""``pykubelet server``: the dev control plane (API server + scheduler + node lifecycle + PV controller).

Start-up order mirrors a kubeadm control plane: PKI and the admin credentials first, then storage
and the namespaces every cluster has, then the HTTPS listener, then the controllers (each an
``X(api).run()`` coroutine talking to this server through ``ApiClient`` with the admin token,
as upstream controllers use the API and never the storage for their writes). Their watches are
shared: one informer per collection (``controllers.kit.SharedInformers``) for all of them, the
scheduler, node lifecycle and PV controllers included, and those informers list and watch the
store in this process (:mod:`pykubelet.server.localwatch`) instead of over HTTP.  A controller that crashes is
logged and started again, as kube-controller-manager's would be by its supervisor.

Data at rest: the data dir is made 0700 (tightened if it exists) before anything is written, the
database 0600 (see :mod:`pykubelet.server.storage`), and ``--encryption-provider-config`` (upstream's
flag and file format, :mod:`pykubelet.server.encryption`) encrypts the configured resources.  The
file is read before anything starts, so a bad one, or stored data that its keys cannot read, stops
the server with an error naming the problem and exit code 1, as kube-apiserver refuses to start.

Garbage collection: :func:`main` raises the collector's first threshold from 700 to
``GC_YOUNG_THRESHOLD`` (:func:`tune_gc`).  The server's heap grows by millions of container objects
with the pods, their Events, the watch history and the informers' copies, and CPython 3.11 makes a
full collection whenever the objects that survived since the last one reach a quarter of the rest:
in a 100-node hollow run that was 16 full collections of a growing heap (~0.4 s each) and 2,000
young ones, 16 % of the server's CPU.  With 50,000 the young collections are rarer and a full one is
considered only every 5 million net allocations (1 in that run).  Nothing a client sees depends on
it; reference cycles (which the API objects, plain JSON trees, never form) are freed later.

Requests are logged (aiohttp's access log) only with ``--access-log`` or ``-v``, as upstream's
apiserver logs them only at ``-v=3``: at 100 hollow nodes the lines cost 7 % of the server's CPU.

``--insecure-port-for-tests`` adds a plain-HTTP listener on 127.0.0.1 whose requests are treated
as ``system:masters`` (like the insecure port older kube-apiservers had); it exists for tests and
is off by default.  :func:`run_server` offers the same for in-process tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from pykubelet.common import aio
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiClient
from pykubelet.server import controllers as kcm
from pykubelet.server import dns, services
from pykubelet.server.app import ApiHttp
from pykubelet.server.auth import PKI, Authorizer, TokenAuth, ensure_admin, node_kubeconfig
from pykubelet.server.controllers import kit
from pykubelet.server.encryption import EncryptionConfigError, ResourceTransformers, load_config
from pykubelet.server.localwatch import InProcessReads
from pykubelet.server.nodelifecycle import NodeLifecycleController
from pykubelet.server.persistentvolume import PersistentVolumeController
from pykubelet.server.registry import Registry
from pykubelet.server.scheduler import Scheduler
from pykubelet.server.storage import Storage, StorageError, secure_dir

log = logging.getLogger(__name__)


@dataclass
class ServerHandle:
    url: str
    kubeconfig: Path
    admin_token: str
    data_dir: Path
    ca_file: Path
    insecure_url: str | None
    registry: Registry
    http: ApiHttp
    controllers: list[asyncio.Task[Any]] = field(default_factory=list)
    dns_port: int | None = None  # cluster DNS (server/dns.py), when served

    @property
    def store(self) -> Storage:
        return self.registry.store

    def node_kubeconfig(self, node_name: str) -> Path:
        return node_kubeconfig(self.data_dir, node_name, self.url)


CONTROLLERS = ("scheduler", "node-lifecycle", "persistentvolume", *kcm.names())


def _make_controller(name: str, api: ApiClient, kw: dict[str, Any],
                     shared: kit.SharedInformers | None = None, store: Storage | None = None) -> kcm.Runnable:
    """One controller, configured from ``controller_kwargs`` (``server/controllers`` registry).
    ``shared``: the server's shared informers, which the scheduler, node lifecycle and PV
    controllers follow too (one watch and one decoded copy of each pod for all of them).
    ``store``: a kit controller's own lists and watches read it in this process (``localwatch``);
    the garbage collector's get metadata only, as upstream's metadata informers give it."""
    if name in kcm.REGISTRY:
        reads = api if store is None else InProcessReads(api, store, metadata_only=name == "garbagecollector")
        return kcm.make(name, reads, kw)
    if name == "scheduler":
        return Scheduler(api, informers=shared, **{k: kw[k] for k in ("retry_interval",) if k in kw})
    if name == "persistentvolume":
        return PersistentVolumeController(api, base_dir=Path(kw["local_path_dir"]), informers=shared)
    return NodeLifecycleController(
        api, informers=shared,
        **{k: kw[k] for k in ("grace_period", "monitor_period", "eviction_timeout") if k in kw})


async def _run_controller(name: str, url: str, token: str, ca: Path, kwargs: dict[str, Any],
                          shared: kit.SharedInformers | None = None, store: Storage | None = None) -> None:
    api = ApiClient(url, token=token, ca_file=str(ca))
    try:
        while True:
            if shared is not None:
                with kit.sharing(shared):  # one pod watch for all the controllers, not one each
                    ctl = _make_controller(name, api, kwargs, shared, store)
            else:
                ctl = _make_controller(name, api, kwargs, store=store)
            try:
                await ctl.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller %s crashed; restarting in 1 s", name)
            await asyncio.sleep(1.0)
    finally:
        with contextlib.suppress(Exception):
            await api.close()


@contextlib.asynccontextmanager
async def run_server(data_dir: str | Path, *, port: int = 0, bind_address: str = "127.0.0.1",
                     version_minor: str = "33", insecure_port: int | None = None,
                     controllers: bool = True, controller_kwargs: dict[str, Any] | None = None,
                     history: int = 10000, bookmark_interval: float = 60.0,
                     default_not_ready_toleration_seconds: int = 300,
                     default_unreachable_toleration_seconds: int = 300,
                     encryption_provider_config: str | Path | None = None,
                     min_request_timeout: int = 1800,
                     local_path_dir: str | Path | None = None,
                     service_cluster_ip_range: str = services.DEFAULT_SERVICE_CIDR,
                     service_node_port_range: str = "30000-32767",
                     advertise_address: str | None = None, dns_address: str | None = None,
                     dns_port: int = 53, cluster_domain: str = "cluster.local",
                     dns_upstreams: list[tuple[str, int]] | None = None) -> AsyncIterator[ServerHandle]:
    """Run the API server in this event loop.  ``port=0`` picks a free port.

    ``controller_kwargs``: ``grace_period``, ``monitor_period``, ``eviction_timeout`` (node
    lifecycle) and ``retry_interval`` (scheduler).  ``local_path_dir``: where the local-path
    provisioner makes volumes (default ``<data_dir>/local-path``).  Raises :class:`EncryptionConfigError` or
    :class:`StorageError` before serving when the encryption config or the stored data is unusable.
    """
    d = Path(data_dir)
    transformer: ResourceTransformers | None = None
    if encryption_provider_config is not None:
        transformer = await asyncio.to_thread(load_config, encryption_provider_config)
    await asyncio.to_thread(secure_dir, d)
    pki = PKI(d)
    allocator = services.ServiceAllocator(service_cluster_ip_range,
                                          services.parse_port_range(service_node_port_range))
    pki.extra_ips = [allocator.kubernetes_ip, *([advertise_address] if advertise_address else [])]
    await asyncio.to_thread(pki.ensure)  # key generation and file I/O off the loop
    tokens = TokenAuth(d, pki)
    authorizer = Authorizer(d)
    store = Storage(d / "state.db", history=history, transformer=transformer)
    await asyncio.to_thread(store.open)
    store.group_commits()  # the writes of one loop turn in one transaction; answers await durable()
    authorizer.bind(store)
    tokens.secret_lookup = lambda ns, name: store.peek("secrets", ns, name)  # bootstrap tokens
    for resource, n in sorted(store.stale.items()):
        log.info("%d %s are stored in plain text or with a key that is no longer the first in the "
                 "encryption config; each is rewritten with the first provider on its next write "
                 "(to rewrite all now: kubectl get %s -A -o json | kubectl replace -f -)",
                 n, resource, resource)
    registry = Registry(store, pki, tokens, authorizer)
    registry.default_not_ready_toleration_seconds = default_not_ready_toleration_seconds
    registry.default_unreachable_toleration_seconds = default_unreachable_toleration_seconds
    registry.storage_protection = controllers
    registry.garbage_collection = controllers  # the garbage collector removes its finalizers
    registry.services = allocator
    registry.bootstrap()
    http = ApiHttp(registry, pki, tokens, authorizer, version_minor=version_minor,
                   insecure_admin=insecure_port is not None, bookmark_interval=bookmark_interval,
                   min_request_timeout=min_request_timeout)
    app = http.make_app()
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, bind_address, port, ssl_context=pki.server_ssl_context(), reuse_address=True)
    await site.start()
    sock = site._server.sockets[0] if site._server and site._server.sockets else None  # type: ignore[union-attr,attr-defined]
    real_port = sock.getsockname()[1] if sock else port
    host = "127.0.0.1" if bind_address in ("0.0.0.0", "127.0.0.1", "") else bind_address
    url = f"https://{host}:{real_port}"
    http.server_addr = f"{host}:{real_port}"
    if advertise_address and advertise_address not in (bind_address, "0.0.0.0"):
        # the pod-facing listener (the gateway address may not exist until the first pod starts)
        try:
            adv_sock = dns.freebind_socket(advertise_address, real_port)
            await web.SockSite(runner, adv_sock, ssl_context=pki.server_ssl_context()).start()
        except OSError as e:
            log.error("cannot listen on the advertise address %s:%d (pods cannot reach the API): %s",
                      advertise_address, real_port, e)
    registry.api_endpoint = (advertise_address, real_port) if advertise_address else None
    registry.ensure_kubernetes_service()
    cluster_dns: dns.ClusterDNS | None = None
    if dns_address:
        cluster_dns = dns.ClusterDNS(store, cluster_domain, dns_upstreams if dns_upstreams is not None
                                     else dns.host_resolvers(exclude=(dns_address,)))
        try:
            dns_port = await cluster_dns.start(dns_address, dns_port)
        except OSError as e:
            log.error("cannot serve cluster DNS on %s:%d: %s", dns_address, dns_port, e)
            cluster_dns = None
    insecure_url = None
    if insecure_port is not None:
        isite = web.TCPSite(runner, "127.0.0.1", insecure_port, reuse_address=True)
        await isite.start()
        isock = isite._server.sockets[0] if isite._server and isite._server.sockets else None  # type: ignore[union-attr,attr-defined]
        insecure_url = f"http://127.0.0.1:{isock.getsockname()[1] if isock else insecure_port}"
    admin_token, kubeconfig = ensure_admin(d, url)
    handle = ServerHandle(url, kubeconfig, admin_token, d, pki.ca_crt, insecure_url, registry, http)
    handle.dns_port = dns_port if cluster_dns is not None else None
    shared_api: ApiClient | None = None
    shared: kit.SharedInformers | None = None
    if controllers:
        kw = {"local_path_dir": Path(local_path_dir) if local_path_dir else d / "local-path",
              **(controller_kwargs or {})}
        shared_api = ApiClient(url, token=admin_token, ca_file=str(pki.ca_crt))
        # lists and watches from the store in this process, writes over HTTP (localwatch)
        shared = kit.SharedInformers(InProcessReads(shared_api, store))
        for name in CONTROLLERS:
            handle.controllers.append(asyncio.create_task(
                _run_controller(name, url, admin_token, pki.ca_crt, kw, shared, store), name=name))
    log.info("API server listening on %s", url)
    try:
        yield handle
    finally:
        await cancel_and_wait(*handle.controllers)
        if shared is not None:
            await shared.close()
        if shared_api is not None:
            await shared_api.close()
        if cluster_dns is not None:
            await cluster_dns.stop()
        await registry.close()
        store.close()  # ends open watches
        await runner.cleanup()


def _duration(value: str) -> float:
    """Seconds as a number or a Go-style duration ("40s", "1m30s", "500ms"), as upstream flags take."""
    try:
        return float(value)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise argparse.ArgumentTypeError(f"invalid duration {value!r}")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _upstreams(value: str | None) -> list[tuple[str, int]] | None:
    if value is None:
        return None
    if value.strip() == "none":
        return []
    out = []
    for item in value.split(","):
        host, _, port = item.strip().partition(":")
        out.append((host, int(port or 53)))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pykubelet server", description="pykubelet dev control plane")
    p.add_argument("--data-dir", default="./.pykubelet")
    p.add_argument("--bind-address", default="127.0.0.1")
    p.add_argument("--secure-port", type=int, default=6443)
    p.add_argument("--insecure-port-for-tests", type=int, default=None,
                   help="also serve plain HTTP on 127.0.0.1:PORT; requests there are system:masters")
    p.add_argument("--version-minor", default="33", help="minor version reported by /version (picks kubectl)")
    # Upstream kube-controller-manager / kube-apiserver flag names; durations in seconds.
    p.add_argument("--node-monitor-grace-period", type=_duration, default=40.0,
                   help="how long a node may go without a lease renewal or status before it is "
                        "marked Unknown (seconds, or e.g. 40s)")
    p.add_argument("--node-monitor-period", type=_duration, default=5.0,
                   help="how often the node lifecycle controller checks node health")
    p.add_argument("--pod-eviction-timeout", type=_duration, default=300.0,
                   help="deprecated upstream; accepted for compatibility (eviction follows tolerations)")
    p.add_argument("--default-not-ready-toleration-seconds", type=int, default=300,
                   help="tolerationSeconds of the not-ready:NoExecute toleration added to every pod")
    p.add_argument("--default-unreachable-toleration-seconds", type=int, default=300,
                   help="tolerationSeconds of the unreachable:NoExecute toleration added to every pod")
    p.add_argument("--scheduler-retry-interval", type=_duration, default=300.0,
                   help="how long an unschedulable pod waits for a triggering change before it is "
                        "retried anyway (upstream's podMaxInUnschedulablePodsDuration, 5m)")
    p.add_argument("--encryption-provider-config", default=None, metavar="FILE",
                   help="EncryptionConfiguration (apiserver.config.k8s.io/v1) saying how to encrypt "
                        "resources at rest: providers aesgcm, secretbox, identity")
    p.add_argument("--min-request-timeout", type=int, default=1800, metavar="SECONDS",
                   help="a watch lasts a random time between this and twice this (upstream's flag)")
    p.add_argument("--local-path-dir", default=None, metavar="DIR",
                   help="where the built-in local-path provisioner makes PersistentVolumes of the "
                        "'standard' StorageClass (default: <data-dir>/local-path); the agent must see "
                        "the same path (it does in the all-in-one)")
    p.add_argument("--service-cluster-ip-range", default=services.DEFAULT_SERVICE_CIDR,
                   help="CIDR ClusterIPs are allocated from (inside 198.18.0.0/15, apart from pod CIDRs)")
    p.add_argument("--service-node-port-range", default="30000-32767", help="node ports of NodePort Services")
    p.add_argument("--advertise-address", default=None,
                   help="address pods reach the API server on (also listened on; the default/kubernetes "
                        "Service's endpoint), e.g. the node's pod-network gateway")
    p.add_argument("--cluster-dns-address", default=None,
                   help="serve cluster DNS (UDP+TCP) on this address (default: no DNS)")
    p.add_argument("--cluster-dns-port", type=int, default=53)
    p.add_argument("--cluster-domain", default="cluster.local")
    p.add_argument("--cluster-dns-upstream", default=None, metavar="HOST[:PORT],...|none",
                   help="where cluster DNS forwards other names (default: the nameservers of /etc/resolv.conf)")
    p.add_argument("--terminated-pod-gc-threshold", type=int, default=12500, metavar="N",
                   help="pod GC deletes terminated pods beyond this many, oldest first (upstream's flag; "
                        "0 or less disables it)")
    p.add_argument("--no-controllers", action="store_true", help="run the API server only")
    p.add_argument("--access-log", action="store_true",
                   help="log every request (as kube-apiserver's httplog at -v=3); also on with -v")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """``run_server`` keyword arguments from parsed flags (shared with tests, so the flags are
    what gets exercised)."""
    return {
        "port": args.secure_port,
        "bind_address": args.bind_address,
        "version_minor": str(args.version_minor),
        "insecure_port": args.insecure_port_for_tests,
        "controllers": not args.no_controllers,
        "controller_kwargs": {
            "grace_period": args.node_monitor_grace_period,
            "monitor_period": args.node_monitor_period,
            "eviction_timeout": args.pod_eviction_timeout,
            "retry_interval": args.scheduler_retry_interval,
            "terminated_pod_gc_threshold": args.terminated_pod_gc_threshold,
        },
        "default_not_ready_toleration_seconds": args.default_not_ready_toleration_seconds,
        "default_unreachable_toleration_seconds": args.default_unreachable_toleration_seconds,
        "encryption_provider_config": args.encryption_provider_config,
        "min_request_timeout": args.min_request_timeout,
        "local_path_dir": args.local_path_dir,
        "service_cluster_ip_range": args.service_cluster_ip_range,
        "service_node_port_range": args.service_node_port_range,
        "advertise_address": args.advertise_address,
        "dns_address": args.cluster_dns_address,
        "dns_port": args.cluster_dns_port,
        "cluster_domain": args.cluster_domain,
        "dns_upstreams": _upstreams(args.cluster_dns_upstream),
    }


async def _amain(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with run_server(args.data_dir, **server_options(args)) as srv:
        print(f"pykubelet API server at {srv.url}; admin kubeconfig: {srv.kubeconfig}", flush=True)
        await stop.wait()
    return 0


def configure_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A line per request only when asked for: formatting them was 7 % of the server's CPU with
    # 100 hollow nodes, and upstream's apiserver logs requests only at -v=3 or more.
    logging.getLogger("aiohttp.access").setLevel(logging.INFO if args.access_log or args.verbose else logging.WARNING)


GC_YOUNG_THRESHOLD = 50_000  # the collector's generation-0 threshold in the server process (default 700)


def tune_gc() -> None:
    """The server's collector thresholds (see the module docstring): the young generation's
    raised, the other two as CPython sets them."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    tune_gc()
    try:
        return aio.run(_amain(args))
    except (OSError, EncryptionConfigError, StorageError) as e:
        log.error("cannot start server: %s", e)
        return 1
