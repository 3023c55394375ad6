"""How long a pod's containers get to stop: one answer for the pod workers, the runtime and the prober.

Upstream decides the grace period in two places that must agree: the pod workers'
``calculateEffectiveGracePeriod`` (the API server's ``deletionGracePeriodSeconds`` or a kubelet
override such as eviction, else ``spec.terminationGracePeriodSeconds``, default 30 s; it may only
shrink once termination started) and ``killContainer`` (the same source, or a probe's own
``terminationGracePeriodSeconds`` after a liveness/startup failure). Both clamp: "no matter what, we
always supply a grace period of 1" for the pod, so ``kubectl delete --grace-period=0 --force`` still
sends SIGTERM before SIGKILL. Keeping the rule here means no caller can forget the clamp.
"""

from __future__ import annotations

from pykubelet.agent.types import Pod

MIN_POD_GRACE = 1
DEFAULT_POD_GRACE = 30


def pod_termination_grace(pod: Pod) -> int:
    """The grace period the pod asks for: the API server's word first, then its spec; never < 1."""
    md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    dgps = md.get("deletionGracePeriodSeconds")
    if dgps is not None:
        return max(MIN_POD_GRACE, int(dgps))
    g = spec.get("terminationGracePeriodSeconds")
    return DEFAULT_POD_GRACE if g is None else max(MIN_POD_GRACE, int(g))


def effective_grace(current: int | None, pod: Pod, override: int | None = None) -> int:
    """Upstream calculateEffectiveGracePeriod: the grace period only shrinks; the API server's
    ``deletionGracePeriodSeconds`` and a kubelet override (eviction, ...) apply when shorter; the
    pod's own ``terminationGracePeriodSeconds`` only when nothing else said anything; never < 1."""
    grace = current or 0
    overridden = False
    dgps = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    for value in (dgps, override):
        if value is not None and (grace == 0 or int(value) < grace):
            grace, overridden = int(value), True
    if not overridden and grace == 0:
        return pod_termination_grace(pod)
    return max(MIN_POD_GRACE, grace)


def probe_kill_grace(pod: Pod, probe_grace: int | None) -> int:
    """Grace period of a kill after a failed liveness/startup probe: the probe-level override if the
    probe has one, else the pod's."""
    if probe_grace is not None:
        return max(MIN_POD_GRACE, int(probe_grace))
    return pod_termination_grace(pod)
