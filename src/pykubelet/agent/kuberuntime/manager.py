"""RuntimeManager: executes pod actions against a CRI runtime (upstream kuberuntime_manager.go).

- ``list_runtime()``: everything the runtime has, grouped by the pod uid label, so
  the agent's whole state is rebuilt from CRI labels/annotations after a restart (no local DB).
- ``get_pod_status(uid)``: full status of one pod (sandbox IPs, container exit codes, times).
  ``status_of_made(uid, made)``: the same answer, by id, for a pod whose objects one sync made
  (``SyncResult.made``): no ListPodSandbox / ListContainers for a pod just started.
- A container's image is inspected once per start: the ImageStatus answer of the image check also
  gives the image's user (upstream asks the runtime a second time, ``getImageUser``).
- ``sync_pod(pod, status)``: ``compute_pod_actions`` then kill / create sandbox / start init and app
  containers (pull → create → start), recording events with upstream reasons and messages and a
  per-container "reason cache" (CrashLoopBackOff, ErrImagePull, ImagePullBackOff,
  CreateContainerConfigError, ...) that the status generator shows as Waiting reasons.
- ``kill_pod(...)``: stop every running container with the grace period, then StopPodSandbox.
  Per container (upstream killContainer): event Killing, the preStop hook within the grace period
  (Warning FailedPreStopHook on failure), then StopContainer with the grace *left* (at least 2 s):
  containerd sends the image's STOPSIGNAL (SIGTERM by default) and SIGKILL when it runs out.
  Regular containers stop in parallel; sidecars after them, in reverse order
  (``termination_dependencies``). A kill still running 1.5 x grace later (at least 10 s) emits
  Warning ExceededGracePeriod, as upstream's pod workers do.
- Volume mounts (upstream generateContainerConfig → makeMounts): the ``mounts`` callable (the volume
  manager's) turns the container's ``volumeMounts`` into CRI mounts, before the termination-message
  mount; a mount it refuses (a subPath leaving its volume, ...) is a CreateContainerConfigError.
- postStart (upstream startContainer): right after StartContainer; a failure emits Warning
  FailedPostStartHook, kills the container ("FailedPostStartHook") and leaves reason
  PostStartHookError so the container goes through the normal crash-loop back-off.
- ``gc_pod``/``remove_pod``: remove dead containers, keeping the newest dead one per container name
  (for ``lastState`` and ``logs --previous``), and dead sandboxes (upstream container_gc.go).
- Legacy log symlinks (upstream startContainer / removeContainerLog): after StartContainer a link
  ``<containers_log_dir>/<pod>_<ns>_<container>-<id>.log`` points at the container's CRI log (only
  if that file exists); removing a container removes its link and its log files, rotated ones
  included (upstream ``logManager.Clean`` globs ``<log_path>*``). See ``agent/logs``.
- File work of a start: the pod's ``etc-hosts`` and the log link are made in the agent's file worker
  (``container/filework``: one thread, calls in order, far cheaper per call than ``to_thread``); the
  termination-message file (a mkdir and an empty file) on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal

from pykubelet.agent import metrics
from pykubelet.agent.container import filework
from pykubelet.agent.container import runtime as t
from pykubelet.agent.container.grace import DEFAULT_POD_GRACE, pod_termination_grace
from pykubelet.agent.images.manager import ImageManager
from pykubelet.agent.interfaces import ContainerRuntime, EventRecorder, LifecycleHookRunner
from pykubelet.agent.kuberuntime import criconfig, ephemeral, etchosts, security
from pykubelet.agent.kuberuntime import dns as poddns
from pykubelet.agent.kuberuntime.actions import (
    PodActions,
    ProbeKillFunc,
    StartedFunc,
    backoff_key,
    compute_pod_actions,
    format_pod,
    termination_dependencies,
)
from pykubelet.agent.logs import symlinks
from pykubelet.agent.logs.manager import clean_rotated
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.common import labels as names
from pykubelet.common.backoff import Backoff
from pykubelet.common.procfs import read_meminfo
from pykubelet.cri import CRIError, pb

log = logging.getLogger(__name__)

MIN_GRACE = 2

_STATE: dict[int, t.ContainerState] = {
    pb.CONTAINER_CREATED: t.ContainerState.CREATED,
    pb.CONTAINER_RUNNING: t.ContainerState.RUNNING,
    pb.CONTAINER_EXITED: t.ContainerState.EXITED,
}


def container_state(state: int) -> t.ContainerState:
    """The CRI ``ContainerState`` enum value as the runtime view's state."""
    return _STATE.get(state, t.ContainerState.UNKNOWN)


def sandbox_state(state: int) -> t.ContainerState:
    """A sandbox seen as the PLEG sees it (upstream: ready = running, not ready = exited)."""
    return t.ContainerState.RUNNING if state == pb.SANDBOX_READY else t.ContainerState.EXITED


def _find_spec(pod: Pod | None, name: str) -> JSONObj | None:
    """The container (app or init) called ``name`` in the pod spec, for its lifecycle hooks."""
    spec = (pod or {}).get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if c.get("name") == name:
            return dict(c)
    return None


def _sec(ns: int) -> float:
    return ns / 1e9 if ns else 0.0


def make_dir(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` that tries the ``mkdir`` first: when the parent exists
    (a pod's directories are made parent first) that is one syscall instead of a ``stat`` of the
    parent and the ``mkdir``. A directory already there is fine, a file in its place raises
    ``FileExistsError``, as ``makedirs`` does."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)


MAX_TERMINATION_MESSAGE = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


def _read_termination_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_TERMINATION_MESSAGE).decode(errors="replace")
    except OSError:
        return ""


def _tail_cri_log(path: str) -> str:
    """Last lines of a CRI-format log (``<ts> <stream> <P|F> <msg>``), as upstream's fallback."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    out: list[str] = []
    for line in data.splitlines()[-FALLBACK_LOG_LINES:]:
        parts = line.split(" ", 3)
        if len(parts) == 4:
            out.append(parts[3] + ("\n" if parts[2] == "F" else ""))
    text = "".join(out)
    return text[-FALLBACK_LOG_BYTES:]


def _with_termination_message(s: pb.ContainerStatus) -> str:
    """Runtime message + the container's termination message (upstream getTerminationMessage), for
    an exited container only, as upstream's toKubeContainerStatus: only a terminated state shows a
    message, so the file is not opened for every status of a running container."""
    if s.state != pb.CONTAINER_EXITED:
        return str(s.message)
    ann = s.annotations
    path = ann.get(names.TERMINATION_MESSAGE_PATH_ANNOTATION, "")
    msg = ""
    if path:
        for m in s.mounts:
            if m.container_path == path:
                msg = _read_termination_file(m.host_path)
                break
    if (not msg and s.state == pb.CONTAINER_EXITED and s.exit_code != 0
            and ann.get(names.TERMINATION_MESSAGE_POLICY_ANNOTATION) == "FallbackToLogsOnError" and s.log_path):
        msg = _tail_cri_log(s.log_path)
    if not msg:
        return str(s.message)
    return f"{s.message}: {msg}" if s.message else msg


ContainerMounts = Callable[[Pod, JSONObj, dict[str, str]], Awaitable[list[pb.Mount]]]
"""The volume mounts of one container given its environment (the volume manager's ``mounts_for``,
passed in so kuberuntime never imports it); raises ``criconfig.ConfigError`` for a mount that cannot
be made (CreateContainerConfigError)."""


RuntimeClassLookup = Callable[[str], Awaitable[JSONObj | None]]
"""A ``node.k8s.io/v1`` RuntimeClass by name (None when it does not exist)."""


class SandboxRefusedError(Exception):
    """The pod's sandbox cannot be created as asked (FailedCreatePodSandBox)."""


@dataclass
class RuntimeListing:
    """Cheap listing (List* RPCs only): per pod uid, sandbox and container id → state.

    The List* answers themselves are not kept: a listing lives until the next relist (``last_listing``),
    and 110 pods' protobuf messages held ~0.36 MB that nothing read."""

    pods: dict[str, dict[str, t.ContainerState]] = field(default_factory=dict)  # uid → {id: state}
    meta: dict[str, tuple[str, str]] = field(default_factory=dict)  # uid → (namespace, name)
    listed_at: float = 0.0  # wall clock taken before the List* calls
    ready_sandboxes: int = 0  # counted once per changed listing (the PLEG's metrics)
    container_counts: dict[t.ContainerState, int] = field(default_factory=dict)
    container_ids: frozenset[str] = frozenset()  # every container's id, pod or not (log cleanup)


# one listed object: its id and CRI state (the part of a listing that changes), in listing order
_Signature = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]


@dataclass
class MadeObjects:
    """Every object a pod has in the runtime, when one sync made all of them: the sync began from a
    runtime view with no sandbox and no container of the pod, and the agent is the only maker of
    its pods' objects. Reading these few by id (``status_of_made``) then answers what listing the
    runtime for the pod would."""

    sandbox_id: str
    container_ids: list[str] = field(default_factory=list)  # created, started or not
    # False once a CreateContainer failed: the runtime may still have made that container (a
    # timeout), so only a listing can tell
    complete: bool = True
    # the sandbox's PodSandboxStatus read right after RunPodSandbox (for its IPs): what a live
    # sandbox answers does not change, and a sandbox that died since is the next relist's change
    sandbox_status: pb.PodSandboxStatusResponse | None = None


@dataclass
class SyncResult:
    error: str = ""
    actions: PodActions | None = None
    started: list[str] = field(default_factory=list)
    made: MadeObjects | None = None  # set when this sync made all of the pod's objects


class RuntimeManager:
    def __init__(
        self,
        runtime: ContainerRuntime,
        *,
        images: ImageManager,
        recorder: EventRecorder,
        pod_logs_dir: str,
        node_name: str = "",
        host_ips: list[str] | None = None,
        cgroup_parent: Callable[[Pod], str] | None = None,
        lookup: criconfig.Lookup | None = None,
        backoff: Backoff | None = None,
        cluster_dns: list[str] | None = None,
        cluster_domain: str = "cluster.local",
        resolv_conf: str = "/etc/resolv.conf",
        runtime_handler: str = "",
        pods_dir: str | None = None,
        hooks: LifecycleHookRunner | None = None,
        containers_log_dir: str | None = None,
        mounts: ContainerMounts | None = None,
        security_options: security.SecurityOptions | None = None,
        runtime_class: RuntimeClassLookup | None = None,
    ) -> None:
        self.runtime = runtime
        self.images = images
        # Service environment variables of a pod (envvars.py over the agent's Service cache; main sets it).
        self.service_env: Callable[[Pod], list[tuple[str, str]]] | None = None
        self.recorder = recorder
        self.pod_logs_dir = pod_logs_dir
        self.node_name = node_name
        self.host_ips = list(host_ips or [])
        self.cgroup_parent = cgroup_parent or (lambda pod: "")
        self.lookup = lookup
        self.backoff = backoff or Backoff(10.0, 300.0)
        self.cluster_dns = cluster_dns or []
        self.cluster_domain = cluster_domain
        self.resolv_conf = resolv_conf
        self.runtime_handler = runtime_handler
        self.pods_dir = pods_dir  # <root_dir>/pods: termination-message files live below it
        self.hooks = hooks  # lifecycle.HandlerRunner (postStart / preStop), None = no hooks
        self.mounts = mounts  # volume mounts of a container, None = no volumes
        # the container manager's say on a container's Linux resources (cpuset, CFS period/quota)
        self.container_resources: Callable[[Pod, JSONObj, pb.LinuxContainerResources], None] | None = None
        # told (container id, log path) of each container created, before it starts (the log manager's add)
        self.container_log: Callable[[str, str], None] | None = None
        self.security_options = security_options or security.SecurityOptions()
        self.runtime_class = runtime_class  # RuntimeClass objects by name (None: runtimeClassName unsupported)
        # legacy /var/log/containers symlinks live next to the pod logs dir
        self.containers_log_dir = containers_log_dir or symlinks.containers_log_dir(pod_logs_dir)
        self.memory_capacity = read_meminfo().get("MemTotal", 0)
        self.node_allocatable = {"cpu": Decimal(os.cpu_count() or 1), "memory": Decimal(self.memory_capacity)}
        self.runtime_type = "containerd"  # replaced by the runtime's own name in start()
        self.reasons: dict[str, dict[str, tuple[str, str]]] = {}  # uid → container → (reason, message)
        # list_runtime's memory of the previous listing (reused while nothing changed)
        self.last_listing: RuntimeListing | None = None
        self._last_signature: _Signature | None = None
        self._last_pods: dict[str, dict[str, t.ContainerState]] = {}
        self._owners: dict[str, tuple[str, str, str]] = {}
        # dead containers gc_pod keeps per name (--maximum-dead-containers-per-container; < 0: all, see gc.py)
        self.dead_per_container = 1

    async def start(self) -> None:
        """Learn the runtime's name: container ids carry it as their scheme (``containerd://``,
        ``cri-o://``), as upstream's ``ContainerID.Type`` is the runtime's ``RuntimeName``."""
        try:
            self.runtime_type = (await self.runtime.version()).runtime_name or self.runtime_type
        except CRIError as e:
            log.warning("runtime version: %s", e)

    # ------------------------------------------------------------------ reading the runtime
    async def list_runtime(self) -> RuntimeListing:
        """Everything the runtime has, grouped by pod uid (see ``RuntimeListing``); also kept as
        ``last_listing`` for readers that can use a listing up to a relist old (housekeeping).

        The cost follows what changed: while every sandbox and container has the id and state it had
        in the previous listing (an idle node), the per-pod maps of that listing are reused (a fresh
        outer dict, so a caller may replace entries); otherwise they are rebuilt, reading the labels
        only of objects not seen before (an object's pod never changes)."""
        listed_at = time.time()
        sandboxes, containers = await asyncio.gather(self.runtime.list_pod_sandbox(),
                                                     self.runtime.list_containers())
        signature: _Signature = (tuple((sb.id, sb.state) for sb in sandboxes),
                                 tuple((c.id, c.state) for c in containers))
        last = self.last_listing
        if last is not None and signature == self._last_signature:
            out = RuntimeListing(pods=dict(self._last_pods), meta=last.meta,
                                 listed_at=listed_at, ready_sandboxes=last.ready_sandboxes,
                                 container_counts=last.container_counts, container_ids=last.container_ids)
            self.last_listing = out
            return out
        out = RuntimeListing(listed_at=listed_at)
        owners: dict[str, tuple[str, str, str]] = {}  # object id → (pod uid, namespace, name)
        for sb in sandboxes:
            owner = owners[sb.id] = self._owners.get(sb.id) or (
                sb.labels.get(names.POD_UID_LABEL) or sb.metadata.uid, sb.metadata.namespace, sb.metadata.name)
            out.ready_sandboxes += sb.state == pb.SANDBOX_READY
            uid = owner[0]
            if not uid:
                continue
            out.pods.setdefault(uid, {})[sb.id] = sandbox_state(sb.state)
            out.meta.setdefault(uid, owner[1:])
        for c in containers:
            owner = owners[c.id] = self._owners.get(c.id) or (
                c.labels.get(names.POD_UID_LABEL, ""), c.labels.get(names.POD_NAMESPACE_LABEL, ""),
                c.labels.get(names.POD_NAME_LABEL, ""))
            state = container_state(c.state)
            out.container_counts[state] = out.container_counts.get(state, 0) + 1
            uid = owner[0]
            if not uid:
                continue
            out.pods.setdefault(uid, {})[c.id] = state
            out.meta.setdefault(uid, owner[1:])
        self._owners = owners
        out.container_ids = frozenset(cid for cid, _ in signature[1])
        self._last_signature = signature
        self._last_pods = dict(out.pods)
        self.last_listing = out
        return out

    def _container_from_status(self, s: pb.ContainerStatus) -> t.ContainerRuntimeStatus:
        ann, labels = s.annotations, s.labels
        try:
            restarts = int(ann.get(names.CONTAINER_RESTART_COUNT_ANNOTATION, s.metadata.attempt))
        except ValueError:
            restarts = s.metadata.attempt
        return t.ContainerRuntimeStatus(
            id=s.id,
            name=labels.get(names.CONTAINER_NAME_LABEL) or s.metadata.name,
            state=container_state(s.state),
            created_at=_sec(s.created_at),
            started_at=_sec(s.started_at),
            finished_at=_sec(s.finished_at),
            exit_code=s.exit_code,
            image=s.image.image,
            image_ref=s.image_ref,
            image_id=getattr(s, "image_id", "") or "",
            hash=ann.get(names.CONTAINER_HASH_ANNOTATION, ""),
            restart_count=restarts,
            reason=s.reason,
            message=_with_termination_message(s),
            log_path=s.log_path,
            runtime_type=self.runtime_type,
        )

    @staticmethod
    def _sandbox_network(st: t.SandboxRuntimeStatus, resp: pb.PodSandboxStatusResponse) -> None:
        net = resp.status.network
        st.ips = [ip for ip in [net.ip, *(a.ip for a in net.additional_ips)] if ip]
        st.host_network = resp.status.linux.namespaces.options.network == pb.NODE

    async def status_of_made(self, uid: str, made: MadeObjects) -> t.RuntimePodStatus:
        """The pod's runtime status when ``made`` holds all of its objects: one ContainerStatus per
        container, by id, and the sandbox's status as read after its creation (else asked again),
        instead of listing the runtime for the pod (two List calls and a PodSandboxStatus); the same
        answer as ``get_pod_status``, which is asked instead if any of them is gone or a
        CreateContainer failed."""
        if not made.complete:
            return await self.get_pod_status(uid)
        ts = time.time()
        try:
            if made.sandbox_status is not None and len(made.container_ids) == 1:
                # the usual pod: one call to await, no task for it (~15 µs)
                sb_resp, c_resps = made.sandbox_status, [await self.runtime.container_status(made.container_ids[0])]
            elif made.sandbox_status is not None:
                sb_resp, c_resps = made.sandbox_status, await asyncio.gather(
                    *(self.runtime.container_status(cid) for cid in made.container_ids))
            else:
                containers = asyncio.gather(*(self.runtime.container_status(cid) for cid in made.container_ids))
                sb_resp, c_resps = await asyncio.gather(self.runtime.pod_sandbox_status(made.sandbox_id), containers)
        except CRIError as e:
            if not e.not_found:
                raise
            return await self.get_pod_status(uid)  # something was removed meanwhile: ask the runtime
        sb = sb_resp.status
        st = t.RuntimePodStatus(uid=uid, timestamp=ts, name=sb.metadata.name, namespace=sb.metadata.namespace)
        s = t.SandboxRuntimeStatus(id=sb.id or made.sandbox_id, ready=sb.state == pb.SANDBOX_READY,
                                   attempt=sb.metadata.attempt, created_at=_sec(sb.created_at))
        if s.ready:
            self._sandbox_network(s, sb_resp)
        st.sandboxes.append(s)
        for resp in c_resps:
            cs = self._container_from_status(resp.status)
            cs.sandbox_id = made.sandbox_id
            st.containers.append(cs)
        st.sort()
        return st

    async def get_pod_status(self, uid: str) -> t.RuntimePodStatus:
        ts = time.time()
        sandboxes = await self.runtime.list_pod_sandbox(pb.PodSandboxFilter(label_selector={names.POD_UID_LABEL: uid}))
        containers = await self.runtime.list_containers(pb.ContainerFilter(label_selector={names.POD_UID_LABEL: uid}))
        st = t.RuntimePodStatus(uid=uid, timestamp=ts)
        for sb in sandboxes:
            st.name, st.namespace = sb.metadata.name, sb.metadata.namespace
            s = t.SandboxRuntimeStatus(id=sb.id, ready=sb.state == pb.SANDBOX_READY, attempt=sb.metadata.attempt,
                                       created_at=_sec(sb.created_at))
            if s.ready:
                try:
                    self._sandbox_network(s, await self.runtime.pod_sandbox_status(sb.id))
                except CRIError as e:
                    log.debug("sandbox status %s: %s", sb.id, e)
            st.sandboxes.append(s)
        for c in containers:
            try:
                resp = await self.runtime.container_status(c.id)
            except CRIError as e:
                if e.not_found:
                    continue
                raise
            cs = self._container_from_status(resp.status)
            cs.sandbox_id = c.pod_sandbox_id
            st.containers.append(cs)
            if not st.name:
                st.name = c.labels.get(names.POD_NAME_LABEL, "")
                st.namespace = c.labels.get(names.POD_NAMESPACE_LABEL, "")
        st.sort()
        return st

    # ------------------------------------------------------------------ sync
    def reasons_for(self, uid: str) -> dict[str, tuple[str, str]]:
        return dict(self.reasons.get(uid, {}))

    def _config_error(self, pod: Pod, name: str, kind: str, message: str) -> bool:
        """Upstream CreateContainerConfigError: waiting reason, a Warning event, never started."""
        self._set_reason(pod, name, "CreateContainerConfigError", message)
        self.recorder.event(pod, "Warning", "Failed", f"Error: {message}")
        metrics.STARTED_CONTAINERS_ERRORS.labels(kind, "CreateContainerConfigError").inc()
        return False

    def _start_failed(self, pod: Pod, name: str, kind: str, reason: str, err: Exception) -> bool:
        """Record a failed create/start the way upstream surfaces it: waiting reason, event, metric."""
        msg = getattr(err, "details", None) or str(err)
        self._set_reason(pod, name, reason, msg)
        self.recorder.event(pod, "Warning", "Failed", f"Error: {msg}")
        metrics.STARTED_CONTAINERS_ERRORS.labels(kind, reason).inc()
        return False

    def _set_reason(self, pod: Pod, name: str, reason: str, message: str) -> None:
        self.reasons.setdefault(pod["metadata"]["uid"], {})[name] = (reason, message)

    def _clear_reason(self, pod: Pod, name: str) -> None:
        self.reasons.get(pod["metadata"]["uid"], {}).pop(name, None)

    def forget(self, uid: str) -> None:
        self.reasons.pop(uid, None)

    def sandbox_config(self, pod: Pod, attempt: int) -> pb.PodSandboxConfig:
        return criconfig.sandbox_config(
            pod, attempt, pod_logs_dir=self.pod_logs_dir, cgroup_parent=self.cgroup_parent(pod),
            cluster_dns=self.cluster_dns, cluster_domain=self.cluster_domain, resolv_conf=self.resolv_conf,
            security_options=self.security_options,
        )

    async def sync_pod(self, pod: Pod, status: t.RuntimePodStatus, *, probe_kill: ProbeKillFunc | None = None,
                       started: StartedFunc | None = None) -> SyncResult:
        actions = compute_pod_actions(pod, status, now=time.time(), backoff=self.backoff,
                                      probe_kill=probe_kill, started=started)
        result = SyncResult(actions=actions)
        if actions.is_noop() and not actions.backoff:
            return result
        log.debug("pod %s actions %s", format_pod(pod), actions)
        if actions.kill_pod:
            if status.running() or any(s.ready for s in status.sandboxes):
                await self.kill_pod(pod, status, pod_termination_grace(pod), reason="")
        elif actions.containers_to_kill:  # (a gather of nothing still asks asyncio for the loop: a getpid)
            await asyncio.gather(*(
                self._kill_container(
                    pod, cid, info.name,
                    info.grace if info.grace is not None else pod_termination_grace(pod),
                    info.message, container=_find_spec(pod, info.name), pod_ip=(status.ips or [""])[0],
                )
                for cid, info in actions.containers_to_kill.items()
            ))
        for name, msg in actions.backoff.items():
            self._set_reason(pod, name, "CrashLoopBackOff", msg)
            self.recorder.event(pod, "Warning", "BackOff",
                                f"Back-off restarting failed container {name} in pod {format_pod(pod)}")
        if not actions.create_sandbox and not actions.init_containers_to_start and not actions.containers_to_start \
                and not actions.ephemeral_containers_to_start:
            return result
        sandbox_id = actions.sandbox_id
        try:
            sb_config = self.sandbox_config(pod, actions.attempt)
        except (criconfig.ConfigError, TypeError, ValueError, AttributeError, KeyError) as e:
            msg = f"Failed to generate sandbox config for pod {format_pod(pod)}: {e}"
            self.recorder.event(pod, "Warning", "FailedCreatePodSandBox", msg)
            result.error = msg
            return result
        pod_ips = status.ips
        if actions.create_sandbox:
            if w := poddns.missing_cluster_dns(pod, cluster_dns=self.cluster_dns or []):
                self.recorder.event(pod, "Warning", "MissingClusterDNS", w)
            try:
                make_dir(sb_config.log_directory)
            except OSError as e:
                log.warning("cannot create log dir %s: %s", sb_config.log_directory, e)
            try:
                handler = await self._sandbox_runtime_handler(pod)
            except SandboxRefusedError as e:
                msg = f"Failed to create pod sandbox: {e}"
                self.recorder.event(pod, "Warning", "FailedCreatePodSandBox", msg)
                metrics.STARTED_PODS_ERRORS.inc()
                result.error = msg
                return result
            try:
                sandbox_id = await self.runtime.run_pod_sandbox(sb_config, handler)
            except Exception as e:
                msg = f"Failed to create pod sandbox: {getattr(e, 'details', None) or e}"
                self.recorder.event(pod, "Warning", "FailedCreatePodSandBox", msg)
                metrics.STARTED_PODS_ERRORS.inc()
                result.error = msg
                return result
            metrics.STARTED_PODS.inc()
            if not status.sandboxes and not status.containers:
                result.made = MadeObjects(sandbox_id)  # the pod's only objects are the ones made below
            try:
                resp = await self.runtime.pod_sandbox_status(sandbox_id)
                net = resp.status.network
                pod_ips = [ip for ip in [net.ip, *(a.ip for a in net.additional_ips)] if ip]
                if result.made is not None:
                    result.made.sandbox_status = resp
            except Exception as e:
                log.warning("sandbox status after create: %s", e)
            if actions.attempt > 0:
                self.recorder.event(pod, "Normal", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork"):
            pod_ips = list(self.host_ips)
        inits = {c.get("name"): c for c in spec.get("initContainers") or []}
        for name in actions.init_containers_to_start:
            ok = await self._start_container(pod, inits[name], sandbox_id, sb_config, pod_ips, status, "init",
                                             made=result.made)
            if not ok:
                result.error = f"init container {name} failed to start"
                return result
            result.started.append(name)
        apps = {c.get("name"): c for c in spec.get("containers") or []}
        for name in actions.containers_to_start:
            if await self._start_container(pod, apps[name], sandbox_id, sb_config, pod_ips, status, "container",
                                           made=result.made):
                result.started.append(name)
            else:
                result.error = result.error or f"container {name} failed to start"
        ephemerals = {c.get("name"): c for c in spec.get("ephemeralContainers") or []}
        for name in actions.ephemeral_containers_to_start:  # after the app containers, as upstream
            if await self._start_container(pod, ephemerals[name], sandbox_id, sb_config, pod_ips, status, "ephemeral",
                                           made=result.made):
                result.started.append(name)
        return result

    async def _start_container(
        self, pod: Pod, container: JSONObj, sandbox_id: str, sb_config: pb.PodSandboxConfig,
        pod_ips: list[str], status: t.RuntimePodStatus, kind: str, *, made: MadeObjects | None = None,
    ) -> bool:
        name = container.get("name", "")
        try:
            criconfig.check_container_types(container, f"spec.{'initContainers' if kind == 'init' else 'containers'}"
                                                       f"[{name}]")
        except criconfig.ConfigError as e:
            return self._config_error(pod, name, kind, str(e))
        img = await self.images.ensure_image_exists(pod, container, sb_config)
        if not img.ok:
            self._set_reason(pod, name, img.error, img.message)
            self.recorder.event(pod, "Warning", "Failed", f"Error: {img.error}")
            metrics.STARTED_CONTAINERS_ERRORS.labels(kind, img.error).inc()
            return False
        prev = status.find_container(name)
        restart_count = prev.restart_count + 1 if prev is not None else 0
        if prev is not None and prev.state == t.ContainerState.EXITED and prev.finished_at:
            self.backoff.next(backoff_key(pod, container), prev.finished_at)
        try:
            config = await criconfig.container_config(
                pod, container, image_ref=img.image_ref, restart_count=restart_count, pod_ips=pod_ips,
                host_ips=self.host_ips, node_name=self.node_name, memory_capacity=self.memory_capacity,
                node_allocatable=self.node_allocatable, lookup=self.lookup,
                warn=lambda reason, message: self.recorder.event(pod, "Warning", reason, message),
                security_options=self.security_options, image_user=await self._image_user(img.image_ref, img.image),
                service_env=self.service_env(pod) if self.service_env is not None else None,
            )
            if self.container_resources is not None:
                self.container_resources(pod, container, config.linux.resources)
            if kind == "ephemeral" and container.get("targetContainerName"):
                ephemeral.share_target_pid(config, container["targetContainerName"], status)
            if self.mounts is not None:
                config.mounts.extend(await self.mounts(pod, container, {kv.key: kv.value for kv in config.envs}))
            hosts = await self._etc_hosts_mount(pod, container, pod_ips)
            if hosts is not None:
                config.mounts.append(hosts)
        except criconfig.ConfigError as e:
            return self._config_error(pod, name, kind, str(e))
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            # a spec the API should have refused (wrong types deeper than check_container_types)
            log.warning("pod %s container %s: cannot build its config: %r", format_pod(pod), name, e)
            return self._config_error(pod, name, kind, f"invalid container spec: {e}")
        try:
            make_dir(os.path.join(sb_config.log_directory, name))
        except OSError:
            pass
        try:
            tm = self._termination_message_file(pod, name)
            if tm:
                config.mounts.append(pb.Mount(
                    container_path=container.get("terminationMessagePath") or "/dev/termination-log",
                    host_path=tm))
        except Exception as e:
            self._set_reason(pod, name, "CreateContainerConfigError", str(e))
            self.recorder.event(pod, "Warning", "Failed", f"Error: {e}")
            return False
        try:
            cid = await self.runtime.create_container(sandbox_id, config, sb_config)
        except Exception as e:
            if made is not None:
                made.complete = False
            return self._start_failed(pod, name, kind, "CreateContainerError", e)
        if made is not None:
            made.container_ids.append(cid)
        # the runtime's log path is the one built here (containerd joins the two): no ContainerStatus to ask it
        log_path = os.path.join(sb_config.log_directory, config.log_path) if config.log_path else ""
        if self.container_log is not None:
            self.container_log(cid, log_path)
        self.recorder.event(pod, "Normal", "Created", f"Created container: {name}")
        try:
            await self.runtime.start_container(cid)
        except Exception as e:
            return self._start_failed(pod, name, kind, "RunContainerError", e)
        self.recorder.event(pod, "Normal", "Started", f"Started container {name}")
        metrics.STARTED_CONTAINERS.labels(kind).inc()
        await self._link_container_log(pod, name, cid, log_path)
        self._clear_reason(pod, name)
        if self.hooks is not None and (container.get("lifecycle") or {}).get("postStart"):
            msg = await self.hooks.run_post_start(pod, container, cid, pod_ip=(pod_ips or [""])[0])
            if msg:
                self.recorder.event(pod, "Warning", "FailedPostStartHook", msg)
                with contextlib.suppress(Exception):
                    await self._kill_container(pod, cid, name, pod_termination_grace(pod),
                                               "FailedPostStartHook", container=None)
                self._set_reason(pod, name, "PostStartHookError", msg)
                metrics.STARTED_CONTAINERS_ERRORS.labels(kind, "PostStartHookError").inc()
                return False
        return True

    # ------------------------------------------------------------------ security (agent/kuberuntime/security.py)
    async def _image_user(self, image_ref: str, known: pb.Image | None = None) -> tuple[int | None, str] | None:
        """Upstream getImageUser from CRI ImageStatus; None when the runtime cannot tell (then the
        image's own user applies and runAsNonRoot cannot be verified). ``known``: the ImageStatus
        answer the image check just read for this very image id (upstream asks the runtime a second
        time; the answer is the same object, so it is not asked again)."""
        if known is not None and known.id == image_ref:
            return security.image_user(known)
        try:
            resp = await self.runtime.image_status(image_ref)
        except CRIError as e:
            log.warning("image status %s: %s", image_ref, e)
            return None
        return security.image_user(resp.image if resp.HasField("image") else None)

    async def _sandbox_runtime_handler(self, pod: Pod) -> str:
        """The CRI runtime handler of the pod's RuntimeClass (upstream runtimeClassManager
        LookupRuntimeHandler), after checking the runtime supports what the pod asks of it:
        ``hostUsers: false`` (a handler reporting user namespaces) and ``supplementalGroupsPolicy:
        Strict`` (the runtime feature). Raises SandboxRefusedError with the reason."""
        spec = pod.get("spec") or {}
        handler = self.runtime_handler
        name = spec.get("runtimeClassName")
        if name:
            rc = await self.runtime_class(str(name)) if self.runtime_class is not None else None
            if rc is None:
                raise SandboxRefusedError(f'runtimeclass.node.k8s.io "{name}" not found')
            handler = str(rc.get("handler") or "")
        psc = spec.get("securityContext") or {}
        strict = isinstance(psc, dict) and psc.get("supplementalGroupsPolicy") == "Strict"
        if not security.wants_user_namespace(pod) and not strict:
            return handler
        try:
            st = await self.runtime.status()
        except CRIError as e:
            raise SandboxRefusedError(f"cannot read the runtime's features: {e}") from e
        if security.wants_user_namespace(pod):
            supported = any(h.name == handler and h.features.user_namespaces for h in st.runtime_handlers)
            if not supported:
                raise SandboxRefusedError(
                    f"RuntimeClass handler {handler!r} does not support user namespaces".replace("'", '"')
                    + f" (hostUsers: false; runtime {self.runtime_type})")
        if strict and not st.features.supplemental_groups_policy:
            raise SandboxRefusedError(
                "SupplementalGroupsPolicy=Strict is not supported by the container runtime "
                f"({self.runtime_type})")
        return handler

    async def _etc_hosts_mount(self, pod: Pod, container: JSONObj, pod_ips: list[str]) -> pb.Mount | None:
        """Upstream makeMounts' /etc/hosts: the kubelet-managed hosts file of the pod (etchosts)."""
        host_network = bool((pod.get("spec") or {}).get("hostNetwork"))
        if not self.pods_dir or not etchosts.needs_hosts_mount(container, pod_ips, host_network=host_network):
            return None
        pod_dir = os.path.join(self.pods_dir, str(pod["metadata"]["uid"]))
        path = await filework.run(etchosts.ensure_hosts_file, pod_dir, pod, pod_ips, self.cluster_domain)
        return pb.Mount(container_path=etchosts.ETC_HOSTS_PATH, host_path=path, readonly=False,
                        selinux_relabel=True)

    async def _link_container_log(self, pod: Pod, name: str, cid: str, log_path: str) -> None:
        """Upstream: symlink the container log to the legacy location for cluster logging."""
        md = pod.get("metadata") or {}
        link = symlinks.legacy_log_symlink(self.containers_log_dir, md.get("name", ""),
                                           md.get("namespace", ""), name, cid)
        try:
            await filework.run(symlinks.create_symlink, link, log_path)
        except OSError as e:
            log.warning("log symlink %s -> %s: %s", link, log_path, e)

    async def _remove_container_logs(self, status: t.RuntimePodStatus, c: t.ContainerRuntimeStatus) -> None:
        """Upstream removeContainerLog: the container's log files (rotated ones too) and its link."""
        link = symlinks.legacy_log_symlink(self.containers_log_dir, status.name, status.namespace, c.name, c.id)

        def remove() -> None:
            symlinks.remove_symlink(link)
            if c.log_path:
                clean_rotated(c.log_path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(c.log_path)

        try:
            await asyncio.to_thread(remove)
        except OSError as e:
            log.warning("removing logs of container %s: %s", c.id, e)

    def _termination_message_file(self, pod: Pod, name: str) -> str:
        """Host file bind-mounted at terminationMessagePath (upstream: pods/<uid>/containers/<name>/<id>)."""
        if not self.pods_dir:
            return ""
        d = os.path.join(self.pods_dir, pod["metadata"]["uid"], "containers", name)
        make_dir(d)
        # an empty file, world-writable whatever the umask (upstream os.Create then Chmod 0666); by fd,
        # not through a text-mode file object (~40 µs of Python per container, the syscalls the same)
        path = os.path.join(d, os.urandom(4).hex())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            os.fchmod(fd, 0o666)
        finally:
            os.close(fd)
        return path

    # ------------------------------------------------------------------ killing / cleanup
    async def _kill_container(
        self, pod: Pod | None, cid: str, name: str, grace: int, message: str = "", *,
        container: JSONObj | None = None, pod_ip: str = "",
        wait_for_turn: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Upstream killContainer: event, preStop within the grace, wait for our turn, StopContainer."""
        start = time.monotonic()
        if pod is not None:
            self.recorder.event(pod, "Normal", "Killing", message or f"Stopping container {name}")
        left = float(grace)
        if (pod is not None and container is not None and self.hooks is not None and grace > 0
                and (container.get("lifecycle") or {}).get("preStop")):
            left = await self.hooks.run_pre_stop(pod, container, cid, pod_ip=pod_ip, grace_seconds=float(grace))
        if wait_for_turn is not None and left > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await wait_for_turn()
            left = grace - int(time.monotonic() - start)
        grace = max(MIN_GRACE, int(left)) if grace > 0 else 0
        try:
            await self.runtime.stop_container(cid, grace)
        except CRIError as e:
            if not e.not_found:
                log.warning("stop container %s (%s): %s", name, cid, e)
                raise

    async def kill_pod(
        self, pod: Pod | None, status: t.RuntimePodStatus, grace: int | None = None, reason: str = ""
    ) -> None:
        """Stop every running container (in parallel, with grace) then every sandbox."""
        running = [c for c in status.containers if c.state in (t.ContainerState.RUNNING, t.ContainerState.CREATED, t.ContainerState.UNKNOWN)]
        if grace is None:
            grace = pod_termination_grace(pod) if pod is not None else DEFAULT_POD_GRACE
        deps = termination_dependencies(pod, [c.name for c in running])
        done = {c.name: asyncio.Event() for c in running}
        pod_ip = (status.ips or [""])[0]

        def turn(name: str) -> Callable[[], Awaitable[None]] | None:
            async def wait() -> None:
                for d in deps.get(name, ()):
                    await done[d].wait()
            return wait if deps.get(name) else None

        async def kill_one(c: t.ContainerRuntimeStatus, g: int) -> None:
            try:
                await self._kill_container(
                    pod if c.state == t.ContainerState.RUNNING else None, c.id, c.name, g,
                    container=_find_spec(pod, c.name) if pod is not None and c.state == t.ContainerState.RUNNING else None,
                    pod_ip=pod_ip, wait_for_turn=turn(c.name))
            finally:
                done[c.name].set()

        watchdog: asyncio.TimerHandle | None = None
        if pod is not None and running:
            # upstream pod workers: a kill that outlives 1.5 x grace (min 10 s) is reported
            watchdog = asyncio.get_running_loop().call_later(
                max(10.0, grace * 1.5), self.recorder.event, pod, "Warning", "ExceededGracePeriod",
                "Container runtime did not kill the pod within specified grace period.")
        try:
            results = await asyncio.gather(*(kill_one(c, grace) for c in running), return_exceptions=True)
        finally:
            if watchdog is not None:
                watchdog.cancel()
        errors = [r for r in results if isinstance(r, BaseException)]
        for sb in status.sandboxes:
            if not sb.ready:
                continue
            try:
                await self.runtime.stop_pod_sandbox(sb.id)
            except CRIError as e:
                if not e.not_found:
                    errors.append(e)
        if errors:
            raise errors[0]

    async def gc_pod(self, status: t.RuntimePodStatus) -> None:
        """Remove dead containers beyond the newest dead one per name, and old dead sandboxes."""
        by_name: dict[str, list[t.ContainerRuntimeStatus]] = {}
        for c in status.containers:
            by_name.setdefault(c.name, []).append(c)
        for group in by_name.values():
            dead = [c for c in group if c.state == t.ContainerState.EXITED]
            keep = dead if self.dead_per_container < 0 else dead[:max(1, self.dead_per_container)]
            for c in dead:
                if c not in keep:
                    await self._remove_container(status, c)
        live_sandbox_ids = {c.sandbox_id for c in status.containers}
        for sb in status.sandboxes[1:]:
            if sb.ready or sb.id in live_sandbox_ids:
                continue
            try:
                await self.runtime.remove_pod_sandbox(sb.id)
            except CRIError as e:
                if not e.not_found:
                    log.warning("remove sandbox %s: %s", sb.id, e)

    async def _remove_container(self, status: t.RuntimePodStatus, c: t.ContainerRuntimeStatus) -> None:
        """RemoveContainer, then its log files and legacy link (kept if the removal failed)."""
        try:
            await self.runtime.remove_container(c.id)
        except CRIError as e:
            if not e.not_found:
                log.warning("remove container %s: %s", c.id, e)
                return
        await self._remove_container_logs(status, c)

    async def remove_pod(self, status: t.RuntimePodStatus) -> None:
        """Remove all containers and sandboxes of a pod that is gone (after it was killed)."""
        for c in status.containers:
            await self._remove_container(status, c)
        for sb in status.sandboxes:
            try:
                await self.runtime.stop_pod_sandbox(sb.id)
                await self.runtime.remove_pod_sandbox(sb.id)
            except CRIError as e:
                if not e.not_found:
                    log.warning("remove sandbox %s: %s", sb.id, e)
        self.forget(status.uid)
