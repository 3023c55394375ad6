"""Discovery documents and OpenAPI v3 for the dev API server.

kubectl 1.30+ asks ``/api`` and ``/apis`` for aggregated discovery (apidiscovery.k8s.io v2, older
clients v2beta1) and only accepts it when the response Content-Type names the exact
group/version/kind it asked for; otherwise it falls back to legacy discovery (``APIVersions``,
``APIGroupList``, then one ``APIResourceList`` per group-version).  ``kubectl drain`` always reads
legacy ``/api/v1`` to see whether ``pods/eviction`` (group policy, version v1) exists, so both
forms are served from the one registry in :mod:`resources`.

OpenAPI: kubectl 1.29+ only needs a v3 root listing ``serverRelativeURL`` per group-version and,
in each group-version document, operations tagged with ``x-kubernetes-group-version-kind`` that
list the ``fieldValidation`` query parameter; then it leaves validation to the server
(``fieldValidation=Strict``).  Component schemas come from :mod:`schema` (the typed field table
the server decodes bodies with); they deliberately carry no GVK tag so ``kubectl apply`` keeps
using its compiled-in strategic-merge metadata (list merge keys) that these schemas do not carry.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pykubelet.server import crd
from pykubelet.server import schema as schemamod
from pykubelet.server.resources import RESOURCES, ResourceInfo, groups

AGG_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGG_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"


def wants_aggregated(accept: str) -> str | None:
    """Return the aggregated content type to answer with, honouring the client's preference order."""
    for part in accept.split(","):
        p = part.replace(" ", "")
        if "g=apidiscovery.k8s.io" in p and "as=APIGroupDiscoveryList" in p:
            if "v=v2beta1" in p:
                return AGG_V2BETA1
            if "v=v2" in p:
                return AGG_V2
    return None


def _agg_resource(r: ResourceInfo) -> dict[str, Any]:
    d: dict[str, Any] = {
        "resource": r.resource,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular_name,
        "verbs": r.verbs,
    }
    if r.short_names:
        d["shortNames"] = r.short_names
    if r.categories:
        d["categories"] = r.categories
    if r.subresources:
        d["subresources"] = [
            {"subresource": s.name,
             "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
             "verbs": s.verbs}
            for s in r.subresources
        ]
    return d


def aggregated(core: bool, api_version: str) -> dict[str, Any]:
    items = []
    for g, versions in groups().items():
        if (g == "") != core:
            continue
        items.append({
            "metadata": {"name": g, "creationTimestamp": None},
            "versions": [
                {"version": v,
                 "resources": [_agg_resource(r) for r in RESOURCES if r.group == g and r.version == v],
                 "freshness": "Current"}
                for v in versions
            ],
        })
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items}


def api_versions(server_addr: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_addr}]}


def _group_entry(g: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
    return {"name": g, "versions": vs, "preferredVersion": vs[0]}


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_entry(g, vs) for g, vs in groups().items() if g]}


def api_group(g: str) -> dict[str, Any] | None:
    vs = groups().get(g)
    if not g or not vs:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(g, vs)}


def resource_list(g: str, v: str) -> dict[str, Any] | None:
    rs = [r for r in RESOURCES if r.group == g and r.version == v]
    if not rs:
        return None
    out = []
    for r in rs:
        e: dict[str, Any] = {"name": r.resource, "singularName": r.singular_name, "namespaced": r.namespaced,
                             "kind": r.kind, "verbs": r.verbs}
        if r.short_names:
            e["shortNames"] = r.short_names
        if r.categories:
            e["categories"] = r.categories
        out.append(e)
        for s in r.subresources:
            se: dict[str, Any] = {"name": f"{r.resource}/{s.name}", "singularName": "",
                                  "namespaced": r.namespaced, "kind": s.kind, "verbs": s.verbs}
            if s.group != r.group or s.version != r.version:
                se["group"] = s.group
                se["version"] = s.version
            out.append(se)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{g}/{v}" if g else v,
            "resources": out}


# ------------------------------------------------------------------ OpenAPI v3
def _gv_path(g: str, v: str) -> str:
    return f"api/{v}" if not g else f"apis/{g}/{v}"


_FV_PARAM = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
             "description": "Ignore, Warn or Strict: how to treat unknown or duplicate fields."}
_FM_PARAM = {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
_DRY_PARAM = {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def openapi_gv(g: str, v: str) -> dict[str, Any] | None:
    rs = [r for r in RESOURCES if r.group == g and r.version == v]
    if not rs:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    prefix = "/" + _gv_path(g, v)
    for r in rs:
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        model = schemamod.root_model(r.group, r.kind)
        if model is not None:
            schemas.update(schemamod.openapi_schemas([model]))
        schema_ref = {"$ref": f"#/components/schemas/{schemamod.schema_name(model)}"} if model else {}
        if model is None and (published := crd.openapi_schema(r)) is not None:  # custom resources
            schemas[published[0]] = published[1]
            schema_ref = {"$ref": f"#/components/schemas/{published[0]}"}
        ref = {"content": {"application/json": {"schema": schema_ref}}}

        def op(action: str, gvk: dict[str, str] = gvk, ref: dict[str, Any] = ref) -> dict[str, Any]:
            return {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
                    "parameters": [_FV_PARAM, _FM_PARAM, _DRY_PARAM],
                    "responses": {"200": {"description": "OK", **ref}}}

        coll = f"{prefix}/namespaces/{{namespace}}/{r.resource}" if r.namespaced else f"{prefix}/{r.resource}"
        paths[coll] = {"post": op("post")}
        if "get" in r.verbs:
            paths[coll]["get"] = {"x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk,
                                  "responses": {"200": {"description": "OK"}}}
            item = coll + "/{name}"
            paths[item] = {"get": {"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk,
                                   "responses": {"200": {"description": "OK", **ref}}},
                           "put": op("put"), "patch": op("patch"),
                           "delete": {"x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk,
                                      "responses": {"200": {"description": "OK"}}}}
            for s in r.subresources:
                if "update" in s.verbs and s.kind == r.kind:
                    paths[f"{item}/{s.name}"] = {"put": op("put"), "patch": op("patch")}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths,
            "components": {"schemas": schemas}}


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()


def openapi_root() -> dict[str, Any]:
    paths = {}
    for g, versions in groups().items():
        for v in versions:
            doc = openapi_gv(g, v)
            if doc is not None:
                paths[_gv_path(g, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={_hash(doc)}"}
    return {"paths": paths}
