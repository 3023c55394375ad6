"""Pod spec → CRI configs (upstream kuberuntime_sandbox.go, kuberuntime_container.go, kubelet_pods.go env).

Pure builders apart from the optional ConfigMap/Secret lookups for env, which are passed in as an
async ``lookup(kind, namespace, name) -> dict | None``:

- ``sandbox_config``: metadata (name/namespace/uid/attempt), hostname, log directory
  ``<podLogsDir>/<ns>_<name>_<uid>``, DNS (ClusterFirst with cluster DNS, else the host resolv.conf,
  None → only dnsConfig), host port mappings, architecture.md labels, pod annotations, cgroup parent,
  the sandbox security context (``security.sandbox_security``: namespaces, privileged, seccomp, user
  namespace), sysctls (dot-separated) and the RuntimeClass overhead; the hostname (FQDN with
  ``setHostnameAsFQDN``, none for hostNetwork) comes from ``etchosts``.
- ``container_config``: image, command/args with ``$(VAR)`` expansion (``$$`` escapes), env (envFrom,
  value, fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef), working dir, log path
  ``<name>/<restartCount>.log``, labels/annotations (hash, restartCount, termination message, grace),
  Linux resources (cpu shares from requests, CFS quota from limits, memory limit, oom_score_adj by
  QoS as upstream GetContainerOOMScoreAdjust) and the container's security context
  (``security.container_security``; runAsNonRoot verified against the image's user when it is known).
- ``envFrom``: every ``data`` key of the ConfigMap/Secret, prefixed; keys that are not valid variable
  names are skipped and reported through the optional ``warn(reason, message)`` callback as upstream's
  ``InvalidEnvironmentVariableNames`` Warning event.
Volume mounts are not built here: the runtime manager asks the volume manager for them.
Errors in the spec raise ``ConfigError`` (surfaced as CreateContainerConfigError), never crash.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from pykubelet.agent.container import runtime as t
from pykubelet.agent.container.grace import pod_termination_grace
from pykubelet.agent.kuberuntime import dns as poddns
from pykubelet.agent.kuberuntime import etchosts, security
from pykubelet.agent.kuberuntime.actions import format_pod
from pykubelet.agent.kuberuntime.dns import parse_resolv_conf  # noqa: F401  (re-exported)
from pykubelet.common import labels as names
from pykubelet.common import podutil, sysctl
from pykubelet.common.podspec import ENV_VAR_FMT
from pykubelet.common.quantity import QuantityError, parse_quantity
from pykubelet.cri import pb

Pod = dict[str, Any]
Lookup = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]
Warn = Callable[[str, str], None]  # (reason, message) of a Warning event about the pod

CPU_PERIOD = 100000
MIN_SHARES = 2
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000


class ConfigError(Exception):
    """The pod spec cannot be turned into a runtime config (CreateContainerConfigError)."""


def _expect(cond: bool, path: str, value: object, what: str) -> None:
    if not cond:
        raise ConfigError(f"{path}: Invalid value: {value!r}: {what}")


def check_container_types(container: dict[str, Any], path: str) -> None:
    """Defence in depth against an API server that lets badly typed pods through: the fields the
    CRI config is built from must have the types the API schema gives them, or the container gets a
    CreateContainerConfigError naming the field, instead of a Python error in the agent's log."""
    image = container.get("image")
    _expect(isinstance(image, str) and image.strip() != "", f"{path}.image", image, "must be a non-empty string")
    for key in ("command", "args"):
        v = container.get(key)
        _expect(v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)), f"{path}.{key}", v,
                "must be a list of strings")
    wd = container.get("workingDir")
    _expect(wd is None or isinstance(wd, str), f"{path}.workingDir", wd, "must be a string")
    env = container.get("env")
    _expect(env is None or isinstance(env, list), f"{path}.env", env, "must be a list")
    for i, e in enumerate(env or []):
        _expect(isinstance(e, dict) and isinstance(e.get("name"), str), f"{path}.env[{i}]", e, "must have a string name")
        _expect(e.get("value") is None or isinstance(e["value"], str), f"{path}.env[{i}].value", e.get("value"),
                "must be a string")
    sc = container.get("securityContext")
    _expect(sc is None or isinstance(sc, dict), f"{path}.securityContext", sc, "must be an object")
    for key in ("runAsUser", "runAsGroup"):
        v = (sc or {}).get(key)
        _expect(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0),
                f"{path}.securityContext.{key}", v, "must be a non-negative integer")
    for key in ("privileged", "readOnlyRootFilesystem", "allowPrivilegeEscalation", "runAsNonRoot"):
        v = (sc or {}).get(key)
        _expect(v is None or isinstance(v, bool), f"{path}.securityContext.{key}", v, "must be a boolean")
    caps = (sc or {}).get("capabilities")
    _expect(caps is None or isinstance(caps, dict), f"{path}.securityContext.capabilities", caps, "must be an object")
    for key in ("add", "drop"):
        v = (caps or {}).get(key)
        _expect(v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
                f"{path}.securityContext.capabilities.{key}", v, "must be a list of strings")
    for key in ("seccompProfile", "appArmorProfile", "seLinuxOptions"):
        v = (sc or {}).get(key)
        _expect(v is None or isinstance(v, dict), f"{path}.securityContext.{key}", v, "must be an object")


def _md(pod: Pod) -> dict[str, Any]:
    return pod.get("metadata") or {}


def pod_log_dir(pod_logs_dir: str, pod: Pod) -> str:
    md = _md(pod)
    return os.path.join(pod_logs_dir, f"{md.get('namespace', '')}_{md.get('name', '')}_{md.get('uid', '')}")


# --- DNS --------------------------------------------------------------------------------------
def dns_config(pod: Pod, *, cluster_dns: list[str], cluster_domain: str, resolv_conf: str) -> pb.DNSConfig:
    """The sandbox's DNSConfig: the policy logic is :func:`pykubelet.agent.kuberuntime.dns.pod_dns`."""
    out = pb.DNSConfig()
    _fill_dns(out, pod, cluster_dns=cluster_dns, cluster_domain=cluster_domain, resolv_conf=resolv_conf)
    return out


def _fill_dns(target: pb.DNSConfig, pod: Pod, *, cluster_dns: list[str], cluster_domain: str,
              resolv_conf: str) -> None:
    try:
        with open(resolv_conf) as f:
            host = f.read()
    except OSError:
        host = ""
    d = poddns.pod_dns(pod, cluster_dns=cluster_dns, cluster_domain=cluster_domain, host_resolv=host)
    target.servers.extend(d.servers)
    target.searches.extend(d.searches)
    target.options.extend(d.options)


# --- sandbox ----------------------------------------------------------------------------------
def sandbox_config(
    pod: Pod,
    attempt: int,
    *,
    pod_logs_dir: str,
    cgroup_parent: str = "",
    cluster_dns: list[str] | None = None,
    cluster_domain: str = "cluster.local",
    resolv_conf: str = "/etc/resolv.conf",
    security_options: security.SecurityOptions | None = None,
) -> pb.PodSandboxConfig:
    md, spec = _md(pod), pod.get("spec") or {}
    # filled in place, as ``container_config``: no sub-message copies, maps set item by item
    config = pb.PodSandboxConfig()
    labels = config.labels
    for k, v in (md.get("labels") or {}).items():
        labels[str(k)] = str(v)
    labels[names.POD_NAME_LABEL] = md.get("name", "")
    labels[names.POD_NAMESPACE_LABEL] = md.get("namespace", "")
    labels[names.POD_UID_LABEL] = md.get("uid", "")
    annotations = config.annotations
    for k, v in (md.get("annotations") or {}).items():
        annotations[str(k)] = str(v)
    try:
        config.hostname = etchosts.sandbox_hostname(pod, cluster_domain)
    except etchosts.HostnameError as e:
        raise ConfigError(str(e)) from e
    ports = config.port_mappings
    for c in spec.get("containers") or []:
        for p in c.get("ports") or []:
            if not p.get("hostPort"):
                continue
            proto = {"TCP": pb.TCP, "UDP": pb.UDP, "SCTP": pb.SCTP}.get(p.get("protocol") or "TCP", pb.TCP)
            ports.add(protocol=proto, container_port=int(p.get("containerPort", 0)),
                      host_port=int(p["hostPort"]), host_ip=p.get("hostIP", ""))
    psc = spec.get("securityContext") or {}
    try:
        sc = security.sandbox_security(pod, security_options or security.SecurityOptions())
    except security.SecurityContextError as e:
        raise ConfigError(str(e)) from e
    linux = config.linux
    linux.cgroup_parent = cgroup_parent
    linux.security_context.CopyFrom(sc)
    for s in psc.get("sysctls") or []:
        linux.sysctls[sysctl.to_dots(str(s.get("name")))] = str(s.get("value", ""))
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, dict) and overhead:
        # upstream: the RuntimeClass overhead (set on the pod by the API server) is passed to CRI too
        if overhead.get("cpu") is not None:
            millis = math.ceil(_quantity(overhead["cpu"]) * 1000)
            linux.overhead.cpu_shares = milli_cpu_to_shares(millis)
            linux.overhead.cpu_period = CPU_PERIOD
            linux.overhead.cpu_quota = milli_cpu_to_quota(millis)
        if overhead.get("memory") is not None:
            linux.overhead.memory_limit_in_bytes = int(_quantity(overhead["memory"]))
    meta = config.metadata
    meta.name = md.get("name", "")
    meta.uid = md.get("uid", "")
    meta.namespace = md.get("namespace", "")
    meta.attempt = attempt
    config.log_directory = pod_log_dir(pod_logs_dir, pod)
    _fill_dns(config.dns_config, pod, cluster_dns=cluster_dns or [], cluster_domain=cluster_domain,
              resolv_conf=resolv_conf)
    return config


# --- env --------------------------------------------------------------------------------------
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(s: str, env: dict[str, str]) -> str:
    """Upstream expansion.Expand: $(VAR) from env when defined, $$ → $, otherwise left as is."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)
    return _VAR.sub(sub, s)


def _quantity(v: Any) -> Decimal:
    try:
        return parse_quantity(v).value
    except (QuantityError, TypeError, ValueError) as e:
        raise ConfigError(f"invalid quantity {v!r}: {e}") from e


def resource_field_value(
    ref: dict[str, Any], container: dict[str, Any], node_allocatable: dict[str, Decimal]
) -> str:
    res = ref.get("resource", "")
    divisor = _quantity(ref.get("divisor") or "1")
    if divisor <= 0:
        divisor = Decimal(1)
    kind, _, name = res.partition(".")
    source = podutil.container_limits(container) if kind == "limits" else podutil.container_requests(container)
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(f"unsupported resourceFieldRef {res!r}")
    value = source.get(name)
    if value is None:
        value = node_allocatable.get(name, Decimal(0)) if kind == "limits" else Decimal(0)
    return str(math.ceil(value / divisor))


def field_value(path: str, pod: Pod, *, pod_ips: list[str], host_ips: list[str], node_name: str) -> str:
    md, spec = _md(pod), pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.*)'\]", path)
    if m:
        return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ips[0] if pod_ips else "",
        "status.podIPs": ",".join(pod_ips),
        "status.hostIP": host_ips[0] if host_ips else "",
        "status.hostIPs": ",".join(host_ips),
    }
    if path not in simple:
        raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")
    return str(simple[path])


async def _get_key(lookup: Lookup | None, kind: str, ns: str, ref: dict[str, Any]) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    obj = await lookup(kind, ns, name) if lookup else None
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    if kind == "Secret":
        data = obj.get("data") or {}
        if key in data:
            return base64.b64decode(data[key]).decode(errors="replace")
        if key in (obj.get("stringData") or {}):
            return str(obj["stringData"][key])
    else:
        if key in (obj.get("data") or {}):
            return str(obj["data"][key])
        if key in (obj.get("binaryData") or {}):
            return base64.b64decode(obj["binaryData"][key]).decode(errors="replace")
    if optional:
        return None
    raise ConfigError(f'couldn\'t find key {key} in {kind} {ns}/{name}')


_ENV_NAME = re.compile(f"^{ENV_VAR_FMT}$")


def env_from_source(kind: str, obj: dict[str, Any], prefix: str, ref: str, warn: Warn | None) -> dict[str, str]:
    """One ``envFrom`` source, as upstream's makeEnvironmentVariables: every key of ``data`` (decoded for
    a Secret; a ConfigMap's ``binaryData`` is not used for env, as upstream) prefixed with ``prefix``;
    names that are not valid environment variable names are skipped with one Warning event
    ``InvalidEnvironmentVariableNames`` listing them (sorted)."""
    out: dict[str, str] = {}
    invalid: list[str] = []
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{kind} {ref}: data is not a map")
    for k, v in data.items():
        key = f"{prefix}{k}"
        if not _ENV_NAME.match(key):
            invalid.append(key)
            continue
        if kind == "Secret":
            try:
                out[key] = base64.b64decode(str(v or ""), validate=True).decode(errors="replace")
            except (binascii.Error, ValueError) as e:
                raise ConfigError(f"Secret {ref}: data[{k}] is not valid base64: {e}") from e
        else:
            out[key] = str(v)
    if invalid and warn is not None:
        what = "configMap" if kind == "ConfigMap" else "secret"
        warn("InvalidEnvironmentVariableNames",
             f"Keys [{', '.join(sorted(invalid))}] from the EnvFrom {what} {ref} were skipped since they are "
             "considered invalid environment variable names.")
    return out


async def make_env(
    pod: Pod,
    container: dict[str, Any],
    *,
    pod_ips: list[str],
    host_ips: list[str],
    node_name: str,
    node_allocatable: dict[str, Decimal],
    lookup: Lookup | None = None,
    warn: Warn | None = None,
    service_env: list[tuple[str, str]] | None = None,
) -> list[tuple[str, str]]:
    ns = _md(pod).get("namespace", "default")
    env: dict[str, str] = dict(service_env or [])  # lowest precedence, as upstream (envvars.py)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = src.get(field)
            if not ref:
                continue
            name = ref.get("name", "")
            obj = await lookup(kind, ns, name) if lookup else None
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind.lower()} "{name}" not found')
            env.update(env_from_source(kind, obj, prefix, f"{ns}/{name}", warn))
    for e in container.get("env") or []:
        name = e.get("name")
        if not name:
            raise ConfigError("env var without a name")
        if "valueFrom" not in e or e.get("value") is not None:
            env[name] = expand(str(e.get("value") or ""), env)
            continue
        vf = e.get("valueFrom") or {}
        val: str | None
        if "fieldRef" in vf:
            val = field_value((vf["fieldRef"] or {}).get("fieldPath", ""), pod, pod_ips=pod_ips,
                              host_ips=host_ips, node_name=node_name)
        elif "resourceFieldRef" in vf:
            ref = vf["resourceFieldRef"] or {}
            target = container
            if ref.get("containerName"):
                target = podutil.find_container(pod, ref["containerName"]) or container
            val = resource_field_value(ref, target, node_allocatable)
        elif "configMapKeyRef" in vf:
            val = await _get_key(lookup, "ConfigMap", ns, vf["configMapKeyRef"] or {})
        elif "secretKeyRef" in vf:
            val = await _get_key(lookup, "Secret", ns, vf["secretKeyRef"] or {})
        else:
            raise ConfigError(f"env var {name}: unsupported valueFrom")
        if val is not None:
            env[name] = val
    return list(env.items())


# --- resources / security ---------------------------------------------------------------------
def milli_cpu_to_shares(millis: int) -> int:
    return MIN_SHARES if millis == 0 else max(MIN_SHARES, millis * 1024 // 1000)


def milli_cpu_to_quota(millis: int, period: int = CPU_PERIOD) -> int:
    return 0 if millis == 0 else max(1000, millis * period // 1000)


def oom_score_adj(pod: Pod, container: dict[str, Any], memory_capacity: int) -> int:
    """Upstream qos.GetContainerOOMScoreAdjust."""
    qos = podutil.qos_class(pod)
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BEST_EFFORT_OOM_SCORE_ADJ
    req = int(podutil.container_requests(container).get("memory", 0) or 0)
    if memory_capacity <= 0:
        return 999
    adj = 1000 - (1000 * req) // memory_capacity
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BEST_EFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return int(adj)


def linux_resources(pod: Pod, container: dict[str, Any], memory_capacity: int) -> pb.LinuxContainerResources:
    req = podutil.container_requests(container)
    lim = podutil.container_limits(container)
    cpu_req = req.get("cpu", lim.get("cpu"))
    r = pb.LinuxContainerResources(
        cpu_shares=milli_cpu_to_shares(podutil.to_millis(cpu_req) if cpu_req is not None else 0),
        oom_score_adj=oom_score_adj(pod, container, memory_capacity),
    )
    if lim.get("cpu"):
        r.cpu_period = CPU_PERIOD
        r.cpu_quota = milli_cpu_to_quota(podutil.to_millis(lim["cpu"]))
    if lim.get("memory"):
        r.memory_limit_in_bytes = int(lim["memory"])
    return r


def _security(pod: Pod, container: dict[str, Any], options: security.SecurityOptions | None,
              image_user: tuple[int | None, str] | None) -> pb.LinuxContainerSecurityContext:
    """The container's CRI security context (``security.container_security``); with the image's user
    known, ``runAsNonRoot`` is verified against it first (upstream verifyRunAsNonRoot)."""
    uid, username = image_user if image_user is not None else (None, "")
    try:
        if image_user is not None:
            security.verify_run_as_non_root(pod, container, uid, username, format_pod(pod))
        return security.container_security(pod, container, options or security.SecurityOptions(),
                                           image_uid=uid, image_username=username)
    except security.SecurityContextError as e:
        raise ConfigError(str(e)) from e


async def container_config(
    pod: Pod,
    container: dict[str, Any],
    *,
    image_ref: str,
    restart_count: int,
    pod_ips: list[str],
    host_ips: list[str],
    node_name: str,
    memory_capacity: int,
    node_allocatable: dict[str, Decimal],
    lookup: Lookup | None = None,
    warn: Warn | None = None,
    security_options: security.SecurityOptions | None = None,
    image_user: tuple[int | None, str] | None = None,
    service_env: list[tuple[str, str]] | None = None,
) -> pb.ContainerConfig:
    md = _md(pod)
    name = container.get("name", "")
    env = await make_env(pod, container, pod_ips=pod_ips, host_ips=host_ips, node_name=node_name,
                         node_allocatable=node_allocatable, lookup=lookup, warn=warn, service_env=service_env)
    env_map = dict(env)
    # The message is filled in place: passing sub-messages and dicts to the constructor copies each
    # sub-message and fills the maps through Python's ``MutableMapping.update`` (~10 µs per container)
    config = pb.ContainerConfig(
        command=[expand(str(x), env_map) for x in container.get("command") or []],
        args=[expand(str(x), env_map) for x in container.get("args") or []],
        working_dir=container.get("workingDir", ""),
        log_path=f"{name}/{restart_count}.log",
        stdin=bool(container.get("stdin")),
        stdin_once=bool(container.get("stdinOnce")),
        tty=bool(container.get("tty")),
    )
    meta = config.metadata
    meta.name = name
    meta.attempt = restart_count
    image = config.image
    image.image = image_ref or container.get("image", "")
    image.user_specified_image = container.get("image", "")
    envs = config.envs
    for k, v in env:
        envs.add(key=k, value=v)
    labels = config.labels
    labels[names.POD_NAME_LABEL] = md.get("name", "")
    labels[names.POD_NAMESPACE_LABEL] = md.get("namespace", "")
    labels[names.POD_UID_LABEL] = md.get("uid", "")
    labels[names.CONTAINER_NAME_LABEL] = name
    annotations = config.annotations
    annotations[names.CONTAINER_HASH_ANNOTATION] = t.hash_container(container)
    annotations[names.CONTAINER_RESTART_COUNT_ANNOTATION] = str(restart_count)
    annotations[names.TERMINATION_MESSAGE_PATH_ANNOTATION] = (container.get("terminationMessagePath")
                                                              or "/dev/termination-log")
    annotations[names.TERMINATION_MESSAGE_POLICY_ANNOTATION] = container.get("terminationMessagePolicy") or "File"
    annotations[names.POD_TERMINATION_GRACE_ANNOTATION] = str(pod_termination_grace(pod))
    linux = config.linux
    linux.resources.CopyFrom(linux_resources(pod, container, memory_capacity))
    linux.security_context.CopyFrom(_security(pod, container, security_options, image_user))
    return config
