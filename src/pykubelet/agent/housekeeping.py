"""Housekeeping: removing what no desired pod needs any more (upstream ``HandlePodCleanups``).

Every ``housekeeping_period`` (2 s), and only once every configured pod source delivered its first
full list (before that, "not desired" may just mean "not listed yet" — upstream waits for
``sourcesReady`` for the same reason), one pass over the runtime's listing — the PLEG's last one when
it is recent and newer than anything housekeeping removed (upstream reads the PLEG's runtime cache),
else a fresh one:

1. forgets the finished pod workers of pods gone from the config and removes their containers and
   sandboxes; a pod still syncing that left the config is told to terminate;
2. kills and removes runtime pods nobody asked for (orphans, e.g. pods deleted while the agent was
   down), each in its own task so a slow kill never delays the pass;
3. runs the registered ``HousekeepingStep``s with the sets of pods the node knows (taken after the
   awaits of 1. and 2.; the sync loop hands no pod update over until the steps are done, so no pod
   is added behind their backs, as in upstream's syncLoop, which runs both): pod cgroups, pod
   directories and pod log directories of unknown pods, ``/var/log/containers`` links of containers
   the runtime no longer has (once a minute, with container GC, as upstream), back-off entries. A new
   subsystem that leaves debris per pod adds a step here; a step whose upstream counterpart runs less
   often keeps its own period.

Steps are independent: one failing is logged and the others still run.

A pass over 1,000 pods that are all where they should be does its per-pod work in set operations
(which pods have a worker but are not desired, which runtime pods nobody knows): its Python work grows
with the pods out of place, not with all pods (the probe cleanup step likewise).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pykubelet.agent.interfaces import HousekeepingContext, HousekeepingStep
from pykubelet.agent.kuberuntime.manager import RuntimeListing, RuntimeManager
from pykubelet.agent.logs import cleanup_symlinks
from pykubelet.agent.pleg import PodStatusCache
from pykubelet.agent.podmanager import PodManager
from pykubelet.agent.podworkers import PodWorkers, PodWorkerState, SyncPodType, UpdatePodOptions
from pykubelet.common.aio import cancel_and_wait

log = logging.getLogger(__name__)

PodForgotten = Callable[[str], None]  # called with the uid of a pod the node no longer has

ORPHAN_GRACE = 2  # seconds: an orphan's spec is unknown, upstream kills it with a short grace
MAX_LISTING_AGE = 2.0  # seconds: how old a runtime listing a pass may reuse (the PLEG relists every 1 s)
LOG_LINKS_PERIOD = 60.0  # upstream ContainerGCPeriod, which removes the stale log links
# the longest the sync loop holds pod updates back for a pass's steps (``wait_for_pass``)
PASS_WAIT_LIMIT = 5.0
# the pod (log) directory steps list at least this often (directory_step_on_change)
DIRECTORY_RESCAN_PERIOD = 60.0


@dataclass
class _Step:
    name: str
    fn: HousekeepingStep


class Housekeeping:
    def __init__(
        self,
        *,
        pods: PodManager,
        workers: PodWorkers,
        runtime: RuntimeManager,
        cache: PodStatusCache,
        on_pod_forgotten: list[PodForgotten] | None = None,
    ) -> None:
        self.pods = pods
        self.workers = workers
        self.runtime = runtime
        self.cache = cache
        self._steps: list[_Step] = []
        self._forget = list(on_pod_forgotten or [])
        self._orphan_kills: dict[str, asyncio.Task[None]] = {}
        self._removed_at = 0.0  # when housekeeping last removed a pod's containers (older listings are stale)
        self._pass_done = asyncio.Event()  # clear while a pass's steps run (``wait_for_pass``)
        self._pass_done.set()
        self._overdue = False  # this pass's steps outlasted PASS_WAIT_LIMIT: updates no longer wait
        self._running_step = ""
        self.runs = 0

    def add_step(self, name: str, fn: HousekeepingStep) -> None:
        self._steps.append(_Step(name, fn))

    def on_pod_forgotten(self, fn: PodForgotten) -> None:
        """``fn(uid)`` runs when a finished pod is forgotten (status manager, cache, ...)."""
        self._forget.append(fn)

    async def stop(self) -> None:
        await cancel_and_wait(*self._orphan_kills.values())

    async def run(self) -> None:
        self.runs += 1
        await self._forget_finished(self.pods.uids())
        listing = await self._listing()
        # From the snapshot of the node's pods to the last step no pod may be added (the sync loop
        # waits in ``wait_for_pass``): a pod added after the snapshot would be "unknown" to the steps
        # while its first sync makes its probe workers, directories and cgroup, and they would remove
        # them. Upstream's syncLoop runs HandlePodCleanups and pod additions in one goroutine.
        self._pass_done.clear()
        try:
            desired = self.pods.uids()
            # set differences first: the Python work of a pass grows with the pods out of place
            for uid in listing.pods.keys() - desired - self._orphan_kills.keys():
                if self.workers.get(uid) is not None:
                    continue
                self._orphan_kills[uid] = asyncio.get_running_loop().create_task(
                    self._remove_orphan(uid), name=f"orphan-{uid}")
            ctx = HousekeepingContext(
                desired=frozenset(desired),
                known=frozenset(desired | set(self.workers.known_uids()) | set(listing.pods)),
                runtime_container_ids=listing.container_ids,
                listed_at=listing.listed_at,
            )
            for step in self._steps:
                self._running_step = step.name
                try:
                    await step.fn(ctx)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("housekeeping step %s failed", step.name)
        finally:
            self._overdue = False
            self._pass_done.set()

    async def wait_for_pass(self) -> None:
        """Return when no pass is between its snapshot of the node's pods and the end of its steps
        (at once, nearly always: a pass's steps take a few milliseconds). A step that hangs (an
        unmount stuck in the kernel) holds pod updates back for ``PASS_WAIT_LIMIT`` once, with a
        warning; after that they go on for the rest of that pass (the node keeps taking pods)."""
        if self._pass_done.is_set() or self._overdue:
            return
        try:
            async with asyncio.timeout(PASS_WAIT_LIMIT):
                await self._pass_done.wait()
        except TimeoutError:
            self._overdue = True
            log.warning("housekeeping step %r has run for over %.0f s: pod updates are handed over "
                        "while it runs", self._running_step, PASS_WAIT_LIMIT)

    async def _listing(self) -> RuntimeListing:
        """The runtime's last listing (the PLEG's, at most ``MAX_LISTING_AGE`` old) when it was taken
        after everything housekeeping removed, else a fresh one: upstream's HandlePodCleanups reads
        the runtime cache the PLEG keeps instead of listing again (a second full listing of 1,000
        pods every 2 s was a large part of an idle agent's CPU)."""
        last = self.runtime.last_listing
        if last is not None and last.listed_at > self._removed_at and time.time() - last.listed_at < MAX_LISTING_AGE:
            return last
        return await self.runtime.list_runtime()

    async def _forget_finished(self, desired: set[str]) -> None:
        """Finished workers of pods gone from the config: forget them and remove their containers."""
        for uid in set(self.workers.known_uids()) - desired:  # C-level set work, Python only per change
            st = self.workers.get(uid)
            if st is None:
                continue
            if st.state is PodWorkerState.SYNCING:
                self.workers.update_pod(UpdatePodOptions(SyncPodType.KILL, st.pod))
                continue
            if not st.finished:
                continue
            self.workers.forget(uid)
            status = await self.runtime.get_pod_status(uid)
            await self.runtime.remove_pod(status)
            self._removed_at = time.time()
            self.cache.delete(uid)
            for fn in self._forget:
                fn(uid)

    async def _remove_orphan(self, uid: str) -> None:
        try:
            status = await self.runtime.get_pod_status(uid)
            for c in status.containers:
                log.info("killing orphaned container %s of pod %s/%s (%s)", c.name, status.namespace,
                         status.name, uid)
            await self.runtime.kill_pod(None, status, ORPHAN_GRACE)
            status = await self.runtime.get_pod_status(uid)
            await self.runtime.remove_pod(status)
            self.cache.delete(uid)
            for fn in self._forget:
                fn(uid)
        except Exception as e:
            log.warning("removing orphaned pod %s: %s", uid, e)
        finally:
            self._removed_at = time.time()
            self._orphan_kills.pop(uid, None)


def remove_pod_dirs(base: Path, known: frozenset[str]) -> None:
    """Remove ``<root>/pods/<uid>`` of pods the node no longer knows, never through a mount.

    Runs every 2 s: one scandir when every directory belongs to a known pod; ``/proc/mounts`` (large
    with many pods) is read only when there is something to remove."""
    try:
        unknown = [e.path for e in os.scandir(base) if e.name not in known and e.is_dir()]
    except OSError:
        return
    if not unknown:
        return
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f]
    except OSError:
        mounts = []
    for d in unknown:
        prefix = d + os.sep
        if any(m.startswith(prefix) for m in mounts):
            continue  # volumes still mounted: never delete through a mount
        shutil.rmtree(d, ignore_errors=True)


def remove_pod_log_dirs(pod_logs_dir: Path, known: frozenset[str]) -> None:
    """Remove ``<podLogsDir>/<namespace>_<name>_<uid>`` of pods the node no longer has (upstream
    container GC ``evictPodLogsDirectories``). A pod that still exists keeps its directory, and so
    the log of its newest dead container that ``kubectl logs --previous`` reads."""
    if not pod_logs_dir.is_dir():
        return
    for d in pod_logs_dir.iterdir():
        uid = d.name.rsplit("_", 1)[-1]
        if d.name.count("_") < 2 or uid in known or not d.is_dir() or d.is_symlink():
            continue
        shutil.rmtree(d, ignore_errors=True)


def unknown_pod_dirs_left(base: Path, known: frozenset[str]) -> bool:
    """Whether ``<root>/pods`` still holds a directory of an unknown pod (one ``remove_pod_dirs``
    left because volumes are still mounted below it)."""
    try:
        with os.scandir(base) as entries:
            return any(e.name not in known and e.is_dir() for e in entries)
    except OSError:
        return False


def unknown_pod_log_dirs_left(base: Path, known: frozenset[str]) -> bool:
    """Whether the pod logs directory still holds a ``<namespace>_<name>_<uid>`` directory of an
    unknown pod (one ``remove_pod_log_dirs`` failed to remove)."""
    try:
        with os.scandir(base) as entries:
            return any(e.name.count("_") >= 2 and e.name.rsplit("_", 1)[-1] not in known
                       and e.is_dir(follow_symlinks=False) for e in entries)
    except OSError:
        return False


def directory_step_on_change(remove: Callable[[Path, frozenset[str]], None],
                             left: Callable[[Path, frozenset[str]], bool], base: Path, *,
                             period: float = DIRECTORY_RESCAN_PERIOD,
                             clock: Callable[[], float] = time.monotonic) -> HousekeepingStep:
    """A housekeeping step that removes the per-pod directories under ``base`` of pods outside
    ``ctx.known`` (``remove``), in a thread, only when it can find something: when the known pods
    differ from those of the last pass that left nothing behind (``left``), or ``period`` passed since
    it (a directory made outside the agent). A directory is made only for a known pod, so with the
    same known pods the listing finds what it found last time."""
    clean: tuple[frozenset[str], float] | None = None  # the known pods and time of the last clean pass

    def work(known: frozenset[str]) -> bool:
        remove(base, known)
        return not left(base, known)

    async def step(ctx: HousekeepingContext) -> None:
        nonlocal clean
        now = clock()
        if clean is not None and clean[0] == ctx.known and now - clean[1] < period:
            return
        clean = (ctx.known, now) if await asyncio.to_thread(work, ctx.known) else None
    return step


def log_links_step(containers_log_dir: str, *, period: float = LOG_LINKS_PERIOD,
                   clock: Callable[[], float] = time.monotonic) -> HousekeepingStep:
    """Legacy ``/var/log/containers`` links of containers the runtime no longer has, at most every
    ``period`` (upstream removes them in container GC's ``evictPodLogsDirectories``, every
    ``ContainerGCPeriod``: 1 min; a pass over 1,000 links every 2 s was work for nothing)."""
    last: float | None = None

    async def step(ctx: HousekeepingContext) -> None:
        nonlocal last
        if last is not None and clock() - last < period:
            return
        last = clock()
        await asyncio.to_thread(cleanup_symlinks, containers_log_dir, set(ctx.runtime_container_ids),
                                created_before=ctx.listed_at - 1.0)  # file times use a coarse clock
    return step
