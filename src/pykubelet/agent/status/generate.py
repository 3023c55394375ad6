"""API pod status from the runtime view (upstream kubelet_pods.go generateAPIPodStatus / getPhase).

Pure functions of (pod spec, previous API status, RuntimePodStatus, reason cache, node IPs, now):

- container statuses (``convertToAPIContainerStatuses``): each spec container defaults to
  Waiting/ContainerCreating (PodInitializing for app containers while init is pending); the newest
  runtime container gives state running/terminated, the one before it ``lastState``; a pending start
  failure recorded in the reason cache (CrashLoopBackOff, ErrImagePull, ImagePullBackOff, ...) turns a
  dead container into Waiting with that reason and moves its termination into ``lastState``.
- phase (``getPhase``): Pending while init is pending or anything waits; Running when something runs;
  when everything stopped: Always → Running (it will restart), OnFailure → Succeeded if all exited 0
  else Running, Never → Succeeded if all exited 0 else Failed; a failed init container with
  restartPolicy Never fails the pod. A terminal phase never goes back (status manager rule).
- conditions PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady, Ready with upstream
  reasons/messages; lastTransitionTime kept while a condition's status does not change.
- podIP(s) from the ready sandbox (host IPs for hostNetwork pods), hostIP(s), startTime, qosClass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from pykubelet.agent.container.runtime import (
    ContainerRuntimeStatus,
    ContainerState,
    RuntimePodStatus,
)
from pykubelet.common.podutil import is_restartable_init_container

Pod = dict[str, Any]

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


_last_stamp: tuple[int, str] = (0, "1970-01-01T00:00:00Z")


def rfc3339(ts: float | None = None) -> str:
    """``ts`` (default: now) as RFC 3339 in whole seconds, UTC. The statuses, conditions and events
    of one moment all carry the same second, so the last answer is kept (``strftime`` costs ~5 µs,
    several times per generated status)."""
    global _last_stamp
    second = math.floor(time.time() if ts is None else ts)
    if _last_stamp[0] != second:
        _last_stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _last_stamp[1]


def _terminated(cs: ContainerRuntimeStatus) -> dict[str, Any]:
    reason = cs.reason or ("Completed" if cs.exit_code == 0 else "Error")
    out: dict[str, Any] = {
        "exitCode": cs.exit_code,
        "reason": reason,
        "startedAt": rfc3339(cs.started_at) if cs.started_at else None,
        "finishedAt": rfc3339(cs.finished_at) if cs.finished_at else None,
        "containerID": cs.container_id,
    }
    if cs.message:
        out["message"] = cs.message
    return out


def _state_of(cs: ContainerRuntimeStatus) -> dict[str, Any]:
    if cs.state == ContainerState.RUNNING:
        return {"running": {"startedAt": rfc3339(cs.started_at or cs.created_at)}}
    if cs.state == ContainerState.EXITED:
        return {"terminated": _terminated(cs)}
    if cs.state == ContainerState.CREATED:
        return {"waiting": {"reason": "ContainerCreating"}}
    return {"waiting": {"reason": "ContainerStatusUnknown"}}


def container_statuses(
    pod: Pod,
    containers: list[dict[str, Any]],
    runtime: RuntimePodStatus,
    reasons: Mapping[str, tuple[str, str]],
    default_reason: str,
    *,
    init: bool,
    probes: Mapping[str, tuple[bool, bool]] | None = None,
) -> list[dict[str, Any]]:
    """``probes``: name → (started, ready) from the prober for running containers; without an entry
    a running container counts as started and ready (no probes)."""
    out = []
    for c in containers:
        name = c.get("name", "")
        all_ = runtime.all_of(name)
        st: dict[str, Any] = {
            "name": name,
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": {"reason": default_reason}},
            "lastState": {},
        }
        if all_:
            latest = all_[0]
            st["state"] = _state_of(latest)
            st["restartCount"] = latest.restart_count
            st["containerID"] = latest.container_id
            st["imageID"] = latest.image_ref or latest.image_id
            running = latest.state == ContainerState.RUNNING
            started, ready = (probes or {}).get(name, (True, True)) if running else (False, False)
            st["started"] = started
            if init and not is_restartable_init_container(c):
                st["started"] = running
                st["ready"] = latest.state == ContainerState.EXITED and latest.exit_code == 0
            else:
                st["ready"] = ready
            previous = next((p for p in all_[1:] if p.state == ContainerState.EXITED), None)
            if previous is not None:
                st["lastState"] = {"terminated": _terminated(previous)}
            if not running and name in reasons:
                reason, message = reasons[name]
                if latest.state == ContainerState.EXITED:
                    st["lastState"] = {"terminated": _terminated(latest)}
                st["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        elif name in reasons:
            reason, message = reasons[name]
            st["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        out.append(st)
    return out


def get_phase(pod: Pod, init_statuses: list[dict[str, Any]], statuses: list[dict[str, Any]]) -> str:
    """Upstream getPhase."""
    spec = pod.get("spec") or {}
    policy = spec.get("restartPolicy") or "Always"
    inits = {c.get("name"): c for c in spec.get("initContainers") or []}
    regular_started = any(
        "running" in s["state"] or "terminated" in s["state"] or s.get("lastState", {}).get("terminated")
        for s in statuses
    )
    pending_init = failed_init = 0
    for s in init_statuses:
        sidecar = is_restartable_init_container(inits.get(s["name"]) or {})
        state = s["state"]
        if sidecar:
            if not s.get("started") and not regular_started:
                pending_init += 1
            continue
        if regular_started:
            continue
        if "running" in state:
            pending_init += 1
        elif "terminated" in state:
            if state["terminated"].get("exitCode", 0) != 0:
                failed_init += 1
        else:
            last = (s.get("lastState") or {}).get("terminated")
            if last and last.get("exitCode", 0) != 0:
                failed_init += 1
            else:
                pending_init += 1
    unknown = running = waiting = stopped = succeeded = 0
    for s in statuses:
        state = s["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            if state["terminated"].get("exitCode", 0) == 0:
                succeeded += 1
        elif "waiting" in state:
            if (s.get("lastState") or {}).get("terminated"):
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if failed_init > 0 and policy == "Never":
        return "Failed"
    if pending_init > 0 or (failed_init > 0 and not regular_started):
        return "Pending"
    if waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Running" if policy == "OnFailure" else "Failed"
    return "Pending"


def _condition(
    old: Mapping[str, dict[str, Any]], ctype: str, status: bool, now: str, reason: str = "", message: str = ""
) -> dict[str, Any]:
    s = "True" if status else "False"
    prev = old.get(ctype)
    cond: dict[str, Any] = {
        "type": ctype,
        "status": s,
        "lastProbeTime": None,
        "lastTransitionTime": prev["lastTransitionTime"]
        if prev and prev.get("status") == s and prev.get("lastTransitionTime")
        else now,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def generate_api_status(
    pod: Pod,
    runtime: RuntimePodStatus,
    *,
    reasons: Mapping[str, tuple[str, str]] | None = None,
    host_ips: list[str] | None = None,
    qos_class: str | None = None,
    now: float | None = None,
    pod_is_terminal: bool = False,
    probes: Mapping[str, tuple[bool, bool]] | None = None,
) -> dict[str, Any]:
    """The full API status the kubelet wants for ``pod`` (upstream generateAPIPodStatus)."""
    reasons = reasons or {}
    now_s = rfc3339(now)
    spec = pod.get("spec") or {}
    # read only, never changed: the conditions carried over are copied below (no deep copy per sync)
    old: Mapping[str, Any] = pod.get("status") or {}
    inits = spec.get("initContainers") or []
    conts = spec.get("containers") or []
    init_statuses = container_statuses(pod, inits, runtime, reasons, "PodInitializing", init=True, probes=probes)
    # App containers wait in PodInitializing while regular init containers have not completed.
    init_pending = any(not s["ready"] for s in init_statuses) and not any(
        runtime.find_container(c.get("name", "")) for c in conts
    )
    # Upstream: app containers of a pod with init containers wait in PodInitializing until created.
    statuses = container_statuses(
        pod, conts, runtime, reasons, "PodInitializing" if init_pending or inits else "ContainerCreating",
        init=False, probes=probes,
    )
    phase = get_phase(pod, init_statuses, statuses)
    old_phase = old.get("phase")
    if old_phase in ("Succeeded", "Failed"):
        phase = old_phase
    elif pod_is_terminal and phase not in ("Succeeded", "Failed"):
        # Upstream: a pod that finished terminating (deleted / evicted) reports Failed unless all
        # containers succeeded.
        stopped_ok = all(
            "terminated" in s["state"] and s["state"]["terminated"].get("exitCode") == 0 for s in statuses
        )
        phase = "Succeeded" if statuses and stopped_ok else "Failed"

    old_conds = {c.get("type", ""): c for c in old.get("conditions") or []}
    conditions: list[dict[str, Any]] = [
        dict(c) for c in old.get("conditions") or [] if c.get("type") not in (*KUBELET_CONDITIONS, "PodScheduled")
    ]
    sched = dict(old_conds.get("PodScheduled") or {}) or {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now_s,
    }
    sandbox_ready = any(sb.ready for sb in runtime.sandboxes)
    conditions.append(_condition(old_conds, "PodReadyToStartContainers", sandbox_ready, now_s))
    not_init = [s["name"] for s in init_statuses if not s["ready"]]
    regular_created = any(runtime.find_container(c.get("name", "")) for c in conts)
    initialized = not not_init or regular_created
    if phase == "Succeeded" and inits:
        initialized = True
    conditions.append(
        _condition(
            old_conds,
            "Initialized",
            initialized,
            now_s,
            "" if initialized else "ContainersNotInitialized",
            "" if initialized else f"containers with incomplete status: [{' '.join(not_init)}]",
        )
    )
    unready = [s["name"] for s in statuses if not s["ready"]]
    unready += [
        s["name"] for s, c in zip(init_statuses, inits, strict=False)
        if is_restartable_init_container(c) and not s["ready"]
    ]
    ready = not unready and initialized and phase == "Running"
    if phase in ("Succeeded", "Failed"):
        reason, msg = "PodCompleted", ""
    elif not initialized:
        reason, msg = "ContainersNotInitialized", f"containers with incomplete status: [{' '.join(not_init)}]"
    else:
        reason, msg = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
    conditions.append(_condition(old_conds, "ContainersReady", ready, now_s, "" if ready else reason,
                                 "" if ready else msg))
    conditions.append(_condition(old_conds, "Ready", ready, now_s, "" if ready else reason,
                                 "" if ready else msg))
    conditions.append(sched)

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "containerStatuses": statuses,
        "startTime": old.get("startTime") or now_s,
    }
    if inits:
        status["initContainerStatuses"] = init_statuses
    if spec.get("ephemeralContainers"):
        status["ephemeralContainerStatuses"] = [
            {k: v for k, v in s.items() if k not in ("ready", "started")} | {"ready": False}
            for s in container_statuses(pod, spec["ephemeralContainers"], runtime, reasons, "ContainerCreating",
                                        init=False, probes={})]
    if qos_class:
        status["qosClass"] = qos_class
    hips = list(host_ips or [])
    if hips:
        status["hostIP"] = hips[0]
        status["hostIPs"] = [{"ip": ip} for ip in hips]
    ips = hips if spec.get("hostNetwork") else runtime.ips
    if not ips and old.get("podIP") and phase in ("Succeeded", "Failed"):
        ips = [old["podIP"]]  # keep the IP a completed pod had (upstream keeps the last one)
    if ips:
        status["podIP"] = ips[0]
        status["podIPs"] = [{"ip": ip} for ip in ips]
    for keep in ("reason", "message", "nominatedNodeName"):
        if keep in old and phase in ("Succeeded", "Failed") and keep in ("reason", "message"):
            status[keep] = old[keep]
        elif keep == "nominatedNodeName" and keep in old:
            status[keep] = old[keep]
    return status
