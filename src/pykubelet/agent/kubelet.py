"""The kubelet engine: sync loop, pod lifecycle and housekeeping (upstream pkg/kubelet/kubelet.go).

``Kubelet`` wires the parts together on one asyncio loop:

- the **sync loop** consumes ``PodUpdate`` values from the sources (ADD/UPDATE/DELETE/REMOVE/
  RECONCILE, upstream ``syncLoopIteration``), admits new pods (max pods, basic spec sanity — a
  rejected pod gets phase Failed with a reason, an event and a log line, never an exception) and
  hands every pod to its **pod worker** (``podworkers.PodWorkers``: serial per pod, parallel across
  pods, coalescing);
- the **PLEG** (``pleg.GenericPLEG``) relists the runtime every second and wakes the worker of any
  pod whose containers changed; its ``PodStatusCache`` is what workers read (a fresh runtime query
  is made when the cache is not newer than the worker's last sync);
- ``sync_pod`` (upstream ``SyncPod``): generate the API status from the runtime view, hand it to the
  status manager, stop if the pod is terminal, else mirror pod for static pods, pod dirs, pod
  cgroup, then ``RuntimeManager.sync_pod``; when that started containers the runtime is re-read at
  once and the new status handed to the status manager (written immediately), so ``Running``
  reaches the API without waiting for the next relist; ``sync_terminating_pod`` kills with the
  grace period (a pod force-deleted from the API is killed with the 1 s minimum);
  ``sync_terminated_pod`` removes the pod cgroup and lets the status manager confirm deletion;
- **housekeeping** every 2 s (upstream ``HandlePodCleanups``), only once all configured sources
  delivered their first full list: forget finished workers of pods no longer desired and remove
  their containers, kill and remove runtime pods nobody asked for (orphans, e.g. after a restart),
  remove orphaned pod cgroups and pod directories, remove ``/var/log/containers`` symlinks of
  containers the runtime no longer has, GC back-off entries;
- **container log rotation** (``logs.ContainerLogManager``, upstream containerLogManager): every
  ``containerLogMonitorInterval`` the logs of running containers reaching ``containerLogMaxSize``
  are rotated, keeping ``containerLogMaxFiles`` files;
- **periodic resync** of every pod each ``sync_frequency``;
- **probes** (``prober.ProbeManager``): every pod that is synced gets its probe workers, and every
  status generation feeds them the runtime view (container id, running, started) first; their
  started/ready results become the containers' ``started``/``ready`` and so the ContainersReady and
  Ready conditions; a result change wakes the pod's worker (``on_change``), whose sync then kills a
  container that failed liveness/startup (``compute_pod_actions(probe_kill=...)``) with the probe's
  grace period. Probe workers are independent tasks with their own timeouts, never the sync loop;
- **lifecycle hooks** (``lifecycle.HandlerRunner``) run by the runtime manager: postStart after
  StartContainer, preStop before StopContainer;
- **activeDeadlineSeconds** (upstream activeDeadlineHandler): a pod active longer than that since
  its startTime gets phase Failed, reason DeadlineExceeded and an event, then is killed; its worker is
  requeued for the deadline so it fires on time.

All state is rebuilt from the runtime (CRI labels/annotations) and the sources, so restarting the
agent re-adopts running containers without restarting them: their spec hash matches and the
sandbox is ready, so ``compute_pod_actions`` has nothing to do.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import copy
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

from pykubelet.agent import metrics
from pykubelet.agent.cm.podcgroups import PodCgroupManager
from pykubelet.agent.images.manager import ImageManager
from pykubelet.agent.container import runtime as rt_types
from pykubelet.agent.kuberuntime.actions import ProbeKill, backoff_key
from pykubelet.agent.kuberuntime.manager import RuntimeManager
from pykubelet.agent.lifecycle.handlers import HandlerRunner
from pykubelet.agent.logs import ContainerLogManager, cleanup_symlinks
from pykubelet.agent.pleg import GenericPLEG, PodStatusCache
from pykubelet.agent.podworkers import (
    SYNC_CREATE,
    SYNC_KILL,
    SYNC_SYNC,
    SYNC_UPDATE,
    PodWorkers,
    SyncPodResult,
    UpdatePodOptions,
)
from pykubelet.agent.prober.manager import ProbeManager, probe_containers
from pykubelet.agent.prober.results import Result
from pykubelet.agent.status.generate import generate_api_status, rfc3339
from pykubelet.agent.status.manager import StatusManager
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.common import podutil
from pykubelet.common.aio import cancel_and_wait

log = logging.getLogger(__name__)

Pod = dict[str, Any]
CONFIG_SOURCE = "kubernetes.io/config.source"


class MirrorClientProtocol(Protocol):
    async def ensure_mirror(self, static_pod: Pod) -> Pod | None: ...

    async def delete_mirror(self, namespace: str, name: str, uid: str | None = None) -> bool: ...


def is_static(pod: Pod) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(CONFIG_SOURCE, "api") != "api"


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def validate_pod(pod: Pod) -> str | None:
    """Basic sanity the engine needs; returns an error message or None."""
    md, spec = pod.get("metadata"), pod.get("spec")
    if not isinstance(md, dict) or not md.get("uid") or not md.get("name"):
        return "pod has no metadata.name/uid"
    if not isinstance(spec, dict):
        return "pod has no spec"
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return "spec.containers: Required value"
    seen: set[str] = set()
    for c in [*(spec.get("initContainers") or []), *containers]:
        if not isinstance(c, dict) or not c.get("name"):
            return "container without a name"
        if c["name"] in seen:
            return f'spec.containers: Duplicate value: "{c["name"]}"'
        seen.add(c["name"])
    return None


class Kubelet:
    def __init__(
        self,
        *,
        options: Any,
        api: Any | None,
        runtime: Any,
        recorder: Any,
        updates: asyncio.Queue[PodUpdate],
        mirror: MirrorClientProtocol | None = None,
        cgroup_mount: str = "/sys/fs/cgroup",
        pleg_period: float = 1.0,
        housekeeping_period: float = 2.0,
        status_reconcile_period: float = 10.0,
    ) -> None:
        self.options = options
        self.config = options.config
        self.api = api
        self.runtime = runtime
        self.recorder = recorder
        self.updates = updates
        self.node_name: str = options.node_name
        self.host_ips = [options.node_ip] if getattr(options, "node_ip", None) else []
        self.root_dir = Path(options.root_dir)
        if mirror is None and api is not None:
            from pykubelet.agent.sources.mirror import MirrorClient

            mirror = MirrorClient(api, self.node_name)
        self.mirror = mirror
        cfg = self.config
        self.images = ImageManager(runtime, recorder, api=api, serialize=cfg.serialize_image_pulls,
                                   max_parallel=cfg.max_parallel_image_pulls)
        self.cgroups = PodCgroupManager(cfg.cgroup_root, enabled=cfg.cgroups_per_qos, mount=cgroup_mount)
        self.runtime_manager = RuntimeManager(
            runtime, images=self.images, recorder=recorder, pod_logs_dir=str(cfg.pod_logs_dir),
            node_name=self.node_name, host_ips=self.host_ips, cgroup_parent=self.cgroups.cgroup_parent,
            lookup=self._lookup if api is not None else None, cluster_dns=list(cfg.cluster_dns),
            cluster_domain=cfg.cluster_domain or "cluster.local", resolv_conf=cfg.resolv_conf,
            pods_dir=str(self.root_dir / "pods"), hooks=HandlerRunner(runtime, recorder),
        )
        self.log_manager = ContainerLogManager(
            runtime, max_size=cfg.container_log_max_size, max_files=cfg.container_log_max_files,
            interval=cfg.container_log_monitor_interval,
        )
        self.probes = ProbeManager(runtime, recorder, on_change=self._on_probe_change)
        self.cache = PodStatusCache()
        self.pleg = GenericPLEG(self.runtime_manager, self.cache, self._on_pleg_event, relist_period=pleg_period)
        self.status_manager = StatusManager(api, reconcile_period=status_reconcile_period)
        self.pod_workers = PodWorkers(self)
        self.housekeeping_period = housekeeping_period
        self._pods: dict[str, Pod] = {}
        self._rejected: set[str] = set()
        self._last_sync: dict[str, float] = {}
        self._first_seen: dict[str, float] = {}
        self._sources_ready: set[str] = set()
        self._required_sources = set()
        if api is not None:
            self._required_sources.add("api")
        if cfg.static_pod_path:
            self._required_sources.add("file")
        self._tasks: list[asyncio.Task[None]] = []
        self._orphan_kills: dict[str, asyncio.Task[None]] = {}
        self._loop_active = time.monotonic()
        self._runtime_ready = False
        self._network_ready = False
        self._runtime_checked = 0.0
        self.housekeeping_runs = 0
        metrics.NODE_NAME.labels(self.node_name).set(1)

    async def _lookup(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """ConfigMap/Secret lookups for container env (None when absent)."""
        if self.api is None:
            return None
        plural = {"ConfigMap": "configmaps", "Secret": "secrets"}[kind]
        try:
            obj: dict[str, Any] = await self.api.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
            return obj
        except Exception as e:
            if getattr(e, "status", None) == 404:
                return None
            raise

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        with contextlib.suppress(OSError):
            (self.root_dir / "pods").mkdir(parents=True, exist_ok=True)
        await self._check_runtime()
        try:
            await self.pleg.relist()  # seed the cache before the first sync
        except Exception as e:
            log.warning("initial relist failed: %s", e)
        self.pleg.start()
        self.status_manager.start()
        self.log_manager.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._sync_loop(), name="kubelet-sync-loop"),
            loop.create_task(self._housekeeping_loop(), name="kubelet-housekeeping"),
            loop.create_task(self._resync_loop(), name="kubelet-resync"),
        ]

    async def stop(self) -> None:
        """Stop the loops; never touches containers."""
        await cancel_and_wait(*self._tasks, *self._orphan_kills.values())
        self._tasks = []
        await self.log_manager.stop()
        await self.pod_workers.stop()
        await self.probes.stop()
        if self.runtime_manager.hooks is not None:
            await self.runtime_manager.hooks.close()
        await self.pleg.stop()
        await self.status_manager.stop()

    def mark_source_ready(self, source: str) -> None:
        self._sources_ready.add(source)

    def sources_ready(self) -> bool:
        return self._required_sources <= self._sources_ready

    # ------------------------------------------------------------------ queries
    def pods(self) -> list[Pod]:
        out = []
        for uid, pod in self._pods.items():
            p = copy.deepcopy(pod)
            st = self.status_manager.get_pod_status(uid)
            if st is not None:
                p["status"] = st
            out.append(p)
        return out

    def get_pod_by_name(self, namespace: str, name: str) -> Pod | None:
        for p in self.pods():
            md = p.get("metadata") or {}
            if md.get("namespace") == namespace and md.get("name") == name:
                return p
        return None

    def get_pod_by_uid(self, uid: str) -> Pod | None:
        pod = self._pods.get(uid)
        return copy.deepcopy(pod) if pod is not None else None

    def running_pod_count(self) -> int:
        return sum(1 for uid in self.cache.uids() if any(s.ready for s in self.cache.get(uid).sandboxes))

    def sync_loop_healthy(self) -> bool:
        return time.monotonic() - self._loop_active < max(2 * self.config.sync_frequency, 30.0)

    def pleg_healthy(self) -> bool:
        return self.pleg.healthy()

    def runtime_up(self) -> bool:
        return self._runtime_ready

    def network_ready(self) -> bool:
        return self._network_ready

    # ------------------------------------------------------------------ sync loop
    async def _sync_loop(self) -> None:
        while True:
            update = await self.updates.get()
            self._loop_active = time.monotonic()
            try:
                self.handle_update(update)
            except Exception:
                log.exception("failed to handle pod update %s from %s", update.op, update.source)

    def handle_update(self, update: PodUpdate) -> None:
        for pod in update.pods:
            try:
                self._handle_pod(update.op, pod)
            except Exception:
                md = pod.get("metadata") if isinstance(pod, dict) else None
                log.exception("bad pod in %s update: %s", update.op.value, md)

    def _handle_pod(self, op: PodOp, pod: Pod) -> None:
        uid = _uid(pod)
        if op == PodOp.ADD or (op in (PodOp.UPDATE, PodOp.DELETE) and uid not in self._pods):
            if uid in self._pods:
                op = PodOp.UPDATE
            else:
                self._admit(pod)
                return
        if op in (PodOp.UPDATE, PodOp.DELETE):
            self._pods[uid] = pod
            if uid in self._rejected:
                return
            self.pod_workers.update_pod(UpdatePodOptions(SYNC_UPDATE, pod))
        elif op == PodOp.REMOVE:
            self._pods.pop(uid, None)
            self._rejected.discard(uid)
            if is_static(pod) and self.mirror is not None:
                md = pod.get("metadata") or {}
                asyncio.get_running_loop().create_task(
                    self._delete_mirror(md.get("namespace", "default"), md.get("name", "")))
            if self.pod_workers.get(uid) is not None:
                # An API pod only disappears before the agent confirmed its termination when it was
                # force-deleted (grace 0): upstream's API server first shows the kubelet
                # deletionGracePeriodSeconds=0, so kill with the shortest grace (1 s), not the spec's.
                # Static pods removed from the manifest dir keep their own grace period.
                kill_grace = None if is_static(pod) else 0
                self.pod_workers.update_pod(UpdatePodOptions(SYNC_KILL, pod, kill_grace=kill_grace))
        elif op == PodOp.RECONCILE:
            if uid in self._pods:
                self._pods[uid] = pod
                self.status_manager.reconcile(pod)

    async def _delete_mirror(self, namespace: str, name: str) -> None:
        assert self.mirror is not None
        try:
            await self.mirror.delete_mirror(namespace, name)
        except Exception as e:
            log.warning("deleting mirror pod %s/%s: %s", namespace, name, e)

    def _admit(self, pod: Pod) -> None:
        uid = _uid(pod)
        err = validate_pod(pod)
        if err is not None:
            self._reject(pod, "InvalidPodSpec", f"Pod was rejected: {err}")
            return
        self._pods[uid] = pod
        self._first_seen.setdefault(uid, time.monotonic())
        if not podutil.is_terminal(pod):
            active = sum(
                1 for u, p in self._pods.items()
                if u != uid and u not in self._rejected and not podutil.is_terminal(p)
                and not self.pod_workers.is_terminating(u)
            )
            if active >= self.config.max_pods and self.pod_workers.get(uid) is None:
                self._reject(
                    pod, "OutOfpods",
                    f"Node didn't have enough resource: pods, requested: 1, used: {active}, "
                    f"capacity: {self.config.max_pods}",
                )
                return
        self.pod_workers.update_pod(UpdatePodOptions(SYNC_CREATE, pod))

    def _reject(self, pod: Pod, reason: str, message: str) -> None:
        """Upstream rejectPod: event + phase Failed with reason/message; the pod never runs."""
        uid = _uid(pod)
        log.warning("rejecting pod %s: %s %s", (pod.get("metadata") or {}).get("name"), reason, message)
        if uid:
            self._pods[uid] = pod
            self._rejected.add(uid)
        self.recorder.event(pod, "Warning", reason, message)
        if not uid:
            return
        old = pod.get("status") or {}
        status = {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "startTime": old.get("startTime") or rfc3339(),
            "conditions": old.get("conditions") or [],
        }
        if self.host_ips:
            status["hostIP"] = self.host_ips[0]
            status["hostIPs"] = [{"ip": ip} for ip in self.host_ips]
        self.status_manager.set_pod_status(pod, status)

    def _on_pleg_event(self, uid: str, events: list[str]) -> None:
        pod = self._pods.get(uid)
        st = self.pod_workers.get(uid)
        if pod is not None and uid not in self._rejected:
            self.pod_workers.update_pod(UpdatePodOptions(SYNC_SYNC, pod))
        elif st is not None and not st.finished:
            self.pod_workers.update_pod(UpdatePodOptions(SYNC_SYNC, st.pod))

    def _on_probe_change(self, uid: str) -> None:
        """A probe result changed: re-sync the pod (readiness → status, liveness → kill)."""
        self._on_pleg_event(uid, ["probe"])

    def _feed_probes(self, pod: Pod, status: rt_types.RuntimePodStatus) -> dict[str, tuple[bool, bool]]:
        """Give the prober the runtime view, return name → (started, ready) for probed containers."""
        uid = _uid(pod)
        views: dict[str, tuple[str, bool, float | None]] = {}
        for c in probe_containers(pod):
            cs = status.find_container(c.get("name", ""))
            if cs is not None:
                views[cs.name] = (cs.id, cs.state == rt_types.STATE_RUNNING, cs.started_at or None)
        self.probes.update_pod_status(pod, views, (status.ips or [""])[0])
        return {n: (self.probes.is_started(uid, n), self.probes.is_ready(uid, n)) for n in views}

    def _probe_kill(self, pod: Pod) -> Any:
        def decide(name: str, container_id: str) -> ProbeKill | None:
            d = self.probes.kill_decision(pod, name)
            # only act on a result about this very container (never on a stale id's)
            if d is None or self.probes.result_for(d.probe_type, container_id) is not Result.FAILURE:
                return None
            return ProbeKill(d.reason, d.message, d.grace_period)
        return decide

    def _active_deadline_left(self, pod: Pod, status: dict[str, Any]) -> float | None:
        """Seconds until spec.activeDeadlineSeconds passes (counted from status.startTime), or None."""
        ads = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        start = status.get("startTime")
        if ads is None or not start:
            return None
        try:
            t0 = calendar.timegm(time.strptime(str(start), "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            return None
        return t0 + float(ads) - time.time()

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(max(1.0, self.config.sync_frequency))
            self._loop_active = time.monotonic()
            for uid, pod in list(self._pods.items()):
                if uid not in self._rejected:
                    self.pod_workers.update_pod(UpdatePodOptions(SYNC_SYNC, pod))

    # ------------------------------------------------------------------ pod sync (PodSyncer)
    async def _runtime_status(self, uid: str) -> rt_types.RuntimePodStatus:
        last = self._last_sync.get(uid, 0.0)
        if self.cache.newer_than(uid, last) and self.cache.has(uid):
            return self.cache.get(uid)
        st = await self.runtime_manager.get_pod_status(uid)
        self.cache.set(uid, st)  # ignored if the PLEG stored a newer view meanwhile
        return self.cache.get(uid)

    def _generate(self, pod: Pod, status: rt_types.RuntimePodStatus, *, terminal: bool = False) -> dict[str, Any]:
        uid = _uid(pod)
        p = pod
        cached = self.status_manager.get_pod_status(uid)
        if cached is not None:
            p = {**pod, "status": cached}
        probes = self._feed_probes(p, status)
        return generate_api_status(
            p, status, reasons=self.runtime_manager.reasons_for(uid), host_ips=self.host_ips,
            qos_class=podutil.qos_class(pod), pod_is_terminal=terminal, probes=probes,
        )

    def _make_pod_dirs(self, uid: str) -> None:
        base = self.root_dir / "pods" / uid
        for sub in ("volumes", "plugins", "containers"):
            (base / sub).mkdir(parents=True, exist_ok=True)

    async def sync_pod(self, update_type: str, pod: Pod, mirror_pod: Pod | None) -> SyncPodResult:
        uid = _uid(pod)
        rt = await self._runtime_status(uid)
        status = self._generate(pod, rt)
        self.status_manager.set_pod_status(pod, status)
        if status.get("phase") in ("Succeeded", "Failed"):
            return SyncPodResult(terminal=True)
        deadline_left = self._active_deadline_left(pod, status)
        if deadline_left is not None and deadline_left <= 0:
            msg = "Pod was active on the node longer than the specified deadline"
            self.recorder.event(pod, "Normal", "DeadlineExceeded", msg)
            self.status_manager.set_pod_status(
                pod, {**status, "phase": "Failed", "reason": "DeadlineExceeded", "message": msg})
            return SyncPodResult(terminal=True)
        self.probes.add_pod(pod)
        if status.get("phase") == "Running" and uid in self._first_seen:
            metrics.POD_START_DURATION.observe(time.monotonic() - self._first_seen.pop(uid))
        if is_static(pod) and self.mirror is not None:
            try:
                await self.mirror.ensure_mirror(pod)
            except Exception as e:
                log.warning("mirror pod for %s: %s", (pod.get("metadata") or {}).get("name"), e)
        try:
            await asyncio.to_thread(self._make_pod_dirs, uid)
        except OSError as e:
            log.warning("pod dirs for %s: %s", uid, e)
        await self.cgroups.ensure(pod)
        result = await self.runtime_manager.sync_pod(pod, rt, probe_kill=self._probe_kill(pod),
                                                     started=lambda n: self.probes.is_started(uid, n))
        self._last_sync[uid] = time.time()
        if result.started:
            # report what we just started at once instead of after the next PLEG relist (up to 1 s)
            rt = await self._refresh_after_start(pod, rt)
        elif result.actions is not None and not result.actions.kill_pod:
            # nothing changed in the runtime: refresh waiting reasons (CrashLoopBackOff, ...) now
            self.status_manager.set_pod_status(pod, self._generate(pod, rt))
        with contextlib.suppress(Exception):
            await self.runtime_manager.gc_pod(rt)
        requeue: float | None = None
        if result.actions is not None and result.actions.backoff:
            # wake up when the first crash-loop back-off expires (nothing else would)
            remaining = [
                self.runtime_manager.backoff.remaining(backoff_key(pod, c), cs.finished_at)
                for name in result.actions.backoff
                if (c := podutil.find_container(pod, name)) is not None
                and (cs := rt.find_container(name)) is not None
            ]
            requeue = max(0.5, min(remaining, default=1.0) + 0.2)
        elif result.error:
            requeue = 5.0
        if deadline_left is not None:
            requeue = min(requeue if requeue is not None else deadline_left + 0.2, deadline_left + 0.2)
        return SyncPodResult(terminal=False, requeue_after=requeue)

    async def _refresh_after_start(self, pod: Pod, rt: rt_types.RuntimePodStatus) -> rt_types.RuntimePodStatus:
        """Re-read the runtime after starting containers and hand the new status over at once.

        The status manager writes it immediately (no batching), so the first ``Running`` reaches the
        API a few milliseconds after StartContainer returned; the PLEG's next relist then finds the
        cache already up to date for this pod.
        """
        uid = _uid(pod)
        try:
            fresh = await self.runtime_manager.get_pod_status(uid)
        except Exception as e:
            log.debug("runtime status of pod %s after start: %s", uid, e)
            return rt
        self.cache.set(uid, fresh)
        status = self._generate(pod, fresh)
        self.status_manager.set_pod_status(pod, status)
        if status.get("phase") == "Running" and uid in self._first_seen:
            metrics.POD_START_DURATION.observe(time.monotonic() - self._first_seen.pop(uid))
        return fresh

    async def sync_terminating_pod(self, pod: Pod, grace: int | None) -> None:
        uid = _uid(pod)
        rt = await self.runtime_manager.get_pod_status(uid)
        self.cache.set(uid, rt)
        await self.runtime_manager.kill_pod(pod, rt, grace)
        rt = await self.runtime_manager.get_pod_status(uid)
        self.cache.set(uid, rt)
        self._last_sync[uid] = time.time()
        if uid not in self._rejected:
            self.status_manager.set_pod_status(pod, self._generate(pod, rt, terminal=True))

    async def sync_terminated_pod(self, pod: Pod) -> None:
        uid = _uid(pod)
        self.probes.remove_pod(uid)
        await self.cgroups.destroy(uid)
        self.status_manager.terminated(uid)

    # ------------------------------------------------------------------ housekeeping
    async def _check_runtime(self) -> None:
        try:
            resp = await self.runtime.status()
            conds = {c.type: c.status for c in resp.status.conditions}
            self._runtime_ready = conds.get("RuntimeReady", False)
            self._network_ready = conds.get("NetworkReady", False)
        except Exception as e:
            log.warning("runtime status: %s", e)
            self._runtime_ready = self._network_ready = False
        self._runtime_checked = time.monotonic()

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(self.housekeeping_period)
            self._loop_active = time.monotonic()
            try:
                await self.housekeeping()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("housekeeping failed")

    async def housekeeping(self) -> None:
        if time.monotonic() - self._runtime_checked > 5:
            await self._check_runtime()
        if not self.sources_ready():
            return
        self.housekeeping_runs += 1
        desired = set(self._pods)
        self.probes.cleanup_pods(u for u in desired if not self.pod_workers.is_terminated(u))
        # finished workers of pods gone from the config: forget them and remove their containers
        for uid in self.pod_workers.known_uids():
            st = self.pod_workers.get(uid)
            if st is None or uid in desired:
                continue
            if st.state == "syncing":
                self.pod_workers.update_pod(UpdatePodOptions(SYNC_KILL, st.pod))
                continue
            if not st.finished:
                continue
            self.pod_workers.forget(uid)
            status = await self.runtime_manager.get_pod_status(uid)
            await self.runtime_manager.remove_pod(status)
            self.cache.delete(uid)
            self.status_manager.forget(uid)
            self._last_sync.pop(uid, None)
        # runtime pods nobody wants (orphans): kill and remove them
        listed_at = time.time()
        listing = await self.runtime_manager.list_runtime()
        for uid in listing.pods:
            if uid in desired or self.pod_workers.get(uid) is not None or uid in self._orphan_kills:
                continue
            self._orphan_kills[uid] = asyncio.get_running_loop().create_task(self._remove_orphan(uid))
        # orphaned pod cgroups and pod directories
        known = desired | set(self.pod_workers.known_uids()) | set(listing.pods)
        for uid in await self.cgroups.list_pod_uids():
            if uid not in known:
                await self.cgroups.destroy(uid)
        await asyncio.to_thread(self._cleanup_pod_dirs, known)
        # legacy log symlinks of containers the runtime no longer has (upstream container GC)
        await asyncio.to_thread(cleanup_symlinks, self.runtime_manager.containers_log_dir,
                                {c.id for c in listing.containers},
                                created_before=listed_at - 1.0)  # file times use a coarse clock
        self.runtime_manager.backoff.gc()
        self.images.backoff.gc()

    async def _remove_orphan(self, uid: str) -> None:
        try:
            status = await self.runtime_manager.get_pod_status(uid)
            grace = 2
            for c in status.containers:
                log.info("killing orphaned container %s of pod %s/%s (%s)", c.name, status.namespace,
                         status.name, uid)
            await self.runtime_manager.kill_pod(None, status, grace)
            status = await self.runtime_manager.get_pod_status(uid)
            await self.runtime_manager.remove_pod(status)
            await self.cgroups.destroy(uid)
            self.cache.delete(uid)
        except Exception as e:
            log.warning("removing orphaned pod %s: %s", uid, e)
        finally:
            self._orphan_kills.pop(uid, None)

    def _cleanup_pod_dirs(self, known: set[str]) -> None:
        base = self.root_dir / "pods"
        if not base.is_dir():
            return
        try:
            with open("/proc/mounts") as f:
                mounts = [line.split()[1] for line in f]
        except OSError:
            mounts = []
        for d in base.iterdir():
            if d.name in known or not d.is_dir():
                continue
            prefix = str(d) + os.sep
            if any(m.startswith(prefix) for m in mounts):
                continue  # volumes still mounted: never delete through a mount
            shutil.rmtree(d, ignore_errors=True)
