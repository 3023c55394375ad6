"""What to do with a pod, given its spec and what the runtime has (upstream computePodActions).

Pure decision logic, no I/O: ``compute_pod_actions(pod, status, now=..., backoff=...)`` returns a
``PodActions`` that ``RuntimeManager.sync_pod`` executes. It follows upstream
``pkg/kubelet/kuberuntime/kuberuntime_manager.go`` (sidecar-aware version):

1. ``pod_sandbox_changed``: a new sandbox is needed when there is none, when the newest is not ready
   or more than one is ready, when the network mode changed, or when a non-host-network sandbox has
   no IP. The attempt number is the newest sandbox's attempt + 1.
2. With a new sandbox the whole pod is killed first (``kill_pod``); restartPolicy Never pods that
   already ran are not restarted; OnFailure skips app containers that succeeded; if init containers
   exist only the first is started (init runs again in a new sandbox), otherwise all app containers.
3. Init containers run one at a time in order; a failed one is restarted per restartPolicy, or the
   pod is killed (Never). Sidecars (init containers with restartPolicy Always) are started in order,
   must be running before the next one starts, and are restarted whenever they exit.
4. App containers not running are (re)started per ``should_container_be_restarted``; a running
   container whose spec hash changed is killed and restarted; unknown-state ones are killed first.
5. Nothing to keep and nothing to start → kill the pod (sandbox goes away when a pod completes).

Probes (upstream liveness/startup managers): ``probe_kill(name, container_id)`` says whether a *running*
container failed its liveness or startup probe. Such a container is killed with the probe's message
("Container X failed liveness probe, will be restarted" when restartPolicy is not Never) and, if the
policy allows, restarted in the same sync; the probe-level ``terminationGracePeriodSeconds`` travels
in ``ContainerToKill.grace``. A running sidecar whose startup probe has not succeeded yet
(``started(name)`` False) holds back the next init container, like upstream.

CrashLoopBackOff (upstream ``doBackOff``): a dead container is restarted only when
``backoff.is_in_backoff_since(key, finished_at)`` is False; key = pod name/namespace/uid + container
name + spec hash. Containers held back are reported in ``PodActions.backoff`` (name → message) and
still count as "to start" so the pod is not torn down. The executor calls
``backoff.next(key, finished_at)`` when it actually restarts one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pykubelet.agent.container.runtime import (
    ContainerRuntimeStatus,
    ContainerState,
    RuntimePodStatus,
    hash_container,
)
from pykubelet.common.backoff import Backoff
from pykubelet.common.durations import format_duration
from pykubelet.common.podutil import is_restartable_init_container

Pod = dict[str, Any]

REASON_UNKNOWN = "Unknown"


@dataclass
class ContainerToKill:
    name: str
    message: str
    reason: str = ""
    grace: int | None = None  # probe-level terminationGracePeriodSeconds overrides the pod's


@dataclass(frozen=True)
class ProbeKill:
    """A running container failed liveness/startup: why, and the probe's grace period (if set)."""

    reason: str  # "LivenessProbe" / "StartupProbe"
    message: str  # "Container X failed liveness probe"
    grace: int | None = None


ProbeKillFunc = Callable[[str, str], "ProbeKill | None"]  # (container name, runtime id) -> kill?
StartedFunc = Callable[[str], bool]  # container name -> startup probe passed (or none defined)


@dataclass
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0
    init_containers_to_start: list[str] = field(default_factory=list)
    containers_to_start: list[str] = field(default_factory=list)
    # Ephemeral containers not started yet (upstream: started once, never restarted).
    ephemeral_containers_to_start: list[str] = field(default_factory=list)
    containers_to_kill: dict[str, ContainerToKill] = field(default_factory=dict)  # runtime id → info
    backoff: dict[str, str] = field(default_factory=dict)  # container name → CrashLoopBackOff message
    init_failed: bool = False

    @property
    def next_init_container_to_start(self) -> str | None:
        return self.init_containers_to_start[0] if self.init_containers_to_start else None

    def is_noop(self) -> bool:
        return not (
            self.kill_pod
            or self.create_sandbox
            or self.init_containers_to_start
            or self.containers_to_start
            or self.ephemeral_containers_to_start
            or self.containers_to_kill
        )


def _spec(pod: Pod) -> dict[str, Any]:
    return pod.get("spec") or {}


def restart_policy(pod: Pod) -> str:
    return _spec(pod).get("restartPolicy") or "Always"


def format_pod(pod: Pod) -> str:
    """Upstream format.Pod: ``name_namespace(uid)``."""
    md = pod.get("metadata") or {}
    return f"{md.get('name', '')}_{md.get('namespace', '')}({md.get('uid', '')})"


def backoff_key(pod: Pod, container: dict[str, Any]) -> str:
    """Upstream GetStableKey: pod name, namespace, uid, container name and spec hash."""
    md = pod.get("metadata") or {}
    return "_".join(
        [md.get("name", ""), md.get("namespace", ""), md.get("uid", ""), container.get("name", ""),
         hash_container(container)]
    )


def crash_backoff_message(
    pod: Pod, container: dict[str, Any], status: ContainerRuntimeStatus | None, backoff: Backoff, now: float
) -> str | None:
    """The CrashLoopBackOff message if ``container`` must wait before restarting, else None."""
    if status is None or status.state != ContainerState.EXITED or not status.finished_at:
        return None
    key = backoff_key(pod, container)
    if backoff.is_in_backoff_since(key, status.finished_at, now):
        return (
            f"back-off {format_duration(backoff.get(key))} restarting failed "
            f"container={container.get('name', '')} pod={format_pod(pod)}"
        )
    return None


def pod_sandbox_changed(pod: Pod, status: RuntimePodStatus) -> tuple[bool, int, str]:
    """(create a new sandbox?, attempt, id of the current sandbox) — upstream podSandboxChanged."""
    if not status.sandboxes:
        return True, 0, ""
    ready = sum(1 for s in status.sandboxes if s.ready)
    newest = status.sandboxes[0]
    host_network = bool(_spec(pod).get("hostNetwork"))
    if ready > 1 or not newest.ready:
        return True, newest.attempt + 1, newest.id
    if newest.host_network != host_network:
        return True, newest.attempt + 1, ""
    if not host_network and not newest.ips:
        return True, newest.attempt + 1, newest.id
    return False, newest.attempt, newest.id


def container_succeeded(container: dict[str, Any], status: RuntimePodStatus) -> bool:
    cs = status.find_container(container.get("name", ""))
    return cs is not None and cs.state == ContainerState.EXITED and cs.exit_code == 0


def should_container_be_restarted(container: dict[str, Any], pod: Pod, status: RuntimePodStatus) -> bool:
    """Upstream kubecontainer.ShouldContainerBeRestarted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    cs = status.find_container(container.get("name", ""))
    if cs is None:
        return True
    if cs.state == ContainerState.RUNNING:
        return False
    if cs.state in (ContainerState.UNKNOWN, ContainerState.CREATED):
        return True
    policy = restart_policy(pod)
    if policy == "Never":
        return False
    if policy == "OnFailure" and cs.exit_code == 0:
        return False
    return True


def has_any_regular_container_created(pod: Pod, status: RuntimePodStatus) -> bool:
    for c in _spec(pod).get("containers") or []:
        cs = status.find_container(c.get("name", ""))
        if cs is not None and cs.state != ContainerState.CREATED:
            return True
    return False


class _Planner:
    def __init__(self, pod: Pod, status: RuntimePodStatus, now: float, backoff: Backoff,
                 probe_kill: ProbeKillFunc | None = None, started: StartedFunc | None = None) -> None:
        self.pod = pod
        self.status = status
        self.now = now
        self.backoff = backoff
        self.probe_kill = probe_kill
        self.started = started
        self.actions = PodActions()

    def probe_failed(self, cs: ContainerRuntimeStatus) -> ProbeKill | None:
        if self.probe_kill is None or cs.state != ContainerState.RUNNING:
            return None
        return self.probe_kill(cs.name, cs.id)

    def start(self, container: dict[str, Any], *, init: bool) -> None:
        """Schedule a start unless the container is in crash-loop back-off."""
        name = container.get("name", "")
        cs = self.status.find_container(name)
        if cs is not None and cs.state == ContainerState.UNKNOWN:
            self.actions.containers_to_kill[cs.id] = ContainerToKill(
                name, f'Container is in "{cs.state}" state, try killing it before restart', REASON_UNKNOWN
            )
        msg = crash_backoff_message(self.pod, container, cs, self.backoff, self.now)
        if msg is not None:
            self.actions.backoff[name] = msg
            return
        (self.actions.init_containers_to_start if init else self.actions.containers_to_start).append(name)

    def init_actions(self) -> bool:
        """Plan init containers; return True when the pod is initialized (app containers may run)."""
        inits = _spec(self.pod).get("initContainers") or []
        if not inits:
            return True
        previously_initialized = has_any_regular_container_created(self.pod, self.status)
        policy = restart_policy(self.pod)
        for ic in inits:
            name = ic.get("name", "")
            cs = self.status.find_container(name)
            sidecar = is_restartable_init_container(ic)
            if not sidecar and previously_initialized:
                continue  # regular init containers never run again once app containers exist
            if cs is None:
                self.start(ic, init=True)
                if previously_initialized:
                    continue
                return False
            if sidecar:
                if cs.state == ContainerState.RUNNING:
                    if cs.hash and cs.hash != hash_container(ic):
                        self.actions.containers_to_kill[cs.id] = ContainerToKill(
                            name, f"Init container {name} definition changed"
                        )
                        self.start(ic, init=True)
                        if not previously_initialized:
                            return False
                    elif (pk := self.probe_failed(cs)) is not None:
                        # sidecars always restart, whatever the pod's restartPolicy
                        self.actions.containers_to_kill[cs.id] = ContainerToKill(
                            name, f"Init {pk.message[0].lower()}{pk.message[1:]}",
                            pk.reason, pk.grace,
                        )
                        self.start(ic, init=True)
                        if not previously_initialized:
                            return False
                    elif self.started is not None and not self.started(name) and not previously_initialized:
                        return False  # wait for its startup probe before the next init container
                    continue
                if (self.pod.get("metadata") or {}).get("deletionTimestamp"):
                    return False
                self.start(ic, init=True)
                if previously_initialized:
                    continue
                return False
            # regular init container, pod not yet initialized
            if cs.state == ContainerState.RUNNING:
                return False
            if cs.state == ContainerState.EXITED and cs.exit_code == 0:
                continue
            if cs.state in (ContainerState.CREATED, ContainerState.UNKNOWN):
                self.start(ic, init=True)
                return False
            # failed
            if policy == "Never":
                self.actions.kill_pod = True
                self.actions.init_failed = True
                self.actions.init_containers_to_start = []
                return False
            self.start(ic, init=True)
            return False
        return True

    def compute(self) -> PodActions:
        pod, status, a = self.pod, self.status, self.actions
        spec = _spec(pod)
        create, attempt, sandbox_id = pod_sandbox_changed(pod, status)
        a.kill_pod, a.create_sandbox, a.attempt, a.sandbox_id = create, create, attempt, sandbox_id
        policy = restart_policy(pod)
        containers = spec.get("containers") or []
        if create:
            if policy == "Never" and attempt != 0 and status.containers:
                a.create_sandbox = False
                return a
            to_start = [
                c for c in containers if not (policy == "OnFailure" and container_succeeded(c, status))
            ]
            if not to_start and has_any_regular_container_created(pod, status):
                a.create_sandbox = False
                return a
            inits = spec.get("initContainers") or []
            if inits:
                self.start(inits[0], init=True)
                return a
            for c in to_start:
                self.start(c, init=False)
            return a

        initialized = self.init_actions()
        if a.kill_pod:
            return a
        if not initialized:
            return a
        keep = 0
        for c in containers:
            name = c.get("name", "")
            cs = status.find_container(name)
            if cs is None or cs.state != ContainerState.RUNNING:
                if should_container_be_restarted(c, pod, status):
                    if cs is not None and cs.state == ContainerState.CREATED:
                        a.containers_to_kill[cs.id] = ContainerToKill(
                            name, f'Container is in "{cs.state}" state, try killing it before restart',
                            REASON_UNKNOWN,
                        )
                    self.start(c, init=False)
                continue
            if cs.hash and cs.hash != hash_container(c):
                a.containers_to_kill[cs.id] = ContainerToKill(name, f"Container {name} definition changed")
                self.start(c, init=False)
                continue
            pk = self.probe_failed(cs)
            if pk is not None:
                # upstream: restart unless restartPolicy Never; say so in the Killing event
                restart = policy != "Never"
                msg = f"{pk.message}, will be restarted" if restart else pk.message
                a.containers_to_kill[cs.id] = ContainerToKill(name, msg, pk.reason, pk.grace)
                if restart:
                    self.start(c, init=False)
                continue
            keep += 1
        for ec in spec.get("ephemeralContainers") or []:
            if status.find_container(ec.get("name", "")) is None:
                a.ephemeral_containers_to_start.append(ec.get("name", ""))
        if keep == 0 and not a.containers_to_start and not a.backoff:
            # Nothing to keep, nothing to start: kill the whole pod (sidecars go with it).
            a.kill_pod = True
            a.init_containers_to_start = []
        return a


def compute_pod_actions(
    pod: Pod, pod_status: RuntimePodStatus, *, now: float, backoff: Backoff,
    probe_kill: ProbeKillFunc | None = None, started: StartedFunc | None = None,
) -> PodActions:
    return _Planner(pod, pod_status, now, backoff, probe_kill, started).compute()


def termination_dependencies(pod: Pod | None, names: list[str]) -> dict[str, set[str]]:
    """Which containers must be gone before each one may be stopped (upstream terminationOrdering).

    Regular containers (and regular init containers) stop at once, in parallel. Sidecars stop after
    every regular container and after every sidecar declared *later* than them, i.e. in reverse
    start order, so a logging or proxy sidecar outlives the app it serves. Only ``names`` (the
    containers being stopped) are considered; without a pod every container stops at once.
    """
    deps: dict[str, set[str]] = {n: set() for n in names}
    if pod is None:
        return deps
    sidecars = [c.get("name", "") for c in _spec(pod).get("initContainers") or [] if is_restartable_init_container(c)]
    present = set(names)
    regular = {n for n in names if n not in sidecars}
    for i, sc in enumerate(sidecars):
        if sc in present:
            deps[sc] = regular | {later for later in sidecars[i + 1:] if later in present}
    return deps
