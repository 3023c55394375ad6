"""``pykubelet server``: the dev control plane (API server + scheduler + node lifecycle).

Start-up order mirrors a kubeadm control plane: PKI and the admin credentials first, then storage
and the namespaces every cluster has, then the HTTPS listener, then the controllers (each an
``X(api).run()`` coroutine talking to this server through ``ApiClient`` with the admin token,
exactly as upstream controllers use the API and never the storage).  Controllers are imported
lazily so the API server works without them.

``--insecure-port-for-tests`` adds a plain-HTTP listener on 127.0.0.1 whose requests are treated
as ``system:masters`` (like the insecure port older kube-apiservers had); it exists for tests and
is off by default.  :func:`run_server` offers the same for in-process tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from pykubelet.server.app import ApiHttp
from pykubelet.server.auth import PKI, Authorizer, TokenAuth, ensure_admin, node_kubeconfig
from pykubelet.server.registry import Registry
from pykubelet.server.storage import Storage

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

    @property
    def store(self) -> Storage:
        return self.registry.store

    def node_kubeconfig(self, node_name: str) -> Path:
        return node_kubeconfig(self.data_dir, node_name, self.url)


def _controller_classes() -> list[Any]:
    out = []
    for mod, cls in (("pykubelet.server.scheduler", "Scheduler"),
                     ("pykubelet.server.nodelifecycle", "NodeLifecycleController")):
        try:
            m = __import__(mod, fromlist=[cls])
            out.append(getattr(m, cls))
        except (ImportError, AttributeError) as e:
            log.info("controller %s.%s not available: %s", mod, cls, e)
    return out


async def _run_controller(cls: Any, url: str, token: str, ca: Path, kwargs: dict[str, Any]) -> None:
    from pykubelet.common.apiclient import ApiClient

    api = ApiClient(url, token=token, ca_file=str(ca))
    try:
        try:
            ctl = cls(api, **kwargs)
        except TypeError:
            ctl = cls(api)
        await ctl.run()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("controller %s crashed", getattr(cls, "__name__", cls))
    finally:
        with contextlib.suppress(Exception):
            await api.close()


@contextlib.asynccontextmanager
async def run_server(data_dir: str | Path, *, port: int = 0, bind_address: str = "127.0.0.1",
                     version_minor: str = "33", insecure_port: int | None = None,
                     controllers: bool = True, controller_kwargs: dict[str, Any] | None = None,
                     history: int = 10000, bookmark_interval: float = 60.0) -> AsyncIterator[ServerHandle]:
    """Run the API server in this event loop.  ``port=0`` picks a free port."""
    d = Path(data_dir)
    pki = PKI(d)
    await asyncio.to_thread(pki.ensure)  # key generation and file I/O off the loop
    tokens = TokenAuth(d, pki)
    authorizer = Authorizer(d)
    store = Storage(d / "state.db", history=history)
    store.open()
    registry = Registry(store, pki, tokens, authorizer)
    registry.bootstrap()
    http = ApiHttp(registry, pki, tokens, authorizer, version_minor=version_minor,
                   insecure_admin=insecure_port is not None, bookmark_interval=bookmark_interval)
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
    insecure_url = None
    if insecure_port is not None:
        isite = web.TCPSite(runner, "127.0.0.1", insecure_port, reuse_address=True)
        await isite.start()
        isock = isite._server.sockets[0] if isite._server and isite._server.sockets else None  # type: ignore[union-attr,attr-defined]
        insecure_url = f"http://127.0.0.1:{isock.getsockname()[1] if isock else insecure_port}"
    admin_token, kubeconfig = ensure_admin(d, url)
    handle = ServerHandle(url, kubeconfig, admin_token, d, pki.ca_crt, insecure_url, registry, http)
    if controllers:
        for cls in _controller_classes():
            handle.controllers.append(asyncio.create_task(
                _run_controller(cls, url, admin_token, pki.ca_crt, controller_kwargs or {})))
    log.info("API server listening on %s", url)
    try:
        yield handle
    finally:
        for t in handle.controllers:
            t.cancel()
        for t in handle.controllers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await registry.close()
        store.close()  # ends open watches
        await runner.cleanup()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pykubelet server", description="pykubelet dev control plane")
    p.add_argument("--data-dir", default="./.pykubelet")
    p.add_argument("--bind-address", default="127.0.0.1")
    p.add_argument("--secure-port", type=int, default=6443)
    p.add_argument("--insecure-port-for-tests", type=int, default=None,
                   help="also serve plain HTTP on 127.0.0.1:PORT; requests there are system:masters")
    p.add_argument("--version-minor", default="33", help="minor version reported by /version (picks kubectl)")
    p.add_argument("--pod-eviction-timeout", type=float, default=300.0,
                   help="seconds before pods on a NotReady node are evicted (node lifecycle controller)")
    p.add_argument("--node-monitor-grace-period", type=float, default=40.0)
    p.add_argument("--no-controllers", action="store_true", help="run the API server only")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


async def _amain(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    kwargs = {"pod_eviction_timeout": args.pod_eviction_timeout,
              "node_monitor_grace_period": args.node_monitor_grace_period}
    async with run_server(args.data_dir, port=args.secure_port, bind_address=args.bind_address,
                          version_minor=str(args.version_minor), insecure_port=args.insecure_port_for_tests,
                          controllers=not args.no_controllers, controller_kwargs=kwargs) as srv:
        print(f"pykubelet API server at {srv.url}; admin kubeconfig: {srv.kubeconfig}", flush=True)
        await stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_amain(args))
    except OSError as e:
        log.error("cannot start server: %s", e)
        return 1
