"""Generic object validation shared by every resource (apimachinery ObjectMeta validation).

Names follow ``k8s.io/apimachinery/pkg/util/validation``: most resources need an RFC 1123 DNS
subdomain, namespaces and services an RFC 1123 label; label keys/values and annotation sizes
are checked as upstream's ``ValidateObjectMeta``.  Failures are (field path, message) pairs that
the caller turns into a single 422 Invalid Status with ``details.causes``.
"""

from __future__ import annotations

import json
import re
from typing import Any

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
    return errs
