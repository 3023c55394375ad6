"""Pod and container security contexts → CRI (upstream ``kuberuntime/security_context.go``,
``kuberuntime_sandbox.go``, ``kuberuntime_container_linux.go``, ``pkg/securitycontext``).

Pure functions (no I/O): the runtime manager passes in what it learned from the node and the runtime
(the image's user from ``ImageStatus``, whether AppArmor is enabled, the seccomp profile root).

Upstream behaviour followed:

- **Precedence** (``DetermineEffectiveSecurityContext``): ``runAsUser``, ``runAsGroup``,
  ``runAsNonRoot``, ``seLinuxOptions``, ``seccompProfile`` and ``appArmorProfile`` come from the
  container when set there, else from the pod; ``privileged``, ``capabilities``,
  ``readOnlyRootFilesystem``, ``allowPrivilegeEscalation`` and ``procMount`` exist only on the container.
- **The image's user** (``getImageUser``): the numeric ``uid`` ImageStatus reports, else its
  ``username``, else root. With no ``runAsUser`` the container runs as that user (``run_as_user`` or
  ``run_as_username``), and ``runAsNonRoot`` is verified against it (``verifyRunAsNonRoot``) with the
  upstream messages, surfaced as CreateContainerConfigError.
- **Groups**: the pod's ``fsGroup`` then ``supplementalGroups`` are supplemental groups of every
  container and of the sandbox; ``supplementalGroupsPolicy`` is passed to CRI (the runtime manager
  refuses Strict when the runtime does not report supporting it, rather than ignore it).
- **no_new_privs** only when ``allowPrivilegeEscalation`` is explicitly false (``AddNoNewPrivileges``).
- **procMount**: ``Default`` passes the upstream masked / read-only /proc paths, ``Unmasked`` none.
- **seccomp** (``getSeccompProfile``): container field, else pod field, else RuntimeDefault when the
  KubeletConfiguration's ``seccompDefault`` is on, else Unconfined; ``Localhost`` profiles live under
  ``<root-dir>/seccomp/``. The sandbox gets the pod-level profile.
- **AppArmor** (``getAppArmorProfile``): container field, else the deprecated
  ``container.apparmor.security.beta.kubernetes.io/<name>`` annotation, else the pod field. A pod that
  needs AppArmor on a node without it is refused at admission (``admission_security``), so here it is
  only passed on when the kernel has AppArmor.
- **The sandbox** (``generatePodSandboxLinuxConfig``): privileged when any container (init,
  ephemeral included) is privileged — containerd and CRI-O refuse a privileged container in an
  unprivileged sandbox; host network / PID / IPC, ``shareProcessNamespace`` and ``hostUsers: false``
  (a CRI ``UserNamespace`` in POD mode with a 65536-id mapping) in the ``NamespaceOption``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from pykubelet.cri import pb

JSON = dict[str, Any]

APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_RUNTIME_DEFAULT = "runtime/default"
APPARMOR_LOCALHOST_PREFIX = "localhost/"
APPARMOR_UNCONFINED = "unconfined"

# upstream pkg/securitycontext/util.go defaultMaskedPaths / defaultReadonlyPaths
DEFAULT_MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

USERNS_LENGTH = 65536  # upstream userns manager: every pod gets 65536 ids
USERNS_FIRST_SLOT = 1  # slot 0 (host ids 0..65535) is the host's own range


class SecurityContextError(Exception):
    """The security context cannot be honoured for this container (CreateContainerConfigError)."""


@dataclass(frozen=True)
class SecurityOptions:
    """Node facts the security context depends on."""

    seccomp_root: str = "/var/lib/kubelet/seccomp"  # <root-dir>/seccomp
    seccomp_default: bool = False  # KubeletConfiguration seccompDefault
    apparmor_enabled: bool = False


def apparmor_enabled(path: str = "/sys/module/apparmor/parameters/enabled") -> bool:
    """Upstream ``apparmor.IsEnabled``: the kernel module's ``enabled`` parameter is ``Y``."""
    try:
        with open(path) as f:
            return f.read().strip().startswith("Y")
    except OSError:
        return False


def _psc(pod: JSON) -> JSON:
    sc = (pod.get("spec") or {}).get("securityContext")
    return sc if isinstance(sc, dict) else {}


def _csc(container: JSON) -> JSON:
    sc = container.get("securityContext")
    return sc if isinstance(sc, dict) else {}


def _all_containers(pod: JSON) -> list[JSON]:
    spec = pod.get("spec") or {}
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def effective(pod: JSON, container: JSON) -> JSON:
    """Upstream ``DetermineEffectiveSecurityContext``: the pod's inheritable fields, overridden by the
    container's; the container-only fields from the container."""
    psc, csc = _psc(pod), _csc(container)
    out: JSON = {}
    for key in ("runAsUser", "runAsGroup", "runAsNonRoot", "seLinuxOptions", "seccompProfile", "appArmorProfile"):
        if csc.get(key) is not None:
            out[key] = csc[key]
        elif psc.get(key) is not None:
            out[key] = psc[key]
    for key in ("privileged", "capabilities", "readOnlyRootFilesystem", "allowPrivilegeEscalation", "procMount"):
        if csc.get(key) is not None:
            out[key] = csc[key]
    return out


def has_privileged_container(pod: JSON) -> bool:
    """Upstream ``HasPrivilegedContainer`` (init and ephemeral containers included)."""
    return any(_csc(c).get("privileged") is True for c in _all_containers(pod))


# --- seccomp ------------------------------------------------------------------------------------
def _field_seccomp(profile: JSON, root: str) -> pb.SecurityProfile:
    kind = profile.get("type")
    if kind == "RuntimeDefault":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.RuntimeDefault)
    if kind == "Localhost":
        local = profile.get("localhostProfile")
        if not local:
            raise SecurityContextError("localhostProfile must be set if seccompProfile type is Localhost.")
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.Localhost,
                                  localhost_ref=os.path.join(root, str(local)))
    if kind == "Unconfined":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.Unconfined)
    raise SecurityContextError(f"seccompProfile.type: Unsupported value: {kind!r}")


def seccomp_profile(pod: JSON, container: JSON | None, options: SecurityOptions) -> pb.SecurityProfile:
    """Upstream ``getSeccompProfile``: container field, pod field, seccompDefault, Unconfined."""
    for sc in ((_csc(container) if container is not None else {}), _psc(pod)):
        if isinstance(sc.get("seccompProfile"), dict):
            return _field_seccomp(sc["seccompProfile"], options.seccomp_root)
    if options.seccomp_default:
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.RuntimeDefault)
    return pb.SecurityProfile(profile_type=pb.SecurityProfile.Unconfined)


# --- AppArmor -----------------------------------------------------------------------------------
def _apparmor_from_annotation(value: str) -> JSON:
    if value == APPARMOR_RUNTIME_DEFAULT:
        return {"type": "RuntimeDefault"}
    if value == APPARMOR_UNCONFINED:
        return {"type": "Unconfined"}
    if value.startswith(APPARMOR_LOCALHOST_PREFIX):
        return {"type": "Localhost", "localhostProfile": value[len(APPARMOR_LOCALHOST_PREFIX):]}
    raise SecurityContextError(f"invalid AppArmor profile name: {value!r}")


def apparmor_field(pod: JSON, container: JSON) -> JSON | None:
    """The AppArmor profile that applies to ``container`` as an API ``AppArmorProfile`` (or None):
    container field, else the container's beta annotation, else the pod field."""
    csc = _csc(container)
    if isinstance(csc.get("appArmorProfile"), dict):
        return dict(csc["appArmorProfile"])
    ann = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        APPARMOR_ANNOTATION_PREFIX + str(container.get("name", "")))
    if isinstance(ann, str) and ann:
        return _apparmor_from_annotation(ann)
    psc = _psc(pod)
    if isinstance(psc.get("appArmorProfile"), dict):
        return dict(psc["appArmorProfile"])
    return None


def apparmor_required(pod: JSON) -> bool:
    """Upstream ``apparmor.isRequired``: some container gets a profile other than Unconfined."""
    for c in _all_containers(pod):
        try:
            prof = apparmor_field(pod, c)
        except SecurityContextError:
            return True
        if prof is not None and prof.get("type") != "Unconfined":
            return True
    return False


def apparmor_profile(pod: JSON, container: JSON) -> tuple[pb.SecurityProfile | None, str]:
    """Upstream ``getAppArmorProfile``: the CRI profile and the deprecated profile string."""
    prof = apparmor_field(pod, container)
    if prof is None:
        return None, ""
    kind = prof.get("type")
    if kind == "RuntimeDefault":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.RuntimeDefault), APPARMOR_RUNTIME_DEFAULT
    if kind == "Unconfined":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.Unconfined), APPARMOR_UNCONFINED
    if kind == "Localhost":
        local = prof.get("localhostProfile")
        if not local:
            raise SecurityContextError("localhostProfile must be set if appArmorProfile type is Localhost.")
        return (pb.SecurityProfile(profile_type=pb.SecurityProfile.Localhost, localhost_ref=str(local)),
                APPARMOR_LOCALHOST_PREFIX + str(local))
    raise SecurityContextError(f"appArmorProfile.type: Unsupported value: {kind!r}")


# --- users --------------------------------------------------------------------------------------
def image_user(image: pb.Image | None) -> tuple[int | None, str]:
    """Upstream ``getImageUser``: (uid, "") for a numeric user, (None, name) for a named one,
    (0, "") when the image sets no user (it runs as root)."""
    if image is not None:
        if image.HasField("uid"):
            return int(image.uid.value), ""
        if image.username:
            return None, str(image.username)
    return 0, ""


def verify_run_as_non_root(pod: JSON, container: JSON, uid: int | None, username: str, pod_name: str) -> None:
    """Upstream ``verifyRunAsNonRoot`` (``pod_name`` is ``format.Pod``'s ``name_namespace(uid)``)."""
    sc = effective(pod, container)
    if sc.get("runAsNonRoot") is not True:
        return
    name = container.get("name", "")
    run_as = sc.get("runAsUser")
    if run_as is not None:
        if int(run_as) == 0:
            raise SecurityContextError(
                f'container\'s runAsUser breaks non-root policy (pod: "{pod_name}", container: {name})')
        return
    if uid is not None and uid == 0:
        raise SecurityContextError(
            f'container has runAsNonRoot and image will run as root (pod: "{pod_name}", container: {name})')
    if uid is None and username:
        raise SecurityContextError(
            f"container has runAsNonRoot and image has non-numeric user ({username}), cannot verify user is "
            f'non-root (pod: "{pod_name}", container: {name})')


# --- namespaces ---------------------------------------------------------------------------------
def user_namespace_mapping(pod_uid: str) -> pb.UserNamespace:
    """A pod-mode user namespace mapping 0..65535 in the pod to a 65536-id host range.

    The range is derived from the pod uid (stable across agent restarts, no state file): slot N maps
    host ids N*65536.., slots from 1 up to 2^31/65536 so the host's own ids are never used."""
    slots = (1 << 31) // USERNS_LENGTH - USERNS_FIRST_SLOT
    slot = USERNS_FIRST_SLOT + int(hashlib.sha256(pod_uid.encode()).hexdigest(), 16) % slots
    mapping = pb.IDMapping(host_id=slot * USERNS_LENGTH, container_id=0, length=USERNS_LENGTH)
    return pb.UserNamespace(mode=pb.POD, uids=[mapping], gids=[pb.IDMapping(
        host_id=mapping.host_id, container_id=0, length=USERNS_LENGTH)])


def wants_user_namespace(pod: JSON) -> bool:
    """``hostUsers: false`` asks for a user namespace (upstream default: host users)."""
    return (pod.get("spec") or {}).get("hostUsers") is False


def namespace_options(pod: JSON) -> pb.NamespaceOption:
    """Upstream ``NamespacesForPod``: host or pod namespaces, the user namespace for hostUsers: false."""
    spec = pod.get("spec") or {}
    opts = pb.NamespaceOption(
        network=pb.NODE if spec.get("hostNetwork") else pb.POD,
        pid=pb.NODE if spec.get("hostPID") else (pb.POD if spec.get("shareProcessNamespace") else pb.CONTAINER),
        ipc=pb.NODE if spec.get("hostIPC") else pb.POD,
    )
    if wants_user_namespace(pod):
        opts.userns_options.CopyFrom(user_namespace_mapping(str((pod.get("metadata") or {}).get("uid", ""))))
    return opts


def _groups(pod: JSON) -> list[int]:
    psc = _psc(pod)
    groups = [int(psc["fsGroup"])] if psc.get("fsGroup") is not None else []
    groups += [int(g) for g in psc.get("supplementalGroups") or []]
    return groups


def supplemental_groups_policy(pod: JSON) -> pb.SupplementalGroupsPolicy.ValueType:
    return pb.Strict if _psc(pod).get("supplementalGroupsPolicy") == "Strict" else pb.Merge


# --- the CRI security contexts -------------------------------------------------------------------
def sandbox_security(pod: JSON, options: SecurityOptions) -> pb.LinuxSandboxSecurityContext:
    """Upstream ``generatePodSandboxLinuxConfig``'s security context."""
    psc = _psc(pod)
    sc = pb.LinuxSandboxSecurityContext(
        namespace_options=namespace_options(pod),
        privileged=has_privileged_container(pod),
        seccomp=seccomp_profile(pod, None, options),
        supplemental_groups=_groups(pod),
        supplemental_groups_policy=supplemental_groups_policy(pod),
    )
    if psc.get("runAsUser") is not None:
        sc.run_as_user.value = int(psc["runAsUser"])
        # only with a user: containerd refuses a sandbox group without one ("user group is specified
        # without user"); the pause process needs neither, the containers get theirs below
        if psc.get("runAsGroup") is not None:
            sc.run_as_group.value = int(psc["runAsGroup"])
    _selinux(psc.get("seLinuxOptions"), sc.selinux_options)
    return sc


def _selinux(opts: object, target: pb.SELinuxOption) -> None:
    if isinstance(opts, dict):
        target.user = str(opts.get("user") or "")
        target.role = str(opts.get("role") or "")
        target.type = str(opts.get("type") or "")
        target.level = str(opts.get("level") or "")


def container_security(
    pod: JSON,
    container: JSON,
    options: SecurityOptions,
    *,
    image_uid: int | None = None,
    image_username: str = "",
) -> pb.LinuxContainerSecurityContext:
    """Upstream ``determineEffectiveSecurityContext``."""
    sc_in = effective(pod, container)
    privileged = sc_in.get("privileged") is True
    unmasked = sc_in.get("procMount") == "Unmasked"
    sc = pb.LinuxContainerSecurityContext(
        namespace_options=namespace_options(pod),
        privileged=privileged,
        readonly_rootfs=sc_in.get("readOnlyRootFilesystem") is True,
        no_new_privs=sc_in.get("allowPrivilegeEscalation") is False,
        seccomp=seccomp_profile(pod, container, options),
        supplemental_groups=_groups(pod),
        supplemental_groups_policy=supplemental_groups_policy(pod),
        masked_paths=[] if unmasked else list(DEFAULT_MASKED_PATHS),
        readonly_paths=[] if unmasked else list(DEFAULT_READONLY_PATHS),
    )
    caps = sc_in.get("capabilities") or {}
    if isinstance(caps, dict):
        sc.capabilities.add_capabilities.extend(str(c) for c in caps.get("add") or [])
        sc.capabilities.drop_capabilities.extend(str(c) for c in caps.get("drop") or [])
    if options.apparmor_enabled:
        profile, deprecated = apparmor_profile(pod, container)
        if profile is not None:
            sc.apparmor.CopyFrom(profile)
            sc.apparmor_profile = deprecated
    if sc_in.get("runAsUser") is not None:
        sc.run_as_user.value = int(sc_in["runAsUser"])
    elif image_uid is not None:
        sc.run_as_user.value = image_uid
    elif image_username:
        sc.run_as_username = image_username
    if sc_in.get("runAsGroup") is not None:
        sc.run_as_group.value = int(sc_in["runAsGroup"])
    _selinux(sc_in.get("seLinuxOptions"), sc.selinux_options)
    return sc
