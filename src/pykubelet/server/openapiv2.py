"""OpenAPI v2 (``/openapi/v2``, legacy ``/swagger-2.0.0.pb-v1``), derived from the v3 documents.

kubectl 1.27 and 1.28 never ask for OpenAPI v3: before ``create``/``apply`` they fetch
``/openapi/v2`` with ``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` (then
``/swagger-2.0.0.pb-v1``) and fail with ``NotFound`` when neither exists.  They decode the body
as gnostic's ``openapi.v2.Document`` protobuf whatever the Content-Type says, and use it for two
things: the query-parameter verifier (a PATCH operation tagged with the kind's
``x-kubernetes-group-version-kind`` that lists ``fieldValidation`` means "the server validates":
kubectl then sends ``fieldValidation=Strict`` and skips its own validation) and, otherwise,
client-side validation against definitions tagged with a GVK.

So the document here is the v3 one (:func:`pykubelet.server.discovery.openapi_gv`, one source
for both) rewritten as Swagger 2.0: the same paths and operations with their GVK and query
parameters, and the component schemas as ``definitions`` -- without GVK tags, as in v3, so
kubectl never validates against these partial schemas and leaves validation to the server.
JSON for clients that ask for JSON; protobuf for the rest.

The protobuf is written with a small field writer over gnostic's ``OpenAPIv2.proto`` field
numbers (only the messages used: Document, Info, Paths, PathItem, Operation, parameters,
responses, Schema, NamedAny/Any): the document is only ever *encoded* here, so there is no
parsing to get wrong, and a generated module for the ~60 messages of that proto (plus a protoc
step) would be far larger than the dozen messages written.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from pykubelet.server import crd, discovery, resources
from pykubelet.server.resources import groups

# kubectl asks with the "@" spelling, which Go's mime parser rejects in a response Content-Type;
# kube-openapi answers with the dotted one.
PROTO_V2 = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_OPS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _v2_schema(s: Any) -> Any:
    """A v3 component schema as a v2 definition: $refs re-pointed, oneOf/anyOf (no v2
    equivalent) folded into the Kubernetes v2 spellings."""
    if isinstance(s, list):
        return [_v2_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k == "$ref" and isinstance(v, str):
            out[k] = v.replace("#/components/schemas/", "#/definitions/")
        elif k in ("oneOf", "anyOf"):
            continue
        elif k == "properties" and isinstance(v, dict):
            out[k] = {pk: _v2_schema(pv) for pk, pv in v.items()}
        else:
            out[k] = _v2_schema(v)
    if s.get("x-kubernetes-int-or-string"):
        out.update({"type": "string", "format": "int-or-string"})
    elif ("oneOf" in s or "anyOf" in s) and "type" not in out:
        out["type"] = "string"  # resource.Quantity is published as a string
    return out


def _v2_param(p: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in p.items() if k != "schema"}
    out.update(p.get("schema") or {})
    return out


def _v2_op(op: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in op.items() if k not in ("parameters", "responses")}
    if op.get("parameters"):
        out["parameters"] = [_v2_param(p) for p in op["parameters"]]
    responses: dict[str, Any] = {}
    for code, r in (op.get("responses") or {}).items():
        resp: dict[str, Any] = {"description": r.get("description", "")}
        schema = ((r.get("content") or {}).get("application/json") or {}).get("schema")
        if schema:
            resp["schema"] = _v2_schema(schema)
        responses[code] = resp
    out["responses"] = responses
    return out


def document() -> dict[str, Any]:
    """The whole Swagger 2.0 document, from every group-version's v3 document."""
    paths: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for g, versions in groups().items():
        for v in versions:
            doc = discovery.openapi_gv(g, v)
            if doc is None:
                continue
            for path, item in doc["paths"].items():
                paths[path] = {verb: _v2_op(op) for verb, op in item.items()}
            for name, s in (doc.get("components") or {}).get("schemas", {}).items():
                definitions[name] = _v2_schema(s)
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths,
            "definitions": definitions}


# ------------------------------------------------------------------ protobuf writer
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _s(num: int, value: Any) -> bytes:
    return _ld(num, str(value).encode()) if value not in (None, "") else b""


def _b(num: int, value: Any) -> bytes:
    return _varint(num << 3) + b"\x01" if value is True else b""


def _i(num: int, value: Any) -> bytes:
    return _varint(num << 3) + _varint(int(value)) if isinstance(value, int) and not isinstance(value, bool) else b""


def _d(num: int, value: Any) -> bytes:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _varint(num << 3 | 1) + struct.pack("<d", float(value))
    return b""


def _yaml(value: Any) -> str:
    """A vendor-extension or default value as the YAML gnostic stores (JSON is YAML)."""
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return "".join(f"{k}: {json.dumps(v)}\n" for k, v in sorted(value.items()))
    return json.dumps(value) + "\n"


def _any(value: Any) -> bytes:
    return _s(2, _yaml(value))  # Any{yaml=2}


def _named_any(name: str, value: Any) -> bytes:
    return _s(1, name) + _ld(2, _any(value))


def _extensions(num: int, obj: dict[str, Any]) -> bytes:
    return b"".join(_ld(num, _named_any(k, v)) for k, v in obj.items() if k.startswith("x-"))


def _schema(s: dict[str, Any]) -> bytes:
    out = _s(1, s.get("$ref")) + _s(2, s.get("format")) + _s(3, s.get("title")) + _s(4, s.get("description"))
    if "default" in s:
        out += _ld(5, _any(s["default"]))
    out += _d(6, s.get("multipleOf")) + _d(7, s.get("maximum")) + _b(8, s.get("exclusiveMaximum"))
    out += _d(9, s.get("minimum")) + _b(10, s.get("exclusiveMinimum"))
    out += _i(11, s.get("maxLength")) + _i(12, s.get("minLength")) + _s(13, s.get("pattern"))
    out += _i(14, s.get("maxItems")) + _i(15, s.get("minItems")) + _b(16, s.get("uniqueItems"))
    out += _i(17, s.get("maxProperties")) + _i(18, s.get("minProperties"))
    out += b"".join(_s(19, r) for r in s.get("required") or [])
    out += b"".join(_ld(20, _any(e)) for e in s.get("enum") or [])
    addl = s.get("additionalProperties")
    if isinstance(addl, dict):
        out += _ld(21, _ld(1, _schema(addl)))
    elif isinstance(addl, bool):
        out += _ld(21, _varint(2 << 3) + (b"\x01" if addl else b"\x00"))
    typ = s.get("type")
    if typ:
        out += _ld(22, b"".join(_s(1, t) for t in (typ if isinstance(typ, list) else [typ])))
    items = s.get("items")
    if isinstance(items, dict):
        out += _ld(23, _ld(1, _schema(items)))
    out += b"".join(_ld(24, _schema(x)) for x in s.get("allOf") or [] if isinstance(x, dict))
    props = s.get("properties")
    if isinstance(props, dict) and props:
        out += _ld(25, b"".join(_ld(1, _s(1, k) + _ld(2, _schema(v))) for k, v in props.items()))
    return out + _extensions(31, s)


def _parameter(p: dict[str, Any]) -> bytes:
    """ParametersItem{parameter: Parameter{non_body_parameter: NonBodyParameter{query|path...}}}."""
    if p.get("in") == "body":
        body = _s(1, p.get("description")) + _s(2, p.get("name")) + _s(3, "body") + _b(4, p.get("required"))
        body += _ld(5, _schema(p.get("schema") or {}))
        return _ld(1, _ld(1, body))
    sub = _b(1, p.get("required")) + _s(2, p.get("in")) + _s(3, p.get("description")) + _s(4, p.get("name"))
    if p.get("in") == "path":
        sub += _s(5, p.get("type")) + _b(19, p.get("uniqueItems"))
        which = 4
    else:
        sub += _s(6, p.get("type")) + _b(20, p.get("uniqueItems"))
        which = {"header": 1, "formData": 2}.get(str(p.get("in")), 3)
    return _ld(1, _ld(2, _ld(which, sub)))


def _operation(op: dict[str, Any]) -> bytes:
    out = b"".join(_s(1, t) for t in op.get("tags") or []) + _s(3, op.get("description"))
    out += _s(5, op.get("operationId"))
    out += b"".join(_ld(8, _parameter(p)) for p in op.get("parameters") or [])
    responses = b""
    for code, r in (op.get("responses") or {}).items():
        resp = _s(1, r.get("description"))
        if isinstance(r.get("schema"), dict):
            resp += _ld(2, _ld(1, _schema(r["schema"])))
        responses += _ld(1, _s(1, code) + _ld(2, _ld(1, resp)))
    out += _ld(9, responses)
    return out + _extensions(13, op)


def to_protobuf(doc: dict[str, Any]) -> bytes:
    """``doc`` as gnostic's ``openapi.v2.Document``."""
    info = doc.get("info") or {}
    out = _s(1, doc.get("swagger", "2.0")) + _ld(2, _s(1, info.get("title")) + _s(2, info.get("version")))
    paths = b""
    for path, item in (doc.get("paths") or {}).items():
        pi = b"".join(_ld(num, _operation(item[verb])) for verb, num in _OPS.items() if verb in item)
        paths += _ld(2, _s(1, path) + _ld(2, pi))
    out += _ld(8, paths)
    defs = b"".join(_ld(1, _s(1, name) + _ld(2, _schema(s))) for name, s in (doc.get("definitions") or {}).items())
    return out + _ld(9, defs)


_cache: dict[tuple[Any, bool], bytes] = {}


def _fingerprint() -> Any:
    """Changes whenever what the document describes can: the served resources, and the
    published custom-resource schemas (new objects on every CRD registration)."""
    return (tuple((r.group, r.version, r.resource) for r in resources.RESOURCES),
            tuple(id(v[1]) for v in crd.published_schemas()))


def render(accept: str, *, legacy_path: bool = False) -> tuple[bytes, str]:
    """The body and Content-Type for a request with ``accept``: protobuf when asked for (and
    always at the legacy protobuf path), else JSON.  Building the document takes ~0.2 s, so it
    is kept until the resources it describes change."""
    proto = legacy_path or "protobuf" in accept
    key = (_fingerprint(), proto)
    body = _cache.get(key)
    if body is None:
        doc = document()
        body = to_protobuf(doc) if proto else json.dumps(doc, separators=(",", ":")).encode()
        if len(_cache) > 4:
            _cache.clear()
        _cache[key] = body
    return body, PROTO_V2 if proto else "application/json"
