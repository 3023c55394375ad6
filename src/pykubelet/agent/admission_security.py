"""Node-side admission of a pod's security settings (upstream ``pkg/kubelet/sysctl/allowlist.go``
``patternAllowlist.Admit`` and ``lifecycle.NewAppArmorAdmitHandler``).

Both are ``PodAdmitHandler``s appended to the kubelet's admission chain, so a pod the node cannot run
as asked fails before any container exists, instead of running without the protection it asked for:

- **sysctls**: every ``spec.securityContext.sysctls`` name must be in the safe set or match the node's
  ``allowedUnsafeSysctls``, and must not touch the node's own network/IPC namespace (hostNetwork /
  hostIPC pods); otherwise the pod fails with reason ``SysctlForbidden`` and message
  ``forbidden sysctl: "<name>" not allowlisted`` as upstream.
- **AppArmor**: a pod that asks for a profile other than ``Unconfined`` (field or the beta
  annotation) on a node whose kernel has no AppArmor fails with reason ``AppArmor`` and message
  ``Cannot enforce AppArmor: AppArmor is not enabled on the host``.
"""

from __future__ import annotations

from pykubelet.agent.interfaces import PodAdmitAttributes, PodAdmitResult
from pykubelet.agent.kuberuntime.security import apparmor_required
from pykubelet.common.sysctl import Allowlist

SYSCTL_FORBIDDEN = "SysctlForbidden"
APPARMOR_REASON = "AppArmor"
ADMIT = PodAdmitResult(admit=True)


class SysctlAdmitHandler:
    """Refuses pods whose sysctls the node does not allow (``SysctlForbidden``)."""

    def __init__(self, allowed_unsafe_sysctls: list[str]) -> None:
        # raises ValueError for patterns that can never be allowed (the config check reports them first)
        self.allowlist = Allowlist.build(list(allowed_unsafe_sysctls))

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        spec = attrs.pod.get("spec")
        if not isinstance(spec, dict):
            return ADMIT
        sc = spec.get("securityContext")
        sysctls = sc.get("sysctls") if isinstance(sc, dict) else None
        if not isinstance(sysctls, list):
            return ADMIT
        for s in sysctls:
            name = s.get("name") if isinstance(s, dict) else None
            err = self.allowlist.check(str(name or ""), host_net=spec.get("hostNetwork") is True,
                                       host_ipc=spec.get("hostIPC") is True)
            if err is not None:
                return PodAdmitResult(False, SYSCTL_FORBIDDEN, f"forbidden sysctl: {err}")
        return ADMIT


class AppArmorAdmitHandler:
    """Refuses pods that need AppArmor on a node without it (reason ``AppArmor``)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def admit(self, attrs: PodAdmitAttributes) -> PodAdmitResult:
        if self.enabled or not apparmor_required(attrs.pod):
            return ADMIT
        return PodAdmitResult(False, APPARMOR_REASON, "Cannot enforce AppArmor: AppArmor is not enabled on the host")
