"""Kernel parameters (sysctls) a pod may set (upstream ``pkg/kubelet/sysctl``: ``safe_sysctls.go``,
``namespace.go``, ``allowlist.go``; the same safe set is Pod Security's baseline list).

A sysctl is *safe* when it is namespaced (it affects only the pod's network or IPC namespace) and
isolated from other pods; those are always allowed. Others are *unsafe* and must be allowed on the
node by the KubeletConfiguration's ``allowedUnsafeSysctls`` (exact names or ``prefix*`` patterns);
even then only namespaced ones can be allowed (a node-wide sysctl could never be honoured per pod),
and a network sysctl is refused for a ``hostNetwork`` pod, an IPC one for a ``hostIPC`` pod, as they
would change the node itself. Shared so the agent's admission and the control plane's Pod Security
checks use one list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum


class Namespace(Enum):
    IPC = "ipc"
    NET = "net"
    UNKNOWN = ""


# upstream SafeSysctlAllowlist (kernel-version gates all met by the kernels pykubelet supports)
SAFE_SYSCTLS: tuple[str, ...] = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)

_NAMESPACES = {"kernel.sem": Namespace.IPC}
_PREFIX_NAMESPACES = {"kernel.shm": Namespace.IPC, "kernel.msg": Namespace.IPC, "fs.mqueue.": Namespace.IPC,
                      "net.": Namespace.NET}

# upstream validation: a sysctl name, optionally ending in '*' (a prefix pattern: net.core.*, kernel.msg*)
_SEGMENT = r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_PATTERN = re.compile(rf"^({_SEGMENT}[\./])*({_SEGMENT}\*?|\*)$")
MAX_LEN = 253


def to_dots(name: str) -> str:
    """Upstream ``ConvertSysctlVariableToDotsSeparator``: ``net/ipv4/conf/eth0.100/x`` →
    ``net.ipv4.conf.eth0/100.x`` (slashes separate, dots inside a segment become slashes)."""
    sep = next((c for c in name if c in "./"), ".")
    if sep == ".":
        return name
    return "".join("/" if c == "." else "." if c == "/" else c for c in name)


def namespaced_by(name: str) -> Namespace:
    """Upstream ``NamespacedBy``: which namespace isolates the sysctl (UNKNOWN: node-wide)."""
    if name in _NAMESPACES:
        return _NAMESPACES[name]
    for prefix, ns in _PREFIX_NAMESPACES.items():
        if name.startswith(prefix):
            return ns
    return Namespace.UNKNOWN


def validate_patterns(patterns: list[str]) -> list[str]:
    """The errors of an ``allowedUnsafeSysctls`` list (upstream ``NewAllowlist``), empty when valid."""
    errors = []
    for p in patterns:
        if not isinstance(p, str) or len(p) > MAX_LEN or not _PATTERN.match(p):
            errors.append(f"sysctl {p!r} must have at most {MAX_LEN} characters and match regex "
                          f"{_PATTERN.pattern}")
        elif namespaced_by(to_dots(p.removesuffix("*"))) is Namespace.UNKNOWN:
            errors.append(f"the sysctl {p!r} is not known to be namespaced")
    return errors


@dataclass
class Allowlist:
    """Upstream ``patternAllowlist``: the safe sysctls plus the node's allowed unsafe ones."""

    sysctls: dict[str, Namespace] = field(default_factory=dict)
    prefixes: dict[str, Namespace] = field(default_factory=dict)

    @classmethod
    def build(cls, allowed_unsafe: list[str]) -> Allowlist:
        errors = validate_patterns(allowed_unsafe)
        if errors:
            raise ValueError("; ".join(errors))
        out = cls()
        for p in [*SAFE_SYSCTLS, *allowed_unsafe]:
            p = to_dots(p)
            if p.endswith("*"):
                out.prefixes[p[:-1]] = namespaced_by(p[:-1])
            else:
                out.sysctls[p] = namespaced_by(p)
        return out

    def check(self, name: str, *, host_net: bool, host_ipc: bool) -> str | None:
        """Upstream ``validateSysctl``: None when allowed, else why not."""
        name = to_dots(name)
        ns = self.sysctls.get(name)
        if ns is None:
            ns = next((n for p, n in self.prefixes.items() if name.startswith(p)), None)
        if ns is None:
            return f"{name!r} not allowlisted".replace("'", '"')
        if ns is Namespace.IPC and host_ipc:
            return f'"{name}" not allowed with host ipc enabled'
        if ns is Namespace.NET and host_net:
            return f'"{name}" not allowed with host net enabled'
        return None
