"""Object semantics of the dev API server (upstream's generic registry + resource strategies).

Handles, independent of HTTP: create/get/list/update/patch/delete/deletecollection; metadata
bookkeeping (uid, creationTimestamp, generation bumped on spec change, managedFields); status
subresources that only change status while the main resource ignores status
(``PrepareForUpdate`` in upstream strategies); strict field validation; finalizers; graceful pod
deletion (``pkg/registry/core/pod/strategy.go`` CheckGracefulDelete: unbound or terminal pods and
grace 0 go at once, otherwise deletionTimestamp/deletionGracePeriodSeconds are set and the node
agent's grace-0 delete removes the object); binding, eviction, TokenRequest, TokenReview,
SubjectAccessReview, CSR approval + signing (the csrsigning controller, inlined);
namespace lifecycle (default ServiceAccount + kube-root-ca.crt per namespace, no creation in
missing or terminating namespaces, deletion drains contents first).

Pod defaulting/validation is delegated to ``pykubelet.common.podspec``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import datetime as dt
import functools
import json
import logging
import operator
import posixpath
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm

from pykubelet.common import podspec
from pykubelet.common.aio import cancel_and_wait
from pykubelet.server import (
    admission,
    admissionplugins,
    apps,
    batchvalidation,
    crd,
    events_conv,
    garbagecollection,
    jsonbytes,
    managedfields,
    pdb,
    podsecurity,
    rbac,
    schema,
    storagevalidation,
    tables,
)
from pykubelet.server.auth import PKI, Attributes, Authorizer, TokenAuth, UserInfo, csr_subject
from pykubelet.server.authadmission import AuthAdmission
from pykubelet.server.errors import (
    StatusError,
    bad_request,
    conflict,
    invalid,
    invalid_options,
    not_found,
    success_status,
)
from pykubelet.server.patch import apply_patch, merge_patch_shared, strategic_merge
from pykubelet.server.resources import BY_GVR, BY_KEY, ResourceInfo, namespaced_resources
from pykubelet.server.selectors import parse_field_selector, parse_label_selector
from pykubelet.server.services import ServiceAllocator, kubernetes_endpoints, validate_endpoint_slice
from pykubelet.server.storage import Compacted, Obj, Storage
from pykubelet.server.validation import (
    resource_version_error,
    string_data_to_data,
    validate_configmap,
    validate_meta,
    validate_secret,
)

log = logging.getLogger(__name__)

KUBE_SIGNERS = {"kubernetes.io/kube-apiserver-client", "kubernetes.io/kube-apiserver-client-kubelet",
                "kubernetes.io/kubelet-serving"}
INITIAL_NAMESPACES = ["default", "kube-system", "kube-public", "kube-node-lease"]
# The class every cluster of this project has (as kind/k3s ship rancher's local-path one):
# claims without a class get it, and the built-in local-path provisioner serves it.
LOCAL_PATH_PROVISIONER = "pykubelet.io/local-path"
DEFAULT_STORAGE_CLASS: Obj = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": "standard", "annotations": {admission.DEFAULT_CLASS_ANNOTATION: "true"}},
    "provisioner": LOCAL_PATH_PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
}
STATUS_RESOURCES = {"pods", "nodes", "namespaces", "services", "certificatesigningrequests", "poddisruptionbudgets"}


_last_second: list[Any] = [-1, ""]  # the last second formatted and its text


def now_rfc3339(t: dt.datetime | None = None) -> str:
    """RFC 3339 in whole seconds, as upstream's ``metav1.Time``; the current time's text is kept
    for its second (every write stamps managedFields, and most creates a timestamp)."""
    if t is not None:
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")
    sec = int(time.time())
    if sec != _last_second[0]:
        _last_second[:] = [sec, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec))]
    return str(_last_second[1])


@dataclass
class RequestContext:
    """What a write needs from the request besides the body: who, the raw query, the validated
    options (``dryRun=All``, ``fieldValidation``, ``fieldManager``) and the duplicate keys the
    body parser saw (``id(dict)`` -> keys, for ``duplicate field`` errors/warnings)."""

    user: UserInfo
    query: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    field_manager: str = ""
    field_validation: str = "Warn"
    duplicates: dict[int, list[str]] = field(default_factory=dict)
    admission_warnings: list[str] = field(default_factory=list)  # e.g. Pod Security's warn mode


# Upstream's messages (k8s.io/apiserver storage/etcd3 and storage/continue.go) for a continue
# token whose revision the store no longer holds.
CONTINUE_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter, or use the continue token in "
                    "this response to retrieve the remainder of the results. Continuing with the provided "
                    "token results in an inconsistent list - objects that were created, modified, or deleted "
                    "between the time the first chunk was returned and now may show up in the list.")


class ContinueExpired(StatusError):
    """410 Expired for a continue token older than the store's history, carrying (in the Status's
    ``metadata.continue``) a token for the rest of the list at the current revision, as upstream's
    ``handleCompactedErrorForPaging`` does (``rv: -1``: "continue at the latest revision")."""

    def __init__(self, token: str) -> None:
        super().__init__(410, "Expired", CONTINUE_EXPIRED)
        self.token = token

    def status(self) -> dict[str, Any]:
        st = super().status()
        st["metadata"] = {"continue": self.token}
        return st


def _start_text(ri: ResourceInfo, ns: str | None, key: tuple[str, str]) -> str:
    """A key as upstream's continue ``start``: relative to the listed prefix (``<name>`` in a
    namespace or for a cluster-scoped resource, ``<namespace>/<name>`` across namespaces)."""
    return f"{key[0]}/{key[1]}" if ns is None and ri.namespaced else key[1]


def _encode_continue(rv: int, start: str) -> str:
    """``storage.EncodeContinue``: unpadded URL-safe base64 of ``{"v","rv","start"}``."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(tok: str, ri: ResourceInfo, ns: str | None) -> tuple[int, tuple[str, str], str]:
    """``storage.DecodeContinue``: (revision, first key to list, the token's start text); 400
    with upstream's messages for a token that does not decode.  Revision -1: the current one."""
    def invalid_token(why: str) -> StatusError:
        return bad_request(f"invalid continue token: continue key is not valid: {why}")
    try:
        d = json.loads(base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4)))
    except (ValueError, TypeError, binascii.Error) as e:
        raise invalid_token(str(e)) from e
    if not isinstance(d, dict):
        raise invalid_token("not a continue token")
    if d.get("v") != "meta.k8s.io/v1":
        raise invalid_token(f"server does not recognize this encoded version {json.dumps(str(d.get('v', '')))}")
    rv, start = d.get("rv"), d.get("start")
    if not isinstance(rv, int) or isinstance(rv, bool) or rv == 0:
        raise invalid_token("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise invalid_token("encoded start key empty (version meta.k8s.io/v1)")
    rooted = start if start.startswith("/") else "/" + start
    if posixpath.normpath(rooted) != rooted or rooted.startswith("//"):  # upstream's path.Clean check
        raise invalid_token(start)
    if ns is None and ri.namespaced:
        key_ns, _, name = start.partition("/")
        return rv, (key_ns, name), start
    return rv, (ns or "", start), start


@dataclass
class ListPage:
    """One page of a list, as parallel lists: keys, stored objects, the objects as presented to
    clients, the stored objects' JSON; and the page's revision, continue token, remaining count."""

    keys: list[tuple[str, str]]
    raws: list[Obj]
    objs: list[Obj]
    data: list[bytes]
    rev: int
    cont: str | None = None
    remaining: int | None = None
    plain: bool = False  # every object is shown as stored: ``data`` is the page (raws/objs empty)

    def encoded(self) -> list[bytes]:
        """Each presented object's JSON: the stored bytes when it is the stored object (a typed
        object shown as stored), else encoded now.  A new list the caller may change."""
        if self.plain:
            return list(self.data)
        if all(map(operator.is_, self.objs, self.raws)):
            return list(self.data)
        return [d if o is r else jsonbytes.encode(o) for o, r, d in zip(self.objs, self.raws, self.data, strict=True)]


class Written:
    """What a write answers: the object as the client sees it, as an object or as JSON, each made
    on first use.  A write of a kind shown as stored answers with the bytes the store encoded for
    the new revision (the same bytes lists and watch events send): the stored object is neither
    decoded into a copy nor encoded a second time for the response."""

    __slots__ = ("_data", "_obj")

    def __init__(self, obj: Obj | None = None, data: bytes | None = None) -> None:
        self._obj = obj
        self._data = data

    def obj(self) -> Obj:
        if self._obj is None:
            self._obj = jsonbytes.decode(self._data or b"{}")
        return self._obj

    def encoded(self) -> bytes:
        if self._data is None:
            self._data = jsonbytes.encode(self._obj)
        return self._data


class Registry:
    def __init__(self, store: Storage, pki: PKI, tokens: TokenAuth, authorizer: Authorizer) -> None:
        self.store = store
        self.pki = pki
        self.tokens = tokens
        self.authorizer = authorizer
        self._tasks: set[asyncio.Task[Any]] = set()
        tokens.claims_validator = self.validate_sa_claims
        # NodeRestriction, RBAC validation/escalation checks, ClusterRole aggregation
        self.auth_admission = AuthAdmission(store, authorizer)
        # StorageObjectInUseProtection admission: only when the controller that removes the
        # finalizers again runs (run_server with controllers), else claims could never go.
        self.storage_protection = False
        # DefaultTolerationSeconds admission (kube-apiserver --default-*-toleration-seconds).
        self.default_not_ready_toleration_seconds = 300
        self.default_unreachable_toleration_seconds = 300
        self.crds = crd.CustomResources()  # the CRDs this server serves (server/crd.py)
        # Garbage-collector finalizers (orphan, foregroundDeletion) on delete: only when the
        # garbage collector that removes them again runs.
        self.garbage_collection = False
        # Service ClusterIP/NodePort allocation (server/services.py); the pod-reachable address and
        # port of this API server, for the default/kubernetes Service's endpoints (None: none).
        self.services = ServiceAllocator()
        self.api_endpoint: tuple[str, int] | None = None
        self.pod_rows = tables.PodRowCache()  # pod Table rows as JSON, per resourceVersion

    # ---------------------------------------------------------------- bootstrap
    def bootstrap(self) -> None:
        sys_ctx = RequestContext(UserInfo("system:apiserver", "", ["system:masters"]))
        ns_ri = BY_GVR[("", "v1", "namespaces")]
        for ns in INITIAL_NAMESPACES:
            if self.store.peek("namespaces", "", ns) is None:
                self._create_obj(ns_ri, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                                 sys_ctx)
        sc_ri = BY_GVR[("storage.k8s.io", "v1", "storageclasses")]
        if self.store.peek(sc_ri.key, "", DEFAULT_STORAGE_CLASS["metadata"]["name"]) is None:
            self._create_obj(sc_ri, "", copy.deepcopy(DEFAULT_STORAGE_CLASS), sys_ctx)
        rbac.ensure_defaults(lambda key, name: self.store.peek(key, "", name),
                             lambda key, obj: self._create_obj(BY_KEY[key], "", copy.deepcopy(obj), sys_ctx))
        self._spawn(self.auth_admission.aggregation_loop())
        self.crds.load([o for _, o in self.store.iter_raw(crd.CRD_KEY)])
        admissionplugins.bootstrap(self.store, lambda r, o: self._create_obj(r, "", o, sys_ctx))
        for (_, name), obj in list(self.store.iter_raw("namespaces")):
            if not obj["metadata"].get("deletionTimestamp"):
                self._namespace_children(name)
            else:
                self._spawn(self._finish_namespace(name))
        self.ensure_kubernetes_service()

    def ensure_kubernetes_service(self) -> None:
        """The default/kubernetes Service and, when the API server has a pod-reachable address,
        its Endpoints + EndpointSlice (upstream's bootstrap controller / endpoint reconciler)."""
        if self.store.peek("services", "default", "kubernetes") is None:
            ctx = RequestContext(UserInfo("system:apiserver", "", ["system:masters"]))
            self._create_obj(BY_GVR[("", "v1", "services")], "default",
                             self.services.kubernetes_service(target_port=(self.api_endpoint or ("", 6443))[1]), ctx)
        if self.api_endpoint is None:
            return
        ep, slice_ = kubernetes_endpoints(*self.api_endpoint)
        for key, obj in (("endpoints", ep), ("endpointslices.discovery.k8s.io", slice_)):
            cur = self.store.peek(key, "default", "kubernetes")
            if cur is None:
                self.store.create(key, "default", "kubernetes", self._new_meta(obj))
            elif {k: v for k, v in cur.items() if k not in ("metadata",)} != {
                    k: v for k, v in obj.items() if k not in ("metadata",)}:
                obj["metadata"] = cur["metadata"]
                self.store.update(key, "default", "kubernetes", obj)

    def _spawn(self, coro: Any) -> None:
        try:
            t = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            return
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self.crds.close()
        await cancel_and_wait(*self._tasks)

    def _namespace_children(self, ns: str) -> None:
        if self.store.peek("serviceaccounts", ns, "default") is None:
            self.store.create("serviceaccounts", ns, "default", self._new_meta(
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}))
        if self.store.peek("configmaps", ns, "kube-root-ca.crt") is None:
            ca = self.pki.ca_crt.read_text() if self.pki.ca_crt.exists() else ""
            self.store.create("configmaps", ns, "kube-root-ca.crt", self._new_meta(
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                              "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used "
                                              "to verify the kube-apiserver when using internal endpoints such as "
                                              "the internal service IP or kubernetes.default.svc. No other usage "
                                              "is guaranteed across distributions of Kubernetes clusters."}},
                 "data": {"ca.crt": ca}}))

    @staticmethod
    def _new_meta(obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        return obj

    # ---------------------------------------------------------------- presentation
    def present(self, ri: ResourceInfo, obj: Obj) -> Obj:
        return self._presenter(ri)(obj)

    def _shown_as_stored(self, ri: ResourceInfo) -> bool:
        """Whether :meth:`_presenter` shows an object that has kind and apiVersion as stored."""
        return ri.group != "events.k8s.io" and self.crds.served(ri) is None

    def _presenter(self, ri: ResourceInfo) -> Callable[[Obj], Obj]:
        """How objects of ``ri`` are shown to clients, decided once per list rather than per item."""
        if ri.group == "events.k8s.io":
            return events_conv.from_core
        if (sv := self.crds.served(ri)) is not None:
            return functools.partial(self.crds.present, sv)
        kind, api_version = ri.kind, ri.api_version

        def typed(obj: Obj) -> Obj:
            if "kind" not in obj or "apiVersion" not in obj:
                return {"kind": kind, "apiVersion": api_version, **obj}
            return obj
        return typed

    def table(self, ri: ResourceInfo, objs: list[Obj], rev: int, cont: str | None,
              remaining: int | None) -> dict[str, Any]:
        sv = self.crds.served(ri)
        t = self.crds.table(sv, objs, dt.datetime.now(dt.UTC)) if sv is not None else \
            tables.to_table(ri.resource, objs, now=dt.datetime.now(dt.UTC))
        meta = t.setdefault("metadata", {})
        meta["resourceVersion"] = str(rev)
        if cont:
            meta["continue"] = cont
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        return t

    def table_json(self, ri: ResourceInfo, objs: list[Obj], rev: int, cont: str | None,
                   remaining: int | None) -> bytes:
        """:meth:`table` as JSON bytes; pod rows come from the per-revision row cache."""
        if ri.key != "pods" or self.crds.served(ri) is not None:
            return json.dumps(self.table(ri, objs, rev, cont, remaining), separators=(",", ":")).encode()
        meta: dict[str, Any] = {"resourceVersion": str(rev)}
        if cont:
            meta["continue"] = cont
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        def current(key: tuple[str, str], rv: str) -> bool:
            obj = self.store.peek("pods", *key)
            return obj is not None and obj["metadata"].get("resourceVersion") == rv
        return self.pod_rows.table(objs, meta, keep=current, live=self.store.count("pods"))

    # ---------------------------------------------------------------- reads
    def _raw_get(self, ri: ResourceInfo, ns: str, name: str) -> Obj:
        obj = self.store.get(ri.key, ns, name)
        if obj is None:
            raise not_found(ri.resource, name, ri.group)
        return obj

    def get(self, ri: ResourceInfo, ns: str, name: str, sub: str = "") -> Obj:
        if ri.virtual:
            raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if sub == "scale":
            if (sv := self.crds.served(ri)) is not None:
                return self.crds.to_scale(sv, self._raw_get(ri, ns, name))
            return apps.to_scale(self.present(ri, self._raw_get(ri, ns, name)))
        return self.present(ri, self._raw_get(ri, ns, name))

    def get_json(self, ri: ResourceInfo, ns: str, name: str, sub: str = "") -> bytes:
        """:meth:`get` as JSON: an object presented as stored is the bytes the store encoded once
        for its revision (shared with lists and watch events), no copy and no encoding."""
        if ri.virtual or sub not in ("", "status"):
            return jsonbytes.encode(self.get(ri, ns, name, sub))
        raw = self.store.peek(ri.key, ns, name)
        if raw is None:
            raise not_found(ri.resource, name, ri.group)
        obj = self._presenter(ri)(raw)
        data = self.store.encoded(ri.key, ns, name) if obj is raw else None
        return data if data is not None else jsonbytes.encode(obj)

    def _select(self, ri: ResourceInfo, ns: str | None, label_sel: str | None, field_sel: str | None,
                limit: int | None, cont: str | None, *, objects: bool = True, exact: int | None = None) -> ListPage:
        """One list page: keys, stored and presented objects, stored JSON, its revision, continue
        token and remainingItemCount.

        Consistent pages, as upstream's etcd3 store: a continue token carries the first page's
        revision and every later page is read at it (:meth:`Storage.snapshot`: objects created,
        changed or deleted since do not show), with that revision as its resourceVersion.  When
        the store's history no longer reaches back to it: 410 Expired with a token (``rv: -1``)
        for the rest of the list at the current revision, whose pages then carry that one.  A
        page starts at its continue key (bisection) and a full page stops the walk: O(page), not
        O(all objects).  ``exact`` (``resourceVersionMatch=Exact``) reads the first page at that
        revision the same way: 410 Expired when the history no longer reaches it, 504 "Too large
        resource version" for one the store has not reached, as upstream.  As upstream, remainingItemCount is given only for lists without
        selectors (counted from the key index); with selectors it is unset.  ``objects=False``:
        the caller needs only the JSON, so a page of typed objects shown as stored is slices of
        the store's key index and encoded column (the objects are not read at all).
        """
        if ri.virtual:
            raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        lmatch = parse_label_selector(label_sel)
        fmatch, eq = parse_field_selector(field_sel, ri.key if ri.group else ri.resource)
        if "metadata.namespace" in eq:
            if ns is not None and ns != eq["metadata.namespace"]:
                return ListPage([], [], [], [], self.store.revision)
            ns = eq["metadata.namespace"]
        start: tuple[str, str] | None = None
        at: int | None = None
        if cont:
            at, start, start_text = _decode_continue(cont, ri, ns)
            try:
                snap = self.store.snapshot(ri.key, ns, at if at > 0 else None)
            except Compacted:
                raise ContinueExpired(_encode_continue(-1, start_text)) from None
            except ValueError as e:
                raise bad_request(f"invalid continue token: {e}") from None
        elif exact is not None:
            try:
                snap = self.store.snapshot(ri.key, ns, exact)
            except Compacted:
                raise StatusError(410, "Expired", "The resourceVersion for the provided list is too old.") from None
            except ValueError:
                raise StatusError(504, "Timeout", f"Too large resource version: {exact}, current: "
                                  f"{self.store.revision}") from None
        else:
            snap = self.store.snapshot(ri.key, ns)
        present = self._presenter(ri)
        name_eq = eq.get("metadata.name")
        filtered = bool(label_sel or field_sel)
        more = False
        if name_eq is None and not filtered:  # every object is listed: slices, no walk
            plain = not objects and not limit and self._shown_as_stored(ri) and snap.untyped() == 0
            keys, raws, data = snap.rows(start, limit + 1 if limit else None, objects=not plain)
            if limit and len(keys) > limit:
                more = True
                del keys[limit:], raws[limit:], data[limit:]
            page = ListPage(keys, raws, raws if plain else list(map(present, raws)), data, snap.rev, plain=plain)
        else:
            page = ListPage([], [], [], [], snap.rev)
            for key, raw, enc in snap.items(start):
                if name_eq is not None and key[1] != name_eq:
                    continue
                obj = present(raw)
                if filtered and not (lmatch(obj) and fmatch(obj)):
                    continue
                if limit and len(page.keys) >= limit:
                    more = True
                    break
                page.keys.append(key)
                page.raws.append(raw)
                page.objs.append(obj)
                page.data.append(enc)
        if more:
            last = page.keys[-1]
            nxt = (last[0], last[1] + "\x00")  # upstream: the next page starts at lastKey + "\x00"
            page.cont = _encode_continue(snap.rev, _start_text(ri, ns, nxt))
            page.remaining = None if filtered else snap.count_from(nxt)
        return page

    def list_objects(self, ri: ResourceInfo, ns: str | None, label_sel: str | None, field_sel: str | None,
                     limit: int | None, cont: str | None) -> tuple[list[Obj], int, str | None, int | None]:
        p = self._select(ri, ns, label_sel, field_sel, limit, cont)
        return [copy.deepcopy(obj) for obj in p.objs], p.rev, p.cont, p.remaining

    def list_shared(self, ri: ResourceInfo, ns: str | None, label_sel: str | None, field_sel: str | None,
                    limit: int | None, cont: str | None, *, exact: int | None = None) -> tuple[list[Obj], int, str | None, int | None]:
        """Like :meth:`list_objects` without the copies: for rendering (Tables) right away; callers
        must not mutate the objects or hold them across an await."""
        p = self._select(ri, ns, label_sel, field_sel, limit, cont, exact=exact)
        return p.objs, p.rev, p.cont, p.remaining

    def list_json(self, ri: ResourceInfo, ns: str | None, label_sel: str | None, field_sel: str | None,
                  limit: int | None, cont: str | None, *, exact: int | None = None) -> bytes:
        """The ``<Kind>List`` of :meth:`list_objects` as one JSON body: an object presented as stored
        reuses the bytes the store encoded once per revision (a list of 10,000 pods copies no
        dict), and those bytes are copied once, into the body (18 MB for 10,000 pods: a second
        copy costs as much as finding them)."""
        p = self._select(ri, ns, label_sel, field_sel, limit, cont, objects=False, exact=exact)
        meta: dict[str, Any] = {"resourceVersion": str(p.rev)}
        if p.cont:
            meta["continue"] = p.cont
            if p.remaining is not None:
                meta["remainingItemCount"] = p.remaining
        head = json.dumps({"kind": ri.list_kind, "apiVersion": ri.api_version, "metadata": meta},
                          separators=(",", ":")).encode()[:-1] + b',"items":['
        items = p.encoded()
        if not items:
            return head + b"]}"
        items[0] = head + items[0]
        items[-1] = items[-1] + b"]}"
        return b",".join(items)

    # ---------------------------------------------------------------- helpers
    def _check_namespace(self, ri: ResourceInfo, ns: str, creating: bool = True) -> None:
        if not ri.namespaced:
            return
        nso = self.store.peek("namespaces", "", ns)
        if nso is None:
            raise not_found("namespaces", ns)
        if creating and nso["metadata"].get("deletionTimestamp"):
            raise StatusError(403, "Forbidden",
                              f"{ri.resource} \"...\" is forbidden: unable to create new content in namespace {ns} "
                              f"because it is being terminated", kind=ri.resource)

    def _decode(self, group: str, version: str, kind: str, obj: Obj, ctx: RequestContext, warnings: list[str], *,
                patch: Any = None, apply: bool = False, decoded: Obj | None = None) -> Obj:
        """Typed decoding of a body (or, with ``patch``, of the patched object) as upstream's
        handlers do: wrong types are 400 (422 for a patch whose result does not decode, as
        upstream's patcher reports it), unknown and duplicate fields per ``fieldValidation``.
        ``decoded``: the stored object a patch result shares its untouched parts with
        (``schema.decode``)."""
        model = schema.root_model(group, kind)
        sv = self.crds.served_kind(group, version, kind) if model is None else None
        if model is None and sv is None:
            if (group, kind) == (crd.GROUP, "CustomResourceDefinition"):
                warnings.extend(crd.crd_warnings(obj))  # CEL rules are not evaluated: say so
            return obj
        try:
            result = (schema.decode(obj, model, decoded=decoded) if model is not None
                      else self.crds.decode(sv, obj))  # type: ignore[arg-type]
        except schema.DecodeError as e:
            if patch is not None and not apply:
                shown = json.dumps(patch, separators=(",", ":"))
                raise invalid("", "", [("patch", f"Invalid value: {json.dumps(shown)}: {e}")]) from e
            if apply:
                raise bad_request(f"failed to create typed patch object ({group}/{version}, Kind={kind}): {e}") from e
            raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {e}') from e
        strict = [f'unknown field "{u}"' for u in result.unknown]
        strict += [f'duplicate field "{d}"' for d in schema.duplicate_paths(patch if patch is not None else obj,
                                                                            ctx.duplicates)]
        if strict:
            if ctx.field_validation == "Strict":
                msg = "strict decoding error: " + ", ".join(strict)
                if patch is None:
                    msg = f'{kind} in version "{version}" cannot be handled as a {kind}: {msg}'
                raise bad_request(msg)
            if ctx.field_validation == "Warn":
                warnings.extend(strict)
        return dict(result.obj)

    def _decode_as(self, ri: ResourceInfo, obj: Obj, ctx: RequestContext, warnings: list[str], **kw: Any) -> Obj:
        return self._decode(ri.group, ri.version, ri.kind, obj, ctx, warnings, **kw)

    def decode_delete_options(self, options: Obj) -> Obj:
        """A DELETE body as ``v1.DeleteOptions`` (unknown fields ignored, as upstream)."""
        try:
            return dict(schema.decode(options, "V1DeleteOptions").obj)
        except schema.DecodeError as e:
            raise bad_request(f'DeleteOptions in version "v1" cannot be handled as a DeleteOptions: {e}') from e

    def _check_type(self, ri: ResourceInfo, obj: Obj, *, required: bool = False) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        for fld, v in (("apiVersion", api_version), ("kind", kind)):
            if v is not None and not isinstance(v, str):
                what = {bool: "bool", int: "number", float: "number", list: "array"}.get(type(v), "object")
                raise bad_request(f"couldn't get version/kind; json parse error: json: cannot unmarshal {what} into "
                                  f"Go struct field .{fld} of type string")
        if required and (not kind or not api_version):
            raise bad_request("Object 'Kind' is missing in '" + json.dumps(obj)[:200] + "'")
        if api_version and api_version != ri.api_version:
            raise bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                              f"version ({ri.api_version})")
        if kind and kind != ri.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({ri.kind})")

    def _validate(self, ri: ResourceInfo, obj: Obj, old: Obj | None, sub: str = "") -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        # core/v1 events keep their legacy (unchecked) names; events.k8s.io/v1 ones are subdomains
        errs = validate_meta(ri.resource if ri.group != "events.k8s.io" else "events.k8s.io", obj,
                             creating=old is None)
        if not errs and ri.resource == "pods" and ri.group == "":
            if sub == "status" and old is not None and obj.get("spec") is old.get("spec"):
                # ValidatePodStatusUpdate: the spec is the stored one (_prepare_update kept it), so
                # only metadata and status are checked, as upstream; a spec stored before a newer
                # rule never blocks the kubelet's status writes.
                errs = list(podspec.validate_metadata("pods", obj))
            else:
                errs = list(podspec.validate_pod(obj, old))
            errs += podspec.validate_pod_status(obj, old)
        elif ri.resource == "secrets":
            errs += validate_secret(obj, old)
        elif ri.resource == "configmaps":
            errs += validate_configmap(obj, old)
        elif not errs and ri.resource == "persistentvolumes":
            errs += storagevalidation.validate_pv(obj, old if sub == "" else None)
        elif not errs and ri.resource == "persistentvolumeclaims":
            errs += storagevalidation.validate_pvc(obj, old if sub == "" else None)
        elif not errs and ri.resource == "endpointslices":
            errs += validate_endpoint_slice(obj)
        elif not errs and ri.resource == "storageclasses":
            errs += storagevalidation.validate_storage_class(obj, old)
        elif not errs and ri.group == "apps":
            errs += (apps.validate_controller_revision(obj) if ri.resource == "controllerrevisions"
                     else apps.validate_workload(ri.resource, obj, old))
        elif not errs and ri.group == "batch" and ri.resource == "jobs" and sub == "":
            errs += batchvalidation.validate_job(obj, old)
        elif not errs and ri.group == "batch" and ri.resource == "cronjobs" and sub == "":
            errs += batchvalidation.validate_cronjob(obj, old)
        if not errs:
            errs += self.crds.admit_write(ri, obj, old)
            errs += admissionplugins.validate(self.store, ri, obj, old)
        if ri.resource == "leases" and not errs:
            spec = obj.get("spec") or {}
            lds = spec.get("leaseDurationSeconds")
            if lds is not None and (not isinstance(lds, int) or lds <= 0):
                errs.append(("spec.leaseDurationSeconds", f"Invalid value: {lds}: must be greater than 0"))
        if ri.resource == "certificatesigningrequests" and old is None and not errs:
            spec = obj.get("spec") or {}
            try:
                csr_subject(base64.b64decode(spec.get("request", "")))
            except ValueError:  # not base64 / not a PEM CSR
                errs.append(("spec.request", "Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST"))
            if not spec.get("signerName"):
                errs.append(("spec.signerName", "Required value"))
        if errs:
            raise invalid(ri.kind, name, errs, ri.group)

    def _managed(self, obj: Obj, ri: ResourceInfo, ctx: RequestContext, operation: str, sub: str = "",
                 *, old: Obj | None = None, written: Obj | None = None,
                 written_paths: set[managedfields.Path] | None = None) -> None:
        """Record the write in managedFields: for Apply the applied configuration's fields
        (``written``), for Update the fields whose value changed from ``old`` (or, on create,
        those the request body set).  ``written_paths``: the fields of ``written``, taken before
        the object was defaulted (a create computes them then instead of keeping a copy)."""
        if not ctx.field_manager:
            return
        has_status = ri.resource in STATUS_RESOURCES or ri.sub("status") is not None
        if written_paths is not None:
            paths = written_paths
        elif operation == "Apply":
            paths = managedfields.field_paths(written or obj, sub=sub, has_status=has_status)
        elif old is None:
            paths = managedfields.field_paths(written or obj, sub=sub, has_status=has_status)
        else:
            paths = managedfields.changed_paths(old, obj, sub=sub, has_status=has_status)
        base = (old or {}).get("metadata", {}).get("managedFields") if old is not None else []
        if old is not None and obj["metadata"].get("managedFields") not in (None, base):
            base = obj["metadata"]["managedFields"]  # the writer replaced managedFields explicitly
        obj["metadata"]["managedFields"] = managedfields.record(
            list(base or []), manager=ctx.field_manager, operation=operation, api_version=ri.api_version,
            time=now_rfc3339(), paths=paths, sub=sub)

    # ---------------------------------------------------------------- create
    async def create(self, ri: ResourceInfo, ns: str, body: Obj, ctx: RequestContext) -> tuple[Written, list[str]]:
        warnings: list[str] = []
        self._check_type(ri, body)
        body = self._decode_as(ri, body, ctx, warnings)
        if ri.group == "events.k8s.io":
            body = events_conv.to_core(body)
        created = self._create_obj(ri, ns, body, ctx)
        return created, warnings + ctx.admission_warnings

    def _create_obj(self, ri: ResourceInfo, ns: str, body: Obj, ctx: RequestContext,
                    operation: str = "Update") -> Written:
        """Create from ``body``, a decoded request body the write takes over (changed in place)."""
        obj = body
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if ri.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                                  "request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = str(meta["generateName"]) + secrets.token_hex(3)[:5]
        obj["kind"] = ri.kind if ri.group != "events.k8s.io" else "Event"
        obj["apiVersion"] = ri.api_version if ri.group != "events.k8s.io" else "v1"
        for k in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                  "managedFields"):
            meta.pop(k, None)
        # what the client set, before defaulting (for managedFields)
        written_paths = managedfields.field_paths(
            obj, has_status=ri.resource in STATUS_RESOURCES or ri.sub("status") is not None) \
            if ctx.field_manager else None
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if "spec" in obj or ri.resource in ("pods",):
            meta["generation"] = 1
        self._check_namespace(ri, ns)
        # strategy PrepareForCreate
        if ri.resource == "pods" and ri.group == "":
            podspec.default_pod(obj, not_ready_toleration_seconds=self.default_not_ready_toleration_seconds,
                                unreachable_toleration_seconds=self.default_unreachable_toleration_seconds)
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            self._admit_pod(obj, ns, meta.get("name", ""), ctx)
        elif ri.resource == "persistentvolumeclaims":
            obj["status"] = {}
            storagevalidation.default_pvc(obj)
            admission.admit_default_storage_class(
                obj, [o for _, o in self.store.iter_raw(BY_GVR[("storage.k8s.io", "v1", "storageclasses")].key)])
        elif ri.resource == "persistentvolumes":
            obj["status"] = {}
            storagevalidation.default_pv(obj)
        elif ri.group == "apps":
            apps.prepare_create(ri.resource, obj)
        elif ri.resource == "services" and ri.group == "":
            obj.pop("status", None)
            errs = self.services.prepare_create(obj, (o for _, o in self.store.iter_raw("services")))
            if errs:
                raise invalid(ri.kind, meta.get("name", ""), errs)
        if self.storage_protection and ri.resource in ("persistentvolumes", "persistentvolumeclaims"):
            fin = "kubernetes.io/pv-protection" if ri.resource == "persistentvolumes" else "kubernetes.io/pvc-protection"
            if isinstance(meta.get("finalizers"), list) and fin not in meta["finalizers"]:
                meta["finalizers"].append(fin)
            elif meta.get("finalizers") is None:
                meta["finalizers"] = [fin]
        elif ri.resource == "storageclasses":
            storagevalidation.default_storage_class(obj)
        elif ri.group == "batch" and ri.resource == "jobs":
            batchvalidation.prepare_job_create(obj)
        elif ri.group == "batch" and ri.resource == "cronjobs":
            batchvalidation.default_cronjob(obj)
            obj["status"] = {}
        elif ri.resource == "secrets":
            string_data_to_data(obj)
            if not obj.get("type"):
                obj["type"] = "Opaque"  # SetDefaults_Secret
        elif ri.resource == "namespaces":
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
        elif ri.resource == "certificatesigningrequests":
            spec = obj.setdefault("spec", {})
            spec["username"] = ctx.user.name
            spec["uid"] = ctx.user.uid
            spec["groups"] = ctx.user.groups
            if ctx.user.extra:
                spec["extra"] = ctx.user.extra
            obj["status"] = {}
        self.auth_admission.admit("CREATE", ri.group, ri.resource, "", ns, meta.get("name", ""), obj, None, ctx.user)
        self._validate(ri, obj, None)
        admissionplugins.admit_create(self.store, ri, ns, obj)  # ResourceQuota
        self._managed(obj, ri, ctx, operation, written_paths=written_paths)
        if ctx.dry_run:
            return Written(self.present(ri, obj))
        key_ns = ns if ri.namespaced else ""
        fast = self._answers_stored(ri)
        # ``obj`` is the decoded request body, made this write's own: handed over to the store
        stored = self.store.create(ri.key, key_ns, meta["name"], obj, kind_name=ri.resource, group=ri.group,
                                   decoded=not fast, owned=fast)
        answer = self._answer(ri, key_ns, meta["name"], stored, fast)
        self.crds.after_write(ri, stored)
        admissionplugins.after_write(self.store, ri, ns)
        if ri.resource == "namespaces":
            self._namespace_children(meta["name"])
        return answer

    def _answers_stored(self, ri: ResourceInfo) -> bool:
        """Whether a write of ``ri`` answers with the stored revision's bytes (see :class:`Written`):
        kinds shown as stored, except CRDs, which the CRD registry keeps after the write."""
        return self._shown_as_stored(ri) and ri.key != crd.CRD_KEY

    def _answer(self, ri: ResourceInfo, key_ns: str, name: str, stored: Obj, fast: bool) -> Written:
        """The response to a write just stored (``stored`` is the store's own object when ``fast``)."""
        if fast and "kind" in stored and "apiVersion" in stored:
            data = self.store.encoded(ri.key, key_ns, name)
            if data is not None:
                return Written(data=data)
        if fast:
            stored = copy.deepcopy(stored)
        return Written(self.present(ri, stored))

    def _admit_pod(self, pod: Obj, ns: str, name: str, ctx: RequestContext) -> None:
        """ServiceAccount admission (on create only, as upstream), the other mutating plugins, then
        Pod Security (validating, last)."""
        if not admission.is_mirror_pod(pod):
            sa = self.store.peek("serviceaccounts", ns, admission.service_account_name(pod))
            try:
                admission.admit_service_account(pod, sa)
            except admission.AdmissionError as e:
                raise StatusError(403, "Forbidden", f'pods "{name}" is forbidden: {e}', name=name, kind="pods") from e
            admissionplugins.admit_pod(self.store, pod, ns, name)  # LimitRanger, Priority
        try:
            ctx.admission_warnings += podsecurity.admit(pod, self.store.peek("namespaces", "", ns))
        except podsecurity.PodSecurityViolation as e:
            raise StatusError(403, "Forbidden", f'pods "{name}" is forbidden: {e}', name=name, kind="pods") from e

    # ---------------------------------------------------------------- update
    async def update(self, ri: ResourceInfo, ns: str, name: str, sub: str, body: Obj,
                     ctx: RequestContext) -> tuple[Written, list[str]]:
        warnings: list[str] = []
        if ri.virtual:
            raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if sub == "scale":
            return Written(self._write_scale(ri, ns, name, body, ctx, warnings)), warnings
        self._check_type(ri, body)
        body = self._decode_as(ri, body, ctx, warnings)
        bmeta = body.get("metadata") or {}
        if not isinstance(bmeta, dict):
            raise bad_request("metadata must be an object")
        if bmeta.get("name") and bmeta["name"] != name:
            raise bad_request(f"the name of the object ({bmeta['name']}) does not match the name on the URL ({name})")
        if ri.namespaced and bmeta.get("namespace") and bmeta["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if ri.group == "events.k8s.io":
            body = events_conv.to_core(body)
        old = self._raw_get(ri, ns, name)
        return self._update_obj(ri, ns, name, sub, old, body, ctx, "Update"), warnings

    def _write_scale(self, ri: ResourceInfo, ns: str, name: str, scale: Obj, ctx: RequestContext,
                     warnings: list[str]) -> Obj:
        """PUT/PATCH of the ``scale`` subresource: an autoscaling/v1 Scale sets spec.replicas."""
        if scale.get("apiVersion") not in (None, "autoscaling/v1") or scale.get("kind") not in (None, "Scale"):
            raise bad_request(f"the API version in the data ({scale.get('apiVersion')}) does not match the expected "
                              "API version (autoscaling/v1)")
        scale = self._decode("autoscaling", "v1", "Scale", scale, ctx, warnings)
        if errs := apps.scale_errors(scale):
            raise invalid("Scale", name, errs, "autoscaling")
        old = self._raw_get(ri, ns, name)
        rv = str((scale.get("metadata") or {}).get("resourceVersion") or "")
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise conflict(ri.resource, name, ri.group)
        new = copy.deepcopy(old)
        replicas = int((scale.get("spec") or {}).get("replicas") or 0)
        if (sv := self.crds.served(ri)) is not None:
            self.crds.set_replicas(sv, new, replicas)
            return self.crds.to_scale(sv, self._update_obj(ri, ns, name, "", old, new, ctx, "Update").obj())
        new.setdefault("spec", {})["replicas"] = replicas
        return apps.to_scale(self._update_obj(ri, ns, name, "", old, new, ctx, "Update").obj())

    def _update_obj(self, ri: ResourceInfo, ns: str, name: str, sub: str, old: Obj, body: Obj,
                    ctx: RequestContext, operation: str, applied: Obj | None = None) -> Written:
        """Write ``body`` (a decoded request body or patch result the write takes over, changed in
        place) over ``old`` (the stored object or a copy of it; only read)."""
        expected = str((body.get("metadata") or {}).get("resourceVersion") or "")
        if expected and (why := resource_version_error(expected, "metadata.resourceVersion")):
            raise bad_request(why)
        if expected and expected != old["metadata"].get("resourceVersion"):
            raise conflict(ri.resource, name, ri.group)
        uid = (body.get("metadata") or {}).get("uid")
        if uid and uid != old["metadata"].get("uid"):
            # a write meant for an object that was deleted and recreated under the same name (the
            # kubelet's status PATCH carries the uid for exactly this)
            raise conflict(ri.resource, name, ri.group,
                           f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                           f"{old['metadata'].get('uid')}")
        new = self._prepare_update(ri, sub, old, body)
        if ri.resource == "pods" and ri.group == "" and sub == "":
            # Type defaults apply on every write (admission only on create), so a PUT that omits
            # defaulted fields is completed before the immutability check rather than rejected.
            admission.carry_over_token_volume(new, old)
            podspec.default_pod(new, admission=False, old=old)
        elif ri.resource == "persistentvolumeclaims":
            storagevalidation.default_pvc(new)
        elif ri.resource == "persistentvolumes":
            storagevalidation.default_pv(new)
        elif ri.group == "apps" and sub == "":
            apps.default_workload(ri.resource, new)
        elif ri.resource == "services" and ri.group == "" and sub == "":
            errs = self.services.prepare_update(old, new, (o for k, o in self.store.iter_raw("services")
                                                           if k != (ns, name)))
            if errs:
                raise invalid(ri.kind, name, errs)
        elif ri.resource == "storageclasses":
            storagevalidation.default_storage_class(new)
        elif ri.group == "batch" and ri.resource == "jobs" and sub == "":
            batchvalidation.carry_over_job(new, old)
            batchvalidation.default_job(new)
        elif ri.group == "batch" and ri.resource == "cronjobs" and sub == "":
            batchvalidation.default_cronjob(new)
        elif ri.resource == "secrets":
            string_data_to_data(new)  # the v1 -> internal conversion, on every write
            if not new.get("type"):
                new["type"] = "Opaque"
        self.auth_admission.admit("UPDATE", ri.group, ri.resource, sub, ns, name, new, old, ctx.user)
        validate_against = old
        if ri.resource == "pods" and ri.group == "" and sub == "ephemeralcontainers":
            podspec.default_pod(new, admission=False, old=old)
            validate_against = self._ephemeral_update(name, old, new)
        self._validate(ri, new, validate_against, sub)
        self._managed(new, ri, ctx, operation, sub, old=old, written=applied)
        if ctx.dry_run:
            return Written(self.present(ri, new))
        key_ns = ns if ri.namespaced else ""
        fast = sub != "approval" and self._answers_stored(ri)
        stored = self.store.update(ri.key, key_ns, name, new, expected_rv=expected or None,
                                   kind_name=ri.resource, group=ri.group, decoded=not fast, owned=fast)
        answer = self._answer(ri, key_ns, name, stored, fast) if fast else None
        self.crds.after_write(ri, stored)
        admissionplugins.after_write(self.store, ri, ns)
        if sub == "approval":
            stored = self._maybe_sign_csr(ri, stored)
        meta = stored["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and \
                not meta.get("deletionGracePeriodSeconds") and ri.resource != "namespaces":
            return Written(self.present(ri, self.store.delete(ri.key, key_ns, name)))
        return answer if answer is not None else Written(self.present(ri, stored))

    @staticmethod
    def _ephemeral_update(name: str, old: Obj, new: Obj) -> Obj:
        """ValidatePodEphemeralContainersUpdate: ephemeral containers may only be added; returns
        the old pod as the rest of the update validation compares against."""
        old_ecs = {c.get("name"): c for c in (old.get("spec") or {}).get("ephemeralContainers") or []}
        new_ecs = {c.get("name"): c for c in (new.get("spec") or {}).get("ephemeralContainers") or []
                   if isinstance(c, dict)}
        for n, c in old_ecs.items():
            if new_ecs.get(n) != c:
                raise invalid("Pod", name, [("spec.ephemeralContainers",
                                             f'Forbidden: existing ephemeral containers "{n}" may not be changed')])
        return {**old, "spec": {**(old.get("spec") or {}),
                                "ephemeralContainers": (new.get("spec") or {}).get("ephemeralContainers")}}

    def _prepare_update(self, ri: ResourceInfo, sub: str, old: Obj, new: Obj) -> Obj:
        """Upstream PrepareForUpdate: system metadata from old; status vs. spec split."""
        meta = new.setdefault("metadata", {})
        ometa = old["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                  "namespace", "name"):
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        new["kind"] = old.get("kind", ri.kind)
        new["apiVersion"] = old.get("apiVersion", ri.api_version)
        has_status = ri.resource in STATUS_RESOURCES or ri.sub("status") is not None
        if sub == "status":
            # Only the top level and metadata are this write's own: the rest is read (validated,
            # compared) and the store copies the object it keeps (Storage._with_rv).
            result = {**old, "metadata": dict(ometa)}
            result["status"] = new.get("status", {})
            return result
        if sub == "approval":
            result = copy.deepcopy(old)
            conds = ((new.get("status") or {}).get("conditions")) or []
            result.setdefault("status", {})["conditions"] = conds
            # status updates may not touch metadata except what upstream resets anyway
            return result
        if sub == "finalize":
            result = copy.deepcopy(old)
            result.setdefault("spec", {})["finalizers"] = (new.get("spec") or {}).get("finalizers") or []
            return result
        if sub == "ephemeralcontainers":
            result = copy.deepcopy(old)
            result.setdefault("spec", {})["ephemeralContainers"] = (new.get("spec") or {}).get("ephemeralContainers") or []
            return result
        if has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if ri.resource == "certificatesigningrequests":
            new["spec"] = old.get("spec", {})
        if ri.resource == "namespaces":
            new["spec"] = old.get("spec", {})
        # generation: bump on any non-metadata, non-status change
        def body_of(o: Obj) -> Obj:
            return {k: v for k, v in o.items() if k not in ("metadata", "status", "kind", "apiVersion")}
        if "generation" in ometa and body_of(old) != body_of(new):
            meta["generation"] = int(ometa["generation"]) + 1
        return new

    # ---------------------------------------------------------------- patch
    async def patch(self, ri: ResourceInfo, ns: str, name: str, sub: str, body: Any, ptype: str,
                    ctx: RequestContext) -> tuple[Written, int, list[str]]:
        warnings: list[str] = []
        if ri.virtual:
            raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if body is None:
            raise bad_request("empty patch body")
        if sub == "scale":
            cur_scale = self.get(ri, ns, name, "scale")
            patched_scale = (strategic_merge(cur_scale, body) if ptype == "apply"
                             else apply_patch(cur_scale, body, ptype))
            if not isinstance(patched_scale, dict):
                raise bad_request("patch result must be an object")
            return Written(self._write_scale(ri, ns, name, patched_scale, ctx, warnings)), 200, warnings
        # A status patch of a built-in kind only reads the current object (the patch functions copy
        # what they change, _prepare_update makes the top level and metadata its own): no copy of
        # it.  CRDs and custom resources are defaulted and pruned in place by their validation.
        read_only = sub == "status" and ri.key != crd.CRD_KEY and self.crds.served(ri) is None
        current = (self.store.peek if read_only else self.store.get)(ri.key, ns if ri.namespaced else "", name)
        if ptype == "apply":
            if not isinstance(body, dict):
                raise bad_request("apply patch must be an object")
            self._check_type(ri, body, required=True)
            body = self._decode_as(ri, body, ctx, warnings, apply=True)
            bmeta = body.get("metadata") or {}
            if bmeta.get("name") and bmeta["name"] != name:
                raise bad_request(f"the name of the object ({bmeta['name']}) does not match the name on the URL "
                                  f"({name})")
            if ri.group == "events.k8s.io":
                body = events_conv.to_core(body)
            if current is None:
                if sub:
                    raise not_found(ri.resource, name, ri.group)
                body.setdefault("metadata", {})["name"] = name
                return self._create_obj(ri, ns, body, ctx, "Apply"), 201, warnings
            patched = strategic_merge(self.present(ri, current) if ri.group != "events.k8s.io" else current, body)
            # Fields this manager applied last time but not now are removed (unless another
            # manager owns them): the part of server-side apply a plain merge cannot express.
            if ctx.field_manager:
                has_status = ri.resource in STATUS_RESOURCES or ri.sub("status") is not None
                applied = managedfields.field_paths(body, sub=sub, has_status=has_status)
                stale = managedfields.stale_applied_paths(
                    current["metadata"].get("managedFields") or [], ctx.field_manager, applied, sub)
                managedfields.remove_paths(patched, stale, applied)
            return self._update_obj(ri, ns, name, sub, current, patched, ctx, "Apply", body), 200, warnings
        if current is None:
            raise not_found(ri.resource, name, ri.group)
        base = self.present(ri, current)
        shared: Obj | None = None
        if read_only and ptype == "merge" and schema.root_model(ri.group, ri.kind) is not None:
            # the typed decoding below makes every container of the result anew (the kubelet's
            # status PATCH): no deep copy of the pod first.  The fields the patch leaves alone
            # are the stored object's own, decoded when it was written: not walked again (a
            # status write keeps only the status of the result anyway).
            patched = merge_patch_shared(base, body)
            shared = base
        else:
            patched = apply_patch(base, body, ptype)
        if not isinstance(patched, dict):
            raise bad_request("patch result must be an object")
        patched = self._decode_as(ri, patched, ctx, warnings, patch=body, decoded=shared)
        pmeta = patched.get("metadata") or {}
        if isinstance(pmeta, dict) and pmeta.get("name", name) != name:
            raise invalid(ri.kind, name, [("metadata.name", "Invalid value: field is immutable")], ri.group)
        if ri.group == "events.k8s.io":
            patched = events_conv.to_core(patched)
        return self._update_obj(ri, ns, name, sub, current, patched, ctx, "Update"), 200, warnings

    # ---------------------------------------------------------------- delete
    async def delete(self, ri: ResourceInfo, ns: str, name: str, options: Obj, ctx: RequestContext) -> tuple[Obj, int]:
        if ri.virtual:
            raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        obj = self._raw_get(ri, ns, name)
        opts = dict(options)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != obj["metadata"].get("uid"):
            raise conflict(ri.resource, name, ri.group,
                           f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                           f"{obj['metadata'].get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"].get("resourceVersion"):
            raise conflict(ri.resource, name, ri.group,
                           f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                           f"ResourceVersion in object meta: {obj['metadata'].get('resourceVersion')}")
        self.auth_admission.admit("DELETE", ri.group, ri.resource, "", ns, name, None, obj, ctx.user)
        if ctx.dry_run or opts.get("dryRun"):
            return self.present(ri, obj), 200
        if ri.resource == "namespaces":
            return self._delete_namespace(obj), 200
        if ri.key == crd.CRD_KEY:
            crd.cleanup(self.store, self.crds, obj)
        deleted = self._delete_obj(ri, ns, name, obj, opts)
        admissionplugins.after_write(self.store, ri, ns)
        return deleted

    def _delete_obj(self, ri: ResourceInfo, ns: str, name: str, obj: Obj, opts: Obj) -> tuple[Obj, int]:
        key_ns = ns if ri.namespaced else ""
        meta = obj["metadata"]
        grace: int = 0
        if ri.resource == "pods" and ri.group == "":
            g = opts.get("gracePeriodSeconds")
            if g is None:
                g = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            grace = max(int(g), 0)  # both typed int64 by decoding
            phase = (obj.get("status") or {}).get("phase")
            if not (obj.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        gc_changed = False
        if self.garbage_collection:
            fins = garbagecollection.deletion_finalizers(ri.group, ri.resource, meta.get("finalizers") or [], opts)
            gc_changed = fins != (meta.get("finalizers") or [])
            if gc_changed:
                meta["finalizers"] = fins
        finalizers = meta.get("finalizers") or []
        if grace == 0 and not finalizers:
            return self.present(ri, self.store.delete(ri.key, key_ns, name)), 200
        if meta.get("deletionTimestamp"):
            if gc_changed:
                obj = self.store.update(ri.key, key_ns, name, obj)
            cur = meta.get("deletionGracePeriodSeconds")
            if cur is not None and grace < int(cur):
                # shortening the grace period moves the deadline earlier (upstream behaviour)
                meta["deletionGracePeriodSeconds"] = grace
                meta["deletionTimestamp"] = now_rfc3339(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace))
                if grace == 0 and not finalizers:
                    return self.present(ri, self.store.delete(ri.key, key_ns, name)), 200
                obj = self.store.update(ri.key, key_ns, name, obj)
            return self.present(ri, obj), 200
        meta["deletionTimestamp"] = now_rfc3339(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        obj = self.store.update(ri.key, key_ns, name, obj)
        return self.present(ri, obj), 200

    def _delete_namespace(self, obj: Obj) -> Obj:
        name = obj["metadata"]["name"]
        if name in ("default", "kube-system", "kube-public"):
            raise StatusError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                              name=name, kind="namespaces")
        if not obj["metadata"].get("deletionTimestamp"):
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            obj.setdefault("status", {})["phase"] = "Terminating"
            obj = self.store.update("namespaces", "", name, obj)
            self._spawn(self._finish_namespace(name))
        return self.present(BY_GVR[("", "v1", "namespaces")], obj)

    async def _finish_namespace(self, ns: str) -> None:
        """The namespace controller: delete contents (pods gracefully), then the namespace."""
        while True:
            remaining = 0
            for ri in namespaced_resources():
                for (_, name), raw in list(self.store.iter_raw(ri.key, ns)):
                    remaining += 1
                    if raw["metadata"].get("deletionTimestamp"):
                        continue
                    with contextlib.suppress(StatusError):
                        self._delete_obj(ri, ns, name, copy.deepcopy(raw), {})
            if remaining == 0:
                break
            if not any(True for ri in namespaced_resources() for _ in self.store.iter_raw(ri.key, ns)):
                break
            await asyncio.sleep(0.5)
        with contextlib.suppress(StatusError):
            self.store.delete("namespaces", "", ns)

    async def delete_collection(self, ri: ResourceInfo, ns: str, options: Obj, ctx: RequestContext) -> Obj:
        items, _rev, _c, _r = self.list_objects(ri, ns or None, ctx.query.get("labelSelector"),
                                       ctx.query.get("fieldSelector"), None, None)
        out = []
        for it in items:
            m = it["metadata"]
            with contextlib.suppress(StatusError):
                obj, _code = await self.delete(ri, m.get("namespace", ""), m["name"], options, ctx)
                out.append(obj)
        return {"kind": ri.list_kind, "apiVersion": ri.api_version,
                "metadata": {"resourceVersion": str(self.store.revision)}, "items": out}

    # ---------------------------------------------------------------- subresource POSTs
    async def create_sub(self, ri: ResourceInfo, ns: str, name: str, sub: str, body: Obj,
                         ctx: RequestContext) -> tuple[Obj, int, list[str]]:
        """POST to a subresource or a virtual resource (binding, eviction, reviews, tokens); the
        body is decoded as its own kind (Binding, policy/v1 Eviction, TokenRequest...)."""
        warnings: list[str] = []
        info = ri.sub(sub) if sub else None
        group, kind = (info.group, info.kind) if info is not None else (ri.group, ri.kind)
        body = self._decode(group, info.version if info is not None else ri.version, kind, body, ctx, warnings)
        obj, code = await self._create_sub(ri, ns, name, sub, body, ctx)
        return obj, code, warnings

    async def _create_sub(self, ri: ResourceInfo, ns: str, name: str, sub: str, body: Obj,
                          ctx: RequestContext) -> tuple[Obj, int]:
        key = (ri.resource, sub)
        if key in (("pods", "eviction"), ("serviceaccounts", "token")):
            self.auth_admission.admit("CREATE", ri.group, ri.resource, sub, ns, name, body, None, ctx.user)
        if key == ("pods", "binding") or ri.resource == "bindings":
            return self._bind(ns, name or (body.get("metadata") or {}).get("name", ""), body, ctx.dry_run)
        if key == ("pods", "eviction"):
            return await self._evict(ns, name, body, ctx)
        if key == ("serviceaccounts", "token"):
            return self._token_request(ns, name, body)
        if ri.resource == "tokenreviews":
            return self._token_review(body)
        if ri.resource == "selfsubjectreviews":
            return {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {},
                    "status": {"userInfo": ctx.user.to_dict()}}, 201
        if ri.resource in ("subjectaccessreviews", "selfsubjectaccessreviews"):
            return self._access_review(ri, body, ctx), 201
        raise StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _bind(self, ns: str, name: str, body: Obj, dry_run: bool = False) -> tuple[Obj, int]:
        pod_ri = BY_GVR[("", "v1", "pods")]
        target = body.get("target") or {}
        node = target.get("name")
        if not node:
            raise invalid("Binding", name, [("target.name", "Required value")])
        stored = self.store.peek(pod_ri.key, ns, name)
        if stored is None:
            raise not_found(pod_ri.resource, name, pod_ri.group)
        if stored["metadata"].get("deletionTimestamp"):
            raise conflict("pods", name, "", "pod is being deleted")
        cur = (stored.get("spec") or {}).get("nodeName")
        if cur:
            raise conflict("pods", name, "", f"pod {name} is already assigned to node \"{cur}\"")
        # new top level, spec and status; the rest is the stored pod's, which the store copies
        status = dict(stored.get("status") or {})
        conds = [c for c in (status.get("conditions") or []) if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conds
        pod = {**stored, "spec": {**(stored.get("spec") or {}), "nodeName": node}, "status": status}
        if not dry_run:
            self.store.update("pods", ns, name, pod, decoded=False, owned=True)
        return success_status(), 201

    async def _evict(self, ns: str, name: str, body: Obj, ctx: RequestContext) -> tuple[Obj, int]:
        pod_ri = BY_GVR[("", "v1", "pods")]
        self._raw_get(pod_ri, ns, name)
        opts = body.get("deleteOptions") or {}
        dry = list(opts.get("dryRun") or [])
        if any(v != "All" for v in dry):
            raise invalid_options("DeleteOptions", [("dryRun", "Unsupported value: []string{"
                                                     + ", ".join(json.dumps(v) for v in dry)
                                                     + '}: supported values: "All"')])
        if not ctx.dry_run and not dry:
            self._charge_disruption_budget(ns, name)
        await self.delete(pod_ri, ns, name, opts, ctx)
        return success_status(), 201

    def _charge_disruption_budget(self, ns: str, name: str) -> None:
        """PodDisruptionBudget check of the eviction subresource (:mod:`pykubelet.server.pdb`):
        429 when the budget allows no disruption, else the budget is charged and the pod marked
        with the DisruptionTarget condition before it is deleted."""
        pod = self.store.get("pods", ns, name)
        if pod is None:
            raise not_found("pods", name)
        pdb_ri = BY_GVR[("policy", "v1", "poddisruptionbudgets")]
        now = dt.datetime.now(dt.UTC)
        budgets = [o for _, o in self.store.iter_raw(pdb_ri.key, ns)]
        d = pdb.check_eviction(pod, budgets, now)
        if d.verdict is pdb.Verdict.MULTIPLE:
            raise StatusError(500, "InternalError", d.cause)
        if d.verdict is pdb.Verdict.FORBIDDEN:
            raise StatusError(403, "Forbidden", d.cause)
        if d.verdict is pdb.Verdict.TOO_MANY:
            raise StatusError(429, "TooManyRequests", pdb.EVICTION_MESSAGE, retry_after=0,
                              causes=[{"reason": "DisruptionBudget", "message": d.cause}])
        if d.verdict is pdb.Verdict.CHARGE and d.pdb is not None:
            self.store.update(pdb_ri.key, ns, d.pdb["metadata"]["name"], d.pdb,
                              expected_rv=d.pdb["metadata"].get("resourceVersion"))
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            self.store.update("pods", ns, name, pdb.with_disruption_target(pod, now))

    def _token_request(self, ns: str, name: str, body: Obj) -> tuple[Obj, int]:
        sa = self.store.peek("serviceaccounts", ns, name)  # only its uid is read: no copy
        if sa is None:
            raise not_found("serviceaccounts", name)
        spec = body.get("spec") or {}
        exp = spec.get("expirationSeconds", 3600)
        if not isinstance(exp, int) or exp < 600:
            raise invalid("TokenRequest", name, [("spec.expirationSeconds",
                                                  f"Invalid value: {exp}: may not specify a duration less than 10 "
                                                  "minutes")], "authentication.k8s.io")
        exp = min(exp, 48 * 3600)
        bound = spec.get("boundObjectRef")
        node: dict[str, str] | None = None
        if bound:
            kind = bound.get("kind")
            res = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}.get(kind or "")
            if res is None:
                raise invalid("TokenRequest", name, [("spec.boundObjectRef.kind", f'Unsupported value: "{kind}"')],
                              "authentication.k8s.io")
            target = self.store.peek(res, "" if res == "nodes" else ns, bound.get("name", ""))
            if target is None:
                raise not_found(res, bound.get("name", ""))
            if bound.get("uid") and bound["uid"] != target["metadata"].get("uid"):
                raise conflict(res, bound.get("name", ""), "", "the UID in the bound object reference does not match")
            bound = {**bound, "uid": target["metadata"].get("uid")}
            node_name = (target.get("spec") or {}).get("nodeName") if res == "pods" else None
            node_obj = self.store.peek("nodes", "", node_name) if node_name else None
            if node_obj is not None:
                node = {"name": str(node_name), "uid": str(node_obj["metadata"].get("uid", ""))}
        token, exp_ts = self.tokens.issue_sa_token(ns, name, sa["metadata"].get("uid", ""),
                                                   list(spec.get("audiences") or []), exp, bound, node)
        out = {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
               "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
               "spec": {"audiences": list(spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"]),
                        "expirationSeconds": exp, "boundObjectRef": bound},
               "status": {"token": token,
                          "expirationTimestamp": now_rfc3339(dt.datetime.fromtimestamp(exp_ts, dt.UTC))}}
        return out, 201

    def validate_sa_claims(self, claims: Obj) -> str:
        """Upstream's service-account claims validator: the account, and the pod/secret/node the
        token is bound to, must still exist with the uid in the token (and not have been deleting
        for more than 60 s).  Returns why the token is invalid, or ""."""
        k8s = claims.get("kubernetes.io")
        if not isinstance(k8s, dict):
            return ""
        ns = str(k8s.get("namespace") or "")
        cutoff = now_rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60))
        # (claim, resource, what upstream's messages call it, namespace)
        refs = [("serviceaccount", "serviceaccounts", "service account", ns), ("pod", "pods", "pod", ns),
                ("secret", "secrets", "secret", ns), ("node", "nodes", "node", "")]
        for claim, res, what, obj_ns in refs:
            ref = k8s.get(claim)
            if not isinstance(ref, dict) or (claim == "node" and isinstance(k8s.get("pod"), dict)):
                continue  # a pod-bound token's node claim is informational
            name, uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
            obj = self.store.peek(res, obj_ns, name)
            if obj is None:
                return f'{res} "{name}" not found'
            meta = obj["metadata"]
            if uid and meta.get("uid") != uid:
                return f"{what} UID ({meta.get('uid')}) does not match claim ({uid})"
            deleted = meta.get("deletionTimestamp")
            if deleted and str(deleted) < cutoff:
                return f"{what} {obj_ns + '/' if obj_ns else ''}{name} has been deleted"
        return ""

    def _token_review(self, body: Obj) -> tuple[Obj, int]:
        spec = body.get("spec") or {}
        token = spec.get("token") or ""
        auds = list(spec.get("audiences") or [])
        status: dict[str, Any] = {"authenticated": False, "user": {}}
        user, why = self.tokens.authenticate_token(token, auds or None) if token else (None, "")
        if user is not None:
            status = {"authenticated": True, "user": user.to_dict(),
                      "audiences": auds or ["https://kubernetes.default.svc.cluster.local"]}
        elif token:
            status["error"] = why or "invalid bearer token"
        return {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}, 201

    def _access_review(self, ri: ResourceInfo, body: Obj, ctx: RequestContext) -> Obj:
        spec = body.get("spec") or {}
        if ri.resource == "selfsubjectaccessreviews":
            user = ctx.user
        else:
            if not spec.get("user") and not spec.get("groups"):
                raise invalid(ri.kind, "", [("spec.user", "Invalid value: \"\": at least one of user or group "
                                             "must be specified")], ri.group)
            user = UserInfo(spec.get("user", ""), spec.get("uid", ""), list(spec.get("groups") or []))
        ra = spec.get("resourceAttributes")
        na = spec.get("nonResourceAttributes")
        if ra:
            attrs = Attributes(user=user, verb=ra.get("verb", ""), namespace=ra.get("namespace", ""),
                               api_group=ra.get("group", ""), resource=ra.get("resource", ""),
                               subresource=ra.get("subresource", ""), name=ra.get("name", ""))
        elif na:
            attrs = Attributes(user=user, verb=na.get("verb", ""), path=na.get("path", ""), resource_request=False)
        else:
            raise invalid(ri.kind, "", [("spec.resourceAttributes", "Required value: exactly one of "
                                         "nonResourceAttributes or resourceAttributes must be specified")], ri.group)
        allowed, reason = self.authorizer.authorize(attrs)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        if not allowed:
            status["denied"] = False
        return {"kind": ri.kind, "apiVersion": ri.api_version, "metadata": {"creationTimestamp": None},
                "spec": spec, "status": status}

    # ---------------------------------------------------------------- CSR signing
    def _maybe_sign_csr(self, ri: ResourceInfo, csr: Obj) -> Obj:
        status = csr.get("status") or {}
        conds = status.get("conditions") or []
        approved = any(c.get("type") == "Approved" and c.get("status", "True") == "True" for c in conds)
        denied = any(c.get("type") in ("Denied", "Failed") and c.get("status", "True") == "True" for c in conds)
        spec = csr.get("spec") or {}
        if not approved or denied or status.get("certificate") or spec.get("signerName") not in KUBE_SIGNERS:
            return csr
        try:
            pem = self.pki.sign_csr(base64.b64decode(spec.get("request", "")), spec["signerName"],
                                    list(spec.get("usages") or []), spec.get("expirationSeconds"))
        except (ValueError, TypeError, OSError, UnsupportedAlgorithm) as e:  # a request we cannot sign
            log.warning("signing CSR %s failed: %s", csr["metadata"].get("name"), e)
            conds.append({"type": "Failed", "status": "True", "reason": "SigningError", "message": str(e),
                          "lastUpdateTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()})
            csr.setdefault("status", {})["conditions"] = conds
        else:
            csr.setdefault("status", {})["certificate"] = base64.b64encode(pem).decode()
        return self.store.update(ri.key, "", csr["metadata"]["name"], csr)

