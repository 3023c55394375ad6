"""``pykubelet agent``: parse the configuration, wire the subsystems, run until SIGTERM/SIGINT.

Design: ``main`` only parses options (a ``ConfigError`` prints its message and exits 1, like the
upstream kubelet refusing an invalid configuration) and sets up logging; ``run_agent`` builds the
object graph in dependency order and tears it down in reverse:

    ApiClient (optional) → CRIClient (connect with retry) → EventRecorder → Kubelet (engine)
    → PodConfig + sources (file, apiserver) → NodeStatusManager (+ Lease) → KubeletServer

Each part is pushed on a ``contextlib.AsyncExitStack`` once started, so the stop order is always the
reverse of the start order, and a part that fails to stop (or takes over 10 s) never keeps the
others running.

Without ``--kubeconfig`` the agent runs standalone: static pods only, no registration, no lease, no
events written — upstream's standalone mode.  Stopping cancels loops only: containers keep running,
so restarting the agent never restarts healthy containers (the engine re-adopts them from CRI
labels).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

from pykubelet.common import aio
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.cri import CRIClient

from . import configsupport, memory, metrics
from .certificate import manager as certificate
from .config import AgentOptions, ConfigError, load_options
from .events import EventRecorder
from .images.endpoint import runtime_client
from .kubelet import Kubelet
from .kuberuntime.envvars import service_env
from .nodestatus import NodeStatusManager
from .proxy.proxier import ListWatchCache, ServiceProxy, proxy_unavailable
from .server import KubeletServer
from .sources import ApiServerSource, FileSource, PodConfig
from .sources.http import HttpSource
from .types import PodUpdate
from .volumemanager import Mounter

log = logging.getLogger("pykubelet.agent")

# Requests in flight to the API server at once (watches have their own connections). Each HTTPS
# connection costs ~300 kB while it lives (asyncio's 256 kB TLS read buffer plus OpenSSL's state),
# and a burst (status writes of many pods, events, TokenRequests) used to open up to 64 of them:
# ~40 seen during a 300-pod start, and their memory stays with the process after the burst. 16 is
# far more than the API server serves at once; upstream's kubelet multiplexes everything on one
# HTTP/2 connection, rate-limited to kubeAPIQPS 50 / burst 100.
API_REQUEST_CONNECTIONS = 16


def setup_logging(verbosity: int) -> None:
    """klog-like levels: -v 0..3 → INFO, -v 4+ → DEBUG (upstream puts debug detail at V(4))."""
    level = logging.DEBUG if verbosity >= 4 else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname).1s %(name)s] %(message)s",
        stream=sys.stderr,
        force=True,
    )
    if verbosity < 6:
        for noisy in ("aiohttp.access", "grpc", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


async def _connect_runtime(runtime: CRIClient, stop: asyncio.Event) -> bool:
    """Wait for the CRI runtime (it may start after us); False if asked to stop first."""
    attempt = 0
    while not stop.is_set():
        try:
            v = await runtime.connect(wait=10.0)
            log.info("connected to container runtime %s %s (CRI %s)",
                     v.runtime_name, v.runtime_version, v.runtime_api_version)
            return True
        except Exception as e:
            attempt += 1
            log.warning("container runtime %s not reachable (attempt %d): %s",
                        runtime.endpoint, attempt, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=min(2.0 * attempt, 10.0))
    return False


def _stopper(name: str, stop: Callable[[], Awaitable[None]], timeout: float = 10.0) -> Callable[[], Awaitable[None]]:
    """A stop callback for the exit stack: bounded in time, and a failure never stops the others."""
    async def run() -> None:
        try:
            await asyncio.wait_for(stop(), timeout=timeout)
        except Exception as e:
            log.warning("error stopping %s: %s", name, e)
    return run


async def run_agent(options: AgentOptions, stop: asyncio.Event | None = None, *,
                    install_signals: bool = True, runtime: CRIClient | None = None,
                    volume_mounter: Mounter | None = None) -> int:
    """Run the agent until ``stop`` is set (or a signal arrives); returns the exit code.

    ``install_signals=False`` lets one process run several agents (hollow nodes) whose owner handles
    SIGTERM/SIGINT itself and sets each ``stop``; ``runtime`` is a CRI client built by such an owner
    (hollow nodes hand in one bound to their in-process fake runtime). The agent closes it on exit.

    Every part is registered on an ``AsyncExitStack`` right after it started, so it is stopped in
    reverse order of starting whatever happens (normal stop, a failed start, cancellation).
    """
    stop = stop or asyncio.Event()
    cfg = options.config
    api: ApiClient | None = None
    cert_dir = options.cert_dir or options.root_dir / "pki"
    if options.bootstrap_kubeconfig is not None:
        if options.kubeconfig is None:
            log.error("--bootstrap-kubeconfig needs --kubeconfig: where the agent writes the kubeconfig of its "
                      "issued certificate")
            return 1
        try:
            await certificate.bootstrap_client(options.bootstrap_kubeconfig, options.kubeconfig, cert_dir,
                                               options.node_name)
        except (certificate.CertificateError, ApiError, OSError, ValueError, KeyError, TypeError) as e:
            log.error("TLS bootstrap with %s failed: %s", options.bootstrap_kubeconfig, e)
            return 1
    if options.kubeconfig is not None:
        try:
            api = ApiClient.from_kubeconfig(options.kubeconfig, user_agent=f"kubelet/{options.node_name}",
                                            max_connections=API_REQUEST_CONNECTIONS)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.error("--kubeconfig: cannot load %s: %s", options.kubeconfig, e)
            return 1
    else:
        log.info("no --kubeconfig: running standalone (static pods only, no node registration)")

    for warning in configsupport.warnings(cfg):  # nothing silently ignored
        log.warning("%s", warning)
    if runtime is None:  # imageServiceEndpoint, when it differs, gets a gRPC channel of its own
        runtime = runtime_client(options.container_runtime_endpoint, options.image_service_endpoint,
                                 timeout=cfg.runtime_request_timeout, observer=metrics.cri_observer)
    recorder = EventRecorder(api, component="kubelet", host=options.node_name,
                             qps=options.config.event_record_qps, burst=options.config.event_burst)
    async with contextlib.AsyncExitStack() as stack:
        if install_signals:
            _install_signal_handlers(stack, stop)
        if api is not None:
            stack.push_async_callback(_stopper("API client", api.close, 5.0))
            if cfg.rotate_certificates and options.kubeconfig is not None:
                client_api = api
                client_cert = certificate.kubeconfig_client_cert(options.kubeconfig)
                if client_cert is not None and client_cert.resolve().parent == cert_dir.resolve():
                    rotator = certificate.CertificateManager(
                        api, cert_dir=cert_dir, prefix="kubelet-client", signer=certificate.CLIENT_SIGNER,
                        usages=certificate.CLIENT_USAGES, node_name=options.node_name,
                        on_rotate=lambda p: client_api.reload_client_certificate(str(p), str(p)))
                    rotator.start()
                    stack.push_async_callback(_stopper("client certificate rotation", rotator.stop))
                else:
                    log.warning("rotateCertificates: the kubeconfig's client certificate is not in --cert-dir %s "
                                "(use --bootstrap-kubeconfig); it is not rotated", cert_dir)
        stack.push_async_callback(_stopper("CRI client", runtime.close, 5.0))
        stack.push_async_callback(_stopper("event recorder", recorder.close, 5.0))
        if not await _connect_runtime(runtime, stop):
            return 0
        updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        try:
            kubelet = Kubelet(options=options, api=api, runtime=runtime, recorder=recorder, updates=updates,
                              volume_mounter=volume_mounter)
        except ConfigError as e:
            log.error("invalid configuration: %s", e)
            return 1
        if api is not None:  # Services for the pods' service environment variables (envvars.py)
            services = ListWatchCache(api, "/api/v1/services")
            services.start()
            stack.push_async_callback(_stopper("service cache", services.stop))
            kubelet.runtime_manager.service_env = lambda pod: service_env(pod, list(services.items.values()))
            with contextlib.suppress(TimeoutError):  # upstream waits for the service informer too
                await asyncio.wait_for(services.synced.wait(), 5.0)
        try:
            await kubelet.start()
        except ConfigError as e:  # startup checks: swap, cgroup driver, reserved cgroups
            log.error("cannot start: %s", e)
            return 1
        stack.push_async_callback(_stopper("kubelet", kubelet.stop))

        podconfig = PodConfig(updates, on_source_ready=kubelet.mark_source_ready)
        if cfg.static_pod_path:
            fsrc = FileSource(cfg.static_pod_path, options.node_name, podconfig, interval=cfg.file_check_frequency)
            fsrc.start()
            stack.push_async_callback(_stopper("static pod source", fsrc.stop))
        if cfg.static_pod_url:
            hsrc = HttpSource(cfg.static_pod_url, options.node_name, podconfig, interval=cfg.http_check_frequency,
                              headers=cfg.static_pod_url_header)
            hsrc.start()
            stack.push_async_callback(_stopper("static pod URL source", hsrc.stop))
        nsm: NodeStatusManager | None = None
        if api is not None:
            nsm = NodeStatusManager(options=options, api=api, runtime=runtime, kubelet=kubelet, recorder=recorder)
            await nsm.start()
            kubelet.node_source = lambda: nsm.node  # node-side admission reads the API's Node
            stack.push_async_callback(_stopper("node status", nsm.stop))
            asrc = ApiServerSource(api, options.node_name, podconfig)
            asrc.start()
            stack.push_async_callback(_stopper("api pod source", asrc.stop))
            if options.service_proxy:
                if why := proxy_unavailable():
                    log.error("--service-proxy: cannot run the service proxy: %s", why)
                    return 1
                proxy = ServiceProxy(api, prefix=options.service_proxy_chain_prefix,
                                     masquerade_bit=cfg.iptables_masquerade_bit, services=services,
                                     node_name=options.node_name)
                await proxy.start()
                stack.push_async_callback(_stopper("service proxy", proxy.stop, 30.0))

        if cfg.enable_server:
            server = KubeletServer(pods=kubelet, runtime=runtime, options=options, api=api)
            if cfg.server_tls_bootstrap and api is not None and nsm is not None:
                serving = certificate.FileStore(cert_dir, "kubelet-server")
                if await certificate.cert_valid(serving.current):
                    server.serving_cert = (str(serving.current), str(serving.current))
                node_status = nsm
                serving_rotator = certificate.CertificateManager(
                    api, cert_dir=cert_dir, prefix="kubelet-server", signer=certificate.SERVING_SIGNER,
                    usages=certificate.SERVING_USAGES, node_name=options.node_name,
                    on_rotate=lambda p: server.reload_tls(str(p), str(p)),
                    names=lambda: certificate.node_address_names(node_status.node))
                serving_rotator.start()
                stack.push_async_callback(_stopper("serving certificate rotation", serving_rotator.stop))
            try:
                await server.start()
            except OSError as e:
                log.error("cannot start the kubelet server on port %d: %s", cfg.port, e)
                return 1
            stack.push_async_callback(_stopper("kubelet server", server.stop))
        log.info("pykubelet agent running as node %s", options.node_name)
        await stop.wait()
        log.info("stopping (containers keep running)")
        return 0


def _install_signal_handlers(stack: contextlib.AsyncExitStack, stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT set ``stop``; the handlers are removed when the stack unwinds."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread (tests), or no signals on this platform
        stack.callback(loop.remove_signal_handler, sig)


def main(argv: list[str] | None = None) -> int:
    try:
        options = load_options(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"pykubelet agent: invalid configuration: {e}", file=sys.stderr)
        return 1
    setup_logging(options.verbosity)
    memory.tune_malloc()  # process-wide: here, not in run_agent (hollow nodes run many agents in one process)
    memory.tune_gc()
    try:
        return aio.run(run_agent(options))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
