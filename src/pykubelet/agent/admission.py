"""Node-side pod admission: the checks a pod passes before this node runs it (upstream
``pkg/kubelet/lifecycle`` admit handlers and ``Kubelet.canAdmitPod``).

The scheduler already checked the pod against the node, but a pod may reach the node without it
(``spec.nodeName`` set by the user, a static pod) or the node may have changed since. So, as upstream,
every new pod goes through a chain of ``PodAdmitHandler``s with the pods already admitted; the first
refusal wins and the pod becomes ``Failed`` with the handler's reason and message, an event is
recorded, and it never gets a pod worker (upstream ``rejectPod``). A pod is admitted once: a pod
already running is never re-checked (that would kill healthy pods after an agent restart).

The chain starts with the spec sanity check the engine needs and max pods (``OutOfpods``); node
resources, taints and affinity, eviction and security checks are further handlers appended by the
subsystems that own them.
"""

from __future__ import annotations

from pykubelet.agent.interfaces import PodAdmitAttributes, PodAdmitHandler, PodAdmitResult
from pykubelet.agent.types import Pod

ADMIT = PodAdmitResult(admit=True)


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


class ValidPodAdmitHandler:
    """Refuses a pod the engine could not turn into runtime calls (``InvalidPodSpec``)."""

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        err = validate_pod(attrs.pod)
        if err is None:
            return ADMIT
        return PodAdmitResult(False, "InvalidPodSpec", f"Pod was rejected: {err}")


class MaxPodsAdmitHandler:
    """Upstream's ``pods`` resource check: at most ``maxPods`` non-terminal pods (``OutOfpods``)."""

    def __init__(self, max_pods: int) -> None:
        self.max_pods = max_pods

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        used = len(attrs.other_pods)
        if used < self.max_pods:
            return ADMIT
        return PodAdmitResult(
            False, "OutOfpods",
            f"Node didn't have enough resource: pods, requested: 1, used: {used}, capacity: {self.max_pods}",
        )


class AdmissionChain:
    """The handlers in order; ``admit`` returns the first refusal, or admission."""

    def __init__(self, handlers: list[PodAdmitHandler] | None = None) -> None:
        self.handlers: list[PodAdmitHandler] = list(handlers or [])

    def append(self, handler: PodAdmitHandler) -> None:
        self.handlers.append(handler)

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        for handler in self.handlers:
            result = handler.admit(attrs)
            if not result.admit:
                return result
        return ADMIT
