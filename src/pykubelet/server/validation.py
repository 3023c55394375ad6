"""Generic object validation shared by every resource (apimachinery ObjectMeta validation).

Names follow ``k8s.io/apimachinery/pkg/util/validation``: most resources need an RFC 1123 DNS
subdomain, namespaces and services an RFC 1123 label; label keys/values and annotation sizes
are checked as upstream's ``ValidateObjectMeta``.  ConfigMaps and Secrets get upstream's
``ValidateConfigMap``/``ValidateSecret`` (config keys, 1 MiB, the keys each Secret type requires,
``immutable``), and Secret ``stringData`` is folded into ``data`` the way the v1 -> internal
conversion does.  Failures are (field path, message) pairs that the caller turns into a single
422 Invalid Status with ``details.causes``.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from pykubelet.common.podspec import config_key_errors

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

LABEL_NAMED = {"namespaces", "services"}
# Names that are path segments of other things and so may not be used (upstream path segment rule)
_BAD_SEGMENTS = {".", ".."}

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def validate_name(resource: str, name: str) -> str | None:
    if name in _BAD_SEGMENTS or "/" in name or "%" in name:
        return 'may not contain \'/\' or \'%\' and may not be "." or ".."'
    if resource in LABEL_NAMED:
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            return LABEL_MSG if len(name) <= 63 else "must be no more than 63 characters"
        return None
    if resource in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
        return None  # RBAC names are path segments only (ValidateRBACName): "system:node" is valid
    if resource in ("events",):  # event names are generated with dots and mixed parts; only length
        return None if 0 < len(name) <= 253 else "must be no more than 253 characters"
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.match(name):
        return SUBDOMAIN_MSG
    return None


def _qualified_key_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return "prefix part " + SUBDOMAIN_MSG
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return None


def validate_meta(resource: str, obj: dict[str, Any], *, creating: bool) -> list[tuple[str, str]]:
    errs: list[tuple[str, str]] = []
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [("metadata", "Required value")]
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errs.append(("metadata.name", "Required value: name or generateName is required"))
    else:
        why = validate_name(resource, name)
        if why:
            errs.append(("metadata.name", f'Invalid value: "{name}": {why}'))
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            errs.append(("metadata.labels", "Invalid value: must be a map of strings"))
        else:
            for k, v in labels.items():
                why = _qualified_key_error(str(k))
                if why:
                    errs.append(("metadata.labels", f'Invalid value: "{k}": {why}'))
                if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
                    errs.append(("metadata.labels", f'Invalid value: "{v}": a valid label must be an empty string '
                                 "or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                                 "with an alphanumeric character"))
    ann = meta.get("annotations")
    if ann is not None:
        if not isinstance(ann, dict) or not all(isinstance(v, str) for v in ann.values()):
            errs.append(("metadata.annotations", "Invalid value: must be a map of strings"))
        else:
            for k in ann:
                why = _qualified_key_error(str(k))
                if why:
                    errs.append(("metadata.annotations", f'Invalid value: "{k}": {why}'))
            if len(json.dumps(ann)) > 256 * 1024:
                errs.append(("metadata.annotations", "Too long: must have at most 262144 bytes"))
    fin = meta.get("finalizers")
    if fin is not None and (not isinstance(fin, list) or not all(isinstance(f, str) for f in fin)):
        errs.append(("metadata.finalizers", "Invalid value: must be a list of strings"))
    errs.extend(managed_fields_errors(meta.get("managedFields")))
    return errs


def managed_fields_errors(entries: Any) -> list[tuple[str, str]]:
    """ValidateManagedFields: operation Apply/Update, fieldsType FieldsV1, a printable manager."""
    errs: list[tuple[str, str]] = []
    for i, e in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(e, dict):
            continue
        p = f"metadata.managedFields[{i}]"
        op = e.get("operation") or ""
        if op not in ("Apply", "Update"):
            errs.append((f"{p}.operation", f"Invalid value: {json.dumps(op)}: must be `Apply` or `Update`"))
        ft = e.get("fieldsType") or ""
        if ft and ft != "FieldsV1":
            errs.append((f"{p}.fieldsType", f"Invalid value: {json.dumps(ft)}: must be `FieldsV1`"))
        manager = str(e.get("manager") or "")
        if len(manager) > 128:
            errs.append((f"{p}.manager", "Too long: may not be more than 128 bytes"))
        errs.extend((f"{p}.manager", f"Invalid value: {json.dumps(manager)}: invalid character U+{ord(ch):04X} "
                     f"(at position {j})") for j, ch in enumerate(manager) if not ch.isprintable())
        if len(str(e.get("subresource") or "")) > 256:
            errs.append((f"{p}.subresource", "Too long: may not be more than 256 bytes"))
    return errs


def resource_version_error(rv: str, fld: str = "resourceVersion") -> str | None:
    """Why ``rv`` is not a resourceVersion of ours (etcd-style uint64, storage.APIObjectVersioner),
    in upstream's words; None when it is one."""
    if re.fullmatch(r"[0-9]+", rv):
        if int(rv) < 2**64:
            return None
        return f'{fld}: Invalid value: "{rv}": strconv.ParseUint: parsing "{rv}": value out of range'
    return f'{fld}: Invalid value: "{rv}": strconv.ParseUint: parsing "{rv}": invalid syntax'


# --- ConfigMap and Secret (pkg/apis/core/validation ValidateConfigMap / ValidateSecret) -------------

MAX_SECRET_SIZE = 1024 * 1024  # core.MaxSecretSize, also the ConfigMap limit
_SECRET_REQUIRED_KEYS = {
    "kubernetes.io/dockercfg": [".dockercfg"],
    "kubernetes.io/dockerconfigjson": [".dockerconfigjson"],
    "kubernetes.io/ssh-auth": ["ssh-privatekey"],
    "kubernetes.io/tls": ["tls.crt", "tls.key"],
}


def _data_key_errors(data: Any, path: str) -> list[tuple[str, str]]:
    return [(f"{path}[{k}]", f"Invalid value: {json.dumps(k)}: {m}")
            for k in (data or {}) for m in config_key_errors(str(k))]


def _immutability_errors(obj: dict[str, Any], old: dict[str, Any] | None, fields: tuple[str, ...]) -> list[tuple[str, str]]:
    if old is None or not old.get("immutable"):
        return []
    errs: list[tuple[str, str]] = []
    if not obj.get("immutable"):
        errs.append(("immutable", "Forbidden: field is immutable when `immutable` is set"))
    for f in fields:
        if (obj.get(f) or {}) != (old.get(f) or {}):
            errs.append((f, "Forbidden: field is immutable when `immutable` is set"))
    return errs


def string_data_to_data(secret: dict[str, Any]) -> None:
    """The v1 -> internal Secret conversion: ``stringData`` entries (write-only) are merged into
    ``data`` as base64, overriding entries of the same key, and never stored."""
    sd = secret.pop("stringData", None)
    if not sd:
        return
    data = secret.get("data") or {}
    for k, v in sd.items():
        data[k] = base64.b64encode(str(v).encode()).decode()
    secret["data"] = data


def validate_secret(secret: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    errs = _data_key_errors(secret.get("data"), "data")
    data = secret.get("data") or {}
    total = sum(len(base64.b64decode(v)) for v in data.values() if isinstance(v, str))
    if total > MAX_SECRET_SIZE:
        errs.append(("data", f"Too long: may not be more than {MAX_SECRET_SIZE} bytes"))
    typ = secret.get("type") or "Opaque"
    if typ == "kubernetes.io/service-account-token":
        if not ((secret.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/service-account.name"):
            errs.append(("metadata.annotations[kubernetes.io/service-account.name]", "Required value"))
    elif typ == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            errs += [("data[username]", "Required value"), ("data[password]", "Required value")]
    for key in _SECRET_REQUIRED_KEYS.get(typ, []):
        if key not in data or (typ == "kubernetes.io/ssh-auth" and not data[key]):
            errs.append((f"data[{key}]", "Required value"))
        elif typ in ("kubernetes.io/dockercfg", "kubernetes.io/dockerconfigjson"):
            try:
                if not isinstance(json.loads(base64.b64decode(data[key])), dict):
                    raise ValueError("json: cannot unmarshal into Go value of type map[string]interface {}")
            except ValueError as e:
                errs.append((f"data[{key}]", f'Invalid value: "<secret contents redacted>": {e}'))
    if old is not None and (old.get("type") or "Opaque") != typ:
        errs.append(("type", f"Invalid value: {json.dumps(typ)}: field is immutable"))
    errs += _immutability_errors(secret, old, ("data",))
    return errs


def validate_configmap(cm: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    errs = _data_key_errors(cm.get("data"), "data") + _data_key_errors(cm.get("binaryData"), "binaryData")
    data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
    for k in data:
        if k in binary:
            errs.append((f"data[{k}]", f"Invalid value: {json.dumps(k)}: duplicate of key present in binaryData"))
    total = sum(len(str(v)) for v in data.values()) + sum(len(base64.b64decode(v)) for v in binary.values())
    if total > MAX_SECRET_SIZE:
        errs.append(("", f"Too long: must have at most {MAX_SECRET_SIZE} bytes"))
    errs += _immutability_errors(cm, old, ("data", "binaryData"))
    return errs
