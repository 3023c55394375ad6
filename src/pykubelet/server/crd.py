"""CustomResourceDefinitions (``apiextensions.k8s.io/v1``) and the custom resources they serve.

Upstream splits this between the apiextensions-apiserver's CRD strategy (validation, status),
its controllers (NamesAccepted / Established conditions, discovery, finalizer cleanup) and the
``customresource`` registry (per-version handlers with structural pruning, defaulting, schema
validation, status/scale subresources and a table convertor for additionalPrinterColumns).
Here one :class:`CustomResources` object per API server does the same synchronously:

* A CRD write is validated (a subset of ``ValidateCustomResourceDefinition``: name =
  plural.group, group with a dot, scope, one storage version, a structural schema per served
  version) and gets its status at once (acceptedNames, NamesAccepted, Established,
  storedVersions) -- upstream reaches the same state a few milliseconds later through its
  naming and establishing controllers, so clients waiting for ``condition=Established`` see
  no difference.  Names that clash with a resource already served in the group are not
  accepted (``NamesAccepted=False``, reason ``PluralConflict``) and nothing is served.
* Every served version becomes a :class:`~pykubelet.server.resources.ResourceInfo` added to
  the dynamic part of the resource registry (``resources.add_resource``), so discovery (legacy
  and aggregated, with short names and categories), OpenAPI, routing, tables, watch and
  namespace cleanup pick it up with no further code.  All versions share one storage key
  (``plural.group``); conversion strategy ``None`` only rewrites ``apiVersion``, which
  :meth:`CustomResources.present` does on the way out.
* Writes to a custom resource are pruned (unknown fields dropped unless
  ``x-kubernetes-preserve-unknown-fields``; reported per ``fieldValidation`` as upstream's
  strict decoder does), defaulted (``default`` of absent properties) and validated with the
  ``jsonschema`` library (Draft 4 semantics, which OpenAPI v3.0 schemas follow; ``nullable``
  and ``x-kubernetes-int-or-string`` are translated first).  Errors read as upstream's
  (``CronTab.stable.example.com "x" is invalid: spec.replicas: Invalid value: "string":
  spec.replicas in body must be of type integer: "string"``).  CEL rules
  (``x-kubernetes-validations``) are not evaluated: a CRD carrying them is accepted with a
  warning saying so, never silently.
* ``status`` subresource: status is dropped on create and on main-resource updates (the
  generic registry's status split does the latter); ``scale``: an autoscaling/v1 Scale read
  from / written to ``specReplicasPath``/``statusReplicasPath``/``labelSelectorPath``.
* Deleting a CRD deletes all its objects (upstream's ``customresourcecleanup`` finalizer
  does this before the CRD goes) and stops serving it.  CRDs are stored objects, so
  :meth:`CustomResources.load` re-registers them when the server starts.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema
from jsonpath_ng.exceptions import JsonPathParserError  # type: ignore[import-untyped]
from jsonpath_ng.ext import parse as jsonpath_parse  # type: ignore[import-untyped]

from pykubelet.server import resources, schema, tables
from pykubelet.server.resources import ResourceInfo, SubresourceInfo

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]

GROUP = "apiextensions.k8s.io"
CRD_RESOURCE = "customresourcedefinitions"
CRD_KEY = f"{CRD_RESOURCE}.{GROUP}"
_GET_UPDATE_PATCH = ["get", "patch", "update"]
_ALWAYS_KEPT = ("apiVersion", "kind", "metadata")


class SchemaInvalid(ValueError):
    """A custom resource does not match its schema; ``errors`` as (field, message)."""

    def __init__(self, errors: FieldErrors) -> None:
        super().__init__("; ".join(f"{f}: {m}" for f, m in errors))
        self.errors = errors


# ------------------------------------------------------------------ version ordering
_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(v: str) -> tuple[int, int, int, str]:
    """Upstream's kube-aware version order (v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > other),
    as a sort key (smaller sorts first)."""
    m = _KUBE_VERSION.match(v)
    if not m:
        return (3, 0, 0, v)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, v)


# ------------------------------------------------------------------ schema helpers
def _jsonschema(s: Any) -> Any:
    """An OpenAPI v3.0 (Kubernetes structural) schema as a Draft 4 JSON schema."""
    if isinstance(s, list):
        return [_jsonschema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k.startswith("x-kubernetes-") or k in ("default", "example", "externalDocs", "description", "format"):
            continue
        if k in ("properties", "patternProperties", "definitions"):
            out[k] = {pk: _jsonschema(pv) for pk, pv in v.items()} if isinstance(v, dict) else v
        elif k in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[k] = _jsonschema(v)
        else:
            out[k] = v
    if s.get("nullable") is True:
        out.pop("nullable", None)
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    else:
        out.pop("nullable", None)
    return out


def _go_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _go_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _render(err: jsonschema.ValidationError) -> list[tuple[str, str]]:
    """One jsonschema error as the field error(s) kube-openapi's validator + apiextensions report."""
    path = _path(err.absolute_path)
    inst, kw, val = err.instance, err.validator, err.validator_value
    where = path or "<root>"
    if kw == "type":
        want = val if isinstance(val, str) else ", ".join(t for t in val if t != "null")
        got = _go_type(inst)
        return [(path, f'Invalid value: "{got}": {where} in body must be of type {want}: "{got}"')]
    if kw == "required":
        return [(f"{path}.{r}" if path else r, "Required value") for r in val if isinstance(inst, dict) and r not in inst]
    if kw == "enum":
        allowed = ", ".join(_go_value(x) for x in val)
        return [(path, f"Unsupported value: {_go_value(inst)}: supported values: {allowed}")]
    if kw in ("minimum", "maximum"):
        excl = err.schema.get("exclusiveMinimum" if kw == "minimum" else "exclusiveMaximum") is True
        rel = ("greater than" if kw == "minimum" else "less than") + ("" if excl else " or equal to")
        return [(path, f"Invalid value: {_go_value(inst)}: {where} in body should be {rel} {_num(val)}")]
    if kw == "pattern":
        return [(path, f"Invalid value: {_go_value(inst)}: {where} in body should match '{val}'")]
    if kw == "maxLength":
        return [(path, f"Too long: may not be more than {val} bytes")]
    if kw == "minLength":
        return [(path, f"Invalid value: {_go_value(inst)}: {where} in body should be at least {val} chars long")]
    if kw == "maxItems":
        return [(path, f"Too many: {len(inst)}: must have at most {val} items")]
    if kw == "minItems":
        return [(path, f"Invalid value: {len(inst)}: {where} in body should have at least {val} items")]
    if kw == "uniqueItems":
        return [(path, f"Duplicate value: {_go_value(inst)}")]
    if kw == "maxProperties":
        return [(path, f"Too many: {len(inst)}: must have at most {val} items")]
    if kw == "minProperties":
        return [(path, f"Invalid value: {len(inst)}: {where} in body should have at least {val} properties")]
    if kw == "multipleOf":
        return [(path, f"Invalid value: {_go_value(inst)}: {where} in body should be a multiple of {_num(val)}")]
    return [(path, f"Invalid value: {_go_value(inst)}: {err.message}")]


def prune(obj: Any, schema: Obj | None, path: str = "", *, root: bool = False) -> list[str]:
    """Drop fields the structural schema does not specify (upstream's ``structuralpruning``);
    returns the dropped paths.  ``x-kubernetes-preserve-unknown-fields`` keeps unknown fields
    (while still pruning inside specified ones), ``x-kubernetes-embedded-resource`` keeps
    apiVersion/kind/metadata, and the root always keeps them."""
    if schema is None or schema.get("x-kubernetes-int-or-string"):
        return []
    dropped: list[str] = []
    if isinstance(obj, dict):
        props: Obj = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        keep = _ALWAYS_KEPT if root or schema.get("x-kubernetes-embedded-resource") else ()
        for k in list(obj):
            sub = f"{path}.{k}" if path else k
            if k in props:
                dropped += prune(obj[k], props[k], sub)
            elif isinstance(addl, dict):
                dropped += prune(obj[k], addl, sub)
            elif k in keep or preserve or addl is True:
                continue
            else:
                del obj[k]
                dropped.append(sub)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += prune(item, schema["items"], f"{path}[{i}]")
    return dropped


def apply_defaults(obj: Any, schema: Obj | None) -> None:
    """Set the ``default`` of every absent property whose parent object exists (upstream's
    structural defaulting), recursing into properties, additionalProperties and items."""
    if schema is None:
        return
    if isinstance(obj, dict):
        for k, ps in (schema.get("properties") or {}).items():
            if k not in obj and isinstance(ps, dict) and "default" in ps:
                obj[k] = copy.deepcopy(ps["default"])
            if k in obj:
                apply_defaults(obj[k], ps)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for k, v in obj.items():
                if k not in (schema.get("properties") or {}):
                    apply_defaults(v, addl)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_defaults(item, schema["items"])


def structural_errors(schema: Any, path: str, *, top: bool = True) -> FieldErrors:
    """The structural-schema rule most often broken: every specified field has a ``type``
    (unless int-or-string or preserve-unknown-fields); plus a Draft 4 meta-schema check."""
    errs: FieldErrors = []
    if not isinstance(schema, dict):
        return [(path, "Invalid value: must be an object")]
    if not schema.get("type") and not schema.get("x-kubernetes-int-or-string") and \
            not schema.get("x-kubernetes-preserve-unknown-fields"):
        errs.append((f"{path}.type", "Required value: must not be empty for specified object fields" if not top
                     else "Required value: must not be empty at the root"))
    for k, v in (schema.get("properties") or {}).items():
        errs += structural_errors(v, f"{path}.properties[{k}]", top=False)
    if isinstance(schema.get("items"), dict):
        errs += structural_errors(schema["items"], f"{path}.items", top=False)
    if isinstance(schema.get("additionalProperties"), dict):
        errs += structural_errors(schema["additionalProperties"], f"{path}.additionalProperties", top=False)
    if top and not errs:
        try:
            jsonschema.Draft4Validator.check_schema(_jsonschema(schema))
        except jsonschema.SchemaError as e:
            errs.append((path, f"Invalid value: {_path(e.absolute_path) or 'schema'}: {e.message}"))
    return errs


def _has_cel(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "x-kubernetes-validations" in schema or any(_has_cel(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_cel(v) for v in schema)
    return False


def _simple_path(obj: Obj, path: str) -> Any:
    """The value at a ``.a.b.c`` path (the only form scale subresource paths may take)."""
    cur: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _set_simple_path(obj: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    cur = obj
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = value


# ------------------------------------------------------------------ CRD object
def _names(crd: Obj) -> Obj:
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    kind = str(names.get("kind") or "")
    names.setdefault("singular", kind.lower())
    names.setdefault("listKind", kind + "List" if kind else "")
    return names


def default_crd(crd: Obj) -> None:
    """SetDefaults_CustomResourceDefinition: singular, listKind, conversion strategy None."""
    spec = crd.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    conv = spec.setdefault("conversion", {"strategy": "None"})
    if isinstance(conv, dict):
        conv.setdefault("strategy", "None")


def validate_crd(crd: Obj, old: Obj | None) -> FieldErrors:
    """A subset of upstream's ``ValidateCustomResourceDefinition``, with its messages."""
    errs: FieldErrors = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    group = spec.get("group") or ""
    names: Obj = spec["names"] if isinstance(spec.get("names"), dict) else {}
    plural = names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name") or ""
    if name != f"{plural}.{group}":
        errs.append(("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    if not group:
        errs.append(("spec.group", "Required value"))
    elif "." not in group:
        errs.append(("spec.group", f'Invalid value: "{group}": should be a domain with at least one dot'))
    for f in ("plural", "kind"):
        if not names.get(f):
            errs.append((f"spec.names.{f}", "Required value"))
    if plural and plural != plural.lower():
        errs.append(("spec.names.plural", f'Invalid value: "{plural}": a lowercase RFC 1123 label must consist '
                     "of lower case alphanumeric characters or '-'"))
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        errs.append(("spec.scope", f'Unsupported value: {_go_value(scope or "")}: supported values: "Cluster", '
                     '"Namespaced"'))
    if old is not None and scope != (old.get("spec") or {}).get("scope"):
        errs.append(("spec.scope", f'Invalid value: "{scope}": field is immutable'))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errs.append(("spec.versions", "Invalid value: null: must have exactly one version marked as storage version"))
        return errs
    if sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        errs.append(("spec.versions", "Invalid value: " + json.dumps(versions, separators=(",", ":"))[:200] +
                     ": must have exactly one version marked as storage version"))
    seen: set[str] = set()
    for i, v in enumerate(versions):
        if not isinstance(v, dict):
            errs.append((f"spec.versions[{i}]", "Invalid value: must be an object"))
            continue
        vname = v.get("name") or ""
        if not vname:
            errs.append((f"spec.versions[{i}].name", "Required value"))
        elif vname in seen:
            errs.append((f"spec.versions[{i}].name", f'Duplicate value: "{vname}"'))
        seen.add(vname)
        schema = (v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v.get("schema"), dict) else None
        if schema is None:
            errs.append((f"spec.versions[{i}].schema.openAPIV3Schema", "Required value: schemas are required"))
        else:
            errs += structural_errors(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
        scale = (v.get("subresources") or {}).get("scale") if isinstance(v.get("subresources"), dict) else None
        if isinstance(scale, dict):
            for p in ("specReplicasPath", "statusReplicasPath"):
                if not isinstance(scale.get(p), str) or not scale[p].startswith("."):
                    errs.append((f"spec.versions[{i}].subresources.scale.{p}",
                                 "Invalid value: should be a json path starting with ."))
        for j, c in enumerate(v.get("additionalPrinterColumns") or []):
            cp = f"spec.versions[{i}].additionalPrinterColumns[{j}]"
            if not isinstance(c, dict) or not c.get("name"):
                errs.append((f"{cp}.name", "Required value"))
                continue
            if c.get("type") not in ("integer", "number", "string", "boolean", "date"):
                errs.append((f"{cp}.type", f'Unsupported value: {_go_value(c.get("type") or "")}: supported values: '
                             '"boolean", "date", "integer", "number", "string"'))
            if not c.get("jsonPath"):
                errs.append((f"{cp}.jsonPath", "Required value"))
    return errs


def crd_warnings(crd: Obj) -> list[str]:
    """What a CRD asks for that this server does not do (accepted, but never silently)."""
    out = []
    conv = (crd.get("spec") or {}).get("conversion")
    if isinstance(conv, dict) and conv.get("strategy") not in (None, "None"):
        out.append(f"spec.conversion.strategy: {conv.get('strategy')} conversion is not supported by this API "
                   "server: objects are served in every version with only apiVersion rewritten (strategy None)")
    for v in (crd.get("spec") or {}).get("versions") or []:
        if isinstance(v, dict) and _has_cel((v.get("schema") or {}).get("openAPIV3Schema")):
            out.append(f"spec.versions[{v.get('name')}].schema.openAPIV3Schema: x-kubernetes-validations (CEL) "
                       "rules are not evaluated by this API server")
    return out


def _condition(typ: str, status: str, reason: str, message: str, now: str, old: list[Obj]) -> Obj:
    prev = next((c for c in old if c.get("type") == typ), None)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == status and \
        prev.get("lastTransitionTime") else now
    return {"type": typ, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}


# ------------------------------------------------------------------ published schemas
# (group, version, plural) -> OpenAPI v3 component of a served custom resource, process-wide like
# the resource registry it accompanies; discovery.openapi_gv publishes it (kubectl explain).
_OPENAPI: dict[tuple[str, str, str], tuple[str, Obj]] = {}


def openapi_schema(ri: ResourceInfo) -> tuple[str, Obj] | None:
    """(component name, schema tagged with its GVK) of a served custom resource, as upstream's
    CRD OpenAPI builder names it (reversed group, version, kind)."""
    return _OPENAPI.get((ri.group, ri.version, ri.resource))


def published_schemas() -> list[tuple[str, Obj]]:
    return list(_OPENAPI.values())


def _published(ri: ResourceInfo, schema: Obj | None) -> tuple[str, Obj]:
    out: Obj = copy.deepcopy(schema) if schema else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props: Obj = out.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string", "description": "APIVersion defines the versioned schema "
                                    "of this representation of an object."})
    props.setdefault("kind", {"type": "string", "description": "Kind is a string value representing the REST "
                              "resource this object represents."})
    props.setdefault("metadata", {"type": "object", "description": "Standard object's metadata."})
    out["x-kubernetes-group-version-kind"] = [{"group": ri.group, "kind": ri.kind, "version": ri.version}]
    name = ".".join(reversed(ri.group.split("."))) + f".{ri.version}.{ri.kind}"
    return name, out


# ------------------------------------------------------------------ served versions
@dataclass
class ServedVersion:
    """What serving one version of a CRD needs."""

    crd_name: str
    ri: ResourceInfo
    schema: Obj | None
    validator: jsonschema.Draft4Validator | None
    columns: list[Obj] = field(default_factory=list)
    scale: Obj | None = None
    status: bool = False


def _column_def(c: Obj) -> Obj:
    typ = c.get("type", "string")
    return {"name": c.get("name", ""), "type": "string" if typ == "date" else typ, "format": c.get("format", ""),
            "description": c.get("description", ""), "priority": int(c.get("priority") or 0)}


def _cell(typ: str, value: Any, now: dt.datetime) -> Any:
    if value is None:
        return None
    if typ == "date":
        t = tables.parse_time(value)
        return tables.since(value, now) if t is not None else str(value)
    if typ == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if typ == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if typ == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class CustomResources:
    """The CRDs one API server serves: registration into the resource registry, and the
    per-version write path (prune, default, validate), presentation, tables and scale."""

    def __init__(self) -> None:
        self._by_crd: dict[str, list[ServedVersion]] = {}
        self._by_gvr: dict[tuple[str, str, str], ServedVersion] = {}

    # -------------------------------------------------------------- registration
    def load(self, crds: list[Obj]) -> None:
        """Serve every stored, established CRD (server start)."""
        for crd in crds:
            if not (crd.get("metadata") or {}).get("deletionTimestamp"):
                self.register(crd)

    def names_conflict(self, crd: Obj) -> tuple[str, str] | None:
        """(reason, message) why ``crd``'s names cannot be accepted, or None (upstream's naming
        controller compares them with every resource served in the group)."""
        spec = crd.get("spec") or {}
        group, names = spec.get("group"), _names(crd)
        me = (crd.get("metadata") or {}).get("name")
        for r in resources.RESOURCES:
            if r.group != group:
                continue
            owner = self._by_gvr.get((r.group, r.version, r.resource))
            if owner is not None and owner.crd_name == me:
                continue
            if r.resource == names.get("plural"):
                return "PluralConflict", f'"{r.resource}" is already in use'
            if names.get("singular") and r.singular_name == names.get("singular"):
                return "SingularConflict", f'"{r.singular_name}" is already in use'
            if r.kind == names.get("kind"):
                return "KindConflict", f'"{r.kind}" is already in use'
        return None

    def status_for(self, crd: Obj, old_status: Obj | None) -> Obj:
        """The status upstream's controllers settle on for ``crd``."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        old_status = old_status or {}
        old_conds = [c for c in old_status.get("conditions") or [] if isinstance(c, dict)]
        conflict = self.names_conflict(crd)
        stored = list(old_status.get("storedVersions") or [])
        for v in (crd.get("spec") or {}).get("versions") or []:
            if isinstance(v, dict) and v.get("storage") and v.get("name") not in stored:
                stored.append(v.get("name"))
        if conflict:
            conds = [_condition("NamesAccepted", "False", conflict[0], conflict[1], now, old_conds),
                     _condition("Established", "False", "NotAccepted", "not all names are accepted", now, old_conds)]
            accepted = old_status.get("acceptedNames") or {"plural": "", "kind": ""}
        else:
            conds = [_condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", now, old_conds),
                     _condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted",
                                now, old_conds)]
            accepted = _names(crd)
        return {"conditions": conds, "acceptedNames": accepted, "storedVersions": stored}

    def register(self, crd: Obj) -> None:
        """(Re)serve ``crd``'s served versions, if its names are accepted."""
        name = (crd.get("metadata") or {}).get("name") or ""
        self.unregister(name)
        conds = {c.get("type"): c.get("status") for c in (crd.get("status") or {}).get("conditions") or []}
        if conds.get("Established") != "True" or self.names_conflict(crd):
            return
        spec = crd.get("spec") or {}
        group, names = str(spec.get("group")), _names(crd)
        versions = sorted((v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("served")),
                          key=lambda v: version_priority(str(v.get("name"))))
        served: list[ServedVersion] = []
        for v in versions:
            subs_spec = v.get("subresources") or {}
            subs: list[SubresourceInfo] = []
            if "status" in subs_spec:
                subs.append(SubresourceInfo("status", names["kind"], _GET_UPDATE_PATCH, group=group, version=v["name"]))
            if isinstance(subs_spec.get("scale"), dict):
                subs.append(SubresourceInfo("scale", "Scale", _GET_UPDATE_PATCH, group="autoscaling"))
            ri = ResourceInfo(group, str(v["name"]), str(names["plural"]), str(names["kind"]),
                              spec.get("scope") == "Namespaced", list(names.get("shortNames") or []),
                              singular=str(names["singular"]), categories=list(names.get("categories") or []),
                              subresources=subs, storage=f"{names['plural']}.{group}")
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            validator = jsonschema.Draft4Validator(_jsonschema(schema)) if isinstance(schema, dict) else None
            sv = ServedVersion(name, ri, schema if isinstance(schema, dict) else None, validator,
                               [c for c in v.get("additionalPrinterColumns") or [] if isinstance(c, dict)],
                               subs_spec.get("scale") if isinstance(subs_spec.get("scale"), dict) else None,
                               "status" in subs_spec)
            served.append(sv)
            self._by_gvr[(group, ri.version, ri.resource)] = sv
            _OPENAPI[(group, ri.version, ri.resource)] = _published(ri, sv.schema)
            resources.add_resource(ri)
        self._by_crd[name] = served

    def unregister(self, name: str) -> ResourceInfo | None:
        """Stop serving CRD ``name``; returns one of its ResourceInfos (for its storage key)."""
        out = None
        for sv in self._by_crd.pop(name, []):
            self._by_gvr.pop((sv.ri.group, sv.ri.version, sv.ri.resource), None)
            _OPENAPI.pop((sv.ri.group, sv.ri.version, sv.ri.resource), None)
            resources.remove_resource(sv.ri.group, sv.ri.version, sv.ri.resource)
            out = sv.ri
        return out

    def close(self) -> None:
        """Stop serving every CRD (the registry is process-global; another server may follow)."""
        for name in list(self._by_crd):
            self.unregister(name)

    def served(self, ri: ResourceInfo) -> ServedVersion | None:
        sv = self._by_gvr.get((ri.group, ri.version, ri.resource))
        return sv if sv is not None and sv.ri is ri else None

    def served_kind(self, group: str, version: str, kind: str) -> ServedVersion | None:
        return next((sv for (g, v, _), sv in self._by_gvr.items() if g == group and v == version and sv.ri.kind == kind),
                    None)

    @staticmethod
    def decode(sv: ServedVersion, obj: Obj) -> schema.Decoded:
        """The body pruned to its schema, plus the dropped (unknown) field paths, which the
        registry reports per ``fieldValidation`` as it does for built-in kinds."""
        out = copy.deepcopy(obj)
        return schema.Decoded(out, prune(out, sv.schema, root=True))

    def admit_write(self, ri: ResourceInfo, obj: Obj, old: Obj | None) -> FieldErrors:
        """The registry's validation hook: CRD objects get defaults, validation and their
        status; custom resources are pruned, defaulted and schema-validated."""
        if ri.key == CRD_KEY:
            default_crd(obj)
            errs = validate_crd(obj, old)
            if not errs:
                obj["status"] = self.status_for(obj, (old or {}).get("status"))
            return errs
        sv = self.served(ri)
        if sv is None:
            return []
        try:
            self.admit(sv, obj, creating=old is None)
        except SchemaInvalid as e:
            return e.errors
        return []

    def after_write(self, ri: ResourceInfo, stored: Obj) -> None:
        """Serve a CRD as soon as it is stored (create/update)."""
        if ri.key == CRD_KEY:
            self.register(stored)

    # -------------------------------------------------------------- custom resource writes
    def admit(self, sv: ServedVersion, obj: Obj, *, creating: bool) -> list[str]:
        """Prune, default and validate a custom resource about to be stored; returns the pruned
        paths (unknown fields).  Raises :class:`SchemaInvalid`."""
        if creating and sv.status:
            obj.pop("status", None)
        if creating:
            obj.setdefault("metadata", {})["generation"] = 1
        dropped = prune(obj, sv.schema, root=True)
        apply_defaults(obj, sv.schema)
        if sv.validator is not None:
            errs: FieldErrors = []
            body = {k: v for k, v in obj.items() if k != "metadata"}
            for e in sorted(sv.validator.iter_errors(body), key=lambda e: _path(e.absolute_path)):
                errs += _render(e)
            if errs:
                raise SchemaInvalid(errs)
        return dropped

    def present(self, sv: ServedVersion, obj: Obj) -> Obj:
        """Conversion strategy None: the stored object with the requested apiVersion."""
        if obj.get("apiVersion") == sv.ri.api_version and obj.get("kind") == sv.ri.kind:
            return obj
        return {**obj, "apiVersion": sv.ri.api_version, "kind": sv.ri.kind}

    # -------------------------------------------------------------- tables
    def table(self, sv: ServedVersion, objs: list[Obj], now: dt.datetime) -> Obj:
        """additionalPrinterColumns (JSONPath, as upstream's table convertor); Name + Age when
        the version declares none."""
        if not sv.columns:
            t = tables.to_table("generic", objs, now=now)
            return t
        cols = [tables.NAME_COL] + [_column_def(c) for c in sv.columns]
        paths: list[Any] = []
        for c in sv.columns:
            try:
                paths.append(jsonpath_parse("$" + str(c.get("jsonPath", ""))))
            except (JsonPathParserError, Exception):  # an unparsable path prints empty cells
                paths.append(None)
        rows = []
        for o in objs:
            cells: list[Any] = [(o.get("metadata") or {}).get("name", "")]
            for c, p in zip(sv.columns, paths, strict=True):
                found = [m.value for m in p.find(o)] if p is not None else []
                cells.append(_cell(str(c.get("type", "string")), found[0] if found else None, now))
            rows.append({"cells": cells, "object": tables.partial_object_metadata(o)})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": cols,
                "rows": rows}

    # -------------------------------------------------------------- scale
    @staticmethod
    def to_scale(sv: ServedVersion, obj: Obj) -> Obj:
        sc = sv.scale or {}
        meta = obj.get("metadata") or {}
        status: Obj = {"replicas": int(_simple_path(obj, sc.get("statusReplicasPath", ".status.replicas")) or 0)}
        if sc.get("labelSelectorPath"):
            sel = _simple_path(obj, sc["labelSelectorPath"])
            if isinstance(sel, str) and sel:
                status["selector"] = sel
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": int(_simple_path(obj, sc.get("specReplicasPath", ".spec.replicas")) or 0)},
                "status": status}

    @staticmethod
    def set_replicas(sv: ServedVersion, obj: Obj, replicas: int) -> None:
        _set_simple_path(obj, (sv.scale or {}).get("specReplicasPath", ".spec.replicas"), replicas)


class _Store(Protocol):
    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]: ...

    def delete(self, resource: str, namespace: str, name: str) -> Obj: ...


def cleanup(store: _Store, crds: CustomResources, crd: Obj) -> int:
    """Deleting a CRD: stop serving it and delete every object of it (what upstream's
    ``customresourcecleanup.apiextensions.k8s.io`` finalizer does); returns how many."""
    name = (crd.get("metadata") or {}).get("name") or ""
    crds.unregister(name)
    spec = crd.get("spec") or {}
    key = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
    n = 0
    for (ns, obj_name), _obj in list(store.iter_raw(key)):
        store.delete(key, ns, obj_name)
        n += 1
    return n
