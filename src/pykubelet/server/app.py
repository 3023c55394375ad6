"""HTTP layer of the dev API server: routing, authn/authz, REST verbs, watch, tables.

One catch-all aiohttp route parses Kubernetes request paths the way upstream's
``RequestInfoFactory`` does (``/api/v1/...``, ``/apis/G/V/...``, optional ``namespaces/NS``,
``resource[/name[/subresource[/rest]]]``, legacy ``/watch/`` prefix), authenticates and
authorizes, then dispatches to :class:`pykubelet.server.registry.Registry`, which owns the
object semantics.  Every error is a Status object (middleware), bodies are capped at 3 MiB (413,
upstream's limit for JSON request bodies).

Request bodies and options are checked here the way upstream's handlers do before any object
semantics run (``k8s.io/apiserver/pkg/endpoints/handlers``):

* Content-Type is negotiated (``negotiation.NegotiateInputSerializer``): JSON, YAML or protobuf;
  an absent header means JSON (upstream keeps that for old clients), anything else is 415
  UnsupportedMediaType.  PATCH takes exactly the patch media types (json-patch, merge-patch,
  strategic-merge-patch, apply-patch+yaml), anything else 415.
* Parsing is bounded: nesting deeper than :data:`MAX_DEPTH` (JSON, YAML, patches) and YAML alias
  bombs are 400, never a RecursionError; NaN/Infinity, YAML timestamps and binary never reach JSON
  encoding.  Duplicate keys are remembered so ``fieldValidation`` can report them.
* Query options are decoded as the Go option structs are (``DecodeParameters``: int64, bool,
  uint64 resourceVersion; a parse error is 400) and validated (``ValidateCreateOptions`` and
  friends: ``dryRun`` only ``All``, ``fieldValidation`` Ignore/Warn/Strict, ``fieldManager``
  printable, <= 128 characters and required for apply; 422 Invalid with upstream's text).

Watches stream one JSON object per line over a chunked 200 response, as upstream's
``WatchServer``; an expired resourceVersion is reported as an ``ERROR`` event carrying a 410
Expired Status (what the watch cache does), bookmarks are sent every ``bookmark_interval`` when
``allowWatchBookmarks=true``.  A watch ends after ``timeoutSeconds``, and never later than the
server's own watch timeout, drawn per watch between ``min_request_timeout`` and twice that
(upstream's ``--min-request-timeout``, default 1800 s), so no client can hold one open forever.
With a Table Accept header each watch event carries a one-row Table, which is what
``kubectl get -w`` prints.

A watch client that stops reading costs bounded memory and nobody else's time: each watch's queue
holds at most ``watch_queue_limit`` live events (default 1000, upstream's largest watch channel);
one more and the store terminates the watch with a log line naming the client (user agent,
address) and the resource (see ``storage``).  Socket writes are awaited by the watch's own request
handler, never by the fan-out; when the watch is terminated, or its timeout passes, while a write is
stuck on a full socket the connection is aborted.  A well-behaved client sees the watch end and
watches again from its last resourceVersion, as with upstream.

Every TLS connection costs the size of asyncio's read buffer (``SSLProtocol.max_size``: 256 KiB,
allocated and zeroed per connection) for as long as it is open; with a hundred kubelets keeping
several connections each, plus the in-process controllers' own, that was the largest single item of
the server's RSS after the objects themselves.  The server lowers it to ``TLS_READ_BUFFER`` (64 KiB,
four TLS records of 16 KiB: a read still drains whatever a record delivers) when it is built.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import json
import logging
import math
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import yaml
from aiohttp import web
from multidict import CIMultiDict

from pykubelet.server import discovery, jsonbytes, kubeletproxy, metricsapi, openapiv2, protobuf
from pykubelet.server.auth import PKI, Attributes, Authorizer, TokenAuth, UserInfo, user_from_peercert
from pykubelet.server.errors import StatusError, bad_request, invalid_options, method_not_allowed
from pykubelet.server.patch import PATCH_TYPES
from pykubelet.server.registry import Registry, RequestContext, Written
from pykubelet.server.resources import ResourceInfo, lookup
from pykubelet.server.selectors import parse_field_selector, parse_label_selector
from pykubelet.server.storage import StorageError, WatchEvent
from pykubelet.server.validation import resource_version_error

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
JSON_CT = "application/json"
WATCH_BATCH = 500  # queued watch events written in one go at most
WATCH_QUEUE_LIMIT = 1000  # live events a watch may have waiting before it is terminated
TLS_READ_BUFFER = 64 * 1024  # asyncio's per-connection TLS read buffer, see the module docstring
# Nesting bound for every body we parse: deeper than any built-in object (managedFields, ~12) needs,
# shallow enough that the recursive code after parsing (typed decoding, merges, deepcopy) stays far
# from Python's recursion limit.
MAX_DEPTH = 100
# A YAML document whose aliases would expand past this many nodes is refused ("billion laughs").
MAX_YAML_NODES = 200_000
DEFAULT_MIN_REQUEST_TIMEOUT = 1800.0
INPUT_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
# Upstream's order in the 415 message (installer.go supportedTypes).
PATCH_MEDIA_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                     "application/strategic-merge-patch+json", "application/apply-patch+yaml")
_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


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
    watching = info.watch_prefix or query.get("watch") in _GO_TRUE  # strconv.ParseBool, as RequestInfoFactory
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
                  headers: CIMultiDict[str] | None = None) -> web.Response:
    h: CIMultiDict[str] = CIMultiDict(headers or {})
    if ";" in content_type:
        h["Content-Type"] = content_type
    return web.Response(body=jsonbytes.encode(obj), status=status,
                        content_type=None if ";" in content_type else content_type, headers=h)


def written_response(written: Written, status: int, headers: CIMultiDict[str] | None = None) -> web.Response:
    """A write's answer: the stored revision's bytes as the store encoded them, when it has them."""
    return web.Response(body=written.encoded(), status=status, content_type=JSON_CT, headers=headers)


def status_response(err: StatusError) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict()
    if err.retry_after is not None:
        headers["Retry-After"] = str(err.retry_after)
    return json_response(err.status(), err.code, headers=headers)


def wants_table(accept: str) -> bool:
    return "as=Table" in accept.replace(" ", "")


# ------------------------------------------------------------------ body decoding
@dataclass
class Body:
    """A decoded request body plus the duplicate keys its parser saw (``id(dict)`` -> keys)."""

    obj: Any
    duplicates: dict[int, list[str]] = field(default_factory=dict)


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def unsupported_media_type(accepted: tuple[str, ...]) -> StatusError:
    return StatusError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                       "accepted media types include: " + ", ".join(accepted))


def negotiate_input(content_type: str) -> str:
    """The input media type (``NegotiateInputSerializer``): absent means JSON, unknown is 415."""
    mt = media_type(content_type)
    if not mt:
        return "application/json"
    if mt not in INPUT_MEDIA_TYPES:
        raise unsupported_media_type(INPUT_MEDIA_TYPES)
    return mt


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def _depth_exceeded(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` nests deeper than ``limit`` (iterative: safe on any input)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict | list):
            if d > limit:
                return True
            stack.extend((c, d + 1) for c in (o.values() if isinstance(o, dict) else o))
    return False


class _BodyDecoder(threading.local):
    """One ``JSONDecoder`` per thread for :func:`parse_json` (``json.loads`` with a hook built a
    decoder and its scanner for every request body).  ``dups``: the duplicate keys of the body
    being parsed, reset by each call (a parse runs to its end without yielding)."""

    def __init__(self) -> None:
        self.dups: dict[int, list[str]] = {}
        self.decoder = json.JSONDecoder(object_pairs_hook=self._pairs, parse_constant=_reject_constant)

    def _pairs(self, items: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(items)
        if len(d) != len(items):
            seen: set[str] = set()
            self.dups[id(d)] = [k for k, _ in items if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        return d

    def parse(self, raw: bytes) -> tuple[Any, dict[int, list[str]]]:
        """What ``json.loads(raw, object_pairs_hook=..., parse_constant=...)`` returns, and the
        duplicates; the same errors (the encoding detected and decoded as ``json.loads`` does)."""
        dups = self.dups = {}
        return self.decoder.decode(raw.decode(json.detect_encoding(raw), "surrogatepass")), dups


_body_decoder = _BodyDecoder()


def parse_json(raw: bytes) -> Body:
    """JSON as Go's decoder reads it: no NaN/Infinity, duplicates remembered, depth bounded."""
    try:
        obj, dups = _body_decoder.parse(raw)
    except RecursionError as e:
        raise ValueError("exceeded max depth") from e
    # Nesting needs an opening bracket per level: a body with no more brackets than the limit in
    # all (strings included) cannot exceed it, and the walk over every value is not needed.
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and _depth_exceeded(obj):
        raise ValueError("exceeded max depth")
    return Body(obj, dups)


class _YAMLLoader(yaml.SafeLoader):
    """SafeLoader with the limits Go's YAML decoder has and JSON-compatible scalars.

    Nesting is bounded while composing (PyYAML composes recursively), aliases are counted,
    duplicate mapping keys are recorded, and timestamps / binary / sets come back as what
    sigs.k8s.io/yaml turns them into for JSON (strings and maps) rather than Python objects
    JSON cannot encode."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.aliases = 0
        self.duplicates: dict[int, list[str]] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.YAMLError(f"exceeded max depth of {MAX_DEPTH}")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_json_map(self, node: yaml.MappingNode) -> Any:
        data: dict[Any, Any] = {}
        yield data
        keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"]
        seen: set[str] = set()
        dup = [k for k in keys if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        if dup:
            self.duplicates[id(data)] = dup
        data.update(self.construct_mapping(node))

    def construct_text(self, node: yaml.Node) -> Any:
        return str(node.value)


_YAMLLoader.add_constructor("tag:yaml.org,2002:map", _YAMLLoader.construct_json_map)
_YAMLLoader.add_constructor("tag:yaml.org,2002:set", _YAMLLoader.construct_json_map)
_YAMLLoader.add_constructor("tag:yaml.org,2002:timestamp", _YAMLLoader.construct_text)
_YAMLLoader.add_constructor("tag:yaml.org,2002:binary", _YAMLLoader.construct_text)


def _json_compatible(obj: Any, dups: dict[int, list[str]]) -> tuple[Any, dict[int, list[str]]]:
    """YAML keys as JSON strings (Go's YAML-to-JSON does the same); non-finite floats refused.
    Iterative, and expands aliases into at most :data:`MAX_YAML_NODES` nodes.  Returns the copy
    and the duplicate-key record re-keyed to the copy's dicts."""
    new_dups: dict[int, list[str]] = {}
    budget = MAX_YAML_NODES
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(obj, root, 0)]
    while stack:
        src, parent, key = stack.pop()
        budget -= 1
        if budget < 0:
            raise ValueError("document contains excessive aliasing")
        if isinstance(src, dict):
            out: Any = {}
            if id(src) in dups:
                new_dups[id(out)] = dups[id(src)]
            for k, v in src.items():
                sk = k if isinstance(k, str) else ("null" if k is None else json.dumps(k))
                out[sk] = None
                stack.append((v, out, sk))
        elif isinstance(src, list):
            out = [None] * len(src)
            stack.extend((v, out, i) for i, v in enumerate(src))
        elif isinstance(src, float) and not math.isfinite(src):
            raise ValueError(f"json: unsupported value: {src}")
        else:
            out = src
        parent[key] = out
    return root[0], new_dups


def parse_yaml(raw: bytes) -> Body:
    loader = _YAMLLoader(raw.decode("utf-8"))
    try:
        obj = loader.get_single_data()
    except RecursionError as e:
        raise yaml.YAMLError(f"exceeded max depth of {MAX_DEPTH}") from e
    finally:
        loader.dispose()
    return Body(*_json_compatible(obj, loader.duplicates))


def decode_body(raw: bytes, content_type: str) -> Body:
    """A create/update/delete body in its negotiated media type; malformed input is 400."""
    mt = negotiate_input(content_type)
    if not raw.strip():
        return Body(None)
    if mt == "application/vnd.kubernetes.protobuf":
        # kubectl's typed clients never fall back to JSON, so decode what they send (protobuf.py);
        # 415 only for kinds without a schema there, 400 for bytes that do not parse
        try:
            return Body(protobuf.decode_object(raw))
        except protobuf.UnsupportedKind as e:
            raise StatusError(415, "UnsupportedMediaType",
                              f"the body of the request was in an unknown format - {e}; accepted media types "
                              "include: application/json, application/yaml, application/vnd.kubernetes.protobuf "
                              f"(for {', '.join(sorted(protobuf.KINDS))})") from e
        except ValueError as e:
            raise bad_request(f"unable to decode protobuf body: {_one_line(e)}") from e
    if mt == "application/yaml":
        try:
            return parse_yaml(raw)
        except (yaml.YAMLError, ValueError) as e:
            raise bad_request(f"error converting YAML to JSON: {_one_line(e)}") from e
    try:
        return parse_json(raw)
    except ValueError as e:
        raise bad_request(f"couldn't get version/kind; json parse error: {_one_line(e)}") from e


def decode_patch(raw: bytes, ptype: str) -> Body:
    """A PATCH body: YAML for apply, JSON for the other patch types."""
    if not raw.strip():
        raise bad_request("the body of the request was empty")
    if ptype == "apply":
        try:
            return parse_yaml(raw)
        except (yaml.YAMLError, ValueError) as e:
            raise bad_request(f"error decoding YAML: {_one_line(e)}") from e
    try:
        return parse_json(raw)
    except ValueError as e:
        raise bad_request(f"error decoding patch: {_one_line(e)}") from e


def _json_kind(v: Any) -> str:
    return {bool: "bool", int: "number", float: "number", str: "string", list: "array"}.get(type(v), "object")


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


# ------------------------------------------------------------------ query options
def _single(query: Any, name: str) -> str | None:
    """The first value of a query parameter (Go's DecodeParameters reads the first)."""
    vals = query.getall(name, [])
    return vals[0] if vals else None


def parse_bool(value: str) -> bool:
    """strconv.ParseBool."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def parse_int64(value: str) -> int:
    """strconv.ParseInt(value, 10, 64)."""
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    n = int(value)
    if not -(2**63) <= n < 2**63:
        raise bad_request(f'strconv.ParseInt: parsing "{value}": value out of range')
    return n


def int64_param(query: Any, name: str) -> int | None:
    v = _single(query, name)
    return None if v is None or v == "" else parse_int64(v)


def bool_param(query: Any, name: str) -> bool:
    v = _single(query, name)
    return False if v is None or v == "" else parse_bool(v)


def check_resource_version(rv: str | None) -> int | None:
    """Our resourceVersions are etcd-style uint64 revisions (storage.APIObjectVersioner);
    anything else is 400 (upstream answers 500 here, a known bug being fixed to 400)."""
    if rv is None or rv == "":
        return None
    why = resource_version_error(rv)
    if why:
        raise bad_request(why)
    return int(rv)


def _go_string_slice(values: list[str]) -> str:
    return "[]string{" + ", ".join(json.dumps(v) for v in values) + "}"


def _field_manager_errors(manager: str) -> list[tuple[str, str]]:
    errs: list[tuple[str, str]] = []
    if len(manager) > 128:
        errs.append(("fieldManager", "Too long: may not be more than 128 bytes"))
    for i, ch in enumerate(manager):
        if not ch.isprintable():  # unicode.IsPrint: no controls, no separators but ASCII space
            errs.append(("fieldManager", f"Invalid value: {json.dumps(manager)}: invalid character "
                         f"U+{ord(ch):04X} (at position {i})"))
    return errs


def write_options(query: Any, kind: str, *, apply: bool = False, patch: bool = False,
                  extra_dry_run: list[str] | None = None) -> tuple[list[str], str, str]:
    """Validate Create/Update/PatchOptions/DeleteOptions query parameters as upstream's
    ``Validate<Kind>`` does (422 ``CreateOptions.meta.k8s.io "" is invalid: ...``).
    Returns (dryRun values, fieldValidation, fieldManager)."""
    errs: list[tuple[str, str]] = []
    dry_run = list(query.getall("dryRun", [])) + list(extra_dry_run or [])
    field_validation = _single(query, "fieldValidation") or ""
    manager = _single(query, "fieldManager") or ""
    if patch:
        force = _single(query, "force")
        if force:
            parse_bool(force)
            if not apply:
                errs.append(("force", "Forbidden: may not be specified for non-apply patch"))
        if apply and not manager:
            errs.append(("fieldManager", "Required value: is required for apply patch"))
    if kind != "DeleteOptions":
        errs.extend(_field_manager_errors(manager))
    if any(v != "All" for v in dry_run):
        errs.append(("dryRun", f'Unsupported value: {_go_string_slice(dry_run)}: supported values: "All"'))
    if kind != "DeleteOptions" and field_validation not in ("", "Ignore", "Warn", "Strict"):
        errs.append(("fieldValidation", f'Unsupported value: {json.dumps(field_validation)}: supported values: '
                     '"", "Ignore", "Strict", "Warn"'))
    if errs:
        raise invalid_options(kind, errs)
    return dry_run, field_validation or "Warn", manager


def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _patch_type(ct: str) -> str:
    t = PATCH_TYPES.get(media_type(ct))
    if t is None:
        raise unsupported_media_type(PATCH_MEDIA_TYPES)
    return t


def _warn_headers(warnings: list[str]) -> CIMultiDict[str]:
    """One ``Warning: 299 - "..."`` header per warning (upstream's warning recorder)."""
    h: CIMultiDict[str] = CIMultiDict()
    for w in warnings:
        text = w.replace("\\", "\\\\").replace('"', '\\"')
        # a field name from the request may carry control characters, which no header may hold
        text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
        h.add("Warning", '299 - "' + text + '"')
    return h


def bound_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Lower asyncio's per-connection TLS read buffer to ``size`` (never raise it).  Process-wide:
    the server's connections and its in-process controllers' client connections alike."""
    proto = getattr(asyncio.sslproto, "SSLProtocol", None)
    if proto is not None and getattr(proto, "max_size", 0) > size:
        proto.max_size = size


class ApiHttp:
    """aiohttp application wrapper."""

    def __init__(self, registry: Registry, pki: PKI, tokens: TokenAuth, authorizer: Authorizer, *,
                 version_minor: str, insecure_admin: bool = False, bookmark_interval: float = 60.0,
                 min_request_timeout: float = DEFAULT_MIN_REQUEST_TIMEOUT,
                 watch_queue_limit: int = WATCH_QUEUE_LIMIT) -> None:
        self.registry = registry
        self.pki = pki
        self.tokens = tokens
        self.authorizer = authorizer
        self.version_minor = version_minor
        self.insecure_admin = insecure_admin
        self.bookmark_interval = bookmark_interval
        # upstream --min-request-timeout: a watch without timeoutSeconds lasts between this and 2x
        self.min_request_timeout = min_request_timeout
        self.watch_queue_limit = watch_queue_limit
        bound_tls_read_buffer()
        self.server_addr = "127.0.0.1:6443"
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        self.stopping = asyncio.Event()
        self.metrics = metricsapi.MetricsApi()  # metrics.k8s.io, scraped from the kubelets

    def watch_timeout(self, requested: int | None) -> float:
        """Seconds a watch may last: the server's own timeout, drawn like upstream's
        ``minRequestTimeout * (1 + rand)``, or the client's ``timeoutSeconds`` when shorter."""
        server = self.min_request_timeout * (random.random() + 1.0)
        if requested is None or requested == 0:
            return server
        return max(min(float(requested), server), 0.0)

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
            store = self.registry.store
            if store.pending:  # nothing is answered before the writes it may show are durable
                await store.durable()
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
        except Exception as e:
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
            with contextlib.suppress(ValueError):  # an unparsable client certificate authenticates nobody
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
        attr_name = info.name
        if not attr_name and info.verb in ("list", "watch"):  # RequestInfoFactory: a single-object list
            sel = (query.get("fieldSelector") or "").replace(" ", "")
            if sel.startswith("metadata.name=") and "," not in sel:
                attr_name = sel.removeprefix("metadata.name=").lstrip("=")
        attrs = Attributes(user=user, verb=info.verb, namespace=info.namespace, api_group=info.group,
                           resource=info.resource, subresource=info.subresource, name=attr_name, path=path,
                           resource_request=info.resource_request)
        if not public:
            ok, why = self.authorizer.authorize(attrs)
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
                    if why:
                        msg += f": {why}"
                    raise StatusError(403, "Forbidden", msg, name=info.name or None, kind=info.resource,
                                      group=info.group)
                raise StatusError(403, "Forbidden",
                                  f'forbidden: User "{user.name}" cannot {info.verb} path "{path}"'
                                  + (f": {why}" if why else ""))
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
        if p in ("/openapi/v2", "/swagger-2.0.0.pb-v1"):  # kubectl <= 1.28 (server/openapiv2.py)
            raw, ctype = openapiv2.render(accept, legacy_path=p != "/openapi/v2")
            return web.Response(body=raw, headers={"Content-Type": ctype})
        raise StatusError(404, "NotFound", "the server could not find the requested resource")

    # -------------------------------------------------------------- resources
    async def _resource(self, request: web.Request, info: RequestInfo, user: UserInfo) -> web.StreamResponse:
        ri = lookup(info.group, info.version, info.resource)
        if ri is None:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if info.group == metricsapi.GROUP and not info.subresource:
            return json_response(await metricsapi.serve(
                request, api=self.metrics, store=self.registry.store, verb=info.verb, namespace=info.namespace,
                resource=info.resource, name=info.name, version=info.version))
        if info.namespace and not ri.namespaced and info.resource != "namespaces":
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if (info.verb in ("update", "patch") and not info.name) or (
                info.verb == "create" and info.name and not info.subresource and not ri.virtual):
            raise method_not_allowed()
        if info.subresource and ri.sub(info.subresource) is None:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if not info.subresource and info.verb not in ri.verbs and not (info.verb == "watch" and "watch" in ri.verbs):
            raise method_not_allowed()
        q = request.query
        ctx = RequestContext(
            user=user, query=dict(q),
            field_manager=_single(q, "fieldManager") or request.headers.get("User-Agent", "unknown").split("/")[0],
        )
        if info.subresource in ("log", "exec", "attach", "portforward", "proxy") and ri.resource in ("pods", "nodes"):
            return await self._proxy(request, ri, info, ctx)
        accept = request.headers.get("Accept", "")
        if info.verb == "watch":
            return await self._watch(request, ri, info, ctx)
        if info.verb == "list":
            return await self._list(request, ri, info, ctx, accept)
        if info.verb == "get":
            check_resource_version(_single(q, "resourceVersion"))
            if wants_table(accept) and not info.subresource:
                obj = self.registry.get(ri, info.namespace, info.name, info.subresource)
                return json_response(self.registry.table(ri, [obj], self.registry.store.revision, None, None))
            return web.Response(body=self.registry.get_json(ri, info.namespace, info.name, info.subresource),
                                content_type=JSON_CT)
        body_raw = await request.read()
        ct = request.headers.get("Content-Type", "")
        if info.verb in ("delete", "deletecollection"):
            return await self._delete(request, ri, info, ctx, body_raw, ct)
        if info.verb == "patch":
            ptype = _patch_type(ct)
            dry, ctx.field_validation, _mgr = write_options(q, "PatchOptions", apply=ptype == "apply", patch=True)
            ctx.dry_run = bool(dry)
            patch_body = decode_patch(body_raw, ptype)
            ctx.duplicates = patch_body.duplicates
            written, code, warnings = await self.registry.patch(ri, info.namespace, info.name, info.subresource,
                                                                patch_body.obj, ptype, ctx)
            return written_response(written, code, headers=_warn_headers(warnings))
        dry, ctx.field_validation, _mgr = write_options(q, "CreateOptions" if info.verb == "create" else "UpdateOptions")
        ctx.dry_run = bool(dry)
        decoded = decode_body(body_raw, ct)
        body = decoded.obj
        ctx.duplicates = decoded.duplicates
        if not isinstance(body, dict):
            what = "empty body" if body is None else f"json: cannot unmarshal {_json_kind(body)} into Go value of type " \
                "struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }"
            raise bad_request(f"couldn't get version/kind; json parse error: {what}" if body is not None else
                              "Object 'Kind' is missing in request body: the body must be a JSON or YAML object")
        if info.verb == "create":
            if info.subresource or ri.virtual:
                obj, code, warnings = await self.registry.create_sub(ri, info.namespace, info.name, info.subresource,
                                                                     body, ctx)
                return json_response(obj, code, headers=_warn_headers(warnings))
            if ri.namespaced and not info.namespace:
                raise method_not_allowed("POST requires a namespace for namespaced resources")
            written, warnings = await self.registry.create(ri, info.namespace, body, ctx)
            return written_response(written, 201, headers=_warn_headers(warnings))
        if info.verb == "update":
            written, warnings = await self.registry.update(ri, info.namespace, info.name, info.subresource, body, ctx)
            return written_response(written, 200, headers=_warn_headers(warnings))
        raise method_not_allowed()

    async def _delete(self, request: web.Request, ri: ResourceInfo, info: RequestInfo, ctx: RequestContext,
                      body_raw: bytes, ct: str) -> web.StreamResponse:
        """DELETE: DeleteOptions from the body (JSON/YAML/protobuf) and the query, validated as
        upstream's ``ValidateDeleteOptions`` (dryRun, propagationPolicy)."""
        query = request.query
        options: Any
        if body_raw.strip() and negotiate_input(ct) == "application/vnd.kubernetes.protobuf":
            try:
                options = protobuf.decode_delete_options(body_raw)
            except ValueError as e:
                raise bad_request(f"unable to decode protobuf DeleteOptions: {_one_line(e)}") from e
        else:
            options = decode_body(body_raw, ct).obj or {}
        if not isinstance(options, dict):
            raise bad_request("couldn't get version/kind; json parse error: json: cannot unmarshal "
                              f"{_json_kind(options)} into Go value of type v1.DeleteOptions")
        if options.get("kind") not in (None, "", "DeleteOptions"):
            raise bad_request("decoded object cannot be converted to DeleteOptions")
        options = self.registry.decode_delete_options(options)
        if "gracePeriodSeconds" not in options and (g := int64_param(query, "gracePeriodSeconds")) is not None:
            options["gracePeriodSeconds"] = g
        if "propagationPolicy" not in options and (pp := _single(query, "propagationPolicy")):
            options["propagationPolicy"] = pp
        if "orphanDependents" not in options and _single(query, "orphanDependents"):
            options["orphanDependents"] = bool_param(query, "orphanDependents")
        errs: list[tuple[str, str]] = []
        pp = options.get("propagationPolicy")
        if pp is not None and options.get("orphanDependents") is not None:
            errs.append(("propagationPolicy", f"Invalid value: {json.dumps(pp)}: orphanDependents and "
                         "deletionPropagation cannot be both set"))
        if pp is not None and pp not in ("Foreground", "Background", "Orphan"):
            errs.append(("propagationPolicy", f"Unsupported value: {json.dumps(pp)}: supported values: "
                         '"Foreground", "Background", "Orphan", "nil"'))
        if errs:
            raise invalid_options("DeleteOptions", errs)
        dry, _fv, _mgr = write_options(query, "DeleteOptions", extra_dry_run=list(options.get("dryRun") or []))
        ctx.dry_run = bool(dry)
        if info.verb == "delete":
            obj, code = await self.registry.delete(ri, info.namespace, info.name, options, ctx)
            return json_response(obj, code)
        self._list_options(query, ri, watch=False)
        lst = await self.registry.delete_collection(ri, info.namespace, options, ctx)
        return json_response(lst)

    def _list_options(self, q: Any, ri: ResourceInfo, *, watch: bool) -> dict[str, Any]:
        """ListOptions as ``DecodeParameters`` + ``ValidateListOptions`` read them: 400 for values
        that do not parse (selectors, integers, booleans, resourceVersion), 422 for combinations
        upstream forbids."""
        opts: dict[str, Any] = {
            "labelSelector": parse_label_selector(_single(q, "labelSelector")),
            "labelSelectorText": _single(q, "labelSelector"),
            "fieldSelectorText": _single(q, "fieldSelector"),
            "fieldSelector": parse_field_selector(_single(q, "fieldSelector"), ri.key if ri.group else ri.resource),
            "limit": int64_param(q, "limit"),
            "timeoutSeconds": int64_param(q, "timeoutSeconds"),
            "allowWatchBookmarks": bool_param(q, "allowWatchBookmarks"),
            "watch": bool_param(q, "watch"),
            "continue": _single(q, "continue") or "",
        }
        rv = _single(q, "resourceVersion") or ""
        opts["resourceVersion"] = rv
        opts["since"] = check_resource_version(rv)
        send_initial = _single(q, "sendInitialEvents")
        opts["sendInitialEvents"] = parse_bool(send_initial) if send_initial else None
        match = _single(q, "resourceVersionMatch") or ""
        opts["resourceVersionMatch"] = match
        errs: list[tuple[str, str]] = []
        if watch:
            if send_initial and match != "NotOlderThan":
                errs.append(("resourceVersionMatch", 'Forbidden: sendInitialEvents requires setting '
                             'resourceVersionMatch to NotOlderThan'))
            elif match and not send_initial:
                errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden for watch "
                             "unless sendInitialEvents is provided"))
            if send_initial and not opts["allowWatchBookmarks"]:
                errs.append(("allowWatchBookmarks", "Forbidden: allowWatchBookmarks must be set to true "
                             "when sendInitialEvents is provided"))
        else:
            if match:
                if not rv:
                    errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden unless "
                                 "resourceVersion is provided"))
                if opts["continue"]:
                    errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden when "
                                 "continue is provided"))
                if match not in ("Exact", "NotOlderThan"):
                    errs.append(("resourceVersionMatch", f"Unsupported value: {json.dumps(match)}: supported "
                                 'values: "Exact", "NotOlderThan", ""'))
                elif match == "Exact" and rv == "0":
                    errs.append(("resourceVersionMatch", 'Forbidden: resourceVersionMatch "exact" is forbidden '
                                 'for resourceVersion "0"'))
            if send_initial:
                errs.append(("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list"))
        if errs:
            raise invalid_options("ListOptions", errs)
        if opts["continue"] and rv and rv != "0":
            raise bad_request("specifying resource version is not allowed when using continue")
        return opts

    async def _list(self, request: web.Request, ri: ResourceInfo, info: RequestInfo, ctx: RequestContext,
                    accept: str) -> web.StreamResponse:
        opts = self._list_options(request.query, ri, watch=False)
        limit = opts["limit"] if opts["limit"] and opts["limit"] > 0 else None
        sel = (ri, info.namespace or None, opts["labelSelectorText"], opts["fieldSelectorText"], limit,
               opts["continue"] or None)
        exact = opts["since"] if opts["resourceVersionMatch"] == "Exact" else None
        if wants_table(accept):
            items, rev, cont, remaining = self.registry.list_shared(*sel, exact=exact)
            return web.Response(body=self.registry.table_json(ri, items, rev, cont, remaining), content_type=JSON_CT)
        return web.Response(body=self.registry.list_json(*sel, exact=exact), content_type=JSON_CT)

    async def _watch(self, request: web.Request, ri: ResourceInfo, info: RequestInfo,
                     ctx: RequestContext) -> web.StreamResponse:
        q = request.query
        opts = self._list_options(q, ri, watch=True)
        label_match = opts["labelSelector"]
        field_match, eq = opts["fieldSelector"]
        if info.name and _single(q, "fieldSelector") and eq.get("metadata.name") != info.name:
            raise bad_request("fieldSelector metadata.name doesn't match requested name")
        if info.name:
            name = info.name

            def name_match(o: dict[str, Any]) -> bool:
                return bool((o.get("metadata") or {}).get("name") == name)
        else:
            def name_match(o: dict[str, Any]) -> bool:
                return True

        def matches(o: dict[str, Any] | None) -> bool:
            return o is not None and name_match(o) and label_match(o) and field_match(o)

        send_initial = bool(opts["sendInitialEvents"])
        since: int | None = None if send_initial or not opts["since"] else opts["since"]
        timeout = self.watch_timeout(opts["timeoutSeconds"])
        bookmarks = opts["allowWatchBookmarks"]
        table = wants_table(request.headers.get("Accept", ""))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                       "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        try:
            watcher = self.registry.store.watch(
                ri.key, info.namespace or None, since, limit=self.watch_queue_limit,
                client=f"{request.headers.get('User-Agent', 'no user agent')!r} from {request.remote}"
                f" as {ctx.user.name!r}",
                # a kubelet's pod watch: queued only the events of its node's pods
                index=("spec.nodeName", eq["spec.nodeName"]) if ri.key == "pods" and "spec.nodeName" in eq else None)
        except StatusError as e:
            await resp.prepare(request)
            await resp.write(_line({"type": "ERROR", "object": e.status()}))
            await resp.write_eof()
            return resp
        initial_left = watcher.queue.qsize() if since is None else 0
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        first_table = True
        last_rv = since or self.registry.store.revision
        ev_now: WatchEvent | None = None
        # Events already queued are written together: one write per burst, not one loop turn per event,
        # so a watcher keeps up while a thousand pods are created (upstream's cacheWatcher batches too).
        pending: list[bytes] = []
        writing = False
        store = self.registry.store

        def stuck() -> None:  # the store terminated this watch: a write blocked on the socket ends now
            if writing and request.transport is not None:
                request.transport.abort()

        watcher.on_terminate = stuck

        async def flush() -> None:
            nonlocal writing
            if pending:
                if store.pending:  # no event is sent before its write is durable
                    try:
                        await store.durable()
                    except StorageError:  # the group was undone and this watch ended
                        raise ConnectionResetError("the events' writes were not committed") from None
                data = b"".join(pending)
                pending.clear()
                writing = True
                try:
                    async with asyncio.timeout_at(deadline):  # a stalled reader cannot outlive the watch
                        await resp.write(data)
                except TimeoutError:
                    if request.transport is not None:
                        request.transport.abort()
                    raise ConnectionResetError("watch timed out in a write") from None
                finally:
                    writing = False

        async def send(etype: str, obj: dict[str, Any]) -> None:
            nonlocal first_table
            out = self.registry.present(ri, obj)
            if not table and out is obj and ev_now is not None and ev_now.obj is obj:
                # the event's JSON is made once for all its watchers
                pending.append(b"".join((b'{"type":"', etype.encode(), b'","object":', ev_now.encoded(), b"}\n")))
                return
            if table:
                t = self.registry.table(ri, [out], int(out["metadata"].get("resourceVersion", "0") or 0), None, None)
                if not first_table:
                    t["columnDefinitions"] = None
                first_table = False
                out = t
            pending.append(_line({"type": etype, "object": out}))

        try:
            if since is None and initial_left == 0 and send_initial:
                await self._bookmark(resp, ri, self.registry.store.revision, initial_end=True)
            while True:
                wait = min(5.0, deadline - loop.time())
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
                closed = ev is None
                batch = 0
                while ev is not None:
                    last_rv = max(last_rv, ev.rv)
                    ev_now = ev
                    await self._deliver(ev, matches, send)
                    if initial_left:
                        initial_left -= 1
                        if initial_left == 0 and send_initial:
                            await flush()
                            await self._bookmark(resp, ri, self.registry.store.revision, initial_end=True)
                    batch += 1
                    if batch >= WATCH_BATCH or watcher.queue.empty():
                        break
                    ev = watcher.queue.get_nowait()
                    closed = ev is None
                await flush()
                if closed:
                    break
        except ConnectionError:
            pass  # the client went away, or was cut off for not reading; nothing to tell it
        finally:
            self.registry.store.unwatch(watcher)
        with contextlib.suppress(ConnectionError):
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


