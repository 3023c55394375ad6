"""Node registration and the node-status loop (upstream ``kubelet_node_status.go``).

Design: ``NodeStatusManager`` owns the Node object's lifecycle on behalf of the agent:

1. ``register()`` — POST the Node built by ``setters.initial_node``; the API server may not be up
   yet, so it retries with exponential backoff (100 ms doubling to 7 s, upstream
   ``registerWithAPIServer``).  409 AlreadyExists means this node was registered before (agent
   restart): GET it and PATCH only what ``setters.reconcile_existing_node`` says must change.
2. ``run()`` — every ``nodeStatusUpdateFrequency`` (10 s) compute the full status from the machine,
   the CRI runtime (Status, Version, ListImages) and the engine's health, GET the Node as stored
   on the server and PATCH ``nodes/<name>/status`` when the computed status differs from the
   *server's* (not from what this process last sent), or when ``nodeStatusReportFrequency`` (5 min)
   has elapsed — the Lease (``lease.py``) is the frequent heartbeat, node status is only refreshed
   on change, like upstream with NodeLease (``tryUpdateNodeStatus`` GETs the node every time).
   Comparing with the server matters after faults: when the API server was unreachable (or
   paused) for longer than the node-monitor grace period, the node lifecycle controller has set
   Ready=Unknown and tainted the node meanwhile; the kubelet's own view never changed, so a
   comparison with the last *sent* status would wait for the 5-minute report tick. A Lease renewal
   that succeeds after failures also triggers an immediate status update, so Lease and status
   recover together, within one update period of the API server's return. While the node is not
   Ready the status is re-computed every second (sent only if it changed), so a runtime that comes
   back (containerd restarted by its supervisor) makes the node Ready within about a second.
   The next update is due a period after one ends, rounded down onto the agent's 1 s grid
   (``common.ticks.due_on_sync_tick``): never later than the period, and on the loop wake-up of the
   PLEG relist rather than one of its own.
   Heartbeat requests (node GET/PATCH and the Lease) carry a timeout of
   min(nodeStatusUpdateFrequency, nodeLeaseDurationSeconds) like upstream's heartbeat client,
   floored at 5 s so a loaded machine does not turn slow answers into failures.
   MemoryPressure / DiskPressure / PIDPressure are the eviction manager's decision (upstream's
   setters read it the same way); only without one (no eviction manager yet, or none observed) are
   the eviction signals read here each update (``pressure.py``) and held against ``evictionHard``.
3. Node events on condition transitions: NodeHasSufficientMemory/…/NodeReady/NodeNotReady, and
   "Starting" once when the agent starts.

Gathering inputs (I/O) is kept in ``collect()``; composing them is ``build_status()`` over the pure
setters, so tests can drive the composition with fixed inputs.  All failures are logged and retried
on the next tick; nothing here raises into the agent's main loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from pykubelet import KUBERNETES_VERSION
from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.common.ticks import due_on_sync_tick

from ..config import AgentOptions
from ..interfaces import NodePressureProvider
from . import pressure, setters
from .lease import LeaseController
from .machine import HostPaths, MachineInfo, discover_node_ip, filesystem_capacity, read_machine_info

log = logging.getLogger(__name__)
Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
MIN_HEARTBEAT_TIMEOUT = 5.0
NOT_READY_RECHECK = 1.0


def heartbeat_timeout(update_frequency: float, lease_duration_seconds: float) -> float:
    """Per-request timeout of heartbeat calls (upstream: min(update frequency, lease duration))."""
    return max(min(update_frequency, lease_duration_seconds), MIN_HEARTBEAT_TIMEOUT)


def server_view(server_status: Obj, status: Obj) -> Obj:
    """The server's node status restricted to the fields the kubelet sets (others are not ours)."""
    return {k: server_status.get(k) for k in status}


class _Health(Protocol):
    def sync_loop_healthy(self) -> bool: ...
    def pleg_healthy(self) -> bool: ...


class _Recorder(Protocol):
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


@dataclass
class StatusInputs:
    """Everything ``build_status`` needs, gathered by ``collect``."""

    machine: MachineInfo
    node_ip: str
    hostname: str
    ephemeral_storage_bytes: int
    runtime_conditions: dict[str, tuple[bool, str, str]] | None
    runtime_error: str | None
    runtime_version: str
    images: list[tuple[list[str], list[str], int]] = field(default_factory=list)
    pleg_healthy: bool = True
    sync_loop_healthy: bool = True
    # Eviction signals (signal -> available, signal -> capacity) from ``pressure.read_signals``;
    # unobserved signals never report pressure.
    pressure_signals: dict[str, int] = field(default_factory=dict)
    pressure_capacity: dict[str, int] = field(default_factory=dict)
    # The eviction manager's conditions (NodePressureProvider), when the engine has one.
    decided_pressure: dict[str, bool] | None = None


def build_status(
    options: AgentOptions, inputs: StatusInputs, previous_conditions: list[Obj], now: float
) -> tuple[Obj, list[Obj]]:
    """Compose node.status; returns (status, conditions whose status changed)."""
    cfg = options.config
    m = inputs.machine
    cap = setters.capacity(
        cpu_millis=m.cpu_millis,
        memory_bytes=m.memory_bytes,
        max_pods=cfg.max_pods,
        ephemeral_storage_bytes=inputs.ephemeral_storage_bytes,
        hugepages=m.hugepages,
    )
    alloc = setters.allocatable(
        cap, system_reserved=cfg.system_reserved, kube_reserved=cfg.kube_reserved, eviction_hard=cfg.eviction_hard
    )
    errs = setters.runtime_errors(
        runtime_conditions=inputs.runtime_conditions,
        runtime_error=inputs.runtime_error,
        pleg_healthy=inputs.pleg_healthy,
        sync_loop_healthy=inputs.sync_loop_healthy,
    )
    under = pressure.node_pressure(inputs.decided_pressure, inputs.pressure_signals, cfg.eviction_hard,
                                   inputs.pressure_capacity)
    current = [
        setters.pressure_condition(setters.MEMORY_PRESSURE, under[setters.MEMORY_PRESSURE]),
        setters.pressure_condition(setters.DISK_PRESSURE, under[setters.DISK_PRESSURE]),
        setters.pressure_condition(setters.PID_PRESSURE, under[setters.PID_PRESSURE]),
        setters.ready_condition(errs, cap),
    ]
    conditions, changed = setters.merge_conditions(previous_conditions, current, now)
    status: Obj = {
        "capacity": cap,
        "allocatable": alloc,
        "conditions": conditions,
        "addresses": setters.addresses(inputs.node_ip, inputs.hostname),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": cfg.port}},
        "nodeInfo": setters.node_info(
            machine_id=m.machine_id,
            system_uuid=m.system_uuid,
            boot_id=m.boot_id,
            kernel_version=m.kernel_version,
            os_image=m.os_image,
            container_runtime_version=inputs.runtime_version,
            kubelet_version=KUBERNETES_VERSION,
            operating_system=m.operating_system,
            architecture=m.architecture,
        ),
        "images": setters.images(inputs.images, cfg.node_status_max_images),
    }
    return status, changed


class NodeStatusManager:
    """Registers the node, keeps its status and Lease fresh, records node events."""

    def __init__(
        self,
        *,
        options: AgentOptions,
        api: ApiClient,
        runtime: Any,
        kubelet: _Health | None = None,
        recorder: _Recorder | None = None,
        host_paths: HostPaths | None = None,
        clock: Callable[[], float] = time.time,
        register_backoff_max: float = 7.0,
    ) -> None:
        self.options = options
        self.api = api
        self.runtime = runtime
        self.kubelet = kubelet
        self.recorder = recorder
        self.host_paths = host_paths
        self.clock = clock
        self.node_name = options.node_name
        self.register_backoff_max = register_backoff_max
        self.node: Obj | None = None  # the Node as last returned by the API server
        self.registered = asyncio.Event()
        self._machine: MachineInfo | None = None
        self._node_ip: str | None = options.node_ip
        self._runtime_version: str = ""
        self._last_report_time = 0.0
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        cfg = options.config
        self.request_timeout = heartbeat_timeout(cfg.node_status_update_frequency, cfg.node_lease_duration_seconds)
        self.lease = LeaseController(
            api,
            self.node_name,
            duration_seconds=cfg.node_lease_duration_seconds,
            node_uid=self.node_uid,
            clock=clock,
            request_timeout=self.request_timeout,
            on_recovered=self.kick,
        )

    # ------------------------------------------------------------------ helpers

    def node_uid(self) -> str | None:
        return ((self.node or {}).get("metadata") or {}).get("uid") or None

    def node_ref(self) -> Obj:
        """The involvedObject of node events (upstream uses the node name as UID)."""
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name, "uid": self.node_name}}

    def _event(self, type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            try:
                self.recorder.event(self.node_ref(), type_, reason, message)
            except Exception as e:  # events are best effort
                log.debug("event %s not recorded: %s", reason, e)

    async def _machine_info(self) -> MachineInfo:
        if self._machine is None:
            self._machine = await asyncio.to_thread(read_machine_info, self.host_paths)
        return self._machine

    async def _ip(self) -> str:
        if self._node_ip is None:
            self._node_ip = await asyncio.to_thread(discover_node_ip, self.options.hostname or self.node_name)
        return self._node_ip

    # ------------------------------------------------------------------ registration

    async def desired_node(self) -> Obj:
        m = await self._machine_info()
        return setters.initial_node(
            self.node_name,
            os_name=m.operating_system or "linux",
            arch=m.architecture,
            node_labels=self.options.node_labels,
            taints=self.options.register_with_taints,
            pod_cidr=self.options.config.pod_cidr,
            provider_id=self.options.config.provider_id,
        )

    async def try_register(self) -> bool:
        """One registration attempt (upstream tryRegisterWithAPIServer)."""
        desired = await self.desired_node()
        try:
            self.node = await self.api.create("/api/v1/nodes", desired)
            log.info("successfully registered node %s", self.node_name)
            return True
        except ApiError as e:
            if e.status != 409:
                log.warning("unable to register node %s with API server: %s", self.node_name, e)
                return False
        try:
            existing = await self.api.get(f"/api/v1/nodes/{self.node_name}")
        except ApiError as e:
            log.warning("unable to get existing node %s: %s", self.node_name, e)
            return False
        patch = setters.reconcile_existing_node(desired, existing)
        if patch is None:
            self.node = existing
        else:
            try:
                self.node = await self.api.patch(f"/api/v1/nodes/{self.node_name}", patch, patch_type="merge")
            except ApiError as e:
                log.warning("unable to reconcile node %s: %s", self.node_name, e)
                return False
        log.info("node %s was previously registered", self.node_name)
        return True

    async def register(self) -> None:
        """Register with retry and exponential backoff until it succeeds (or is cancelled)."""
        delay = 0.1
        while not await self.try_register():
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.register_backoff_max)
        self.registered.set()

    # ------------------------------------------------------------------ status

    async def collect(self) -> StatusInputs:
        m = await self._machine_info()
        conds: dict[str, tuple[bool, str, str]] | None = None
        rt_err: str | None = None
        try:
            st = await self.runtime.status()
            conds = {c.type: (bool(c.status), c.reason, c.message) for c in st.status.conditions}
        except Exception as e:
            rt_err = str(e) or type(e).__name__
        if not self._runtime_version:
            try:
                v = await self.runtime.version()
                self._runtime_version = f"{v.runtime_name}://{v.runtime_version}"
            except Exception as e:
                log.debug("runtime version unavailable: %s", e)
        imgs: list[tuple[list[str], list[str], int]] = []
        try:
            for img in await self.runtime.list_images():
                imgs.append((list(img.repo_tags), list(img.repo_digests), int(img.size)))
        except Exception as e:
            log.debug("list images failed: %s", e)
        pleg_ok = sync_ok = True
        if self.kubelet is not None:
            try:
                pleg_ok = bool(self.kubelet.pleg_healthy())
                sync_ok = bool(self.kubelet.sync_loop_healthy())
            except Exception as e:
                log.debug("engine health unavailable: %s", e)
        storage = await asyncio.to_thread(filesystem_capacity, self.options.root_dir)
        decided = self._decided_pressure()
        signals: dict[str, int] = {}
        sig_cap: dict[str, int] = {}
        if decided is None:  # the eviction manager's decision stands when it has one: nothing to read
            try:
                signals, sig_cap = await asyncio.to_thread(
                    pressure.read_signals, m.memory_bytes, self.options.root_dir, self.host_paths
                )
            except Exception as e:  # pressure is best effort: unobserved means no pressure
                log.debug("eviction signals unavailable: %s", e)
        return StatusInputs(
            machine=m,
            node_ip=await self._ip(),
            hostname=self.options.hostname or self.node_name,
            ephemeral_storage_bytes=storage,
            runtime_conditions=conds,
            runtime_error=rt_err,
            runtime_version=self._runtime_version,
            images=imgs,
            pleg_healthy=pleg_ok,
            sync_loop_healthy=sync_ok,
            pressure_signals=signals,
            pressure_capacity=sig_cap,
            decided_pressure=decided,
        )

    def _decided_pressure(self) -> dict[str, bool] | None:
        provider = self.kubelet
        if provider is None or not hasattr(provider, "pressure_conditions"):
            return None
        try:
            return cast(NodePressureProvider, provider).pressure_conditions()
        except Exception as e:
            log.debug("eviction manager conditions unavailable: %s", e)
            return None

    def kick(self) -> None:
        """Run a status update now (e.g. the Lease just recovered after failures)."""
        self._kick.set()

    async def read_node(self) -> Obj | None:
        """GET the Node as stored on the server; None when that failed (re-registers on 404)."""
        try:
            node = await self.api.request(
                "GET", f"/api/v1/nodes/{self.node_name}", timeout=self.request_timeout
            )
        except ApiError as e:
            log.warning("error getting node %s: %s", self.node_name, e)
            if e.status == 404:  # the Node was deleted: register again (upstream re-registers)
                self.registered.clear()
                await self.register()
            return None
        self.node = node
        return node

    async def sync_once(self, *, force: bool = False) -> bool:
        """Compute status; PATCH it if it differs from the server's or the report period passed.

        Returns True if a status was sent.
        """
        inputs = await self.collect()
        node = await self.read_node()
        if node is None:
            return False
        now = self.clock()
        server_status = node.get("status") or {}
        prev = list(server_status.get("conditions") or [])
        status, changed = build_status(self.options, inputs, prev, now)
        due = now - self._last_report_time >= self.options.config.node_status_report_frequency
        if not force and not due and not setters.status_changed(server_view(server_status, status), status):
            return False
        try:
            self.node = await self.api.request(
                "PATCH",
                f"/api/v1/nodes/{self.node_name}/status",
                body={"status": status},
                content_type=MERGE_PATCH,
                timeout=self.request_timeout,
            )
        except ApiError as e:
            log.warning("error updating node status for %s: %s", self.node_name, e)
            if e.status == 404:  # the Node was deleted: register again (upstream re-registers)
                self.registered.clear()
                await self.register()
            return False
        self._last_report_time = now
        for cond in changed:
            ev = setters.condition_event(cond)
            if ev is not None:
                self._event("Normal", ev[0], ev[1].format(node=self.node_name))
        return True

    async def run(self) -> None:
        await self.register()
        self.lease.start()
        while True:
            self._kick.clear()
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node status update failed")
            loop = asyncio.get_running_loop()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(due_on_sync_tick(loop.time(), self.next_update_in())):
                    await self._kick.wait()

    def next_update_in(self) -> float:
        """Seconds to the next status update: the update period, but at most NOT_READY_RECHECK while
        this node's Ready is not True (a runtime restarting, PLEG catching up), so the node is
        reported Ready again within about a second of being ready rather than a full period later.
        Only a *change* is sent, so re-checking costs CRI and /proc reads, not API writes."""
        period = self.options.config.node_status_update_frequency
        if self.ready_status() != "True":
            return min(period, NOT_READY_RECHECK)
        return period

    def ready_status(self) -> str | None:
        """Ready condition of the Node as last read from or written to the server."""
        for c in ((self.node or {}).get("status") or {}).get("conditions") or []:
            if isinstance(c, dict) and c.get("type") == "Ready":
                return str(c.get("status"))
        return None

    async def start(self) -> None:
        """Record Starting and run registration + status + lease in the background."""
        self._event("Normal", "Starting", "Starting kubelet.")
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="node-status")

    async def stop(self) -> None:
        await self.lease.stop()
        await cancel_and_wait(self._task)
        self._task = None
