"""A container's ``volumeMounts`` as CRI mounts (upstream ``makeMounts`` in kubelet_pods.go).

For every ``volumeMounts[i]`` of the container, in order, one ``runtime.v1.Mount``:

- ``host_path``: the volume's host path (``MountedVolume.host_path``), or a path inside it for
  ``subPath``/``subPathExpr``;
- ``readonly``: the mount's ``readOnly``, or forced by the plugin (configMap, secret, downwardAPI,
  projected; a claim mounted ``readOnly``);
- ``propagation``: unset/``None`` → private, ``HostToContainer`` → rslave, ``Bidirectional`` →
  rshared, which only privileged containers may use (the API server refuses it otherwise; here the
  container gets a CreateContainerConfigError saying so).

subPath, as upstream: ``subPathExpr`` is expanded with the container's environment (``$(VAR)``, ``$$``
for a literal ``$``; an unknown or empty variable fails with ``missing value for VAR``); the result
must be relative (``error SubPath `p` must not be an absolute path``) and have no ``..`` element
(``unable to provision SubPath `p`: must not contain '..'``); a missing subPath is created as a
directory with the volume root's mode, each element checked not to leave the volume; the path is then
resolved (symlinks included) and must stay inside the volume, else ``failed to prepare subPath for
volumeMount "v" of container "c"``. The *resolved* path is what the runtime bind-mounts, which is why a
subPath mount of a ConfigMap key does not follow later edits (the data directory it resolved to is
replaced, not changed) — exactly upstream's behaviour. Upstream closes the remaining race (a symlink
swapped in between the check and the runtime's mount) with an extra bind mount made through
``/proc/self/fd``; pykubelet does not, which matters only for a hostile container sharing the volume.

Errors are ``criconfig.ConfigError`` so the container waits with CreateContainerConfigError.
Blocking (realpath, mkdir) for a subPath: then called through ``asyncio.to_thread``
(:func:`needs_filesystem`); without one it computes paths only and runs on the event loop.
"""

from __future__ import annotations

import os
import re

from pykubelet.agent.kuberuntime.criconfig import ConfigError
from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.types import MountedVolume
from pykubelet.cri import pb

_PROPAGATION = {
    None: pb.PROPAGATION_PRIVATE,
    "None": pb.PROPAGATION_PRIVATE,
    "HostToContainer": pb.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": pb.PROPAGATION_BIDIRECTIONAL,
}
_VAR = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand_subpath_expr(expr: str, env: dict[str, str]) -> str:
    """Upstream ``ExpandContainerVolumeMounts``: every referenced variable must have a value."""
    missing: set[str] = set()

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        value = env.get(m.group(1), "")
        if not value:
            missing.add(m.group(1))
        return value

    out = _VAR.sub(sub, expr)
    if missing:
        raise ConfigError(f"missing value for {', '.join(sorted(missing))}")
    return out


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _safe_make_dir(volume_path: str, sub_path: str) -> None:
    """Create ``sub_path`` under ``volume_path`` one element at a time, never leaving the volume."""
    root = os.path.realpath(volume_path)
    perm = os.stat(root).st_mode & 0o7777
    cur = root
    for part in [p for p in sub_path.split("/") if p not in ("", ".")]:
        nxt = os.path.join(cur, part)
        if os.path.lexists(nxt):
            real = os.path.realpath(nxt)
            if not _inside(real, root):
                raise OSError(f"{sub_path} leaves the volume")
            cur = real
            continue
        os.mkdir(nxt, perm)
        os.chmod(nxt, perm)
        cur = nxt


def resolve_sub_path(mv: MountedVolume, mount: JSONObj, container_name: str, env: dict[str, str]) -> str:
    sub = mount.get("subPath") or ""
    expr = mount.get("subPathExpr") or ""
    name = mount.get("name", "")
    if sub and expr:
        raise ConfigError(f'volumeMount "{name}": subPathExpr and subPath are mutually exclusive')
    if expr:
        sub = expand_subpath_expr(str(expr), env)
    if not sub:
        return mv.host_path
    sub = str(sub)
    if os.path.isabs(sub):
        raise ConfigError(f"error SubPath `{sub}` must not be an absolute path")
    if ".." in sub.split("/"):
        raise ConfigError(f"unable to provision SubPath `{sub}`: must not contain '..'")
    prepare = f'failed to prepare subPath for volumeMount "{name}" of container "{container_name}"'
    target = os.path.join(mv.host_path, sub)
    root = os.path.realpath(mv.host_path)
    try:
        if not os.path.lexists(target):
            _safe_make_dir(mv.host_path, sub)
        real = os.path.realpath(target)
    except OSError as e:
        raise ConfigError(f'failed to create subPath directory for volumeMount "{name}" of container '
                          f'"{container_name}": {e.strerror or e}') from e
    if not _inside(real, root):
        raise ConfigError(f"{prepare}: subPath `{sub}` resolves outside the volume")
    if not os.path.exists(real):
        raise ConfigError(f"{prepare}: subPath `{sub}` does not exist")
    return real


def _privileged(container: JSONObj) -> bool:
    sc = container.get("securityContext")
    return isinstance(sc, dict) and sc.get("privileged") is True


def needs_filesystem(container: JSONObj) -> bool:
    """Whether :func:`container_mounts` may touch the filesystem for this container (a ``subPath``
    or ``subPathExpr`` is resolved, maybe created, on disk); without one it only computes paths, so
    the caller need not hand it to a thread."""
    mounts = container.get("volumeMounts") or []
    return not isinstance(mounts, list) or any(
        not isinstance(vm, dict) or vm.get("subPath") or vm.get("subPathExpr") for vm in mounts)


def container_mounts(pod_kind: str, index: int, container: JSONObj, volumes: dict[str, MountedVolume],
                     env: dict[str, str]) -> list[pb.Mount]:
    """The CRI mounts of one container. ``pod_kind``/``index`` name it in messages
    (``spec.containers[0]``)."""
    cname = str(container.get("name", ""))
    out: list[pb.Mount] = []
    mounts = container.get("volumeMounts") or []
    if not isinstance(mounts, list):
        raise ConfigError(f"spec.{pod_kind}[{index}].volumeMounts: must be a list")
    for i, vm in enumerate(mounts):
        where = f"spec.{pod_kind}[{index}].volumeMounts[{i}]"
        if not isinstance(vm, dict):
            raise ConfigError(f"{where}: must be an object")
        name = str(vm.get("name", ""))
        mv = volumes.get(name)
        if mv is None:
            raise ConfigError(f'cannot find volume "{name}" to mount into container "{cname}"')
        mount_path = vm.get("mountPath")
        if not isinstance(mount_path, str) or not mount_path:
            raise ConfigError(f"{where}.mountPath: Required value")
        mode = vm.get("mountPropagation")
        if not (mode is None or isinstance(mode, str)) or mode not in _PROPAGATION:
            raise ConfigError(f'invalid MountPropagation mode: "{mode}"')
        if mode == "Bidirectional" and not _privileged(container):
            raise ConfigError(f"{where}.mountPropagation: Forbidden: Bidirectional mount propagation is available "
                              "only to privileged containers")
        rro = vm.get("recursiveReadOnly")
        if rro not in (None, "Disabled", "IfPossible"):
            raise ConfigError(f'{where}.recursiveReadOnly: "{rro}" is not supported by this kubelet '
                              '(supported: "Disabled", "IfPossible")')
        out.append(pb.Mount(
            container_path=os.path.normpath("/" + mount_path) if not mount_path.startswith("/") else mount_path,
            host_path=resolve_sub_path(mv, vm, cname, env),
            readonly=bool(vm.get("readOnly")) or mv.read_only,
            propagation=_PROPAGATION[mode],
        ))
    return out
