"""Pod Security admission (upstream ``k8s.io/pod-security-admission``): the Pod Security Standards
enforced per namespace by its labels.

A namespace opts in with ``pod-security.kubernetes.io/<mode>: privileged|baseline|restricted`` for
the modes ``enforce`` (a violating pod is refused, 403), ``warn`` (it is admitted and the response
carries a Warning) and ``audit`` (upstream writes an audit annotation; this server has no audit log,
so audit is evaluated like warn, said in the warning). ``<mode>-version`` pins a version; this server
knows one version of the standards, the latest, and names the version the label asks for in its
messages as upstream does. An unknown level is evaluated as ``restricted`` (upstream fails closed).

Checks and texts follow the policy package of upstream (``policy/check_*.go``): each failing check
gives ``<reason> (<detail>)`` and the message is
``violates PodSecurity "<level>:<version>": <reason> (<detail>), ...`` in the order of the checks'
ids. Pods only: controllers' pod templates are not checked (upstream only warns for those).
Evaluation is pure (:func:`violations`); :func:`admit` reads the namespace's labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pykubelet.common.sysctl import SAFE_SYSCTLS, to_dots

Obj = dict[str, Any]
LABEL = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")

# upstream's baseline capability allow list and the restricted one
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


class PodSecurityViolation(Exception):
    """The pod violates the namespace's enforced level; the message is upstream's."""


def _containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def _sc(o: Obj) -> Obj:
    v = o.get("securityContext")
    return v if isinstance(v, dict) else {}


def _quote(items: Iterable[str]) -> str:
    return ", ".join(f'"{i}"' for i in items)


def _who(names: list[str], noun: str = "container") -> str:
    return f'{noun} {_quote(names)}' if len(names) == 1 else f'{noun}s {_quote(names)}'


def _verb(names: list[str], one: str, many: str) -> str:
    return one if len(names) == 1 else many


Check = Callable[[Obj], tuple[str, str] | None]


def _host_namespaces(pod: Obj) -> tuple[str, str] | None:
    spec = pod.get("spec") or {}
    on = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]
    return ("host namespaces", ", ".join(on)) if on else None


def _privileged(pod: Obj) -> tuple[str, str] | None:
    bad = [c.get("name", "") for c in _containers(pod) if _sc(c).get("privileged") is True]
    return ("privileged", f"{_who(bad)} must not set securityContext.privileged=true") if bad else None


def _added_caps(c: Obj) -> list[str]:
    caps = _sc(c).get("capabilities") or {}
    return [str(a) for a in caps.get("add") or []]


def _capabilities_baseline(pod: Obj) -> tuple[str, str] | None:
    bad: list[str] = []
    caps: list[str] = []
    for c in _containers(pod):
        extra = [a for a in _added_caps(c) if a not in BASELINE_CAPS]
        if extra:
            bad.append(c.get("name", ""))
            caps += [a for a in extra if a not in caps]
    if not bad:
        return None
    return ("non-default capabilities", f"{_who(bad)} must not include {_quote(caps)} in "
            "securityContext.capabilities.add")


def _volumes(pod: Obj) -> list[tuple[str, str]]:
    """(name, type) of each volume."""
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if isinstance(v, dict):
            kinds = [k for k in v if k != "name"]
            out.append((str(v.get("name", "")), kinds[0] if kinds else ""))
    return out


def _host_path_volumes(pod: Obj) -> tuple[str, str] | None:
    bad = [n for n, t in _volumes(pod) if t == "hostPath"]
    return ("hostPath volumes", _who(bad, "volume")) if bad else None


def _host_ports(pod: Obj) -> tuple[str, str] | None:
    bad: list[str] = []
    ports: list[str] = []
    for c in _containers(pod):
        hp = [str(p.get("hostPort")) for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if hp:
            bad.append(c.get("name", ""))
            ports += [p for p in hp if p not in ports]
    if not bad:
        return None
    return ("hostPort", f"{_who(bad)} {_verb(bad, 'uses', 'use')} {_verb(ports, 'hostPort', 'hostPorts')} "
                        f"{', '.join(ports)}")


def _proc_mount(pod: Obj) -> tuple[str, str] | None:
    bad = [c.get("name", "") for c in _containers(pod) if _sc(c).get("procMount") not in (None, "", "Default")]
    return ("procMount", f'{_who(bad)} must not set securityContext.procMount to "Unmasked"') if bad else None


def _seccomp_type(o: Obj) -> str | None:
    prof = _sc(o).get("seccompProfile")
    return str(prof.get("type")) if isinstance(prof, dict) and prof.get("type") else None


def _seccomp_baseline(pod: Obj) -> tuple[str, str] | None:
    parts = []
    if _seccomp_type(pod.get("spec") or {}) == "Unconfined":
        parts.append('pod must not set securityContext.seccompProfile.type to "Unconfined"')
    bad = [c.get("name", "") for c in _containers(pod) if _seccomp_type(c) == "Unconfined"]
    if bad:
        parts.append(f'{_who(bad)} must not set securityContext.seccompProfile.type to "Unconfined"')
    return ("seccompProfile", "; ".join(parts)) if parts else None


def _selinux(pod: Obj) -> tuple[str, str] | None:
    def bad_opts(o: Obj) -> bool:
        opts = _sc(o).get("seLinuxOptions") or {}
        return bool(opts.get("user") or opts.get("role")) or str(opts.get("type") or "") not in SELINUX_TYPES
    parts = []
    if bad_opts(pod.get("spec") or {}):
        parts.append("pod must not set securityContext.seLinuxOptions.type, user or role to forbidden values")
    bad = [c.get("name", "") for c in _containers(pod) if bad_opts(c)]
    if bad:
        parts.append(f"{_who(bad)} must not set securityContext.seLinuxOptions.type, user or role to forbidden values")
    return ("seLinuxOptions", "; ".join(parts)) if parts else None


def _sysctls(pod: Obj) -> tuple[str, str] | None:
    names = [str(s.get("name", "")) for s in _sc(pod.get("spec") or {}).get("sysctls") or [] if isinstance(s, dict)]
    bad = [n for n in names if to_dots(n) not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def _app_armor(pod: Obj) -> tuple[str, str] | None:
    bad = [f'{k}="{v}"' for k, v in ((pod.get("metadata") or {}).get("annotations") or {}).items()
           if str(k).startswith("container.apparmor.security.beta.kubernetes.io/")
           and v not in ("runtime/default",) and not str(v).startswith("localhost/")]
    unconfined = [c.get("name", "") for c in _containers(pod)
                  if (_sc(c).get("appArmorProfile") or {}).get("type") == "Unconfined"]
    if (_sc(pod.get("spec") or {}).get("appArmorProfile") or {}).get("type") == "Unconfined":
        bad.append('pod must not set securityContext.appArmorProfile.type to "Unconfined"')
    if unconfined:
        bad.append(f'{_who(unconfined)} must not set securityContext.appArmorProfile.type to "Unconfined"')
    return ("forbidden AppArmor profiles", ", ".join(bad)) if bad else None


def _allow_privilege_escalation(pod: Obj) -> tuple[str, str] | None:
    bad = [c.get("name", "") for c in _containers(pod) if _sc(c).get("allowPrivilegeEscalation") is not False]
    return ("allowPrivilegeEscalation != false",
            f"{_who(bad)} must set securityContext.allowPrivilegeEscalation=false") if bad else None


def _capabilities_restricted(pod: Obj) -> tuple[str, str] | None:
    no_drop: list[str] = []
    adders: list[str] = []
    caps: list[str] = []
    for c in _containers(pod):
        if "ALL" not in [str(d) for d in (_sc(c).get("capabilities") or {}).get("drop") or []]:
            no_drop.append(c.get("name", ""))
        extra = [a for a in _added_caps(c) if a != "NET_BIND_SERVICE"]
        if extra:
            adders.append(c.get("name", ""))
            caps += [a for a in extra if a not in caps]
    parts = []
    if no_drop:
        parts.append(f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adders:
        parts.append(f"{_who(adders)} must not include {_quote(caps)} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(parts)) if parts else None


def _restricted_volumes(pod: Obj) -> tuple[str, str] | None:
    bad = [(n, t) for n, t in _volumes(pod) if t not in RESTRICTED_VOLUMES]
    if not bad:
        return None
    names = [n for n, _ in bad]
    types = list(dict.fromkeys(t for _, t in bad))
    return ("restricted volume types", f"{_who(names, 'volume')} {_verb(names, 'uses', 'use')} restricted volume "
                                       f"{_verb(types, 'type', 'types')} {_quote(types)}")


def _run_as_non_root(pod: Obj) -> tuple[str, str] | None:
    pod_value = _sc(pod.get("spec") or {}).get("runAsNonRoot")
    parts = []
    if pod_value is False:
        parts.append("pod must not set securityContext.runAsNonRoot=false")
    explicit_false = [c.get("name", "") for c in _containers(pod) if _sc(c).get("runAsNonRoot") is False]
    if explicit_false:
        parts.append(f"{_who(explicit_false)} must not set securityContext.runAsNonRoot=false")
    if pod_value is not True:
        unset = [c.get("name", "") for c in _containers(pod) if _sc(c).get("runAsNonRoot") is None]
        if unset:
            parts.append(f"pod or {_who(unset)} must set securityContext.runAsNonRoot=true")
    return ("runAsNonRoot != true", "; ".join(parts)) if parts else None


def _run_as_user(pod: Obj) -> tuple[str, str] | None:
    parts = []
    if _sc(pod.get("spec") or {}).get("runAsUser") == 0:
        parts.append("pod must not set runAsUser=0")
    bad = [c.get("name", "") for c in _containers(pod) if _sc(c).get("runAsUser") == 0]
    if bad:
        parts.append(f"{_who(bad)} must not set runAsUser=0")
    return ("runAsUser=0", "; ".join(parts)) if parts else None


def _seccomp_restricted(pod: Obj) -> tuple[str, str] | None:
    ok = ("RuntimeDefault", "Localhost")
    pod_type = _seccomp_type(pod.get("spec") or {})
    parts = []
    if pod_type is not None and pod_type not in ok:
        parts.append(f'pod must not set securityContext.seccompProfile.type to "{pod_type}"')
    wrong = [c.get("name", "") for c in _containers(pod) if _seccomp_type(c) not in (None, *ok)]
    if wrong:
        parts.append(f'{_who(wrong)} must not set securityContext.seccompProfile.type to "Unconfined"')
    if pod_type is None:
        unset = [c.get("name", "") for c in _containers(pod) if _seccomp_type(c) is None]
        if unset:
            parts.append(f'pod or {_who(unset)} must set securityContext.seccompProfile.type to "RuntimeDefault" '
                         'or "Localhost"')
    return ("seccompProfile", "; ".join(parts)) if parts else None


# (check id, check); restricted adds its checks and replaces the two baseline ones it tightens
BASELINE: list[tuple[str, Check]] = [
    ("appArmorProfile", _app_armor), ("capabilities_baseline", _capabilities_baseline),
    ("hostNamespaces", _host_namespaces), ("hostPathVolumes", _host_path_volumes), ("hostPorts", _host_ports),
    ("privileged", _privileged), ("procMount", _proc_mount), ("seccompProfile_baseline", _seccomp_baseline),
    ("seLinuxOptions", _selinux), ("sysctls", _sysctls),
]
RESTRICTED: list[tuple[str, Check]] = [
    ("allowPrivilegeEscalation", _allow_privilege_escalation), ("capabilities_restricted", _capabilities_restricted),
    ("restrictedVolumes", _restricted_volumes), ("runAsNonRoot", _run_as_non_root), ("runAsUser", _run_as_user),
    ("seccompProfile_restricted", _seccomp_restricted),
]
OVERRIDDEN = {"capabilities_baseline", "seccompProfile_baseline"}


def violations(pod: Obj, level: str) -> list[str]:
    """``<reason> (<detail>)`` for each check of ``level`` the pod fails, in check-id order."""
    if level == "privileged":
        return []
    checks = list(BASELINE)
    if level != "baseline":
        checks = [c for c in checks if c[0] not in OVERRIDDEN] + RESTRICTED
    out = []
    for _, check in sorted(checks, key=lambda c: c[0].lower()):
        found = check(pod)
        if found is not None:
            out.append(f"{found[0]} ({found[1]})")
    return out


def policy(namespace: Obj | None, mode: str) -> tuple[str, str] | None:
    """(level, version) the namespace sets for ``mode`` (enforce, warn, audit); None when unset."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(LABEL + mode)
    if not level:
        return None
    if level not in LEVELS:
        level = "restricted"  # fail closed, as upstream
    return level, str(labels.get(LABEL + mode + "-version") or "latest")


def admit(pod: Obj, namespace: Obj | None) -> list[str]:
    """Raise :class:`PodSecurityViolation` for the enforced level; return warnings for warn/audit."""
    enforced = policy(namespace, "enforce")
    if enforced is not None:
        found = violations(pod, enforced[0])
        if found:
            raise PodSecurityViolation(f'violates PodSecurity "{enforced[0]}:{enforced[1]}": ' + ", ".join(found))
    warnings = []
    for mode in ("warn", "audit"):
        p = policy(namespace, mode)
        if p is None:
            continue
        found = violations(pod, p[0])
        if found:
            suffix = "" if mode == "warn" else " (audit mode: this server keeps no audit log, so it warns)"
            warnings.append(f'would violate PodSecurity "{p[0]}:{p[1]}": ' + ", ".join(found) + suffix)
    return list(dict.fromkeys(warnings))
