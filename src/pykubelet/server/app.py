"""HTTP layer of the dev API server: routing, authn/authz, REST verbs, watch, tables.

One catch-all aiohttp route parses Kubernetes request paths the way upstream's
``RequestInfoFactory`` does (``/api/v1/...``, ``/apis/G/V/...``, optional ``namespaces/NS``,
``resource[/name[/subresource[/rest]]]``, legacy ``/watch/`` prefix), authenticates and
authorizes, then dispatches to :class:`pykubelet.server.registry.Registry`, which owns the
object semantics.  Every error is a Status object (middleware), bodies are capped at 3 MiB (413,
upstream's limit for JSON request bodies), JSON and YAML bodies are both accepted.

Watches stream one JSON object per line over a chunked 200 response, as upstream's
``WatchServer``; an expired resourceVersion is reported as an ``ERROR`` event carrying a 410
Expired Status (what the watch cache does), bookmarks are sent every ``bookmark_interval`` when
``allowWatchBookmarks=true``, and the stream ends after ``timeoutSeconds``.  With a Table Accept
header each watch event carries a one-row Table, which is what ``kubectl get -w`` prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import yaml
from aiohttp import web

from pykubelet.server import discovery, kubeletproxy, protobuf
from pykubelet.server.auth import PKI, Attributes, Authorizer, TokenAuth, UserInfo, user_from_peercert
from pykubelet.server.errors import StatusError, bad_request, method_not_allowed
from pykubelet.server.registry import Registry, RequestContext
from pykubelet.server.resources import ResourceInfo, lookup
from pykubelet.server.selectors import parse_field_selector, parse_label_selector
from pykubelet.server.storage import WatchEvent

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
JSON_CT = "application/json"


@dataclass
class RequestInfo:
    resource_request: bool
    path: str
    verb: str = ""
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    name: str = ""
    subresource: str = ""
    rest: str = ""
    watch_prefix: bool = False


def parse_request_info(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    segs = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
    if len(segs) >= 2 and segs[0] == "api":
        group, version, segs = "", segs[1], segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        group, version, segs = segs[1], segs[2], segs[3:]
    else:
        return RequestInfo(False, path, verb=method.lower())
    if not segs:
        return RequestInfo(False, path, verb=method.lower())
    info = RequestInfo(True, path, group=group, version=version)
    if segs[0] == "watch":
        info.watch_prefix = True
        segs = segs[1:]
    if segs[0] == "namespaces" and len(segs) > 2 and segs[2] not in ("status", "finalize"):
        info.namespace = segs[1]
        segs = segs[2:]
    if not segs:
        return RequestInfo(False, path, verb=method.lower())
    info.resource = segs[0]
    if len(segs) > 1:
        info.name = segs[1]
    if len(segs) > 2:
        info.subresource = segs[2]
    if len(segs) > 3:
        info.rest = "/".join(segs[3:])
    m = method.upper()
    watching = info.watch_prefix or query.get("watch") in ("true", "1")
    if m in ("GET", "HEAD"):
        info.verb = "watch" if watching else ("get" if info.name else "list")
    elif m == "POST":
        info.verb = "create"
    elif m == "PUT":
        info.verb = "update"
    elif m == "PATCH":
        info.verb = "patch"
    elif m == "DELETE":
        info.verb = "delete" if info.name else "deletecollection"
    else:
        info.verb = m.lower()
    return info


def json_response(obj: Any, status: int = 200, content_type: str = JSON_CT,
                  headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(obj, separators=(",", ":")).encode(), status=status,
                        content_type=None if ";" in content_type else content_type,
                        headers={**({"Content-Type": content_type} if ";" in content_type else {}),
                                 **(headers or {})})


def status_response(err: StatusError) -> web.Response:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return json_response(err.status(), err.code, headers=headers)


def wants_table(accept: str) -> bool:
    return "as=Table" in accept.replace(" ", "")


def decode_body(raw: bytes, content_type: str) -> Any:
    """JSON or YAML (upstream accepts application/yaml; apply-patch is YAML)."""
    ct = content_type.split(";")[0].strip().lower()
    if not raw.strip():
        return None
    if ct.startswith("application/vnd.kubernetes.protobuf"):
        # kubectl's typed clients never fall back to JSON, so decode what they send (protobuf.py);
        # 415 only for kinds without a schema there, 400 for bytes that do not parse
        try:
            return protobuf.decode_object(raw)
        except protobuf.UnsupportedKind as e:
            raise StatusError(415, "UnsupportedMediaType",
                              f"the body of the request was in an unknown format - {e}; accepted media types "
                              "include: application/json, application/yaml, application/vnd.kubernetes.protobuf "
                              f"(for {', '.join(sorted(protobuf.KINDS))})") from e
        except ValueError as e:
            raise bad_request(f"unable to decode protobuf body: {_one_line(e)}") from e
    text_err: Exception
    if ct in ("application/yaml", "application/apply-patch+yaml", "text/yaml"):
        try:
            return yaml.safe_load(raw.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            text_err = e
            raise bad_request(f"error converting YAML to JSON: {_one_line(e)}") from e
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        text_err = e
    if ct in ("", "text/plain", "*/*"):
        try:
            return yaml.safe_load(raw.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            pass
    raise bad_request(f"couldn't get version/kind; json parse error: {_one_line(text_err)}")


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


class ApiHttp:
    """aiohttp application wrapper."""

    def __init__(self, registry: Registry, pki: PKI, tokens: TokenAuth, authorizer: Authorizer, *,
                 version_minor: str, insecure_admin: bool = False, bookmark_interval: float = 60.0) -> None:
        self.registry = registry
        self.pki = pki
        self.tokens = tokens
        self.authorizer = authorizer
        self.version_minor = version_minor
        self.insecure_admin = insecure_admin
        self.bookmark_interval = bookmark_interval
        self.server_addr = "127.0.0.1:6443"
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        self.stopping = asyncio.Event()

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._errors])
        app[kubeletproxy.PKI_DIR] = self.pki.dir  # kubeletproxy authenticates to kubelets with a client cert from here
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    # -------------------------------------------------------------- middleware
    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            resp: web.StreamResponse = await handler(request)
            return resp
        except StatusError as e:
            return status_response(e)
        except web.HTTPRequestEntityTooLarge:
            return status_response(StatusError(413, "RequestEntityTooLarge",
                                               "the server has received too large a request body: limit is 3145728"))
        except web.HTTPException as e:
            if e.status == 413:
                return status_response(StatusError(413, "RequestEntityTooLarge", "request entity too large"))
            return status_response(StatusError(e.status, e.reason or "", e.text or e.reason or ""))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:  # never crash the server on bad input
            log.exception("internal error serving %s %s", request.method, request.path)
            return status_response(StatusError(500, "InternalError",
                                               f"Internal error occurred: {type(e).__name__}: {e}"))

    # -------------------------------------------------------------- authn
    def authenticate(self, request: web.Request) -> UserInfo | None:
        if self.insecure_admin and request.transport is not None and \
                request.transport.get_extra_info("sslcontext") is None:
            return UserInfo("admin", "admin", ["system:masters", "system:authenticated"])
        authz = request.headers.get("Authorization", "")
        if authz:
            if not authz.lower().startswith("bearer "):
                raise StatusError(401, "Unauthorized", "Unauthorized")
            u = self.tokens.authenticate(authz[7:].strip())
            if u is None:
                raise StatusError(401, "Unauthorized", "Unauthorized")
            return u
        ssl_obj = request.transport.get_extra_info("ssl_object") if request.transport else None
        if ssl_obj is not None:
            with contextlib.suppress(Exception):
                u = user_from_peercert(ssl_obj.getpeercert(binary_form=True))
                if u is not None:
                    return u
        return None

    # -------------------------------------------------------------- dispatch
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        query = dict(request.query)
        info = parse_request_info(request.method, path, query)
        user = self.authenticate(request)
        public = (not info.resource_request) and (path.rstrip("/") in ("/version", "/healthz", "/livez", "/readyz")
                                                  or path.startswith(("/healthz/", "/livez/", "/readyz/")))
        if user is None:
            if not public:
                raise StatusError(401, "Unauthorized", "Unauthorized")
            user = UserInfo("system:anonymous", "", ["system:unauthenticated"])
        attrs = Attributes(user=user, verb=info.verb, namespace=info.namespace, api_group=info.group,
                           resource=info.resource, subresource=info.subresource, name=info.name, path=path,
                           resource_request=info.resource_request)
        if not public:
            ok, _why = self.authorizer.authorize(attrs)
            if not ok:
                if info.resource_request:
                    res = info.resource + (f"/{info.subresource}" if info.subresource else "")
                    grp = f' in API group "{info.group}"'
                    scope = f' in the namespace "{info.namespace}"' if info.namespace and info.resource != "namespaces" \
                        else " at the cluster scope"
                    msg = f'{info.resource} is forbidden: User "{user.name}" cannot {info.verb} resource "{res}"{grp}{scope}'
                    if info.name:
                        msg = f'{info.resource} "{info.name}" is forbidden: User "{user.name}" cannot {info.verb} ' \
                              f'resource "{res}"{grp}{scope}'
                    raise StatusError(403, "Forbidden", msg, name=info.name or None, kind=info.resource,
                                      group=info.group)
                raise StatusError(403, "Forbidden",
                                  f'forbidden: User "{user.name}" cannot {info.verb} path "{path}"')
        if not info.resource_request:
            return await self._non_resource(request, path)
        return await self._resource(request, info, user)

    async def _non_resource(self, request: web.Request, path: str) -> web.StreamResponse:
        p = path.rstrip("/") or "/"
        accept = request.headers.get("Accept", "")
        if request.method not in ("GET", "HEAD"):
            raise method_not_allowed()
        if p == "/version":
            minor = self.version_minor
            return json_response({"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.0", "gitCommit": "pykubelet",
                                  "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                                  "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64"})
        if p in ("/healthz", "/livez", "/readyz") or p.startswith(("/healthz/", "/livez/", "/readyz/")):
            return web.Response(text="ok", content_type="text/plain")
        if p in ("/api", "/apis"):
            agg = discovery.wants_aggregated(accept)
            if agg:
                api_version = "apidiscovery.k8s.io/v2beta1" if "v2beta1" in agg else "apidiscovery.k8s.io/v2"
                return json_response(discovery.aggregated(p == "/api", api_version), content_type=agg)
            if p == "/api":
                return json_response(discovery.api_versions(self.server_addr))
            return json_response(discovery.api_group_list())
        doc: dict[str, Any] | None = None
        if (m := re.fullmatch(r"/api/(v1)", p)) is not None:
            doc = discovery.resource_list("", m.group(1))
        elif (m := re.fullmatch(r"/apis/([^/]+)", p)) is not None:
            doc = discovery.api_group(m.group(1))
        elif (m := re.fullmatch(r"/apis/([^/]+)/([^/]+)", p)) is not None:
            doc = discovery.resource_list(m.group(1), m.group(2))
        elif p == "/openapi/v3":
            doc = discovery.openapi_root()
        elif (m := re.fullmatch(r"/openapi/v3/api/([^/]+)", p)) is not None:
            doc = discovery.openapi_gv("", m.group(1))
        elif (m := re.fullmatch(r"/openapi/v3/apis/([^/]+)/([^/]+)", p)) is not None:
            doc = discovery.openapi_gv(m.group(1), m.group(2))
        if doc is not None:
            return json_response(doc)
        raise StatusError(404, "NotFound", "the server could not find the requested resource")

    # -------------------------------------------------------------- resources
    async def _resource(self, request: web.Request, info: RequestInfo, user: UserInfo) -> web.StreamResponse:
        ri = lookup(info.group, info.version, info.resource)
        if ri is None:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if info.namespace and not ri.namespaced and info.resource != "namespaces":
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if (info.verb in ("update", "patch") and not info.name) or (
                info.verb == "create" and info.name and not info.subresource and not ri.virtual):
            raise method_not_allowed()
        if info.subresource and ri.sub(info.subresource) is None:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if not info.subresource and info.verb not in ri.verbs and not (info.verb == "watch" and "watch" in ri.verbs):
            raise method_not_allowed()
        ctx = RequestContext(
            user=user, query=dict(request.query), dry_run="dryRun" in request.query,
            field_manager=request.query.get("fieldManager") or request.headers.get("User-Agent", "unknown").split("/")[0],
        )
        if info.subresource in ("log", "exec", "attach", "portforward", "proxy") and ri.resource in ("pods", "nodes"):
            return await self._proxy(request, ri, info, ctx)
        accept = request.headers.get("Accept", "")
        if info.verb == "watch":
            return await self._watch(request, ri, info, ctx)
        if info.verb == "list":
            return await self._list(request, ri, info, ctx, accept)
        if info.verb == "get":
            obj = self.registry.get(ri, info.namespace, info.name, info.subresource)
            if wants_table(accept) and not info.subresource:
                return json_response(self.registry.table(ri, [obj], self.registry.store.revision, None, None))
            return json_response(obj)
        body_raw = await request.read()
        ct = request.headers.get("Content-Type", "")
        if info.verb in ("delete", "deletecollection"):
            if ct.startswith("application/vnd.kubernetes.protobuf") and body_raw.strip():
                try:
                    options = protobuf.decode_delete_options(body_raw)
                except ValueError as e:
                    raise bad_request(f"unable to decode protobuf DeleteOptions: {_one_line(e)}") from e
            else:
                options = decode_body(body_raw, ct) or {}
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be an object")
            if info.verb == "delete":
                obj, code = await self.registry.delete(ri, info.namespace, info.name, options, ctx)
                return json_response(obj, code)
            lst = await self.registry.delete_collection(ri, info.namespace, options, ctx)
            return json_response(lst)
        if info.verb == "patch":
            ptype = _patch_type(ct)
            body = decode_body(body_raw, "application/yaml" if ptype == "apply" else "application/json")
            obj, code, warnings = await self.registry.patch(ri, info.namespace, info.name, info.subresource,
                                                            body, ptype, ctx)
            return json_response(obj, code, headers=_warn_headers(warnings))
        body = decode_body(body_raw, ct)
        if not isinstance(body, dict):
            raise bad_request("Object 'Kind' is missing in request body: the body must be a JSON or YAML object")
        if info.verb == "create":
            if info.subresource or ri.virtual:
                obj, code = await self.registry.create_sub(ri, info.namespace, info.name, info.subresource, body, ctx)
                return json_response(obj, code)
            if ri.namespaced and not info.namespace:
                raise method_not_allowed("POST requires a namespace for namespaced resources")
            obj, warnings = await self.registry.create(ri, info.namespace, body, ctx)
            return json_response(obj, 201, headers=_warn_headers(warnings))
        if info.verb == "update":
            obj, warnings = await self.registry.update(ri, info.namespace, info.name, info.subresource, body, ctx)
            return json_response(obj, 200, headers=_warn_headers(warnings))
        raise method_not_allowed()

    async def _list(self, request: web.Request, ri: ResourceInfo, info: RequestInfo, ctx: RequestContext,
                    accept: str) -> web.StreamResponse:
        q = request.query
        limit = _int_param(q.get("limit"), "limit")
        items, rev, cont, remaining = self.registry.list_objects(ri, info.namespace or None, q.get("labelSelector"),
                                                         q.get("fieldSelector"), limit, q.get("continue"))
        if wants_table(accept):
            return json_response(self.registry.table(ri, items, rev, cont, remaining))
        meta: dict[str, Any] = {"resourceVersion": str(rev)}
        if cont:
            meta["continue"] = cont
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        return json_response({"kind": ri.list_kind, "apiVersion": ri.api_version, "metadata": meta, "items": items})

    async def _watch(self, request: web.Request, ri: ResourceInfo, info: RequestInfo,
                     ctx: RequestContext) -> web.StreamResponse:
        q = request.query
        label_match = parse_label_selector(q.get("labelSelector"))
        field_match, _eq = parse_field_selector(q.get("fieldSelector"), ri.key if ri.group else ri.resource)
        if info.name:
            name = info.name

            def name_match(o: dict[str, Any]) -> bool:
                return bool((o.get("metadata") or {}).get("name") == name)
        else:
            def name_match(o: dict[str, Any]) -> bool:
                return True

        def matches(o: dict[str, Any] | None) -> bool:
            return o is not None and name_match(o) and label_match(o) and field_match(o)

        rv_param = q.get("resourceVersion", "")
        send_initial = q.get("sendInitialEvents") == "true"
        since: int | None
        if rv_param in ("", "0") or send_initial:
            since = None
        else:
            try:
                since = int(rv_param)
            except ValueError as e:
                raise bad_request(f"invalid resource version: {rv_param}") from e
        timeout = _int_param(q.get("timeoutSeconds"), "timeoutSeconds")
        bookmarks = q.get("allowWatchBookmarks") == "true"
        table = wants_table(request.headers.get("Accept", ""))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        try:
            watcher = self.registry.store.watch(ri.key, info.namespace or None, since)
        except StatusError as e:
            await resp.prepare(request)
            await resp.write(_line({"type": "ERROR", "object": e.status()}))
            await resp.write_eof()
            return resp
        initial_left = watcher.queue.qsize() if since is None else 0
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        first_table = True
        last_rv = since or self.registry.store.revision

        async def send(etype: str, obj: dict[str, Any]) -> None:
            nonlocal first_table
            out = self.registry.present(ri, obj)
            if table:
                t = self.registry.table(ri, [out], int(out["metadata"].get("resourceVersion", "0") or 0), None, None)
                if not first_table:
                    t["columnDefinitions"] = None
                first_table = False
                out = t
            await resp.write(_line({"type": etype, "object": out}))

        try:
            if since is None and initial_left == 0 and send_initial:
                await self._bookmark(resp, ri, self.registry.store.revision, initial_end=True)
            while True:
                wait = 5.0
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        break
                try:
                    ev = await asyncio.wait_for(watcher.queue.get(), timeout=max(wait, 0.01))
                except TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break
                    if bookmarks and loop.time() % self.bookmark_interval < 5.0:
                        await self._bookmark(resp, ri, last_rv)
                    continue
                if ev is None:
                    break
                last_rv = max(last_rv, ev.rv)
                await self._deliver(ev, matches, send)
                if initial_left:
                    initial_left -= 1
                    if initial_left == 0 and send_initial:
                        await self._bookmark(resp, ri, self.registry.store.revision, initial_end=True)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.registry.store.unwatch(watcher)
        with contextlib.suppress(Exception):
            await resp.write_eof()
        return resp

    @staticmethod
    async def _deliver(ev: WatchEvent, matches: Any, send: Any) -> None:
        if ev.type == "MODIFIED":
            now, before = matches(ev.obj), matches(ev.old)
            if now and before:
                await send("MODIFIED", ev.obj)
            elif now:
                await send("ADDED", ev.obj)
            elif before:
                await send("DELETED", ev.obj)
        elif matches(ev.obj):
            await send(ev.type, ev.obj)

    async def _bookmark(self, resp: web.StreamResponse, ri: ResourceInfo, rv: int, initial_end: bool = False) -> None:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        await resp.write(_line({"type": "BOOKMARK", "object": {"kind": ri.kind, "apiVersion": ri.api_version,
                                                               "metadata": meta}}))

    async def _proxy(self, request: web.Request, ri: ResourceInfo, info: RequestInfo,
                     ctx: RequestContext) -> web.StreamResponse:
        if ri.resource == "nodes":
            node = self.registry.get(ri, "", info.name)
            if info.subresource != "proxy":
                raise StatusError(404, "NotFound", "the server could not find the requested resource")
            resp: web.StreamResponse = await kubeletproxy.node_proxy(request, node=node, path=info.rest)
            return resp
        pod = self.registry.get(ri, info.namespace, info.name)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            raise bad_request(f"pod {info.name} does not have a host assigned")
        node_obj = self.registry.store.get("nodes", "", node_name)
        if node_obj is None:
            raise StatusError(404, "NotFound", f'nodes "{node_name}" not found', name=node_name, kind="nodes")
        resp = await kubeletproxy.pod_subresource(request, pod=pod, node=node_obj, subresource=info.subresource)
        return resp


def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _int_param(v: str | None, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError as e:
        raise bad_request(f"invalid value for {name}: {v!r}") from e
    if n < 0:
        raise bad_request(f"invalid value for {name}: must be non-negative")
    return n


def _patch_type(ct: str) -> str:
    from pykubelet.server.patch import PATCH_TYPES

    base = ct.split(";")[0].strip().lower()
    t = PATCH_TYPES.get(base)
    if t is None:
        raise StatusError(415, "UnsupportedMediaType",
                          'the body of the request was in an unknown format - accepted media types include: '
                          'application/json-patch+json, application/merge-patch+json, '
                          'application/apply-patch+yaml, application/strategic-merge-patch+json')
    return t


def _warn_headers(warnings: list[str]) -> dict[str, str] | None:
    if not warnings:
        return None
    # aiohttp headers are a multidict but Response(headers=dict) takes one value; join with comma
    return {"Warning": ", ".join('299 - "' + w.replace('"', '\\"') + '"' for w in warnings)}

