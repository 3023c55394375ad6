"""The kubelet engine: the sync loop and the wiring of the pod subsystems (upstream pkg/kubelet/kubelet.go).

``Kubelet`` builds the per-pod machinery and runs the loops that feed it, on one asyncio loop:

- the **sync loop** consumes ``PodUpdate`` values from the sources (ADD/UPDATE/DELETE/REMOVE/
  RECONCILE, upstream ``syncLoopIteration``), keeps the **pod manager** (``podmanager``) up to date,
  runs every new pod through the **admission chain** (``admission``; a refused pod gets phase Failed
  with the handler's reason and an event, never an exception) and hands every admitted pod to its
  **pod worker** (``podworkers``: serial per pod, parallel across pods, coalescing), which runs the
  **pod syncer** (``podsyncer``: what one sync does);
- the **PLEG** (``pleg``) relists the runtime every second and emits typed ``PodLifecycleEvent``s; the
  sync-worthy ones (``is_sync_pod_worthy``) wake the pod's worker; its ``PodStatusCache`` is what
  workers read;
- **probes** (``prober``): a result change wakes the pod's worker, whose sync then reports readiness
  or kills a container that failed liveness/startup;
- **housekeeping** (``housekeeping``) every 2 s once all sources are ready: forgotten pods, orphans,
  and the registered cleanup steps (pod cgroups, pod volumes, pod directories, log links, back-off
  entries);
- **volumes** (``volumemanager``): a pod's volumes are set up before its containers start (a pod hook),
  containers get their mounts from it, and it refreshes ConfigMap/Secret/downward API content;
- **periodic resync** of every pod each ``syncFrequency`` (per pod worker, jittered as upstream) and
  **container log rotation**.

All state is rebuilt from the runtime (CRI labels/annotations) and the sources, so restarting the
agent re-adopts running containers without restarting them: their spec hash matches and the
sandbox is ready, so ``compute_pod_actions`` has nothing to do.

The agent's own periodic loops (PLEG, housekeeping, runtime check, image GC, CPU manager reconcile) and
the pods' due resyncs start on multiples of their periods on the loop clock (``common.ticks``), so an
idle node wakes once a second for all of them instead of once per loop and pod. Housekeeping's pod and
pod-log directory steps list their directory only when the node's known pods changed since a pass that
left nothing behind, and at least every ``housekeeping.DIRECTORY_RESCAN_PERIOD`` (an idle node's 2-s
passes were two thread hops and two directory listings that found nothing, ~1 thread job a second).

Where new subsystems plug in is described in ``interfaces``: ``self.admission.append(handler)``,
``self.pod_hooks`` (before containers start), ``self.housekeeping.add_step(name, step)``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path

from pykubelet.agent import metrics
from pykubelet.agent.admission import AdmissionChain, MaxPodsAdmitHandler, ValidPodAdmitHandler
from pykubelet.agent.admission_security import AppArmorAdmitHandler, SysctlAdmitHandler
from pykubelet.agent.cm.admission import NodeAdmitAttributes, NodeUsage, PredicateAdmitHandler
from pykubelet.agent.cm.cgroups import milli_cpu_to_quota
from pykubelet.agent.cm.checks import enforce_node_allocatable, reserved_amounts, run_startup_checks
from pykubelet.agent.cm.cpumanager import CPUManager
from pykubelet.agent.cm.podcgroups import PodCgroupManager
from pykubelet.agent.cm.systemd import SystemdDbusUnits
from pykubelet.agent.config import AgentOptions
from pykubelet.agent.eviction import EvictionManager, eviction_config
from pykubelet.agent.housekeeping import (
    Housekeeping,
    directory_step_on_change,
    log_links_step,
    remove_pod_dirs,
    remove_pod_log_dirs,
    unknown_pod_dirs_left,
    unknown_pod_log_dirs_left,
)
from pykubelet.agent.images.gc import GCPolicy, ImageGCManager
from pykubelet.agent.images.manager import ImageManager
from pykubelet.agent.interfaces import (
    ContainerRuntime,
    EventRecorder,
    HousekeepingContext,
    MirrorClient,
    PodAdmitAttributes,
    PodLifecycleHook,
)
from pykubelet.agent.kuberuntime.gc import ContainerGC, ContainerGCPolicy
from pykubelet.agent.kuberuntime.manager import RuntimeManager
from pykubelet.agent.kuberuntime.security import SecurityOptions, apparmor_enabled
from pykubelet.agent.lifecycle.handlers import HandlerRunner
from pykubelet.agent.logs import ContainerLogManager
from pykubelet.agent.nodestatus import machine, pressure, setters
from pykubelet.agent.pleg import GenericPLEG, PodLifecycleEvent, PodStatusCache, is_sync_pod_worthy
from pykubelet.agent.podmanager import PodManager, pod_uid
from pykubelet.agent.podsyncer import PodDirectories, PodSyncer
from pykubelet.agent.podworkers import PodWorkers, SyncPodType, UpdatePodOptions
from pykubelet.agent.prober.manager import ProbeManager
from pykubelet.agent.server.stats import StatsProvider
from pykubelet.agent.sources.mirror import MirrorClient as ApiMirrorClient
from pykubelet.agent.status.generate import rfc3339
from pykubelet.agent.status.manager import NEW_POD_STATUS_DELAY, StatusManager
from pykubelet.agent.types import JSONObj, Pod, PodOp, PodUpdate
from pykubelet.agent.volumemanager import Mounter, VolumeManager
from pykubelet.common import podutil
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.common.procfs import read_meminfo
from pykubelet.common.ticks import run_on_ticks
from pykubelet.cri import CRIError, pb

log = logging.getLogger(__name__)

RUNTIME_CHECK_PERIOD = 5.0  # upstream checks the runtime's status every 5 s
class Kubelet:
    def __init__(
        self,
        *,
        options: AgentOptions,
        api: ApiClient | None,
        runtime: ContainerRuntime,
        recorder: EventRecorder,
        updates: asyncio.Queue[PodUpdate],
        mirror: MirrorClient | None = None,
        cgroup_mount: str = "/sys/fs/cgroup",
        pleg_period: float = 1.0,
        housekeeping_period: float = 2.0,
        status_reconcile_period: float = 10.0,
        volume_mounter: Mounter | None = None,
        volume_refresh_period: float | None = None,
        eviction_monitoring_period: float | None = None,
        startup_checks: bool = True,
    ) -> None:
        cfg = self.config = options.config
        self.api = api
        self.runtime = runtime
        self.recorder = recorder
        self.updates = updates
        self.node_name = options.node_name
        self.host_ips = [options.node_ip] if options.node_ip else []
        self.root_dir = Path(options.root_dir)
        if mirror is None and api is not None:
            mirror = ApiMirrorClient(api, self.node_name)
        self.mirror = mirror
        self.images = ImageManager(runtime, recorder, api=api, serialize=cfg.serialize_image_pulls,
                                   max_parallel=cfg.max_parallel_image_pulls)
        self.cgroups = PodCgroupManager(
            cfg.cgroup_root, enabled=cfg.cgroups_per_qos, mount=cgroup_mount, driver=cfg.cgroup_driver,
            systemd=SystemdDbusUnits() if cfg.cgroup_driver == "systemd" else None, cfs_quota=cfg.cpu_cfs_quota,
            cfs_period_us=int(cfg.cpu_cfs_quota_period * 1_000_000), pod_pids_limit=cfg.pod_pids_limit,
            swap_behavior=str(cfg.memory_swap.get("swapBehavior") or ""), qos_reserved=cfg.qos_reserved)
        # volume content follows its source each syncFrequency, as upstream's remount in every pod sync
        self.volume_manager = VolumeManager(
            root_dir=self.root_dir, api=api, recorder=recorder, mounter=volume_mounter,
            refresh_period=(volume_refresh_period if volume_refresh_period is not None
                            else lambda: max(1.0, self.config.sync_frequency)),
            change_detection=cfg.config_map_and_secret_change_detection_strategy,
        )
        self.runtime_manager = RuntimeManager(
            runtime, images=self.images, recorder=recorder, pod_logs_dir=str(cfg.pod_logs_dir),
            node_name=self.node_name, host_ips=self.host_ips, cgroup_parent=self.cgroups.cgroup_parent,
            lookup=self._lookup if api is not None else None, cluster_dns=list(cfg.cluster_dns),
            cluster_domain=cfg.cluster_domain or "cluster.local", resolv_conf=cfg.resolv_conf,
            pods_dir=str(self.root_dir / "pods"), hooks=HandlerRunner(runtime, recorder),
            mounts=self.volume_manager.mounts_for,
            security_options=SecurityOptions(seccomp_root=str(self.root_dir / "seccomp"),
                                             seccomp_default=cfg.seccomp_default, apparmor_enabled=apparmor_enabled()),
            runtime_class=self._runtime_class if api is not None else None,
        )
        self.log_manager = ContainerLogManager(
            runtime, max_size=cfg.container_log_max_size, max_files=cfg.container_log_max_files,
            interval=cfg.container_log_monitor_interval,
        )
        self.runtime_manager.container_log = self.log_manager.add  # new containers' log paths: no ContainerStatus
        self.status_manager = StatusManager(api, reconcile_period=status_reconcile_period,
                                            first_write_delay=NEW_POD_STATUS_DELAY)
        self.pod_manager = PodManager(self.status_manager)
        self.probes = ProbeManager(runtime, recorder, on_change=self._wake_pod)
        self.cache = PodStatusCache()
        self.pleg = GenericPLEG(self.runtime_manager, self.cache, self._on_pleg_event, relist_period=pleg_period)
        self.admission = AdmissionChain([ValidPodAdmitHandler(), MaxPodsAdmitHandler(cfg.max_pods)])
        self.admission.append(SysctlAdmitHandler(list(cfg.allowed_unsafe_sysctls)))
        self.admission.append(AppArmorAdmitHandler(self.runtime_manager.security_options.apparmor_enabled))
        self.pod_hooks: list[PodLifecycleHook] = [PodDirectories(self.root_dir), self.volume_manager, self.cgroups]
        self.syncer = PodSyncer(
            pods=self.pod_manager, runtime=self.runtime_manager, cache=self.cache, statuses=self.status_manager,
            probes=self.probes, recorder=recorder, mirror=mirror, host_ips=self.host_ips, hooks=self.pod_hooks,
            refresh=self.pleg.update_pod, listed_without=self.pleg.listed_without,
        )
        self.pleg.making = self.syncer.is_making  # a relist leaves a pod being made to its sync
        # each worker resyncs its pod syncFrequency (+ up to 50 % jitter) after its last sync, as upstream
        # (their due times on the relist's grid, at most upstream's 1 s syncTicker: one loop wake-up for
        # the relist and the due resyncs)
        self.pod_workers = PodWorkers(self.syncer, resync_interval=lambda: max(1.0, self.config.sync_frequency),
                                      resync_tick=min(1.0, pleg_period))
        # what the admitted, non-terminated pods take from the node, kept as they come and go
        # (admission reads it instead of summing every other pod for each new one)
        self.node_usage = NodeUsage()
        self.pod_workers.on_terminating = self._sync_usage
        self.housekeeping = Housekeeping(pods=self.pod_manager, workers=self.pod_workers,
                                         runtime=self.runtime_manager, cache=self.cache,
                                         on_pod_forgotten=[self.status_manager.forget, self.syncer.forget])
        self.housekeeping.add_step("probe workers", self._cleanup_probes)
        self.housekeeping.add_step("pod cgroups",  # orphans go; the QoS tiers follow the admitted pods
                                   self.cgroups.cleanup_step(lambda: [p for _, p in self.pod_manager.active()]))
        self.housekeeping.add_step("pod volumes", self.volume_manager.cleanup)  # before the pod directories
        self.housekeeping.add_step("pod directories", directory_step_on_change(
            remove_pod_dirs, unknown_pod_dirs_left, self.root_dir / "pods"))
        self.housekeeping.add_step("pod log directories", directory_step_on_change(
            remove_pod_log_dirs, unknown_pod_log_dirs_left, Path(cfg.pod_logs_dir)))
        self.housekeeping.add_step("container log links", log_links_step(self.runtime_manager.containers_log_dir))
        self.housekeeping.add_step("back-off entries", self._gc_backoff)
        self.housekeeping.add_step("node usage recount", self._recount_usage)
        # node-wide container GC (upstream kuberuntime_gc.go) and image GC (images/image_gc_manager.go)
        self.container_gc = ContainerGC(
            runtime, ContainerGCPolicy(options.minimum_container_ttl_duration,
                                       options.maximum_dead_containers_per_container, options.maximum_dead_containers),
            pod_exists=lambda uid: self.pod_workers.get(uid) is not None,
            containers_log_dir=self.runtime_manager.containers_log_dir, period=options.container_gc_period)
        self.housekeeping.add_step("container garbage collection", self.container_gc.step)
        self.runtime_manager.dead_per_container = options.maximum_dead_containers_per_container
        self.image_gc = ImageGCManager(
            runtime, recorder, self._node_ref,
            GCPolicy(cfg.image_gc_high_threshold_percent, cfg.image_gc_low_threshold_percent,
                     cfg.image_minimum_gc_age, cfg.image_maximum_gc_age))
        self.image_gc_period = options.image_gc_period
        # node self-protection (docs/resources.md): node-side predicates, then eviction admission;
        # the eviction manager's conditions are what the node status reports as pressure
        self.node_source: Callable[[], JSONObj | None] | None = None  # the API's Node (main wires it)
        self.local_node: JSONObj | None = None  # the node as this agent would register it (set in start)
        self._node_labels, self._register_taints = options.node_labels, options.register_with_taints
        self.startup_checks = startup_checks
        self._background_loops: list[asyncio.Task[None]] = []
        self._machine: machine.MachineInfo | None = None
        self.admission.append(PredicateAdmitHandler(self.node_for_admission))
        self.eviction = EvictionManager(
            eviction_config(cfg, eviction_monitoring_period or cfg.eviction_monitoring_period,
                            Path(cgroup_mount) / "memory"), read_signals=self._read_signals,
            summary=StatsProvider(runtime=runtime, node_name=self.node_name, root_dir=str(self.root_dir)),
            active_pods=self._pods_for_eviction, evictor=self, recorder=recorder,
            reclaimers=[self.container_gc, self.image_gc], allocatable_memory=self._allocatable_memory)
        self.admission.append(self.eviction)
        self.cpu_manager = CPUManager(cfg, self.root_dir)  # last: it allocates CPUs to what is admitted
        self.admission.append(self.cpu_manager)
        self.runtime_manager.container_resources = self._container_resources
        self.housekeeping_period = housekeeping_period
        self._sources_ready: set[str] = set()
        self._required_sources = {s for s, on in (("api", api is not None), ("file", bool(cfg.static_pod_path))) if on}
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._runtime_ready = asyncio.Event()
        self._loop_active = time.monotonic()
        metrics.NODE_NAME.labels(self.node_name).set(1)

    def _node_ref(self) -> JSONObj:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name, "uid": self.node_name}}

    async def _lookup(self, kind: str, namespace: str, name: str) -> JSONObj | None:
        """ConfigMap/Secret lookups for container env (None when absent)."""
        if self.api is None:
            return None
        plural = {"ConfigMap": "configmaps", "Secret": "secrets"}[kind]
        try:
            return await self.api.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def _runtime_class(self, name: str) -> JSONObj | None:
        """A node.k8s.io/v1 RuntimeClass (None when absent) for the pod's runtime handler."""
        if self.api is None:
            return None
        try:
            return await self.api.get(f"/apis/node.k8s.io/v1/runtimeclasses/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._machine = await asyncio.to_thread(machine.read_machine_info)
        self.local_node = await asyncio.to_thread(self._build_local_node, self._machine)
        if self.startup_checks:  # a ConfigError stops the agent with a message naming the setting
            await run_startup_checks(self.config, self.runtime)
        await enforce_node_allocatable(self.cgroups, self.config, cpu_millis=self._machine.cpu_millis,
                                       memory_bytes=self._machine.memory_bytes)
        self.cgroups.node_memory = self._machine.memory_bytes  # memorySwap.swapBehavior LimitedSwap shares
        self.cgroups.node_swap = (await asyncio.to_thread(read_meminfo)).get("SwapTotal", 0)
        await self.cgroups.update_qos([])
        await self.runtime_manager.start()
        await self.volume_manager.start()  # rebuilds the actual state of volumes before any pod syncs
        try:
            await self.pleg.relist()  # seed the cache before the first sync
        except Exception as e:
            log.warning("initial relist failed: %s", e)
        self.pleg.start()
        self.status_manager.start()
        self.log_manager.start()
        await self._update_runtime_state()
        self.eviction.start()
        if self.cpu_manager.enabled:
            self._background_loops.append(run_on_ticks(
                self._reconcile_cpusets, max(1.0, self.config.cpu_manager_reconcile_period),
                name="cpu-manager-reconcile", log=log))
        self._tasks = [
            run_on_ticks(self._update_runtime_state, RUNTIME_CHECK_PERIOD, name="kubelet-runtime-state", log=log),
            asyncio.get_running_loop().create_task(self._sync_loop(), name="kubelet-sync-loop"),
            run_on_ticks(self._housekeeping, self.housekeeping_period, name="kubelet-housekeeping", log=log),
            run_on_ticks(self.image_gc.run_once, self.image_gc_period, name="kubelet-image-gc", log=log),
        ]

    async def stop(self) -> None:
        """Stop the loops; never touches containers."""
        await cancel_and_wait(*self._tasks, *self._background)
        self._tasks = []
        await self.eviction.stop()
        await cancel_and_wait(*self._background_loops)
        self._background_loops = []
        await self.housekeeping.stop()
        await self.log_manager.stop()
        await self.pod_workers.stop()
        await self.probes.stop()
        if self.runtime_manager.hooks is not None:
            await self.runtime_manager.hooks.close()
        await self.pleg.stop()
        await self.status_manager.stop()
        await self.volume_manager.stop()

    def mark_source_ready(self, source: str) -> None:
        self._sources_ready.add(source)

    def sources_ready(self) -> bool:
        return self._required_sources <= self._sources_ready

    # ------------------------------------------------------------------ node self-protection
    def _build_local_node(self, m: machine.MachineInfo) -> JSONObj:
        """Upstream ``initialNode`` with the capacity/allocatable the node status would report."""
        cfg = self.config
        node = setters.initial_node(self.node_name, os_name=m.operating_system or "linux", arch=m.architecture,
                                    node_labels=self._node_labels, taints=self._register_taints)
        cap = setters.capacity(cpu_millis=m.cpu_millis, memory_bytes=m.memory_bytes, max_pods=cfg.max_pods,
                               ephemeral_storage_bytes=machine.filesystem_capacity(self.root_dir),
                               hugepages=m.hugepages)
        node["status"] = {"capacity": cap, "allocatable": setters.allocatable(
            cap, system_reserved=cfg.system_reserved, kube_reserved=cfg.kube_reserved, eviction_hard=cfg.eviction_hard)}
        return node

    def node_for_admission(self) -> JSONObj | None:
        """Upstream ``getNodeAnyWay``: the API's Node when known (labels, taints), else the local one."""
        api_node = self.node_source() if self.node_source is not None else None
        if api_node is None:
            return self.local_node
        if not (api_node.get("status") or {}).get("allocatable") and self.local_node is not None:
            return {**api_node, "status": {**(api_node.get("status") or {}), **self.local_node["status"]}}
        return api_node

    def _container_resources(self, pod: Pod, container: JSONObj, r: pb.LinuxContainerResources) -> None:
        """Container-config hook: cpuCFSQuota / cpuCFSQuotaPeriod at container level, the CPU manager's cpuset."""
        cfg = self.config
        if r.cpu_quota:
            if not cfg.cpu_cfs_quota:
                r.cpu_quota, r.cpu_period = 0, 0
            else:
                lim = podutil.container_limits(container).get("cpu")
                period = int(cfg.cpu_cfs_quota_period * 1_000_000)
                if lim:
                    r.cpu_period = period
                    r.cpu_quota = milli_cpu_to_quota(podutil.to_millis(lim), period)
        self.cpu_manager.apply(pod, container, r)

    async def _reconcile_cpusets(self) -> None:
        await self.cpu_manager.reconcile(self.runtime, dict(self.pod_manager.active()))

    def pressure_conditions(self) -> dict[str, bool] | None:
        """NodePressureProvider for the node status: the eviction manager's conditions."""
        return self.eviction.pressure_conditions()

    def _read_signals(self) -> tuple[dict[str, int], dict[str, int]]:
        pids = any(t.signal.value == "pid.available" for t in self.eviction.config.thresholds)
        return pressure.read_signals(self._machine.memory_bytes if self._machine else 0, self.root_dir, pids=pids)

    def _allocatable_memory(self) -> int | None:
        """allocatableMemory.available's capacity: memory minus system/kube reserved (the pods' share,
        without the hard eviction threshold that the reported allocatable also subtracts)."""
        if self._machine is None:
            return None
        reserved = reserved_amounts(self.config.system_reserved, self.config.kube_reserved).get("memory", 0)
        return max(0, self._machine.memory_bytes - reserved)

    def _pods_for_eviction(self) -> list[Pod]:
        return [p for u, p in self.pod_manager.active()
                if not self.pod_workers.is_terminating(u) and not self.pod_workers.is_terminated(u)]

    async def evict_pod(self, pod: Pod, message: str, grace: int) -> bool:
        """PodEvictor (upstream ``killPodNow`` from the eviction manager): Failed/Evicted, then kill."""
        uid = pod_uid(pod)
        if self.pod_workers.is_terminating(uid):
            return False
        status = dict(self.status_manager.get_pod_status(uid) or pod.get("status") or {})
        status.update(phase="Failed", reason="Evicted", message=message)
        self.status_manager.set_pod_status(pod, status)
        self.pod_workers.update_pod(UpdatePodOptions(SyncPodType.KILL, pod, kill_grace=grace))
        return True

    # ------------------------------------------------------------------ PodProvider
    def pods(self) -> list[Pod]:
        return self.pod_manager.pods()

    def get_pod_by_name(self, namespace: str, name: str) -> Pod | None:
        return self.pod_manager.get_pod_by_name(namespace, name)

    def running_pod_count(self) -> int:
        return sum(1 for uid in self.cache.uids() if any(s.ready for s in self.cache.get(uid).sandboxes))

    def sync_loop_healthy(self) -> bool:
        return time.monotonic() - self._loop_active < max(2 * self.config.sync_frequency, 30.0)

    def pleg_healthy(self) -> bool:
        return self.pleg.healthy()

    # ------------------------------------------------------------------ sync loop
    async def _sync_loop(self) -> None:
        while True:
            update = await self.updates.get()
            self._loop_active = time.monotonic()
            await self.housekeeping.wait_for_pass()  # no pod added while housekeeping's steps run
            if not self._runtime_ready.is_set():
                # upstream syncLoop: "skipping pod synchronization" while the runtime is down, so the
                # node controller's Ready=False on our pods is not overwritten with a stale Ready=True
                log.info("container runtime is down: holding pod updates until it is back")
                await self._runtime_ready.wait()
            self.handle_update(update)

    async def _update_runtime_state(self) -> None:
        """Upstream updateRuntimeUp: the runtime is up when CRI Status says RuntimeReady."""
        try:
            resp = await self.runtime.status()
            ready = any(c.type == "RuntimeReady" and c.status for c in resp.status.conditions)
        except CRIError as e:
            log.warning("container runtime status: %s", e)
            ready = False
        if ready:
            self._runtime_ready.set()
        else:
            self._runtime_ready.clear()

    def handle_update(self, update: PodUpdate) -> None:
        for pod in update.pods:
            try:
                self._handle_pod(update.op, pod)
            except Exception:
                md = pod.get("metadata") if isinstance(pod, dict) else None
                log.exception("bad pod in %s update: %s", update.op.value, md)

    def _handle_pod(self, op: PodOp, pod: Pod) -> None:
        uid = pod_uid(pod)
        try:
            self._apply_pod(op, uid, pod)
        finally:
            self._sync_usage(uid)

    def _apply_pod(self, op: PodOp, uid: str, pod: Pod) -> None:
        known = uid in self.pod_manager
        if op in (PodOp.ADD, PodOp.UPDATE, PodOp.DELETE) and not known:
            self._admit(pod)
        elif op in (PodOp.ADD, PodOp.UPDATE, PodOp.DELETE):
            self.pod_manager.update_pod(pod)
            if not self.pod_manager.is_rejected(uid):
                self.pod_workers.update_pod(UpdatePodOptions(SyncPodType.UPDATE, pod))
        elif op is PodOp.REMOVE:
            self.pod_manager.remove(uid)
            if podutil.is_static_pod(pod) and self.mirror is not None:
                md = pod.get("metadata") or {}
                self._spawn(self._delete_mirror(md.get("namespace", "default"), md.get("name", "")),
                            f"delete-mirror-{uid}")
            if self.pod_workers.get(uid) is not None:
                # An API pod only disappears before the agent confirmed its termination when it was
                # force-deleted (grace 0): upstream's API server first shows the kubelet
                # deletionGracePeriodSeconds=0, so kill with the shortest grace (1 s), not the spec's.
                # Static pods removed from the manifest dir keep their own grace period.
                kill_grace = None if podutil.is_static_pod(pod) else 0
                self.pod_workers.update_pod(UpdatePodOptions(SyncPodType.KILL, pod, kill_grace=kill_grace))
        elif op is PodOp.RECONCILE and known:
            self.pod_manager.update_pod(pod)
            self.status_manager.reconcile(pod)

    def _spawn(self, coro: Coroutine[object, object, None], name: str) -> None:
        """Fire-and-forget work of the sync loop, kept referenced and cancelled by ``stop``."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _delete_mirror(self, namespace: str, name: str) -> None:
        if self.mirror is None:
            return
        try:
            await self.mirror.delete_mirror(namespace, name)
        except Exception as e:
            log.warning("deleting mirror pod %s/%s: %s", namespace, name, e)

    def _admit(self, pod: Pod) -> None:
        uid = pod_uid(pod)
        if podutil.is_terminal(pod) or self.pod_workers.get(uid) is not None:
            result = ValidPodAdmitHandler().admit(PodAdmitAttributes(pod, []))
        else:
            self.node_usage.discard(uid)  # never counted against itself
            result = self.admission.admit(NodeAdmitAttributes(pod, self.node_usage.pods(), self.node_usage))
        if not result.admit:
            self._reject(pod, result.reason, result.message)
            return
        self.pod_manager.add_pod(pod)
        self.pod_workers.update_pod(UpdatePodOptions(SyncPodType.CREATE, pod))

    def _reject(self, pod: Pod, reason: str, message: str) -> None:
        """Upstream rejectPod: event + phase Failed with reason/message; the pod never runs."""
        uid = pod_uid(pod)
        log.warning("rejecting pod %s: %s %s", (pod.get("metadata") or {}).get("name"), reason, message)
        self.recorder.event(pod, "Warning", reason, message)
        if not uid:
            return
        self.pod_manager.reject(pod)
        old = pod.get("status") or {}
        status: JSONObj = {
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

    def _wake_pod(self, uid: str) -> None:
        """Something about the pod changed in the runtime or its probes: sync it."""
        pod = self.pod_manager.get(uid)
        st = self.pod_workers.get(uid)
        if pod is not None and not self.pod_manager.is_rejected(uid):
            self.pod_workers.update_pod(UpdatePodOptions(SyncPodType.SYNC, pod))
        elif st is not None and not st.finished:
            self.pod_workers.update_pod(UpdatePodOptions(SyncPodType.SYNC, st.pod))

    def _on_pleg_event(self, event: PodLifecycleEvent) -> None:
        if is_sync_pod_worthy(event) and not self.syncer.reported_by_its_sync(event):
            self._wake_pod(event.pod_uid)

    # ------------------------------------------------------------------ housekeeping
    async def _housekeeping(self) -> None:
        self._loop_active = time.monotonic()
        if self.sources_ready():
            await self.housekeeping.run()

    async def _cleanup_probes(self, ctx: HousekeepingContext) -> None:
        # set operations only: no Python work per pod that stays (the terminated pods are few)
        self.probes.cleanup_pods(ctx.desired - self.pod_workers.finished_uids())

    def _counts_for_admission(self, uid: str, pod: Pod | None) -> bool:
        """Upstream ``filterOutInactivePods`` as admission sees it: admitted, not terminal, not terminating."""
        return (pod is not None and not self.pod_manager.is_rejected(uid) and not podutil.is_terminal(pod)
                and not self.pod_workers.is_terminating(uid))

    def _sync_usage(self, uid: str) -> None:
        """One pod may have started or stopped counting against the node (or changed): update the sums."""
        pod = self.pod_manager.get(uid)
        if pod is not None and self._counts_for_admission(uid, pod):
            self.node_usage.add(uid, pod)
        else:
            self.node_usage.discard(uid)

    async def _recount_usage(self, ctx: HousekeepingContext) -> None:
        """Consistency check of the incremental node usage: recount it from the admitted pods.

        O(pods), so only every 15th pass (30 s at the 2 s period): the bookkeeping is kept per event,
        and this only repairs the rare race of a uid re-added while its finished worker is forgotten.
        """
        if self.housekeeping.runs % 15 != 1:
            return
        counted = {u: p for u, p in self.pod_manager.active() if self._counts_for_admission(u, p)}
        drift = self.node_usage.reconcile(counted)
        if drift:
            log.warning("node usage for admission was out of step for %d pod(s) (%s): recounted",
                        len(drift), ", ".join(drift[:5]))

    async def _gc_backoff(self, ctx: HousekeepingContext) -> None:
        self.runtime_manager.backoff.gc()
        self.images.backoff.gc()

