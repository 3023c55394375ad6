"""Object storage for the dev API server: SQLite (WAL) + in-memory index + watch history.

Design.  etcd gives upstream one global, monotonically increasing revision that doubles as every
object's ``metadata.resourceVersion``; we do the same with a single counter persisted in SQLite.
All objects are also held in memory (a dict per resource keyed by (namespace, name)), so reads and
lists never touch the database and never block the event loop; writes are small transactions
in WAL mode with ``synchronous=NORMAL`` (durable across process crashes, which is what "a restart
loses nothing" needs), done inline because each takes microseconds (one per write, or one per
group of the writes of an event-loop turn: "Group commit" below).

Watches follow the upstream watch cache (``staging/src/k8s.io/apiserver/pkg/storage/cacher``):
a bounded ring of recent events; a watch may resume from any resourceVersion still covered by the
ring, otherwise it gets ``410 Expired`` ("too old resource version").  After a restart the ring is
empty and covers exactly the persisted revision onward.  Optimistic concurrency: an update that
names a resourceVersion other than the stored one fails with 409 Conflict.

The same ring serves paged lists (upstream reads etcd at the continue token's revision): a
:class:`Snapshot` is the current sorted keys with the writes since a revision undone from the ring,
so pages after the first show the first page's state and nothing is kept per list; a revision the
ring no longer reaches is :class:`Compacted` (410 Expired in the API).

Everything runs on the event loop thread, so no locking is needed: a write and its fan-out to
watchers happen atomically with respect to other coroutines.

Copies.  The store keeps its own copy of each object (a ``deepcopy``: revisions share their
strings) and its compact JSON per revision, for lists and watch events (encoded and decoded by
:mod:`pykubelet.server.jsonbytes`: msgspec, the same JSON values as the stdlib's); what a write
returns to its caller is that JSON decoded again (several times cheaper than ``deepcopy``),
or, for the API's writes, which answer with those very bytes, nothing (``decoded=False``).

A watch with an equality field selector on ``spec.nodeName`` (every kubelet's pod watch) is indexed
by that value, so a pod event is queued for the one node's watch instead of being matched, and
dropped, by a hundred of them (upstream's watch cache indexes pods by ``spec.nodeName`` too).

Slow watchers.  The fan-out only appends to each watcher's queue (never awaits), so a client that
stops reading cannot slow a write or another watcher.  What it could do is make its queue grow
without bound; a watch opened with a ``limit`` (the HTTP watches, see ``ApiHttp``) is bounded like
upstream's ``cacheWatcher`` channel: when ``limit`` live events are already waiting, the watcher
is terminated instead of buffering more (upstream: "Forcing ... watcher close due to
unresponsiveness", after a short time budget), its queue gets the end marker and
``on_terminate`` runs, so the HTTP handler can drop a connection stuck in a write.  The client
sees its watch end and, like every informer, re-lists or re-watches from its last
resourceVersion.  Events queued at subscription (initial ADDEDs, replayed history) do not count
against the limit: upstream sends those before reading the channel, too.

Group commit.  A write's SQLite transaction cost ~70-90 µs of CPU (the WAL frames of the row's
pages and the ``meta`` revision row), most of it per commit, not per row; the server handles bursts
(a kubelet's status writes and Events, the pods of a Deployment) in which several writes, up to
~50 in a 1,000-pod start, run in one turn of the event loop.  With :meth:`Storage.group_commits` (the API server's store) the first
write of a turn opens a transaction and schedules its COMMIT (with the ``meta`` row once) for the
next turn; the writes after it join.  Nothing is acknowledged before it is durable, as before: the
HTTP layer awaits :meth:`Storage.durable` before it answers any request (so no answer shows a write
not yet committed) and before it sends watch events.  A row that fails fails its write alone, as
before.  A group that fails to commit (an I/O error, a full disk) is undone in memory by reading
the database again; its writers get a 500 and every watch ends (see :meth:`Storage._group_failed`).
In-process watchers (the controllers) see a write before its commit, as they saw it before its
answer; they act through the API, whose answers wait.

Data at rest.  The database holds every object, Secrets included, so it is private to its owner:
the file is created 0600 before SQLite opens it (SQLite gives ``-wal``/``-shm``/``-journal`` the
database file's mode, so they are 0600 too) and existing files are tightened on open; the data dir
itself is 0700 (:func:`secure_dir`, called by the server before anything is written).  Values may
also be encrypted, per resource, by a :class:`ValueTransformer` (upstream's
``--encryption-provider-config``, see :mod:`pykubelet.server.encryption`): a row holds the object's
JSON as TEXT, or the transformer's ``k8s:enc:...`` bytes as a BLOB.  Rows are decoded once, at open:
a value that no configured provider can read stops the start with an error naming the object (a
missing or wrong key must not look like missing data).  ``secure_delete`` makes SQLite zero the
bytes of deleted and overwritten rows, so a plaintext Secret that is re-encrypted on write does not
linger in free space.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import copy
import heapq
import itertools
import logging
import operator
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pykubelet.server import jsonbytes
from pykubelet.server.errors import already_exists, conflict, expired, not_found
from pykubelet.server.selectors import field_value

Obj = dict[str, Any]
log = logging.getLogger(__name__)

ENCRYPTED_PREFIX = b"k8s:enc:"
DB_SUFFIXES = ("", "-wal", "-shm", "-journal")


class StorageError(Exception):
    """The database cannot be used (unreadable row, wrong key, not a database); the message says
    which object or file."""


class ValueTransformer(Protocol):
    """Turns a row's plain JSON bytes into stored bytes and back, per resource (encryption at rest).
    ``from_storage`` returns (plain, stale): stale = not written by the current write provider."""

    def to_storage(self, resource: str, namespace: str, name: str, data: bytes) -> bytes: ...

    def from_storage(self, resource: str, namespace: str, name: str, data: bytes) -> tuple[bytes, bool]: ...


def _tighten(path: Path, mode: int, *, follow: bool = False) -> None:
    """chmod ``path`` to ``mode`` if it grants more; logged, since it changes the user's files.
    A symlinked database side file is left alone (never chmod something outside the data dir);
    a symlinked data dir is followed: its target is the data dir."""
    try:
        st = path.stat() if follow else path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        return
    if stat.S_IMODE(st.st_mode) & ~mode:
        log.info("tightening permissions of %s from %04o to %04o", path, stat.S_IMODE(st.st_mode), mode)
        os.chmod(path, mode)


def secure_dir(path: Path) -> None:
    """Create ``path`` mode 0700 (parents as the umask says), or tighten it to 0700 if it exists."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _tighten(path, 0o700, follow=True)


def secure_db_files(path: Path) -> None:
    """Make the database and its side files owner-only before SQLite opens them: SQLite creates
    ``-wal``/``-shm``/``-journal`` with the database file's permissions, so a 0600 database keeps
    them 0600 too."""
    if not path.exists():
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))  # an empty file is an empty database
    for suffix in DB_SUFFIXES:
        _tighten(path.with_name(path.name + suffix), 0o600)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    resource: str  # storage key of the resource, e.g. "pods" or "leases.coordination.k8s.io"
    namespace: str
    name: str
    rv: int
    obj: Obj
    old: Obj | None = None
    _encoded: bytes | None = field(default=None, repr=False)
    _old_encoded: bytes | None = field(default=None, repr=False)

    def encoded(self) -> bytes:
        """``obj`` as compact JSON, encoded once however many watchers receive the event."""
        if self._encoded is None:  # a cache, not state: set once on the frozen event
            object.__setattr__(self, "_encoded", jsonbytes.encode(self.obj))
        assert self._encoded is not None
        return self._encoded

    def old_encoded(self) -> bytes:
        """``old`` as compact JSON (encoded on first use: only a list page at an older revision
        asks), ``b""`` for an ADDED event."""
        if self._old_encoded is None:
            data = b"" if self.old is None else jsonbytes.encode(self.old)
            object.__setattr__(self, "_old_encoded", data)
        assert self._old_encoded is not None
        return self._old_encoded


class Compacted(Exception):
    """A read at a revision the store no longer holds: older than the watch history's floor
    (upstream: etcd's ``ErrCompacted``, which the API server answers with 410 Expired)."""

    def __init__(self, rev: int, floor: int) -> None:
        super().__init__(f"revision {rev} is compacted (oldest held: {floor})")
        self.rev = rev
        self.floor = floor


Key = tuple[str, str]


def _untyped(obj: Obj) -> int:
    return 0 if "kind" in obj and "apiVersion" in obj else 1


@dataclass(eq=False)
class _Column:
    """A resource's stored JSON in key order, aligned with one sorted key list (``keys`` is that
    list itself: a create or delete makes a new one, and the column is rebuilt from it), kept up
    to date by updates; ``untyped``: how many of the objects lack kind or apiVersion."""

    keys: list[Key]
    data: list[bytes]
    untyped: int


class Snapshot:
    """One resource (in one namespace, or all) as it was at revision ``rev``, for the pages of a
    list after its first (upstream reads etcd at the continue token's revision).

    Nothing is copied when the list starts: a page is the store's current sorted keys with the
    writes made since ``rev`` undone from the watch history (each key touched since then reads as
    the ``old`` of its first later event, or as absent if that event created it).  A page costs
    O(page + events since ``rev``) and the store keeps nothing per list; a revision older than the
    history's floor is :class:`Compacted`.
    """

    def __init__(self, store: Storage, resource: str, namespace: str | None, rev: int,
                 overlay: dict[Key, WatchEvent]) -> None:
        self.store = store
        self.resource = resource
        self.namespace = namespace
        self.rev = rev
        self._overlay = overlay  # key -> first event after rev (its ``old`` is the key at rev)

    def _bounds(self, start: Key | None) -> tuple[list[Key], int, int]:
        keys = self.store._sorted_keys(self.resource)
        ns = self.namespace
        lo = 0 if ns is None else bisect.bisect_left(keys, (ns, ""))
        if start is not None:
            lo = max(lo, bisect.bisect_left(keys, start))
        hi = len(keys) if ns is None else bisect.bisect_left(keys, (ns + "\x00", ""), lo)
        return keys, lo, hi

    def _current(self, start: Key | None) -> Iterator[tuple[Key, Obj, bytes]]:
        keys, lo, hi = self._bounds(start)
        items = self.store._objects[self.resource]
        cache = self.store._encoded[self.resource]
        overlay = self._overlay
        for j in range(lo, hi):
            k = keys[j]
            if k in overlay:
                continue
            obj = items.get(k)
            if obj is None:
                continue
            data = cache.get(k)
            if data is None:
                data = cache[k] = jsonbytes.encode(obj)
            yield k, obj, data

    def _past(self, start: Key | None) -> Iterator[tuple[Key, Obj, bytes]]:
        for k in sorted(k for k, ev in self._overlay.items() if ev.old is not None and (start is None or k >= start)):
            ev = self._overlay[k]
            assert ev.old is not None
            yield k, ev.old, ev.old_encoded()

    def items(self, start: Key | None = None) -> Iterator[tuple[Key, Obj, bytes]]:
        """(key, stored object, its compact JSON) at ``rev``, sorted, from ``start`` on (inclusive:
        a continue token's start key is the last key listed + ``"\\x00"``, as upstream's).
        Callers must not mutate the objects."""
        if not self._overlay:
            return self._current(start)
        return heapq.merge(self._current(start), self._past(start), key=operator.itemgetter(0))

    def rows(self, start: Key | None = None, n: int | None = None, *, objects: bool = True
             ) -> tuple[list[Key], list[Obj], list[bytes]]:
        """The first ``n`` (all: ``None``) of :meth:`items` as three lists: keys, objects (empty
        unless ``objects``), JSON.  Without writes since ``rev`` these are slices of the key index
        and of the column of encoded objects: no walk in Python per object."""
        if self._overlay:
            got = list(self.items(start) if n is None else itertools.islice(self.items(start), n))
            return [g[0] for g in got], [g[1] for g in got], [g[2] for g in got]
        keys, lo, hi = self._bounds(start)
        if n is not None:
            hi = min(hi, lo + n)
        ks = keys[lo:hi]
        items = self.store._objects[self.resource]
        objs = [items[k] for k in ks] if objects else []
        col = self.store._columns.get(self.resource)
        if n is None or (col is not None and col.keys is keys):  # a page does not rebuild the column
            return ks, objs, self.store._column(self.resource).data[lo:hi]
        return ks, objs, [self.store.encoded(self.resource, *k) or b"" for k in ks]

    def untyped(self) -> int | None:
        """How many objects of the resource (all namespaces) lack kind or apiVersion; ``None``
        when not counted (a snapshot with writes since ``rev``)."""
        return None if self._overlay else self.store._column(self.resource).untyped

    def count_from(self, start: Key) -> int:
        """How many objects sort at or after ``start`` at ``rev``: a page's ``remainingItemCount``
        from the key index, without walking them."""
        _keys, lo, hi = self._bounds(start)
        n = max(0, hi - lo)
        items = self.store._objects[self.resource]
        for k, ev in self._overlay.items():
            if k >= start:
                n += (ev.old is not None) - (k in items)
        return n


@dataclass(eq=False)
class Watcher:
    """A live subscription; events are pushed by the store, consumed by the HTTP handler."""

    resource: str
    namespace: str | None
    queue: asyncio.Queue[WatchEvent | None] = field(default_factory=asyncio.Queue)
    closed: bool = False
    limit: int = 0  # live events allowed to wait; 0 = unbounded (in-process consumers)
    client: str = ""  # who is watching, for the log line when it is terminated
    live: int = 0  # events pushed after the subscription
    terminated: bool = False  # closed by the store for falling behind
    on_terminate: Callable[[], None] | None = None
    index: tuple[str, str] | None = None  # (field, value): only events whose object had it, see watch()

    def backlog(self) -> int:
        """Live events still queued.  The queue holds the subscription's initial events first and
        they are consumed first, so the live ones are the last ``min(live, qsize)``."""
        return min(self.live, self.queue.qsize())


class Storage:
    """Persistent, watchable object store.  Keys: (resource, namespace, name); cluster-scoped
    objects use namespace ""."""

    def __init__(self, path: str | Path | None, history: int = 10000,
                 transformer: ValueTransformer | None = None) -> None:
        self._path = str(path) if path is not None else ":memory:"
        self._transformer = transformer
        self.stale: dict[str, int] = {}  # per resource: rows a non-first provider decoded at open
        self._db: sqlite3.Connection | None = None
        self._objects: dict[str, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        # compact JSON of stored objects, made once per revision (on write, or on first read after a
        # load) and reused by lists and watches, like upstream's watch cache serving from memory
        self._encoded: dict[str, dict[tuple[str, str], bytes]] = collections.defaultdict(dict)
        self._order: dict[str, list[tuple[str, str]]] = {}  # keys of a resource, sorted; dropped on create/delete
        self._columns: dict[str, _Column] = {}  # encoded objects in key order, for full lists
        self._history: collections.deque[WatchEvent] = collections.deque(maxlen=history)
        self._watchers: dict[str, set[Watcher]] = collections.defaultdict(set)
        # watchers with an equality field selector (a kubelet's spec.nodeName=<node>): resource ->
        # field -> value -> watchers, so an event reaches the one node's watch, not all of them
        self._indexed: dict[str, dict[str, dict[str, set[Watcher]]]] = {}
        self.revision = 0
        self._floor = 0  # oldest revision a watch can resume from
        self._grouping = False  # group_commits()
        self._batch = False  # a group is open: its COMMIT is scheduled (call_soon)
        self._batch_writes = 0
        self._waiters: list[asyncio.Future[None]] = []  # durable() callers of the open group

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> None:
        if self._path != ":memory:":
            secure_db_files(Path(self._path))
        try:
            db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            try:
                self._load(db)
            except BaseException:
                db.close()
                raise
        except sqlite3.DatabaseError as e:
            raise StorageError(f"{self._path}: {e}") from None
        self._db = db

    def _load(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA secure_delete=ON")
        db.execute(
            "CREATE TABLE IF NOT EXISTS objects (resource TEXT, namespace TEXT, name TEXT, rv INTEGER,"
            " data TEXT, PRIMARY KEY (resource, namespace, name))"
        )
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER)")
        row = db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
        self.revision = int(row[0]) if row else 0
        for resource, ns, name, _rv, data in db.execute("SELECT * FROM objects"):
            self._objects[resource][(ns, name)] = self._decode(resource, ns, name, data)
        self._floor = self.revision

    def _decode(self, resource: str, ns: str, name: str, data: str | bytes) -> Obj:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        where = f"{resource} {ns + '/' if ns else ''}{name}"
        try:
            if self._transformer is not None:
                raw, stale = self._transformer.from_storage(resource, ns, name, raw)
                if stale:
                    self.stale[resource] = self.stale.get(resource, 0) + 1
            elif raw.startswith(ENCRYPTED_PREFIX):
                raise StorageError("identity transformer tried to read encrypted data")
            obj = jsonbytes.decode(raw)
        except Exception as e:  # any decoding failure: say which object, stop the start
            hint = ""
            if isinstance(data, bytes) and bytes(data).startswith(ENCRYPTED_PREFIX):
                hint = " (it is encrypted: --encryption-provider-config must list the key it was written with)"
            raise StorageError(f"cannot read {where} from {self._path}: {e}{hint}") from None
        if not isinstance(obj, dict):
            raise StorageError(f"cannot read {where} from {self._path}: not a JSON object")
        return obj

    def _row_value(self, resource: str, ns: str, name: str, data: bytes) -> str | bytes:
        if self._transformer is None:
            return data.decode()
        out = self._transformer.to_storage(resource, ns, name, data)
        return out if out.startswith(ENCRYPTED_PREFIX) else out.decode()

    @staticmethod
    def _with_rv(obj: Obj, rv: int, owned: bool = False) -> tuple[Obj, bytes]:
        """``obj`` at revision ``rv`` as the store keeps it (a copy of its own, the caller's object
        untouched) and as compact JSON.  The copy is a ``deepcopy``, which shares the strings with
        the caller's object and, through :meth:`get`, with the object's earlier revisions still in
        the watch history; a ``json.loads`` copy would give every revision strings of its own
        (measured: +25 kB of server RSS per pod).  ``owned``: the caller hands ``obj`` over and
        never changes it or any part of it again, so only the top level and metadata (where the
        revision goes) are copied; the rest is shared, as it may be with earlier revisions."""
        if owned:
            stored = {**obj, "metadata": {**(obj.get("metadata") or {}), "resourceVersion": str(rv)}}
            return stored, jsonbytes.encode(stored)
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(rv)
        return stored, jsonbytes.encode(stored)

    def close(self) -> None:
        if self._batch:
            self._commit_batch()
        for ws in self._watchers.values():
            for w in ws:
                w.closed = True
                w.queue.put_nowait(None)
        self._watchers.clear()
        for by_field in self._indexed.values():
            for by_value in by_field.values():
                for ws in by_value.values():
                    for w in ws:
                        w.closed = True
                        w.queue.put_nowait(None)
        self._indexed.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    # ---------------------------------------------------------------- reads
    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        """A copy of the stored object the caller may change (sharing its strings, see _with_rv)."""
        obj = self._objects[resource].get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def peek(self, resource: str, namespace: str, name: str) -> Obj | None:
        """Like get() but returns the stored object itself: callers must not mutate it."""
        return self._objects[resource].get((namespace, name))

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Objects sorted by (namespace, name), copies the caller may change."""
        items = self._objects[resource]
        keys = sorted(k for k in items if namespace is None or k[0] == namespace)
        return [copy.deepcopy(items[k]) for k in keys]

    def encoded(self, resource: str, namespace: str, name: str) -> bytes | None:
        """The stored object as compact JSON (``None`` when absent); callers must not mutate."""
        obj = self._objects[resource].get((namespace, name))
        if obj is None:
            return None
        cache = self._encoded[resource]
        data = cache.get((namespace, name))
        if data is None:
            data = cache[(namespace, name)] = jsonbytes.encode(obj)
        return data

    def _sorted_keys(self, resource: str) -> list[tuple[str, str]]:
        keys = self._order.get(resource)
        if keys is None:  # sorted once per create/delete of the resource, not per list
            keys = self._order[resource] = sorted(self._objects[resource])
        return keys

    def _column(self, resource: str) -> _Column:
        """The resource's encoded objects in key order: rebuilt after a create or delete (like the
        key index), patched in place by an update, so a full list is a slice of it."""
        keys = self._sorted_keys(resource)
        col = self._columns.get(resource)
        if col is None or col.keys is not keys:
            items = self._objects[resource]
            cache = self._encoded[resource]
            data: list[bytes] = []
            untyped = 0
            for k in keys:
                obj = items[k]
                d = cache.get(k)
                if d is None:
                    d = cache[k] = jsonbytes.encode(obj)
                data.append(d)
                untyped += _untyped(obj)
            col = self._columns[resource] = _Column(keys, data, untyped)
        return col

    def _column_update(self, resource: str, key: Key, old: Obj, new: Obj, data: bytes) -> None:
        """An update's new JSON into the resource's column, if it has a current one."""
        col = self._columns.get(resource)
        if col is None or col.keys is not self._order.get(resource):
            return
        col.data[bisect.bisect_left(col.keys, key)] = data
        col.untyped += _untyped(new) - _untyped(old)

    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]:
        """Sorted (key, stored object) pairs without copying; callers must not mutate.  A list's
        pages read a :meth:`snapshot` instead."""
        items = self._objects[resource]
        keys = self._sorted_keys(resource)
        i = 0 if namespace is None else bisect.bisect_left(keys, (namespace, ""))
        for j in range(i, len(keys)):
            k = keys[j]
            if namespace is not None and k[0] != namespace:
                break
            obj = items.get(k)
            if obj is not None:
                yield k, obj

    def iter_unordered(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]:
        """The pairs :meth:`iter_raw` gives, in no particular order, for callers that only look for
        something in them (the node authorizer's pods of a node): no sort of every key when a create
        has dropped the sorted order (a kubelet's TokenRequest came right after its pod's create and
        sorted all the pods each time).  Read it to the end, or drop it, before the next write."""
        if resource in self._order:  # sorted already: a namespace is a slice of the keys
            yield from self.iter_raw(resource, namespace)
            return
        for key, obj in self._objects[resource].items():
            if namespace is None or key[0] == namespace:
                yield key, obj

    def snapshot(self, resource: str, namespace: str | None, rev: int | None = None) -> Snapshot:
        """``resource`` (in ``namespace``) at revision ``rev`` (``None``: now), to read list pages
        from.  Raises :class:`Compacted` when the watch history no longer reaches back to ``rev``,
        ``ValueError`` for a revision the store has not reached."""
        if rev is None or rev == self.revision:
            return Snapshot(self, resource, namespace, self.revision, {})
        if rev > self.revision:
            raise ValueError(f"revision {rev} is newer than the store's ({self.revision})")
        if rev < self._floor:
            raise Compacted(rev, self._floor)
        overlay: dict[Key, WatchEvent] = {}
        for ev in reversed(self._history):  # newest first: the last one kept per key is its first after rev
            if ev.rv <= rev:
                break
            if ev.resource == resource and (namespace is None or ev.namespace == namespace):
                overlay[(ev.namespace, ev.name)] = ev
        return Snapshot(self, resource, namespace, rev, overlay)

    def resources(self) -> list[str]:
        return [r for r, objs in self._objects.items() if objs]

    def count(self, resource: str) -> int:
        return len(self._objects[resource])

    # ---------------------------------------------------------------- writes
    def _next_rv(self) -> int:
        self.revision += 1
        return self.revision

    def _persist(self, resource: str, namespace: str, name: str, data: bytes | None) -> None:
        db = self._db
        if db is None:
            raise RuntimeError("storage is not open")
        if self._grouping and not self._batch:
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a tool, a test's setup): committed per write as before
                loop = None
            if loop is not None:
                db.execute("BEGIN")
                self._batch = True
                self._batch_writes = 0
                loop.call_soon(self._commit_batch)
        if self._batch:  # joins the group; committed by _commit_batch
            try:
                self._write_row(db, resource, namespace, name, data)
            except BaseException as e:
                # A statement that fails leaves the transaction as it was (this write fails alone,
                # as before), unless SQLite rolled the whole group back (an I/O error, disk full).
                if not db.in_transaction:
                    self._group_failed(e)
                raise
            self._batch_writes += 1
            return
        db.execute("BEGIN")
        try:
            self._write_row(db, resource, namespace, name, data)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('revision', ?)", (self.revision,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _write_row(self, db: sqlite3.Connection, resource: str, namespace: str, name: str,
                   data: bytes | None) -> None:
        if data is None:
            db.execute(
                "DELETE FROM objects WHERE resource=? AND namespace=? AND name=?",
                (resource, namespace, name),
            )
        else:
            db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?)",
                (resource, namespace, name, self.revision, self._row_value(resource, namespace, name, data)),
            )

    # ---------------------------------------------------------------- group commit
    def group_commits(self) -> None:
        """Commit the writes made in one turn of the event loop in one transaction (the API
        server's store; module docstring, "Group commit").  A writer that answers a client awaits
        :meth:`durable` first."""
        self._grouping = True

    @property
    def pending(self) -> bool:
        """Writes are waiting for their group's commit."""
        return self._batch

    async def durable(self) -> None:
        """Return when every write made so far is committed; raise :class:`StorageError` when the
        group holding one of them failed to commit (that write is undone, see :meth:`_group_failed`)."""
        if self._batch:
            # a future of its own per waiter: a cancelled waiter (a client gone) cancels only its
            # own, and _commit_batch wakes each waiter directly (one loop turn, not two via shield)
            f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(f)
            await f

    def _commit_batch(self) -> None:
        if not self._batch:  # committed already (close) or failed
            return
        self._batch = False
        db = self._db
        try:
            if db is None:
                raise StorageError("storage closed before its writes were committed")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('revision', ?)", (self.revision,))
            db.execute("COMMIT")
        except Exception as e:
            self._group_failed(e)
            return
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    def _group_failed(self, e: BaseException) -> None:
        """A group's transaction did not commit: none of its writes was acknowledged (each writer
        awaits :meth:`durable`), and none may stay visible.  Its writers get the error (500), the
        store is read again from the database, the watch history is dropped and every watch ends
        (clients list again; a resumed watch gets 410), and revisions go on from the highest one
        handed out (never reused)."""
        self._batch = False
        n = self._batch_writes
        log.error("committing %d writes to %s failed (%s): they are undone; the store is read again "
                  "from the database and every watch ends", n, self._path, e)
        err = StorageError(f"committing the write failed: {e}")
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_exception(err)
        db = self._db
        if db is None:
            return
        with contextlib.suppress(sqlite3.Error):
            if db.in_transaction:
                db.execute("ROLLBACK")
        rev = self.revision
        self._objects.clear()
        self._encoded.clear()
        self._order.clear()
        self._columns.clear()
        for resource, ns, name, _rv, data in db.execute("SELECT * FROM objects"):
            self._objects[resource][(ns, name)] = self._decode(resource, ns, name, data)
        self.revision = rev
        self._history.clear()
        self._floor = rev
        for w in {w for r in {*self._watchers, *self._indexed} for w in self.watchers(r)}:
            self.unwatch(w)
            w.terminated = True
            w.queue.put_nowait(None)

    def create(self, resource: str, namespace: str, name: str, obj: Obj, *, kind_name: str = "",
               group: str = "", decoded: bool = True, owned: bool = False) -> Obj:
        """Store ``obj`` as a new object; returns a copy the caller may change, or with
        ``decoded=False`` the store's own object (callers must not mutate it; :meth:`encoded`
        gives its JSON): a write that answers with those bytes needs no copy.  ``owned``: see
        :meth:`_with_rv`."""
        items = self._objects[resource]
        if (namespace, name) in items:
            raise already_exists(kind_name or resource, name, group)
        rv = self._next_rv()
        obj, data = self._with_rv(obj, rv, owned)
        self._persist(resource, namespace, name, data)
        items[(namespace, name)] = obj
        self._order.pop(resource, None)
        self._encoded[resource][(namespace, name)] = data
        self._emit(WatchEvent("ADDED", resource, namespace, name, rv, obj, _encoded=data))
        return jsonbytes.decode(data) if decoded else obj

    def update(self, resource: str, namespace: str, name: str, obj: Obj, *, expected_rv: str | None = None,
               kind_name: str = "", group: str = "", decoded: bool = True, owned: bool = False) -> Obj:
        """Replace the stored object; ``decoded`` and ``owned`` as for :meth:`create`."""
        items = self._objects[resource]
        old = items.get((namespace, name))
        if old is None:
            raise not_found(kind_name or resource, name, group)
        if expected_rv and expected_rv != old["metadata"].get("resourceVersion"):
            raise conflict(kind_name or resource, name, group)
        rv = self._next_rv()
        obj, data = self._with_rv(obj, rv, owned)
        self._persist(resource, namespace, name, data)
        items[(namespace, name)] = obj
        self._encoded[resource][(namespace, name)] = data
        self._column_update(resource, (namespace, name), old, obj, data)
        self._emit(WatchEvent("MODIFIED", resource, namespace, name, rv, obj, old, _encoded=data))
        return jsonbytes.decode(data) if decoded else obj

    def delete(self, resource: str, namespace: str, name: str, *, expected_rv: str | None = None,
               kind_name: str = "", group: str = "") -> Obj:
        items = self._objects[resource]
        old = items.get((namespace, name))
        if old is None:
            raise not_found(kind_name or resource, name, group)
        if expected_rv and expected_rv != old["metadata"].get("resourceVersion"):
            raise conflict(kind_name or resource, name, group)
        rv = self._next_rv()
        # Upstream's DELETED event carries the object at the deletion revision.
        obj, data = self._with_rv(old, rv)
        self._persist(resource, namespace, name, None)
        del items[(namespace, name)]
        self._order.pop(resource, None)
        self._encoded[resource].pop((namespace, name), None)
        self._emit(WatchEvent("DELETED", resource, namespace, name, rv, obj, old, _encoded=data))
        return jsonbytes.decode(data)

    # ---------------------------------------------------------------- watch
    def _emit(self, ev: WatchEvent) -> None:
        if len(self._history) == self._history.maxlen:
            self._floor = self._history[0].rv
        self._history.append(ev)
        for w in self._targets(ev):
            if w.namespace is None or w.namespace == ev.namespace:
                if w.limit and w.backlog() >= w.limit:
                    self._terminate(w)
                    continue
                w.live += 1
                w.queue.put_nowait(ev)

    def _targets(self, ev: WatchEvent) -> list[Watcher]:
        """The watchers an event may concern: all unindexed ones, and the indexed ones whose value
        the object has now or had before (a watch must see an object enter and leave its selection)."""
        out = list(self._watchers.get(ev.resource, ()))
        by_field = self._indexed.get(ev.resource)
        if by_field:
            for fld, by_value in by_field.items():
                now = field_value(ev.obj, fld)
                out.extend(by_value.get(now, ()))
                if ev.old is not None and (before := field_value(ev.old, fld)) != now:
                    out.extend(by_value.get(before, ()))
        return out

    def _terminate(self, w: Watcher) -> None:
        """End a watcher that fell ``limit`` events behind: bounded memory, not an ever-growing
        queue; the client re-lists or re-watches (upstream's cacheWatcher termination)."""
        log.warning("Forcing %s watcher close due to unresponsiveness: %s. %d events queued (limit %d); "
                    "the client must watch again", w.resource, w.client or "an in-process watcher",
                    w.backlog(), w.limit)
        w.terminated = True
        self.unwatch(w)
        w.queue.put_nowait(None)
        if w.on_terminate is not None:
            w.on_terminate()

    def watch(self, resource: str, namespace: str | None, since: int | None,
              initial: Callable[[], list[Obj]] | None = None, *, limit: int = 0, client: str = "",
              index: tuple[str, str] | None = None) -> Watcher:
        """Subscribe.  ``since``: deliver events with rv > since (410 if no longer in history).
        ``since is None``: synthesize ADDED for current objects first (upstream semantics for an
        unset or "0" resourceVersion).  ``limit``: live events that may wait before the watcher is
        terminated (0: unbounded); ``client`` names the watcher in that log line.  ``index``:
        (field, value) of an equality field selector the watch has: live events whose object does
        not have, and did not have, that value are not queued (the caller still filters what is)."""
        w = Watcher(resource, namespace, limit=limit, client=client, index=index)
        if since is None:
            for (ns, name), obj in self.iter_raw(resource, namespace):
                if index is not None and field_value(obj, index[0]) != index[1]:
                    continue  # not the indexed value: the caller's selector drops it anyway
                rv = int(obj["metadata"].get("resourceVersion", "0") or 0)
                # stored objects are replaced, never changed in place, so the event may share them
                w.queue.put_nowait(WatchEvent("ADDED", resource, ns, name, rv, obj,
                                              _encoded=self.encoded(resource, ns, name)))
        else:
            if since < self._floor:
                raise expired(f"too old resource version: {since} ({self._floor})")
            # The ring is in revision order: walk back from the newest to ``since`` (a resumed watch
            # is usually a few events behind) instead of over the whole ring from its oldest.
            newer: list[WatchEvent] = []
            for ev in reversed(self._history):
                if ev.rv <= since:
                    break
                if ev.resource == resource and (namespace is None or ev.namespace == namespace) and (
                        index is None or field_value(ev.obj, index[0]) == index[1]
                        or (ev.old is not None and field_value(ev.old, index[0]) == index[1])):
                    newer.append(ev)
            for ev in reversed(newer):
                w.queue.put_nowait(ev)
        if index is None:
            self._watchers[resource].add(w)
        else:
            self._indexed.setdefault(resource, {}).setdefault(index[0], {}).setdefault(index[1], set()).add(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        w.closed = True
        if w.index is None:
            self._watchers.get(w.resource, set()).discard(w)
            return
        by_value = self._indexed.get(w.resource, {}).get(w.index[0], {})
        ws = by_value.get(w.index[1])
        if ws is not None:
            ws.discard(w)
            if not ws:
                del by_value[w.index[1]]

    def watchers(self, resource: str) -> list[Watcher]:
        """The live watchers of ``resource`` (for tests and diagnostics)."""
        return [*self._watchers.get(resource, ()),
                *(w for by_value in self._indexed.get(resource, {}).values() for ws in by_value.values() for w in ws)]
