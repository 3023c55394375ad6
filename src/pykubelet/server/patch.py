"""PATCH semantics: JSON patch, JSON merge patch, strategic merge patch, server-side apply.

Strategic merge patch follows ``k8s.io/apimachinery/pkg/util/strategicpatch``: maps merge
recursively, ``null`` deletes a key, and lists whose Go field carries
``patchStrategy:"merge"`` merge element-wise by their ``patchMergeKey``; all other lists are
replaced.  We have no Go struct tags, so the merge keys come from a table keyed by the list's
field name (optionally qualified by its parent path for the few names that mean different things
in different places, e.g. ``ports`` in a container vs. a Service).  Directives honoured:
``$patch: replace|delete|merge`` (in maps and list elements), ``$setElementOrder/<list>``,
``$retainKeys``, ``$deleteFromPrimitiveList/<list>``.

Server-side apply is approximated: a missing object is created, an existing one receives the
applied configuration as a strategic merge; fields the same manager applied before but no
longer does are then removed using its field set in managedFields (see ``managedfields.py``).
"""

from __future__ import annotations

import copy
from typing import Any

import json_merge_patch
import jsonpatch

from pykubelet.server.errors import StatusError, bad_request

# field name -> merge key (None = merge primitive list as a set)
MERGE_KEYS: dict[str, str | None] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "finalizers": None,
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "addresses": "type",
    "secrets": "name",
    "ports": "containerPort",
    "taints": "key",
    "readinessGates": None,
}

# Context-specific overrides: (parent field, list field) -> merge key
CONTEXT_KEYS: dict[tuple[str, str], str | None] = {
    ("spec", "ports"): "port",  # Service.spec.ports (a pod spec has no top-level "ports")
    ("status", "addresses"): "type",
    ("spec", "taints"): "key",
}

# Lists that are atomic even though their name appears above in another role.
ATOMIC_CONTEXT: set[tuple[str, str]] = {
    ("status", "containerStatuses"),
    ("status", "initContainerStatuses"),
}


def merge_key_for(parent: str, name: str) -> tuple[bool, str | None]:
    """(is_merge_list, key).  key None with True means a primitive set-merge list."""
    if (parent, name) in ATOMIC_CONTEXT:
        return False, None
    if (parent, name) in CONTEXT_KEYS:
        return True, CONTEXT_KEYS[(parent, name)]
    if name in MERGE_KEYS:
        return True, MERGE_KEYS[name]
    return False, None


def _is_directive(k: str) -> bool:
    return k.startswith("$")


def strategic_merge(original: Any, patch: Any, parent: str = "") -> Any:
    """Apply a strategic merge patch to ``original`` (not mutated) and return the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(original, dict):
        original = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not _is_directive(k)}
    if directive == "delete":
        return None
    result = copy.deepcopy(original)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        for k in list(result):
            if k not in retain:
                del result[k]
    orders: dict[str, list[Any]] = {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            if isinstance(v, list):
                orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(v, list):
                result[field] = [x for x in result[field] if x not in v]
            continue
        if _is_directive(k):
            continue
        if v is None:
            result.pop(k, None)
            continue
        cur = result.get(k)
        if isinstance(v, dict):
            merged = strategic_merge(cur if isinstance(cur, dict) else {}, v, k)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        elif isinstance(v, list):
            is_merge, key = merge_key_for(parent, k)
            if is_merge and isinstance(cur, list):
                result[k] = _merge_list(cur, v, key, k)
            elif is_merge:
                result[k] = _merge_list([], v, key, k)
            else:
                result[k] = copy.deepcopy(v)
        else:
            result[k] = copy.deepcopy(v)
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            is_merge, key = merge_key_for(parent, field)
            result[field] = _apply_order(result[field], order, key)
    return result


def _merge_list(cur: list[Any], patch: list[Any], key: str | None, name: str) -> list[Any]:
    # A list-level "$patch: replace" element replaces the whole list.
    if any(isinstance(e, dict) and e.get("$patch") == "replace" and (key is None or key not in e) for e in patch):
        return [copy.deepcopy(e) for e in patch if not (isinstance(e, dict) and "$patch" in e)]
    if key is None:
        out = copy.deepcopy(cur)
        for e in patch:
            if e not in out:
                out.append(copy.deepcopy(e))
        return out
    out = copy.deepcopy(cur)
    for e in patch:
        if not isinstance(e, dict) or key not in e:
            # Elements without the merge key cannot be merged: upstream errors; we append.
            if isinstance(e, dict) and e.get("$patch"):
                continue
            out.append(copy.deepcopy(e))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == e[key]), None)
        if e.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append({k: copy.deepcopy(v) for k, v in e.items() if not _is_directive(k)})
        else:
            out[idx] = strategic_merge(out[idx], e, name)
    return out


def _apply_order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(x: Any) -> Any:
        if key is None:
            return x
        return x.get(key) if isinstance(x, dict) else x

    order_ids = [ident(o) if key is not None else o for o in order]
    pos = {repr(v): i for i, v in enumerate(order_ids)}
    ordered = sorted(
        (x for x in items if repr(ident(x)) in pos), key=lambda x: pos[repr(ident(x))]
    )
    rest = [x for x in items if repr(ident(x)) not in pos]
    return ordered + rest


def json_patch(original: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    try:
        return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(original))
    except jsonpatch.JsonPatchTestFailed as e:
        raise StatusError(422, "Invalid", f"the server rejected our request due to an error in our request: {e}") from e
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, ValueError) as e:
        raise StatusError(422, "Invalid", f"the server rejected our request due to an error in our request: {e}") from e


def merge_patch(original: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    return json_merge_patch.merge(copy.deepcopy(original), copy.deepcopy(patch))


def merge_patch_shared(original: Any, patch: Any) -> Any:
    """:func:`merge_patch` (RFC 7386, as ``json_merge_patch.merge``) without copying: the dicts on
    the patched paths are new, everything else is ``original``'s or ``patch``'s own.  For a
    caller that rebuilds the result anyway (the typed decoding of a built-in kind makes every
    container anew) and must not pay for a deep copy of the whole object first."""
    if not isinstance(patch, dict):
        return patch
    result = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if isinstance(value, dict):
            result[key] = merge_patch_shared(result.get(key), value)
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def apply_patch(original: Any, patch: Any, patch_type: str) -> Any:
    if patch_type == "json":
        return json_patch(original, patch)
    if patch_type == "merge":
        return merge_patch(original, patch)
    if patch_type == "strategic":
        if not isinstance(patch, dict):
            raise bad_request("strategic merge patch must be a JSON object")
        return strategic_merge(original, patch)
    raise StatusError(415, "UnsupportedMediaType", f"unsupported patch type {patch_type}")


# The patch media types upstream serves for built-in kinds (types.PatchType); apply-patch+cbor only
# exists behind the alpha CBOR feature gate, so it is not served here.
PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
