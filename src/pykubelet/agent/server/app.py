"""The kubelet HTTP API: ``KubeletServer`` (10250 HTTPS, 10248 healthz, optional 10255 read-only).

Mirrors upstream pkg/kubelet/server/server.go:

* 10250 is HTTPS with the serving cert from ``tlsCertFile``/``tlsPrivateKeyFile`` or a self-signed
  one generated into ``<root_dir>/pki/kubelet.{crt,key}`` (upstream writes ``kubelet.crt`` there too).
  Client certificates are requested (not required) and verified against
  ``authentication.x509.clientCAFile``; every request passes the authn/authz filter (auth.py).
* 10248 serves only ``/healthz`` over plain HTTP with the named checks ``ping``, ``log``,
  ``syncloop`` and ``pleg`` (``?verbose`` lists them, a failure is 500 like k8s.io/apiserver healthz).
* The read-only port (when non-zero) serves the unauthenticated subset upstream keeps there:
  healthz, pods, stats and metrics.

Routes: ``/pods``, ``/runningpods/``, ``/containerLogs/{ns}/{pod}/{container}``, ``/logs/…`` (files under
the node log directory; traversal outside it is refused), ``/exec``, ``/attach``, ``/portForward``,
``/run``, ``/metrics`` (+ ``/cadvisor``, ``/resource``, ``/probes``), ``/stats/summary``, ``/configz``.
Bad input always ends as a Status/4xx, never as an unhandled exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pykubelet.agent import metrics
from pykubelet.agent.config import AgentOptions
from pykubelet.agent.interfaces import ContainerRuntime, PodProvider
from pykubelet.agent.server import cri_helpers, logs, stats
from pykubelet.agent.server.auth import AuthError, KubeletAuth, request_attributes
from pykubelet.agent.server.status import StatusError, status_response
from pykubelet.agent.server.streaming import StreamingHandlers
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.common import labels
from pykubelet.common.apiclient import ApiClient
from pykubelet.cri import CRIError, pb

log = logging.getLogger(__name__)

NODE_LOG_DIR = "/var/log"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def ensure_self_signed(root_dir: Path, node_name: str, ips: list[str]) -> tuple[str, str]:
    """Create (once) a self-signed serving cert like upstream's kubelet does when none is configured.

    The generation runs ``selfsigned.py`` in a child process so the agent never imports
    ``cryptography`` (~10 MB of resident memory it would keep for good; see that module).
    """
    pki = root_dir / "pki"
    crt, key = pki / "kubelet.crt", pki / "kubelet.key"
    if crt.exists() and key.exists():
        return str(crt), str(key)
    script = Path(__file__).with_name("selfsigned.py")
    res = subprocess.run([sys.executable, str(script), str(root_dir), node_name, *ips],
                         capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0 or not (crt.exists() and key.exists()):
        raise RuntimeError(f"generating the self-signed serving certificate failed: {res.stderr.strip()[-2000:]}")
    return str(crt), str(key)


class KubeletServer:
    """Serves the kubelet API; see the module docstring for ports and routes."""

    def __init__(self, *, pods: PodProvider, runtime: ContainerRuntime, options: AgentOptions,
                 api: ApiClient | None, node_log_dir: str = NODE_LOG_DIR) -> None:
        self.pod_provider = pods
        self.runtime = runtime
        self.options = options
        self.config = options.config
        self.api = api
        self.node_name = options.node_name or socket.gethostname()
        self.root_dir = Path(options.root_dir)
        self.node_log_dir = os.path.realpath(node_log_dir)
        self.auth = KubeletAuth(config=self.config, api=api, node_name=self.node_name)
        self.streaming = StreamingHandlers(runtime=runtime, find_pod=self._find_pod)
        self.stats = stats.StatsProvider(runtime=runtime, node_name=self.node_name, root_dir=str(self.root_dir))
        self._runners: list[web.AppRunner] = []
        # a CSR-issued serving certificate (serverTLSBootstrap) replaces the self-signed fallback
        self.serving_cert: tuple[str, str] | None = None
        self._tls: ssl.SSLContext | None = None
        self.ports: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle
    def reload_tls(self, cert_file: str, key_file: str) -> None:
        """Serve a new certificate from the next TLS handshake on (``serverTLSBootstrap``
        rotation; open connections keep theirs)."""
        self.serving_cert = (cert_file, key_file)
        if self._tls is not None:
            self._tls.load_cert_chain(cert_file, key_file)

    def _ssl_context(self) -> ssl.SSLContext:
        cert = self.config.tls_cert_file
        key = self.config.tls_private_key_file
        if self.serving_cert is not None:
            cert, key = self.serving_cert
        if not (cert and key):
            node_ip = self.options.node_ip or ""
            cert, key = ensure_self_signed(self.root_dir, self.node_name, [node_ip] if node_ip else [])
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        self._tls = ctx
        ca = self.config.authentication.x509.client_ca_file
        if ca:
            ctx.load_verify_locations(cafile=ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def build_main_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_middleware], client_max_size=1 << 20)
        self._add_read_routes(app)
        r = app.router
        r.add_get("/runningpods/", self.running_pods)
        r.add_get("/containerLogs/{namespace}/{pod}/{container}", self.container_logs)
        r.add_get("/logs", self.node_logs)
        r.add_get("/logs/{path:.*}", self.node_logs)
        for prefix, handler in (("/exec", self.streaming.exec), ("/attach", self.streaming.attach)):
            r.add_route("GET", prefix + "/{namespace}/{pod}/{container}", handler)
            r.add_route("POST", prefix + "/{namespace}/{pod}/{container}", handler)
            r.add_route("GET", prefix + "/{namespace}/{pod}/{uid}/{container}", handler)
            r.add_route("POST", prefix + "/{namespace}/{pod}/{uid}/{container}", handler)
        r.add_route("GET", "/portForward/{namespace}/{pod}", self.streaming.port_forward)
        r.add_route("POST", "/portForward/{namespace}/{pod}", self.streaming.port_forward)
        r.add_route("GET", "/portForward/{namespace}/{pod}/{uid}", self.streaming.port_forward)
        r.add_route("POST", "/portForward/{namespace}/{pod}/{uid}", self.streaming.port_forward)
        r.add_post("/run/{namespace}/{pod}/{container}", self.streaming.run)
        r.add_post("/run/{namespace}/{pod}/{uid}/{container}", self.streaming.run)
        r.add_get("/configz", self.configz)
        r.add_get("/debug/pprof/goroutine", self.debug_tasks)
        return app

    def _add_read_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/healthz/{check}", self.healthz)
        r.add_get("/pods", self.pods)
        r.add_get("/pods/", self.pods)
        r.add_get("/stats/summary", self.stats_summary)
        r.add_get("/stats/summary/", self.stats_summary)
        r.add_get("/metrics", self.metrics)
        r.add_get("/metrics/cadvisor", self.metrics_cadvisor)
        r.add_get("/metrics/resource", self.metrics_resource)
        r.add_get("/metrics/probes", self.metrics_probes)
        r.add_get("/spec", self.spec)
        r.add_get("/spec/", self.spec)

    def build_healthz_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/healthz/{check}", self.healthz)
        return app

    def build_readonly_app(self) -> web.Application:
        app = web.Application()
        self._add_read_routes(app)
        return app

    async def _serve(self, app: web.Application, name: str, host: str, port: int,
                     ctx: ssl.SSLContext | None) -> None:
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, host or None, port, ssl_context=ctx, reuse_address=True)
        await site.start()
        self.ports[name] = port
        for sock in runner.addresses:  # the real port when ``port`` was 0 (tests)
            self.ports[name] = int(sock[1])
            break

    async def start(self) -> None:
        cfg = self.config
        try:
            await self._serve(self.build_main_app(), "main", cfg.address, cfg.port, self._ssl_context())
            if cfg.healthz_port:
                await self._serve(self.build_healthz_app(), "healthz", cfg.healthz_bind_address,
                                  cfg.healthz_port, None)
            if cfg.read_only_port:
                await self._serve(self.build_readonly_app(), "readonly", cfg.address, cfg.read_only_port, None)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        for runner in runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()

    # ------------------------------------------------------------------ auth
    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        peercert = None
        if request.transport is not None:
            with contextlib.suppress(Exception):
                peercert = request.transport.get_extra_info("peercert")
        try:
            user = await self.auth.authenticate(peercert=peercert,
                                                authorization=request.headers.get("Authorization"))
        except AuthError as e:
            return web.Response(status=e.status, text=e.message)
        attrs = request_attributes(user, request.method, request.path, self.node_name)
        allowed, reason = await self.auth.authorize(attrs)
        if not allowed:
            msg = attrs.forbidden_message()
            log.info("kubelet API denied %s: %s", msg, reason)
            return web.Response(status=403, text=msg)
        return await handler(request)

    # ------------------------------------------------------------------ kubelet lookups
    def _find_pod(self, namespace: str, name: str) -> Pod | None:
        return self.pod_provider.get_pod_by_name(namespace, name)

    # ------------------------------------------------------------------ handlers
    async def healthz(self, request: web.Request) -> web.Response:
        checks: list[tuple[str, bool]] = [
            ("ping", True), ("log", True),
            ("syncloop", self.pod_provider.sync_loop_healthy()), ("pleg", self.pod_provider.pleg_healthy()),
        ]
        only = request.match_info.get("check")
        if only:
            found = [c for c in checks if c[0] == only]
            if not found:
                raise web.HTTPNotFound(text="404 page not found\n")
            checks = found
        healthy = all(ok for _, ok in checks)
        if "verbose" in request.query or not healthy:
            lines = [f"[+]{n} ok" if ok else f"[-]{n} failed: reason withheld" for n, ok in checks]
            lines.append("healthz check passed" if healthy else "healthz check failed")
            return web.Response(status=200 if healthy else 500, text="\n".join(lines) + "\n")
        return web.Response(text="ok")

    async def pods(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                  "items": self.pod_provider.pods()})

    async def running_pods(self, request: web.Request) -> web.Response:
        try:
            sandboxes = await self.runtime.list_pod_sandbox()
            containers = await self.runtime.list_containers()
        except CRIError as e:
            raise StatusError(500, "InternalError", f"runtime error: {e}") from e
        pods: dict[str, JSONObj] = {}
        for s in sandboxes:
            if s.state != pb.SANDBOX_READY:
                continue
            md = s.metadata
            pods[md.uid] = {"metadata": {"name": md.name, "namespace": md.namespace, "uid": md.uid,
                                         "creationTimestamp": None},
                            "spec": {"containers": []}, "status": {}}
        for c in containers:
            if c.state != pb.CONTAINER_RUNNING:
                continue
            uid = c.labels.get(labels.POD_UID_LABEL, "")
            if uid in pods:
                pods[uid]["spec"]["containers"].append(
                    {"name": c.metadata.name, "image": c.image.image or c.image_ref, "resources": {}})
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(pods.values())})

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        ns, name, container = (request.match_info["namespace"], request.match_info["pod"],
                               request.match_info["container"])
        pod = self._find_pod(ns, name)
        if pod is None:
            return status_response(404, "NotFound", f'pod "{name}" not found', name=name, kind="pods")
        spec = pod.get("spec") or {}
        names = [c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
                 for c in spec.get(key) or []]
        if container not in names:
            return status_response(404, "NotFound", f'container "{container}" not found in pod "{name}"')
        try:
            opts = logs.options_from_query(dict(request.query), time.time_ns())
        except ValueError as e:
            return status_response(400, "BadRequest", str(e))
        uid = (pod.get("metadata") or {}).get("uid")
        try:
            status_id = cri_helpers.logs_container_id(pod.get("status") or {}, container, opts.previous)
            c = await cri_helpers.pick_container(self.runtime, ns, name, container, uid=uid, previous=opts.previous,
                                                 status_id=status_id)
            st = await cri_helpers.container_status(self.runtime, c.id)
        except cri_helpers.NotFound as e:
            return status_response(400, "BadRequest", str(e))
        except Exception as e:
            return status_response(500, "InternalError", f"runtime error: {e}")
        path = str(st.log_path)
        if path and not os.path.isabs(path):
            path = os.path.join(str(self.config.pod_logs_dir), f"{ns}_{name}_{uid}", path)
        resp = web.StreamResponse(headers={"Content-Type": "text/plain", "Cache-Control": "no-cache"})
        if not path or not await asyncio.to_thread(os.path.exists, path):
            await resp.prepare(request)
            await resp.write_eof()
            return resp
        cid = str(c.id)

        async def running() -> bool:
            return await cri_helpers.is_running(self.runtime, cid)

        def gone() -> bool:
            t = request.transport
            return t is None or t.is_closing()

        if opts.follow:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            async for chunk in logs.read_logs(path, opts, is_running=running, client_gone=gone):
                await resp.write(chunk)
            await resp.write_eof()
        except (ConnectionError, FileNotFoundError, RuntimeError):
            pass
        return resp

    def _resolve_node_log(self, rel: str) -> tuple[str, str]:
        """(kind, target) for a /logs/ path: kind is forbidden|dir|file|missing (blocking, run off-loop)."""
        target = os.path.realpath(os.path.join(self.node_log_dir, rel.lstrip("/")))
        if target != self.node_log_dir and not target.startswith(self.node_log_dir + os.sep):
            return "forbidden", target
        if os.path.isdir(target):
            return "dir", target
        return ("file" if os.path.isfile(target) else "missing"), target

    def _listing(self, target: str) -> str:
        items = []
        for e in sorted(os.listdir(target)):
            suffix = "/" if os.path.isdir(os.path.join(target, e)) else ""
            q = html.escape(e + suffix, quote=True)
            items.append(f'<a href="{q}">{q}</a>')
        return "<pre>\n" + "\n".join(items) + "\n</pre>\n"

    async def node_logs(self, request: web.Request) -> web.StreamResponse:
        rel = request.match_info.get("path", "")
        if "\x00" in rel:
            return web.Response(status=400, text="invalid path\n")
        kind, target = await asyncio.to_thread(self._resolve_node_log, rel)
        if kind == "forbidden":
            return web.Response(status=403, text="path outside the node log directory\n")
        if kind == "dir":
            if rel and not request.path.endswith("/"):
                raise web.HTTPMovedPermanently(request.path + "/")
            try:
                text = await asyncio.to_thread(self._listing, target)
            except OSError:
                return web.Response(status=403, text="forbidden\n")
            return web.Response(text=text, content_type="text/html")
        if kind == "missing":
            return web.Response(status=404, text="404 page not found\n")
        return web.FileResponse(target, headers={"Content-Type": "text/plain; charset=utf-8"})

    async def debug_tasks(self, request: web.Request) -> web.Response:
        """The asyncio analogue of upstream's ``/debug/pprof/goroutine?debug=1`` (a "proxy" subresource).

        First line ``goroutine profile: total N``; then one ``count @ module.qualname`` line per coroutine,
        so leaks of streaming tasks (pumps, log followers, request handlers) are visible from outside.
        """
        counts: dict[str, int] = {}
        tasks = asyncio.all_tasks()
        for t in tasks:
            coro = t.get_coro()
            code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
            mod = ""
            frame = getattr(coro, "cr_frame", None)
            if frame is not None:
                mod = str(frame.f_globals.get("__name__", ""))
            name = f"{mod}.{getattr(code, 'co_qualname', '?')}" if code is not None else type(coro).__name__
            counts[name] = counts.get(name, 0) + 1
        lines = [f"goroutine profile: total {len(tasks)}"]
        lines += [f"{n} @ {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        return web.Response(text="\n".join(lines) + "\n")

    async def configz(self, request: web.Request) -> web.Response:
        return web.json_response({"kubeletconfig": self.config.to_dict()})

    async def spec(self, request: web.Request) -> web.Response:
        mem = stats.node_memory()
        return web.json_response({"num_cores": os.cpu_count() or 1, "memory_capacity": mem.get("capacity", 0),
                                  "machine_id": (stats._read("/etc/machine-id") or "").strip()})

    async def stats_summary(self, request: web.Request) -> web.Response:
        try:
            summary = await self.stats.summary()
        except Exception as e:
            return status_response(500, "InternalError", f"failed to get stats: {e}")
        if request.query.get("only_cpu_and_memory", "").lower() == "true":
            summary["node"] = {k: v for k, v in summary["node"].items() if k in ("nodeName", "startTime", "cpu", "memory")}
            for p in summary["pods"]:
                for k in list(p):
                    if k not in ("podRef", "startTime", "cpu", "memory", "containers"):
                        del p[k]
        return web.Response(text=json.dumps(summary, indent=2), content_type="application/json")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def metrics_probes(self, request: web.Request) -> web.Response:
        """Upstream serves the prober's metrics on their own path: the ``prober_*`` families."""
        keep = [line for line in generate_latest(metrics.REGISTRY).decode().splitlines()
                if (line.split(" ")[2] if line.startswith("#") and line.count(" ") >= 2 else line).startswith("prober_")]
        return web.Response(body=("\n".join(keep) + "\n").encode() if keep else b"",
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def metrics_resource(self, request: web.Request) -> web.Response:
        summary: JSONObj | None
        try:
            summary = await self.stats.summary()
        except Exception:
            summary = None
        return web.Response(text=stats.resource_metrics(summary), content_type="text/plain",
                            charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})

    async def metrics_cadvisor(self, request: web.Request) -> web.Response:
        try:
            summary = await self.stats.summary(keep_ids=True)
        except Exception as e:
            return web.Response(status=500, text=f"failed to collect stats: {e}\n")
        mem = stats.node_memory().get("capacity", 0)
        return web.Response(text=stats.cadvisor_metrics(summary, machine_cores=os.cpu_count() or 1,
                                                        machine_memory=mem),
                            content_type="text/plain", charset="utf-8")
