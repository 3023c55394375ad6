"""A minimal ``metadata.managedFields``: per-manager field sets in the FieldsV1 format.

Why: ``kubectl get -o yaml --show-managed-fields`` shows who set what, and server-side apply
needs each applier's previous field set to remove the fields it stopped applying (upstream's
structured-merge-diff).  We keep the set where upstream does, in ``managedFields[].fieldsV1``,
so nothing else (annotations) is needed.

FieldsV1 (k8s.io/apimachinery/pkg/apis/meta/v1 "FieldsV1", structured-merge-diff's
``fieldpath.Set`` serialisation): a tree whose keys are path elements: ``f:<field>`` for a map
field, ``k:<json of key fields>`` for an item of a keyed (merge) list, ``v:<json value>`` for a
member of a set-like primitive list, and ``.`` marking that the item/map itself is owned.  Leaves
are ``{}``.

Simplifications (documented, deliberate): list keys come from the strategic-merge key table in
``patch.py`` (single-field keys); apply conflicts between managers are not detected (values
are merged, ownership shared); an Update takes ownership of the fields whose value it changed
and removes them from other managers' sets, as upstream does.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pykubelet.server.patch import merge_key_for

Obj = dict[str, Any]
Path = tuple[str, ...]

# metadata fields the server owns; never part of a manager's set
_SYSTEM_META = {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"}


def _item_key(item: Any, key: str | None) -> str | None:
    if key is not None and isinstance(item, dict) and key in item:
        v = item[key]
        if type(v) is str:  # the usual key (a name): the bytes json.dumps writes, without an encoder
            return f"k:{{{_encode_str(key)}:{_encode_str(v)}}}"
        return "k:" + json.dumps({key: v}, separators=(",", ":"), sort_keys=True)
    return None


_encode_str = json.encoder.encode_basestring_ascii  # what json.dumps (ensure_ascii) writes for a str


def _paths(value: Any, parent: str, prefix: Path, out: set[Path]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str) or k.startswith("$"):
                continue
            p = (*prefix, "f:" + k)
            out.add(p)
            if isinstance(v, dict):
                _paths(v, k, p, out)
            elif isinstance(v, list):
                is_merge, key = merge_key_for(parent, k)
                if not is_merge:
                    continue  # atomic list: owned as a whole
                for item in v:
                    if key is None and not isinstance(item, dict | list):
                        out.add((*p, "v:" + json.dumps(item, separators=(",", ":"))))
                        continue
                    ik = _item_key(item, key)
                    if ik is None:
                        continue
                    ip = (*p, ik)
                    out.add(ip)
                    out.add((*ip, "."))
                    _paths(item, k, ip, out)


def field_paths(obj: Obj, *, sub: str = "", has_status: bool = True) -> set[Path]:
    """Every path (inner nodes included) of the fields ``obj`` sets, minus server-owned ones."""
    out: set[Path] = set()
    _paths(_body(obj, sub, has_status), "", (), out)
    return out


def _body(obj: Obj, sub: str, has_status: bool) -> Obj:
    """The top-level fields of ``obj`` a manager can own (``metadata`` without the server's)."""
    body: Obj = {}
    for k, v in obj.items():
        if k in ("apiVersion", "kind"):
            continue
        if sub == "status" and k != "status":
            continue
        if sub == "" and k == "status" and has_status:
            continue
        if k == "metadata" and isinstance(v, dict):
            v = {mk: mv for mk, mv in v.items() if mk not in _SYSTEM_META}
            if not v:
                continue
        body[k] = v
    return body


def _lookup(obj: Any, path: Path) -> tuple[bool, Any]:
    cur = obj
    for el in path:
        if el == ".":
            continue
        if el.startswith("f:") and isinstance(cur, dict):
            if el[2:] not in cur:
                return False, None
            cur = cur[el[2:]]
        elif el.startswith("k:") and isinstance(cur, list):
            want = json.loads(el[2:])
            found = [i for i in cur if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())]
            if not found:
                return False, None
            cur = found[0]
        elif el.startswith("v:") and isinstance(cur, list):
            val = json.loads(el[2:])
            if val not in cur:
                return False, None
            cur = val
        else:
            return False, None
    return True, cur


@functools.lru_cache(maxsize=4096)
def _json_element(text: str) -> Any:
    """A ``k:``/``v:`` element's JSON, decoded once (callers only read it)."""
    return json.loads(text)


def _step(at: tuple[bool, Any], el: str) -> tuple[bool, Any]:
    """One element of :func:`_lookup`'s walk, from the value at the parent path."""
    found, cur = at
    if not found or el == ".":
        return at
    if el.startswith("f:") and isinstance(cur, dict):
        if el[2:] not in cur:
            return False, None
        return True, cur[el[2:]]
    if el.startswith("k:") and isinstance(cur, list):
        want = _json_element(el[2:])
        for i in cur:
            if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()):
                return True, i
        return False, None
    if el.startswith("v:") and isinstance(cur, list):
        val = _json_element(el[2:])
        if val not in cur:
            return False, None
        return True, val
    return False, None


def _lookup_memo(obj: Any, path: Path, memo: dict[Path, tuple[bool, Any]]) -> tuple[bool, Any]:
    """:func:`_lookup` with the value at every prefix kept in ``memo``: the paths of one object
    share their prefixes, so each is one step from its parent's value instead of a walk from the
    root (with a list scan and a JSON decode per keyed item on the way)."""
    at = memo.get(path)
    if at is None:
        at = memo[path] = _step(_lookup_memo(obj, path[:-1], memo) if len(path) > 1 else (True, obj), path[-1])
    return at


def changed_paths(old: Obj | None, new: Obj, *, sub: str = "", has_status: bool = True) -> set[Path]:
    """Paths of ``new`` whose value differs from ``old`` (all of them on create), with ancestors.

    One walk down ``new`` beside ``old`` (:func:`_diff`) that leaves a subtree as soon as its
    value equals the old one: nothing below an equal value can differ (JSON values hold no NaN:
    request bodies are read without it, as Go's decoder reads them), as long as each keyed list
    item's path leads back to that item (:func:`_irregular`). A kubelet's status PATCH leaves
    most of the status as it was, and each of its ~40 paths was looked up in both objects and
    compared with everything below it. Where a path may lead to another item (a key that is no
    string or number, the same key twice), the paths are compared one by one as before
    (:func:`_changed_by_lookup`), so the set is the same either way."""
    if old is None:
        return field_paths(new, sub=sub, has_status=has_status)
    out: set[Path] = set()
    try:
        for k, walk in _body(new, sub, has_status).items():
            if not isinstance(k, str) or k.startswith("$"):
                continue
            _diff(k in old, old.get(k), new[k], walk, "", k, ("f:" + k,), out)
    except _Irregular:
        return _changed_by_lookup(old, new, sub=sub, has_status=has_status)
    return out


class _Irregular(Exception):
    """A keyed list whose items' paths may lead to other items (see :func:`changed_paths`)."""


_KEY_TYPES = (str, int, float)  # key values that equal only their own kind (hashed as compared)


def _diff(found: bool, oldv: Any, newv: Any, walk: Any, parent: str, name: str, p: Path, out: set[Path]) -> None:
    """Add to ``out`` the paths of ``walk`` (the value of field ``name`` of ``parent`` at ``p``:
    ``newv``, or for ``metadata`` its fields a manager can own) that :func:`_changed_by_lookup`
    finds changed; ``oldv`` is the old value at ``p`` (``found``: whether there is one)."""
    if found and (oldv is newv or oldv == newv):
        if isinstance(walk, dict | list) and _irregular(walk, parent, name):
            raise _Irregular
        return  # equal here, so equal below: nothing changed
    if not found:
        _subtree(walk, parent, name, p, out)
        return
    out.add(p)  # its ancestors are in ``out`` already: they differ, as it does
    if isinstance(walk, dict):
        _diff_fields(oldv if isinstance(oldv, dict) else None, walk, name, p, out)
    elif isinstance(walk, list):
        is_merge, key = merge_key_for(parent, name)
        if is_merge:
            _diff_items(oldv if isinstance(oldv, list) else None, walk, name, key, p, out)


def _diff_fields(old: Obj | None, new: Obj, name: str, p: Path, out: set[Path]) -> None:
    for k, v in new.items():
        if not isinstance(k, str) or k.startswith("$"):
            continue
        if old is not None and k in old:
            _diff(True, old[k], v, v, name, k, (*p, "f:" + k), out)
        else:
            _subtree(v, name, k, (*p, "f:" + k), out)


def _diff_items(old: list[Any] | None, new: list[Any], name: str, key: str | None, p: Path, out: set[Path]) -> None:
    if key is None:  # a set of primitives: an item is changed when the old list lacks it
        for item in new:
            if not isinstance(item, dict | list):
                el = "v:" + json.dumps(item, separators=(",", ":"))
                found, oldv = _step((True, old), el) if old is not None else (False, None)
                _f, newv = _step((True, new), el)
                if not found or oldv != newv:
                    out.add((*p, el))
        return
    if _irregular_keys(new, key):
        raise _Irregular
    by_key: dict[Any, Any] = {}  # the first old item with each key, as the lookup finds it
    for item in old or ():
        if isinstance(item, dict):
            v = item.get(key)
            if isinstance(v, _KEY_TYPES):
                by_key.setdefault(v, item)
    for item in new:
        ik = _item_key(item, key)
        if ik is None:
            continue
        ip = (*p, ik)
        oldv = by_key.get(item[key], _MISSING)
        if oldv is _MISSING:
            out.add(ip)
            out.add((*ip, "."))
            _paths(item, name, ip, out)
        elif oldv is item or oldv == item:
            if _irregular_fields(item, name):
                raise _Irregular
        else:
            out.add(ip)
            out.add((*ip, "."))
            _diff_fields(oldv, item, name, ip, out)


def _irregular_keys(items: list[Any], key: str) -> bool:
    """Whether a keyed item's path (``k:`` and its key's JSON) may lead to another item: the
    lookup takes the first item whose key equals it, and an item without the key has None."""
    seen: set[Any] = set()
    for item in items:
        if isinstance(item, dict) and key in item:
            v = item[key]
            if v is None or not isinstance(v, _KEY_TYPES) or v in seen:
                return True
            seen.add(v)
    return False


def _irregular(v: Any, parent: str, name: str) -> bool:
    """Whether a keyed list at or below ``v`` (field ``name`` of ``parent``) has
    :func:`_irregular_keys`."""
    if isinstance(v, dict):
        return _irregular_fields(v, name)
    if isinstance(v, list):
        is_merge, key = merge_key_for(parent, name)
        if not is_merge or key is None:
            return False
        return _irregular_keys(v, key) or any(
            isinstance(i, dict) and key in i and _irregular_fields(i, name) for i in v)
    return False


def _irregular_fields(d: Obj, name: str) -> bool:
    return any(isinstance(x, dict | list) and isinstance(k, str) and not k.startswith("$") and _irregular(x, name, k)
               for k, x in d.items())


def _subtree(walk: Any, parent: str, name: str, p: Path, out: set[Path]) -> None:
    """Every path at and below ``p``: there is no old value there."""
    if isinstance(walk, list):
        _paths({name: walk}, parent, p[:-1], out)
        return
    out.add(p)
    if isinstance(walk, dict):
        _paths(walk, name, p, out)


def _changed_by_lookup(old: Obj, new: Obj, *, sub: str = "", has_status: bool = True) -> set[Path]:
    """:func:`changed_paths` path by path: each of ``new``'s paths looked up in both objects."""
    paths = field_paths(new, sub=sub, has_status=has_status)
    out: set[Path] = set()
    old_memo: dict[Path, tuple[bool, Any]] = {}
    new_memo: dict[Path, tuple[bool, Any]] = {}
    for p in paths:
        if p[-1] == ".":
            continue
        found, oldv = _lookup_memo(old, p, old_memo)
        _f, newv = _lookup_memo(new, p, new_memo)
        if not found or oldv != newv:
            out.update(p[:i] for i in range(1, len(p) + 1))
            if p[-1].startswith("k:"):
                out.add((*p, "."))
    return out


class FieldsTree(dict[str, Any]):
    """A FieldsV1 tree :func:`to_fields_v1` built: canonical (see :func:`_canonical`) by
    construction.  Encoded, copied and compared as the plain map it is; nothing changes a
    managedFields tree in place, so the mark stays true for as long as the object lives (a tree
    read back from storage or sent by a client is a plain map and is checked instead)."""

    __slots__ = ()


def to_fields_v1(paths: set[Path] | frozenset[Path]) -> Obj:
    """The FieldsV1 tree of ``paths`` (keys sorted at every level).

    The same set gives the same tree object (:func:`_tree_of`, an LRU): pods made from one
    template, their Events and the kubelet's status writes give their managers the same sets
    over and over, and sorting the paths (tuples) was most of the cost of building the tree.
    Sharing the tree between objects is what the store already does between the revisions of
    one object (:func:`record` keeps an unchanged tree): nothing changes a tree in place."""
    return _tree_of(paths if type(paths) is frozenset else frozenset(paths))


@functools.lru_cache(maxsize=512)
def _tree_of(paths: frozenset[Path]) -> FieldsTree:
    tree = FieldsTree()
    for p in sorted(paths):
        node: Obj = tree
        for el in p:
            node = node.setdefault(el, {})
    return tree


_PATHS_OF_TREE: dict[int, tuple[FieldsTree, frozenset[Path]]] = {}  # id -> (tree, its paths), LRU of 512


def _paths_of(tree: Any) -> set[Path] | frozenset[Path]:
    """``from_fields_v1(tree)``, remembered for a :class:`FieldsTree` (a tree built here, shared by
    every object with the same set and never changed in place): the kubelet's second status
    PATCH of each pod adds its pod IP to the same shared tree, which was walked again per pod.
    The entry holds the tree, so its ``id`` is not reused while remembered."""
    if type(tree) is not FieldsTree:
        return from_fields_v1(tree)
    hit = _PATHS_OF_TREE.pop(id(tree), None)
    if hit is None or hit[0] is not tree:
        hit = (tree, frozenset(from_fields_v1(tree)))
        if len(_PATHS_OF_TREE) >= 512:
            del _PATHS_OF_TREE[next(iter(_PATHS_OF_TREE))]  # the least recently used
    _PATHS_OF_TREE[id(tree)] = hit
    return hit[1]


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    stack: list[tuple[Any, Path]] = [(tree, prefix)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                p = (*at, str(k))
                out.add(p)
                stack.append((v, p))
    return out


def _canonical(tree: Any) -> bool:
    """Whether ``tree`` is what :func:`to_fields_v1` makes of its own paths (every value a map,
    the keys of each sorted strings): rebuilding it from :func:`from_fields_v1` would change
    nothing, not even the key order."""
    if type(tree) is FieldsTree:
        return True
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            return False
        if node:
            keys = list(node)
            if keys != sorted(keys) or not all(type(k) is str for k in keys):
                return False
            stack.extend(node.values())
    return True


def _has_path(tree: Any, path: Path) -> bool:
    """``path in from_fields_v1(tree)``, by a walk down ``tree``."""
    node = tree
    for el in path:
        if not isinstance(node, dict) or el not in node:
            return False
        node = node[el]
    return True


def _remove_one(obj: Obj, p: Path) -> bool:
    found, parent = _lookup(obj, p[:-1])
    if not found:
        return False
    el = p[-1]
    if el.startswith("f:") and isinstance(parent, dict):
        return parent.pop(el[2:], _MISSING) is not _MISSING
    if el.startswith("k:") and isinstance(parent, list):
        want = json.loads(el[2:])
        n = len(parent)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))]
        return len(parent) != n
    if el.startswith("v:") and isinstance(parent, list):
        val = json.loads(el[2:])
        n = len(parent)
        parent[:] = [i for i in parent if i != val]
        return len(parent) != n
    return False


_MISSING = object()


def remove_paths(obj: Obj, paths: set[Path], keep: set[Path] | None = None) -> None:
    """Delete from ``obj`` (in place) the fields at ``paths``; only the outermost of nested
    removed paths is acted on, so a removed container goes as a whole.  A map or list left
    empty by a removal goes too unless ``keep`` (the fields still applied) names it, so
    dropping the last label does not leave ``labels: {}`` behind."""
    keep = keep or set()
    for p in sorted(paths, key=len):
        if p[-1] == ".":
            p = p[:-1]
        if not p or any(p[:i] in paths for i in range(1, len(p))):
            continue
        if not _remove_one(obj, p):
            continue
        parent = p[:-1]
        while len(parent) > 1 and parent not in keep:  # never a top-level field (metadata, spec)
            found, v = _lookup(obj, parent)
            if not found or not isinstance(v, dict | list) or v:
                break
            _remove_one(obj, parent)
            parent = parent[:-1]


def entry_paths(entry: Obj) -> set[Path]:
    return from_fields_v1(entry.get("fieldsV1") or {})


def stale_applied_paths(managed: list[Obj], manager: str, applied: set[Path], sub: str = "") -> set[Path]:
    """Fields ``manager`` applied before but not now, and that no other manager owns."""
    prev: set[Path] = set()
    others: set[Path] = set()
    for e in managed:
        if not isinstance(e, dict):
            continue
        ps = entry_paths(e)
        if e.get("manager") == manager and e.get("operation") == "Apply" and e.get("subresource", "") == sub:
            prev |= ps
        else:
            others |= ps
    # Only leaves and whole list items: an inner map (metadata, spec) the new configuration
    # does not mention at all is not "removed", only the fields under it are.
    inner = {p[:i] for p in prev for i in range(1, len(p))}
    removed = {p for p in prev - applied
               if p[-1] != "." and (p not in inner or p[-1].startswith(("k:", "v:")))}
    # keep a path if another manager owns it or anything below it
    return {p for p in removed if not any(o[:len(p)] == p for o in others)}


def record(managed: list[Obj], *, manager: str, operation: str, api_version: str, time: str,
           paths: set[Path], sub: str = "") -> list[Obj]:
    """The new managedFields list after ``manager`` wrote ``paths`` with ``operation``.

    Apply replaces the manager's set with what it applied; Update adds the changed fields to
    its set and takes them away from every other manager (entries left empty are dropped).

    An entry (or the writer's own set) that the write leaves as it was keeps its tree as it is
    instead of a tree rebuilt from its paths, when that tree is canonical (:func:`_canonical`):
    the rebuilt one would be equal to it, key order included.  A kubelet's status PATCH touches
    none of the creator's fields and mostly fields it already owns: the pod's field trees were
    rebuilt on every one of them."""
    out: list[Obj] = []
    prior_tree: Any = None
    firsts: set[str] | None = None  # the top-level elements of ``paths``
    for e in managed:
        if not isinstance(e, dict):
            continue
        if e.get("manager") == manager and e.get("operation") == operation and e.get("subresource", "") == sub:
            prior_tree = e.get("fieldsV1") or {}
            continue
        if operation == "Update" and paths:
            tree = e.get("fieldsV1") or {}
            if firsts is None:
                firsts = {p[0] for p in paths if p}
            if not (tree and isinstance(tree, dict) and _canonical(tree) and (
                    firsts.isdisjoint(tree) or not any(_has_path(tree, p) for p in paths))):
                kept = _paths_of(tree) - paths
                if not kept:
                    continue
                e = {**e, "fieldsV1": to_fields_v1(kept)}
        out.append(e)
    fields: Obj
    if operation == "Apply" or not prior_tree:
        if not paths and operation == "Update":
            return out
        fields = to_fields_v1(paths)
    elif _canonical(prior_tree) and all(_has_path(prior_tree, p) for p in paths):
        fields = prior_tree  # nothing new: the same set, the same tree
    else:
        mine = _paths_of(prior_tree) | paths
        if not mine:
            return out
        fields = to_fields_v1(mine)
    entry: Obj = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": time,
                  "fieldsType": "FieldsV1", "fieldsV1": fields}
    if sub:
        entry["subresource"] = sub
    out.append(entry)
    return out
