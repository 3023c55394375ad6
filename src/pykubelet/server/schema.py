"""Typed decoding of request bodies: what Go's ``json.Unmarshal`` into the API structs does.

Upstream decodes every body into the Go struct of its kind before anything else runs, so a value
of the wrong JSON type never reaches validation or storage: ``image: 5`` fails with
``json: cannot unmarshal number into Go struct field Container.spec.containers.image of type
string`` (the handler prefixes ``Pod in version "v1" cannot be handled as a Pod: `` and answers
400).  Fields the struct does not know are dropped, and reported per the ``fieldValidation``
query parameter (``unknown field "spec.containers[0].foo"``), as are duplicate keys
(``duplicate field "metadata.name"``).

Where the types come from: :mod:`pykubelet.server.apitypes`, a table generated from the official
``kubernetes`` client's models (their ``openapi_types`` + ``attribute_map`` are the upstream
OpenAPI schema, one model per Go struct) for every kind this server accepts, so the server needs
no copy of the OpenAPI document and no runtime dependency on the client (a test keeps the table
in sync; ``python -m pykubelet.server.schema`` rewrites it).  The generator adds what the client
models cannot say: which ``int`` fields are Go ``int64`` (the rest are ``int32``), which strings
are ``resource.Quantity`` (they also accept JSON numbers and are stored in canonical form, as
upstream's round trip does: ``cpu: 0.5`` reads back ``500m``), which timestamps are
``MicroTime``, and which free-form ``object`` fields are ``intstr.IntOrString``.

Decoding rules followed (encoding/json as used through sigs.k8s.io/json): keys are
case-sensitive; ``null`` is the zero value (dropped; inside a map of strings it is ``""``); the
first type error in document order wins; integers must fit their Go type (``number 1.5`` /
``number 3000000000`` into int32 fail); ``[]byte`` is standard base64; ``metav1.Time`` is an
RFC 3339 string.  The same table renders the OpenAPI v3 component schemas (:func:`openapi_schemas`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pykubelet.common.quantity import QuantityError, canonical
from pykubelet.server import apitypes

# (group, kind) of every body this server decodes -> model name in apitypes.TYPES
ROOTS: dict[tuple[str, str], str] = {
    ("", "Pod"): "V1Pod",
    ("", "Node"): "V1Node",
    ("", "Namespace"): "V1Namespace",
    ("", "ConfigMap"): "V1ConfigMap",
    ("", "Secret"): "V1Secret",
    ("", "ServiceAccount"): "V1ServiceAccount",
    ("", "Service"): "V1Service",
    ("", "Endpoints"): "V1Endpoints",
    ("", "Event"): "CoreV1Event",
    ("events.k8s.io", "Event"): "EventsV1Event",
    ("coordination.k8s.io", "Lease"): "V1Lease",
    ("node.k8s.io", "RuntimeClass"): "V1RuntimeClass",
    ("certificates.k8s.io", "CertificateSigningRequest"): "V1CertificateSigningRequest",
    ("policy", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("batch", "Job"): "V1Job",
    ("batch", "CronJob"): "V1CronJob",
    ("apps", "Deployment"): "V1Deployment",
    ("apps", "ReplicaSet"): "V1ReplicaSet",
    ("apps", "DaemonSet"): "V1DaemonSet",
    ("apps", "StatefulSet"): "V1StatefulSet",
    ("apps", "ControllerRevision"): "V1ControllerRevision",
    ("autoscaling", "Scale"): "V1Scale",
    ("", "PersistentVolume"): "V1PersistentVolume",
    ("", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("storage.k8s.io", "StorageClass"): "V1StorageClass",
    ("", "Binding"): "V1Binding",
    ("policy", "Eviction"): "V1Eviction",
    ("authentication.k8s.io", "TokenRequest"): "AuthenticationV1TokenRequest",
    ("authentication.k8s.io", "TokenReview"): "V1TokenReview",
    ("authentication.k8s.io", "SelfSubjectReview"): "V1SelfSubjectReview",
    ("authorization.k8s.io", "SubjectAccessReview"): "V1SubjectAccessReview",
    ("authorization.k8s.io", "SelfSubjectAccessReview"): "V1SelfSubjectAccessReview",
    ("meta.k8s.io", "DeleteOptions"): "V1DeleteOptions",
}

# Facts the client models do not carry (Go struct name, JSON field).
INT64_FIELDS = {
    ("ObjectMeta", "generation"), ("ObjectMeta", "deletionGracePeriodSeconds"),
    ("PodSpec", "terminationGracePeriodSeconds"), ("PodSpec", "activeDeadlineSeconds"),
    ("PodSecurityContext", "runAsUser"), ("PodSecurityContext", "runAsGroup"),
    ("PodSecurityContext", "fsGroup"), ("PodSecurityContext", "supplementalGroups"),
    ("SecurityContext", "runAsUser"), ("SecurityContext", "runAsGroup"),
    ("Probe", "terminationGracePeriodSeconds"), ("SleepAction", "seconds"),
    ("Toleration", "tolerationSeconds"), ("PodStatus", "observedGeneration"),
    ("PodCondition", "observedGeneration"), ("LinuxContainerUser", "uid"), ("LinuxContainerUser", "gid"),
    ("LinuxContainerUser", "supplementalGroups"), ("ContainerImage", "sizeBytes"),
    ("NodeSwapStatus", "capacity"), ("ServiceAccountTokenProjection", "expirationSeconds"),
    ("TokenRequestSpec", "expirationSeconds"), ("DeleteOptions", "gracePeriodSeconds"),
    ("PodDisruptionBudgetStatus", "observedGeneration"),
    ("DeploymentStatus", "observedGeneration"), ("ReplicaSetStatus", "observedGeneration"),
    ("DaemonSetStatus", "observedGeneration"), ("StatefulSetStatus", "observedGeneration"),
    ("ControllerRevision", "revision"),
    ("JobSpec", "activeDeadlineSeconds"), ("CronJobSpec", "startingDeadlineSeconds"),
    ("JobStatus", "observedGeneration"),
}
QUANTITY_FIELDS = {
    ("ResourceRequirements", "limits"), ("ResourceRequirements", "requests"),
    ("VolumeResourceRequirements", "limits"), ("VolumeResourceRequirements", "requests"),
    ("PodSpec", "overhead"), ("Overhead", "podFixed"), ("NodeStatus", "capacity"),
    ("NodeStatus", "allocatable"), ("ContainerStatus", "allocatedResources"),
    ("PodStatus", "allocatedResources"), ("EmptyDirVolumeSource", "sizeLimit"),
    ("ResourceFieldSelector", "divisor"), ("PersistentVolumeSpec", "capacity"),
    ("PersistentVolumeClaimStatus", "capacity"), ("PersistentVolumeClaimStatus", "allocatedResources"),
}
MICROTIME_FIELDS = {
    ("Event", "eventTime"), ("EventSeries", "lastObservedTime"), ("LeaseSpec", "acquireTime"),
    ("LeaseSpec", "renewTime"),
}

_SCALARS = {"string", "int32", "int64", "bool", "float64", "bytes", "Time", "MicroTime", "Quantity",
            "IntOrString", "any"}
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


@functools.cache
def go_name(model: str) -> str:
    """Go struct name of a client model: ``V1Container`` -> ``Container``,
    ``CoreV1EventSeries`` -> ``EventSeries``."""
    return re.sub(r"^([A-Z][a-z]+)?V\d+((alpha|beta)\d+)?", "", model)


@functools.lru_cache(maxsize=4096)
def _canonical_quantity(s: str) -> str:
    """:func:`~pykubelet.common.quantity.canonical` of a quantity string, memoized: every decoded
    pod carries the same few requests and limits ("100m", "64Mi"), and parsing one through
    ``Decimal`` was 1.6 % of the server's CPU in ``bench_hollow.py``.  A string that does not parse
    raises each time (``lru_cache`` keeps no exceptions)."""
    return canonical(s)


class DecodeError(ValueError):
    """A body that Go's json.Unmarshal would refuse; the message is Go's."""


@dataclass
class Decoded:
    obj: Any
    unknown: list[str] = field(default_factory=list)


@functools.cache
def _parse(t: str) -> tuple[str, Any]:
    """("list", elem) | ("map", elem) | ("scalar", name) | ("model", name)."""
    if t.startswith("[]"):
        return ("list", _parse(t[2:]))
    if t.startswith("map[string]"):
        return ("map", _parse(t[len("map[string]"):]))
    if t in _SCALARS:
        return ("scalar", t)
    return ("model", t)


_STRING = _parse("string")
_TIME = _parse("Time")
_BOOL = _parse("bool")
_ANY = _parse("any")
_INTS = (_parse("int32"), _parse("int64"))


@functools.cache
def _parsed_fields(model: str) -> dict[str, tuple[str, Any]]:
    """A model's fields with their parsed types (:func:`_parse` once per field, not per value)."""
    return {k: _parse(t) for k, t in apitypes.TYPES[model].items()}


def _go_type(t: tuple[str, Any]) -> str:
    kind, arg = t
    if kind == "list":
        return "[]" + _go_type(arg)
    if kind == "map":
        return "map[string]" + _go_type(arg)
    if kind == "model":
        return "v1." + go_name(arg)
    return {"bytes": "[]uint8", "Time": "v1.Time", "MicroTime": "v1.MicroTime", "Quantity": "resource.Quantity",
            "IntOrString": "intstr.IntOrString", "any": "interface {}"}.get(arg, arg)


def _json_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class _Walker:
    def __init__(self) -> None:
        self.unknown: list[str] = []

    def _mismatch(self, v: Any, t: tuple[str, Any], struct: str, gopath: str, number: bool = False) -> DecodeError:
        what = _json_kind(v)
        if number:
            what = f"number {v!r}" if not isinstance(v, float) else f"number {_float_literal(v)}"
        target = f"Go struct field {struct}.{gopath}" if struct else "Go value"
        return DecodeError(f"json: cannot unmarshal {what} into {target} of type {_go_type(t)}")

    def value(self, v: Any, t: tuple[str, Any], struct: str, gopath: str, path: str) -> Any:
        kind, arg = t
        if v is None:
            return None
        if kind == "model":
            if not isinstance(v, dict):
                raise self._mismatch(v, t, struct, gopath)
            return self.model(v, arg, gopath, path)
        if kind == "list":
            if not isinstance(v, list):
                raise self._mismatch(v, t, struct, gopath)
            out = []
            for i, e in enumerate(v):
                d = self.value(e, arg, struct, gopath, f"{path}[{i}]")
                out.append(_zero(arg) if d is None else d)
            return out
        if kind == "map":
            if not isinstance(v, dict):
                raise self._mismatch(v, t, struct, gopath)
            res: dict[str, Any] = {}
            for k, e in v.items():
                d = self.value(e, arg, struct, gopath, f"{path}.{k}")
                res[k] = _zero(arg) if d is None else d
            return res
        return self.scalar(v, t, struct, gopath)

    def scalar(self, v: Any, t: tuple[str, Any], struct: str, gopath: str) -> Any:
        name = t[1]
        if name == "any":
            return v
        if name == "string":
            if not isinstance(v, str):
                raise self._mismatch(v, t, struct, gopath)
            return v
        if name == "bool":
            if not isinstance(v, bool):
                raise self._mismatch(v, t, struct, gopath)
            return v
        if name in _INT_RANGE:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise self._mismatch(v, t, struct, gopath)
            lo, hi = _INT_RANGE[name]
            if isinstance(v, float) or not lo <= v <= hi:
                raise self._mismatch(v, t, struct, gopath, number=True)
            return v
        if name == "float64":
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise self._mismatch(v, t, struct, gopath)
            return v
        if name == "bytes":
            if not isinstance(v, str):
                raise self._mismatch(v, t, struct, gopath)
            _check_base64(v)
            return v
        if name in ("Time", "MicroTime"):
            if not isinstance(v, str):
                raise DecodeError(f"json: cannot unmarshal {_json_kind(v)} into Go value of type string")
            if not _RFC3339.match(v):
                raise DecodeError(f'parsing time "{v}" as "2006-01-02T15:04:05Z07:00": cannot parse "{v}" as "2006"')
            return v
        if name == "Quantity":
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise DecodeError("quantities must match the regular expression "
                                  "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
            try:
                return _canonical_quantity(v.strip()) if isinstance(v, str) else canonical(v)
            except QuantityError as e:
                raise DecodeError(str(e)) from e
        if name == "IntOrString":
            if isinstance(v, str):
                return v
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise DecodeError(f"json: cannot unmarshal {_json_kind(v)} into Go value of type int32")
            lo, hi = _INT_RANGE["int32"]
            if isinstance(v, float) or not lo <= v <= hi:
                lit = _float_literal(v) if isinstance(v, float) else str(v)
                raise DecodeError(f"json: cannot unmarshal number {lit} into Go value of type int32")
            return v
        raise AssertionError(f"unknown scalar {name}")  # pragma: no cover - table is generated

    def model(self, obj: dict[str, Any], model: str, gopath: str, path: str,
              decoded: Mapping[str, Any] | None = None) -> dict[str, Any]:
        fields = _parsed_fields(model)
        struct = go_name(model)
        out: dict[str, Any] = {}
        for k, v in obj.items():
            pt = fields.get(k)
            if pt is None:
                self.unknown.append(f"{path}.{k}" if path else k)
                continue
            if decoded is not None and pt[0] == "model" and type(v) is dict and decoded.get(k) is v:
                out[k] = v  # this very object was decoded before (see decode's ``decoded``)
                continue
            # the common cases without the generic dispatch (and without the field's paths,
            # which only an error or an unknown field below it needs): a string, a boolean, an
            # integer in range, a well-formed time, null, a nested object
            vt = type(v)
            if vt is str and (pt is _STRING or (pt is _TIME and _RFC3339.match(v))):
                out[k] = v
                continue
            if (vt is bool and pt is _BOOL) or (vt is int and pt in _INTS and
                                                _INT_RANGE[pt[1]][0] <= v <= _INT_RANGE[pt[1]][1]):
                out[k] = v
                continue
            if v is None:
                if pt is _ANY:
                    out[k] = None
                continue
            if pt[0] == "model" and type(v) is dict:
                out[k] = self.model(v, pt[1], f"{gopath}.{k}" if gopath else k, f"{path}.{k}" if path else k)
                continue
            d = self.value(v, pt, struct, f"{gopath}.{k}" if gopath else k, f"{path}.{k}" if path else k)
            if d is not None or pt is _ANY:
                out[k] = d
        return out


def _zero(t: tuple[str, Any]) -> Any:
    kind, arg = t
    if kind == "scalar":
        return {"string": "", "int32": 0, "int64": 0, "bool": False, "float64": 0, "bytes": "",
                "Quantity": "0", "IntOrString": 0}.get(arg)
    return None


def _float_literal(v: float) -> str:
    return str(int(v)) + ".0" if v.is_integer() and abs(v) < 1e16 else repr(v)


def _check_base64(s: str) -> None:
    """Go's base64.StdEncoding.Decode (newlines ignored): the first bad byte is reported."""
    stripped = s.replace("\r", "").replace("\n", "")
    m = re.search(r"[^A-Za-z0-9+/=]", stripped)
    if m is not None:
        raise DecodeError(f"illegal base64 data at input byte {m.start()}")
    if not _B64.match(stripped):
        raise DecodeError(f"illegal base64 data at input byte {stripped.index('=')}")
    try:
        base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DecodeError(f"illegal base64 data at input byte {len(stripped) - len(stripped) % 4}") from e


def root_model(group: str, kind: str) -> str | None:
    return ROOTS.get((group, kind))


def decode(obj: dict[str, Any], model: str, *, decoded: Mapping[str, Any] | None = None) -> Decoded:
    """Decode ``obj`` as ``model``: the pruned, normalised object plus the paths of unknown
    fields.  Raises :class:`DecodeError` on the first value of the wrong type.

    ``decoded``: an object of the same model that is itself a decoding result (a stored object).
    A top-level object field of ``obj`` that *is* (identity, not equality) that object's value of
    the field is taken as it is, unwalked and shared: decoding a decoded value gives it back with
    nothing unknown, so only the walk is saved.  A status PATCH merges into the stored pod and
    keeps its ``spec`` as the very same object."""
    w = _Walker()
    out = w.model(obj, model, "", "", decoded)
    return Decoded(out, w.unknown)


def duplicate_paths(obj: Any, dup_ids: dict[int, list[str]], path: str = "") -> list[str]:
    """Paths of the duplicate keys the parser recorded (by ``id`` of the dict holding them)."""
    if not dup_ids:
        return []
    out: list[str] = []
    if isinstance(obj, dict):
        out += [f"{path}.{k}" if path else k for k in dup_ids.get(id(obj), [])]
        for k, v in obj.items():
            out += duplicate_paths(v, dup_ids, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += duplicate_paths(v, dup_ids, f"{path}[{i}]")
    return out


# ------------------------------------------------------------------ OpenAPI v3
def schema_name(model: str) -> str:
    return f"io.pykubelet.{model}"


def _openapi_type(t: tuple[str, Any]) -> dict[str, Any]:
    kind, arg = t
    scalars: dict[str, dict[str, Any]]
    if kind == "list":
        return {"type": "array", "items": _openapi_type(arg)}
    if kind == "map":
        return {"type": "object", "additionalProperties": _openapi_type(arg)}
    if kind == "model":
        return {"$ref": f"#/components/schemas/{schema_name(arg)}"}
    scalars = {
        "string": {"type": "string"},
        "int32": {"type": "integer", "format": "int32"},
        "int64": {"type": "integer", "format": "int64"},
        "bool": {"type": "boolean"},
        "float64": {"type": "number", "format": "double"},
        "bytes": {"type": "string", "format": "byte"},
        "Time": {"type": "string", "format": "date-time"},
        "MicroTime": {"type": "string", "format": "date-time"},
        "Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        "IntOrString": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
    }
    return scalars.get(arg, {})


def openapi_schemas(models: list[str]) -> dict[str, dict[str, Any]]:
    """Component schemas for ``models`` and every model they reference."""
    out: dict[str, dict[str, Any]] = {}
    todo = list(models)
    while todo:
        m = todo.pop()
        if schema_name(m) in out:
            continue
        props = {}
        for f, t in apitypes.TYPES[m].items():
            parsed = _parse(t)
            props[f] = _openapi_type(parsed)
            while parsed[0] in ("list", "map"):
                parsed = parsed[1]
            if parsed[0] == "model":
                todo.append(parsed[1])
        out[schema_name(m)] = {"type": "object", "properties": props}
    return out


# ------------------------------------------------------------------ generator
def generate_types(models_module: Any) -> dict[str, dict[str, str]]:
    """The apitypes table from the official client's models (``kubernetes.client.models``)."""
    out: dict[str, dict[str, str]] = {}
    todo = sorted(set(ROOTS.values()))
    while todo:
        name = todo.pop(0)
        if name in out:
            continue
        cls = getattr(models_module, name)
        struct = go_name(name)
        fields: dict[str, str] = {}
        for attr, t in cls.openapi_types.items():
            json_name = cls.attribute_map[attr]
            fields[json_name] = _convert(t, struct, json_name, cls, attr, models_module, todo)
        out[name] = dict(sorted(fields.items()))
    return dict(sorted(out.items()))


def _convert(t: str, struct: str, json_name: str, cls: Any, attr: str, models_module: Any, todo: list[str]) -> str:
    if t.startswith("List[") and t.endswith("]"):
        return "[]" + _convert(t[5:-1], struct, json_name, cls, attr, models_module, todo)
    if t.startswith("Dict[str, ") and t.endswith("]"):
        return "map[string]" + _convert(t[10:-1], struct, json_name, cls, attr, models_module, todo)
    key = (struct, json_name)
    if t == "str":
        return "Quantity" if key in QUANTITY_FIELDS else "string"
    if t == "int":
        return "int64" if key in INT64_FIELDS else "int32"
    if t == "bool":
        return "bool"
    if t == "float":
        return "float64"
    if t == "bytes":
        return "bytes"
    if t == "datetime":
        return "MicroTime" if key in MICROTIME_FIELDS else "Time"
    if t == "object":
        ann = str(cls.model_fields[attr].annotation)
        return "IntOrString" if "int" in ann and "str" in ann else "any"
    if hasattr(models_module, t):
        todo.append(t)
        return t
    raise ValueError(f"unsupported client type {t!r} in {cls.__name__}.{attr}")


def render_module(types: dict[str, dict[str, str]]) -> str:
    lines = ['"""Field types of every kind the API server decodes (GENERATED, do not edit).',
             "",
             "Regenerate with ``python -m pykubelet.server.schema`` (needs the official ``kubernetes``",
             "client, a test dependency); see :mod:`pykubelet.server.schema` for the notation:",
             "``[]T`` list, ``map[string]T`` map, a model name, or a scalar (string int32 int64 bool",
             'float64 bytes Time MicroTime Quantity IntOrString any).',
             '"""',
             "",
             "TYPES: dict[str, dict[str, str]] = {"]
    for name, fields in types.items():
        lines.append(f"    {name!r}: {{")
        for f, t in fields.items():
            lines.append(f"        {f!r}: {t!r},")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines).replace("'", '"') + "\n"


if __name__ == "__main__":  # pragma: no cover - developer tool
    from pathlib import Path

    import kubernetes.client.models as client_models

    target = Path(__file__).with_name("apitypes.py")
    target.write_text(render_module(generate_types(client_models)))
    print(f"wrote {target}")
