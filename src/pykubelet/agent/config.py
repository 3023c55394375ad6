"""Agent configuration: the ``KubeletConfiguration`` file plus the upstream command-line flags.

Design: configuration is loaded once at startup into two immutable-ish values, the
``KubeletConfiguration`` model (the kubelet.config.k8s.io/v1beta1 file, with upstream defaults) and
``AgentOptions`` (flags that are not part of the file plus the parsed model).  Everything else in
the agent reads these; nothing re-reads flags or files later.  Every failure becomes a
``ConfigError`` whose message names the offending flag or setting, so ``main`` can print it and exit
with status 1 — upstream's kubelet likewise refuses to start on an invalid configuration instead of
guessing.

The model is a set of ``msgspec.Struct`` classes read by ``msgspec.convert`` (strict types, the
upstream JSON names, unknown fields refused, durations through one ``dec_hook``) plus the
validation table ``_CHECKS``.  Why msgspec and not pydantic, the usual choice for configuration:
the agent's memory budget.  pydantic cost the agent ~9 MB of its 60 MB (its import plus the models'
schema); msgspec, a small maintained C extension, ~1 MB in the agent's import context (see
docs/benchmarks-scale.md, "Agent RSS: the configuration without pydantic").  msgspec reports the
first value of the wrong type; ``_validate`` reports every setting that fails upstream's checks.

Upstream behaviour followed:
- field names and defaults of kubelet.config.k8s.io/v1beta1 (``SetDefaults_KubeletConfiguration``):
  syncFrequency 1m, fileCheckFrequency 20s, port 10250, healthzPort 10248 on 127.0.0.1,
  nodeStatusUpdateFrequency 10s, nodeStatusReportFrequency 5m, nodeLeaseDurationSeconds 40,
  maxPods 110, evictionHard {memory.available: 100Mi, nodefs.available: 10%, nodefs.inodesFree: 5%,
  imagefs.available: 15%, imagefs.inodesFree: 5%}, cgroupDriver cgroupfs, cgroupsPerQOS true,
  podLogsDir /var/log/pods, containerLogMaxSize 10Mi, containerLogMaxFiles 5, nodeStatusMaxImages
  50, serializeImagePulls true, runtimeRequestTimeout 2m, authentication webhook on / anonymous off,
  authorization mode Webhook, containerRuntimeEndpoint unix:///run/containerd/containerd.sock;
- unknown fields are rejected (upstream decodes the file strictly), apiVersion/kind must match;
- durations are Go duration strings ("1m30s", "500ms"; ``common.durations``); in Python they are
  float seconds;
- flags override values from the file (upstream applies the command line after the file);
- the node name is ``--hostname-override`` or the host name, lower-cased and trimmed
  (``nodeutil.GetHostname``);
- ``--node-labels`` is ``k=v,k2=v2``; ``--register-with-taints`` is ``k=v:Effect,k2:Effect``.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import yaml

from pykubelet.common import sysctl
from pykubelet.common.durations import format_duration, parse_duration
from pykubelet.common.quantity import QuantityError, parse_quantity

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"
DEFAULT_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
DEFAULT_ROOT_DIR = "/var/lib/kubelet"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "allocatableMemory.available",
    "pid.available",
)


class ConfigError(Exception):
    """Invalid configuration; the message names the flag or setting at fault."""


# --------------------------------------------------------------------------- the model

# Upstream JSON names that the simple snake→camel rule gets wrong.
_ALIAS_OVERRIDES = {
    "cgroups_per_qos": "cgroupsPerQOS",
    "kube_api_qps": "kubeAPIQPS",
    "kube_api_burst": "kubeAPIBurst",
    "pod_cidr": "podCIDR",
    "cluster_dns": "clusterDNS",
    "cpu_cfs_quota": "cpuCFSQuota",
    "cpu_cfs_quota_period": "cpuCFSQuotaPeriod",
    "registry_pull_qps": "registryPullQPS",
    "event_record_qps": "eventRecordQPS",
    "oom_score_adj": "oomScoreAdj",
    "iptables_masquerade_bit": "iptablesMasqueradeBit",
    "iptables_drop_bit": "iptablesDropBit",
    "make_ip_tables_util_chains": "makeIPTablesUtilChains",
    "image_gc_high_threshold_percent": "imageGCHighThresholdPercent",
    "image_gc_low_threshold_percent": "imageGCLowThresholdPercent",
    "image_minimum_gc_age": "imageMinimumGCAge",
    "image_maximum_gc_age": "imageMaximumGCAge",
    "static_pod_url": "staticPodURL",
    "static_pod_url_header": "staticPodURLHeader",
    "server_tls_bootstrap": "serverTLSBootstrap",
    "tls_cert_file": "tlsCertFile",
    "tls_private_key_file": "tlsPrivateKeyFile",
    "tls_cipher_suites": "tlsCipherSuites",
    "tls_min_version": "tlsMinVersion",
    "reserved_system_cpus": "reservedSystemCPUs",
    "client_ca_file": "clientCAFile",
    "provider_id": "providerID",
    "cpu_manager_policy": "cpuManagerPolicy",
    "cpu_manager_policy_options": "cpuManagerPolicyOptions",
    "cpu_manager_reconcile_period": "cpuManagerReconcilePeriod",
    "fail_swap_on": "failSwapOn",
    "cache_ttl": "cacheTTL",
    "cache_authorized_ttl": "cacheAuthorizedTTL",
    "cache_unauthorized_ttl": "cacheUnauthorizedTTL",
    "enable_system_log_query": "enableSystemLogQuery",
    "single_process_oom_kill": "singleProcessOOMKill",
    "max_parallel_image_pulls": "maxParallelImagePulls",
    "fail_cgroup_v1": "failCgroupV1",
    "x509": "x509",
}


def _alias(name: str) -> str:
    """A field's upstream JSON name (msgspec's ``rename`` for every section): snake_case -> camelCase."""
    if name in _ALIAS_OVERRIDES:
        return _ALIAS_OVERRIDES[name]
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# --------------------------------------------------------------------------- reading with msgspec

if TYPE_CHECKING:
    Duration = float
else:

    class Duration(float):
        """Seconds, written in the file as a Go duration string ("1m30s") or a number of seconds.

        For type checkers and the rest of the agent a duration is a float.  At run time the duration
        fields are annotated with this float subclass because msgspec knows nothing of Go durations:
        for a type it does not know it hands the raw value to ``_decode_duration`` (its ``dec_hook``).
        """


def _decode_duration(kind: type, value: object) -> object:
    """msgspec's ``dec_hook``: read a duration field (msgspec adds the field's path to errors)."""
    if kind is not Duration:
        raise NotImplementedError(kind)  # msgspec reports "Expected `<kind>`, got ..."
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a duration such as '10s' or '1m30s', got {type(value).__name__}")
    return Duration(parse_duration(value))


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename=_alias):
    """A part of the configuration: read by upstream's JSON names (``_alias``), unknown fields refused.

    msgspec's types are strict like upstream's decoder: a string is not an integer, a bool is not an
    integer, an integer is a valid float.
    """


# msgspec's "Expected `int`, got `str` - at `$.authentication.x509.port`" (the path is missing at the top)
_MSGSPEC_ERROR = re.compile(r"(?P<msg>.*?)(?: - at (?P<key>`key` in )?`\$\.?(?P<path>[^`]*)`)?", re.DOTALL)
_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(?P<name>.*)`", re.DOTALL)


def _from_msgspec(e: msgspec.ValidationError) -> str:
    """A msgspec error in this module's style: "<JSON path>: <problem>", e.g. "maxPods: expected `int`, got `str`"."""
    m = _MSGSPEC_ERROR.fullmatch(str(e))
    if m is None:  # not msgspec's usual form: show it as it is
        return str(e)
    msg, path = m["msg"], m["path"] or ""
    unknown = _UNKNOWN_FIELD.fullmatch(msg)
    if unknown:
        return f"{path}.{unknown['name']}: unknown field" if path else f"{unknown['name']}: unknown field"
    if m["key"]:
        path += " (a key)"
    msg = msg[:1].lower() + msg[1:]
    return f"{path}: {msg}" if path else msg


def _describe(problems: list[tuple[str, str]]) -> str:
    return "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems)


def json_names(cls: type[msgspec.Struct]) -> dict[str, str]:
    """A configuration section's fields: Python attribute -> upstream JSON name, in declaration order."""
    return {f.name: f.encode_name for f in msgspec.structs.fields(cls)}


def _json_path(dotted: str) -> str:
    return ".".join(_alias(p) for p in dotted.split("."))


def _to_json(section: msgspec.Struct) -> dict[str, Any]:
    """A section as upstream JSON: JSON names, durations as Go strings, copies of maps and lists."""
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(section):
        value = getattr(section, f.name)
        if f.type is Duration and isinstance(value, float):
            out[f.encode_name] = format_duration(value)
        elif isinstance(value, msgspec.Struct):
            out[f.encode_name] = _to_json(value)
        else:
            out[f.encode_name] = copy.deepcopy(value)
    return out


# --------------------------------------------------------------------------- the model


class X509Authentication(_Section):
    client_ca_file: str = ""


class WebhookAuthentication(_Section):
    enabled: bool = True
    cache_ttl: Duration = 120.0


class AnonymousAuthentication(_Section):
    enabled: bool = False


class KubeletAuthentication(_Section):
    x509: X509Authentication = msgspec.field(default_factory=X509Authentication)
    webhook: WebhookAuthentication = msgspec.field(default_factory=WebhookAuthentication)
    anonymous: AnonymousAuthentication = msgspec.field(default_factory=AnonymousAuthentication)


class WebhookAuthorization(_Section):
    cache_authorized_ttl: Duration = 300.0
    cache_unauthorized_ttl: Duration = 30.0


class KubeletAuthorization(_Section):
    mode: str = "Webhook"
    webhook: WebhookAuthorization = msgspec.field(default_factory=WebhookAuthorization)


def _default_eviction_hard() -> dict[str, str]:
    return {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
        "imagefs.inodesFree": "5%",
    }


class KubeletConfiguration(_Section):
    """kubelet.config.k8s.io/v1beta1 KubeletConfiguration with upstream defaults.

    Constructing one validates it (``ConfigError`` naming the settings at fault);
    :meth:`from_dict` reads the upstream JSON form.  Assigning a field later is not validated.
    """

    api_version: str = API_VERSION
    kind: str = KIND

    enable_server: bool = True
    static_pod_path: str = ""
    pod_logs_dir: str = "/var/log/pods"
    sync_frequency: Duration = 60.0
    file_check_frequency: Duration = 20.0
    http_check_frequency: Duration = 20.0
    static_pod_url: str = ""
    static_pod_url_header: dict[str, list[str]] = msgspec.field(default_factory=dict)
    address: str = "0.0.0.0"
    port: int = 10250
    read_only_port: int = 0
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    tls_cipher_suites: list[str] = msgspec.field(default_factory=list)
    tls_min_version: str = ""
    rotate_certificates: bool = False
    server_tls_bootstrap: bool = False
    authentication: KubeletAuthentication = msgspec.field(default_factory=KubeletAuthentication)
    authorization: KubeletAuthorization = msgspec.field(default_factory=KubeletAuthorization)
    registry_pull_qps: int = 5
    registry_burst: int = 10
    image_pull_credentials_verification_policy: str = ""
    preloaded_images_verification_allowlist: list[str] = msgspec.field(default_factory=list)
    event_record_qps: int = 50
    event_burst: int = 100
    enable_debugging_handlers: bool = True
    enable_contention_profiling: bool = False
    healthz_port: int = 10248
    healthz_bind_address: str = "127.0.0.1"
    oom_score_adj: int = -999
    cluster_domain: str = ""
    cluster_dns: list[str] = msgspec.field(default_factory=list)
    streaming_connection_idle_timeout: Duration = 4 * 3600.0
    node_status_update_frequency: Duration = 10.0
    node_status_report_frequency: Duration = 300.0
    node_lease_duration_seconds: int = 40
    image_minimum_gc_age: Duration = 120.0
    image_maximum_gc_age: Duration = 0.0
    image_gc_high_threshold_percent: int = 85
    image_gc_low_threshold_percent: int = 80
    volume_stats_agg_period: Duration = 60.0
    kubelet_cgroups: str = ""
    system_cgroups: str = ""
    cgroup_root: str = ""
    cgroups_per_qos: bool = True
    cgroup_driver: str = "cgroupfs"
    cpu_manager_policy: str = "none"
    single_process_oom_kill: bool | None = None
    cpu_manager_policy_options: dict[str, str] = msgspec.field(default_factory=dict)
    cpu_manager_reconcile_period: Duration = 10.0
    memory_manager_policy: str = "None"
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: dict[str, str] = msgspec.field(default_factory=dict)
    qos_reserved: dict[str, str] = msgspec.field(default_factory=dict)
    runtime_request_timeout: Duration = 120.0
    hairpin_mode: str = "promiscuous-bridge"
    max_pods: int = 110
    pod_cidr: str = ""
    pod_pids_limit: int = -1
    resolv_conf: str = "/etc/resolv.conf"
    run_once: bool = False
    cpu_cfs_quota: bool = True
    cpu_cfs_quota_period: Duration = 0.1
    node_status_max_images: int = 50
    max_open_files: int = 1000000
    content_type: str = "application/vnd.kubernetes.protobuf"
    kube_api_qps: int = 50
    kube_api_burst: int = 100
    serialize_image_pulls: bool = True
    max_parallel_image_pulls: int | None = None
    eviction_hard: dict[str, str] = msgspec.field(default_factory=_default_eviction_hard)
    eviction_soft: dict[str, str] = msgspec.field(default_factory=dict)
    eviction_soft_grace_period: dict[str, str] = msgspec.field(default_factory=dict)
    eviction_pressure_transition_period: Duration = 300.0
    eviction_monitoring_period: Duration = 10.0  # upstream's evictionMonitoringPeriod (a constant before 1.33)
    eviction_max_pod_grace_period: int = 0
    eviction_minimum_reclaim: dict[str, str] = msgspec.field(default_factory=dict)
    merge_default_eviction_settings: bool = False
    pods_per_core: int = 0
    enable_controller_attach_detach: bool = True
    protect_kernel_defaults: bool = False
    make_ip_tables_util_chains: bool = True
    iptables_masquerade_bit: int = 14
    iptables_drop_bit: int = 15
    feature_gates: dict[str, bool] = msgspec.field(default_factory=dict)
    fail_swap_on: bool = True
    memory_swap: dict[str, Any] = msgspec.field(default_factory=dict)
    container_log_max_size: str = "10Mi"
    container_log_max_files: int = 5
    container_log_max_workers: int = 1
    container_log_monitor_interval: Duration = 10.0
    config_map_and_secret_change_detection_strategy: str = "Watch"
    system_reserved: dict[str, str] = msgspec.field(default_factory=dict)
    kube_reserved: dict[str, str] = msgspec.field(default_factory=dict)
    reserved_system_cpus: str = ""
    show_hidden_metrics_for_version: str = ""
    system_reserved_cgroup: str = ""
    kube_reserved_cgroup: str = ""
    enforce_node_allocatable: list[str] = msgspec.field(default_factory=lambda: ["pods"])
    allowed_unsafe_sysctls: list[str] = msgspec.field(default_factory=list)
    volume_plugin_dir: str = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
    provider_id: str = ""
    kernel_memcg_notification: bool = False
    logging: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": "text"})
    enable_system_log_handler: bool = True
    enable_system_log_query: bool = False
    shutdown_grace_period: Duration = 0.0
    shutdown_grace_period_critical_pods: Duration = 0.0
    shutdown_grace_period_by_pod_priority: list[dict[str, Any]] = msgspec.field(default_factory=list)
    crash_loop_back_off: dict[str, Any] = msgspec.field(default_factory=dict)
    reserved_memory: list[dict[str, Any]] = msgspec.field(default_factory=list)
    enable_profiling_handler: bool = True
    enable_debug_flags_handler: bool = True
    seccomp_default: bool = False
    memory_throttling_factor: float = 0.9
    register_with_taints: list[dict[str, Any]] = msgspec.field(default_factory=list)
    register_node: bool = True
    tracing: dict[str, Any] | None = None
    local_storage_capacity_isolation: bool = True
    container_runtime_endpoint: str = DEFAULT_RUNTIME_ENDPOINT
    image_service_endpoint: str = ""
    fail_cgroup_v1: bool = False
    user_namespaces: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        problems = _validate(self)
        if problems:
            raise ConfigError(_describe(problems))

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> KubeletConfiguration:
        """The configuration from its upstream JSON form (camelCase keys, duration strings).

        Missing fields keep their defaults; apiVersion and kind are optional here (the file
        loaders require them).  Raises ``ConfigError`` naming the first value of the wrong type or
        unknown field (msgspec stops there), or else every setting that fails validation.
        """
        try:
            return msgspec.convert(data, cls, dec_hook=_decode_duration)
        except msgspec.ValidationError as e:
            raise ConfigError(_from_msgspec(e)) from None

    def to_dict(self) -> dict[str, Any]:
        """The configuration as upstream JSON (camelCase, durations as strings), e.g. for /configz."""
        return _to_json(self)

# ---- validation (upstream pkg/kubelet/apis/config/validation) ----


def _range(lo: int, hi: int) -> Callable[[int], None]:
    def check(v: int) -> None:
        if not lo <= v <= hi:
            raise ValueError(f"must be between {lo} and {hi}, got {v}")
    return check


def _one_of(*allowed: str, text: str) -> Callable[[str], None]:
    def check(v: str) -> None:
        if v not in allowed:
            raise ValueError(f"must be {text}, got {v!r}")
    return check


def _equals(expected: str) -> Callable[[str], None]:
    def check(v: str) -> None:
        if v != expected:
            raise ValueError(f"must be {expected!r}, got {v!r}")
    return check


def _non_negative(v: int) -> None:
    if v < 0:
        raise ValueError(f"must be >= 0, got {v}")


def _non_negative_or_unlimited(v: int) -> None:
    if v != -1:
        _non_negative(v)


def _positive(v: int) -> None:
    if v <= 0:
        raise ValueError(f"must be > 0, got {v}")


def _positive_duration(v: float) -> None:
    if v <= 0:
        raise ValueError(f"must be a positive duration, got {format_duration(v)}")


def _namespaced_sysctls(v: list[str]) -> None:
    # upstream NewAllowlist: only namespaced sysctls (or prefix* patterns) can be allowed per pod
    errors = sysctl.validate_patterns(v)
    if errors:
        raise ValueError("; ".join(errors))


def _at_least_two(v: int) -> None:
    # upstream's validation: the live log plus at least one rotated file
    if v < 2:
        raise ValueError(f"must be > 1, got {v}")


def _log_size(v: str) -> None:
    try:
        parse_quantity(v)
    except (QuantityError, ValueError) as e:
        raise ValueError(f"invalid quantity {v!r}: {e}") from None


def _reserved(v: dict[str, str]) -> None:
    for name, q in v.items():
        if name not in ("cpu", "memory", "ephemeral-storage", "pid"):
            raise ValueError(f"unsupported resource {name!r} (cpu, memory, ephemeral-storage, pid)")
        try:
            if parse_quantity(q).value < 0:
                raise ValueError(f"{name}: must not be negative, got {q!r}")
        except QuantityError as e:
            raise ValueError(f"{name}: invalid quantity {q!r}: {e}") from None


def _eviction(v: dict[str, str]) -> None:
    for signal, threshold in v.items():
        if signal not in EVICTION_SIGNALS:
            raise ValueError(f"unsupported eviction signal {signal!r}")
        t = str(threshold).strip()
        if t.endswith("%"):
            try:
                pct = float(t[:-1])
            except ValueError:
                raise ValueError(f"{signal}: invalid percentage {threshold!r}") from None
            if not 0 <= pct <= 100:
                raise ValueError(f"{signal}: percentage must be between 0% and 100%, got {threshold!r}")
        else:
            try:
                parse_quantity(t)
            except QuantityError as e:
                raise ValueError(f"{signal}: invalid quantity {threshold!r}: {e}") from None


def _taints(v: list[dict[str, Any]]) -> None:
    for t in v:
        if not isinstance(t, dict) or not t.get("key"):
            raise ValueError(f"taint {t!r} has no key")
        if t.get("effect") not in TAINT_EFFECTS:
            raise ValueError(f"taint {t.get('key')!r}: effect must be one of {', '.join(TAINT_EFFECTS)}")


# Python attribute path -> its checks, in the order of the model's fields.
_CHECKS: dict[str, tuple[Callable[[Any], None], ...]] = {
    "api_version": (_equals(API_VERSION),),
    "kind": (_equals(KIND),),
    "sync_frequency": (_positive_duration,),
    "file_check_frequency": (_positive_duration,),
    "port": (_range(1, 65535),),
    "read_only_port": (_range(0, 65535),),
    "authorization.mode": (_one_of("AlwaysAllow", "Webhook", text="AlwaysAllow or Webhook"),),
    "healthz_port": (_range(0, 65535),),
    "node_status_update_frequency": (_positive_duration,),
    "node_status_report_frequency": (_positive_duration,),
    "node_lease_duration_seconds": (_positive,),
    "image_gc_high_threshold_percent": (_range(0, 100),),
    "image_gc_low_threshold_percent": (_range(0, 100),),
    "cgroup_driver": (_one_of("cgroupfs", "systemd", text="cgroupfs or systemd"),),
    "runtime_request_timeout": (_positive_duration,),
    "max_pods": (_non_negative,),
    "event_record_qps": (_non_negative,),
    "event_burst": (_non_negative,),
    "node_status_max_images": (_non_negative_or_unlimited,),
    "eviction_hard": (_eviction,),
    "eviction_soft": (_eviction,),
    "eviction_monitoring_period": (_positive_duration,),
    "pods_per_core": (_non_negative,),
    "container_log_max_size": (_log_size,),
    "container_log_max_files": (_at_least_two,),
    "system_reserved": (_reserved,),
    "kube_reserved": (_reserved,),
    "allowed_unsafe_sysctls": (_namespaced_sysctls,),
    "register_with_taints": (_taints,),
}


def _attr(obj: object, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _validate(c: KubeletConfiguration) -> list[tuple[str, str]]:
    """Every problem of ``c`` as (JSON path, message); applies upstream's one defaulting rule."""
    problems = []
    for dotted, checks in _CHECKS.items():
        value = _attr(c, dotted)
        for check in checks:
            try:
                check(value)
            except ValueError as e:
                problems.append((_json_path(dotted), str(e)))
                break
    if problems:
        return problems
    if c.image_gc_low_threshold_percent >= c.image_gc_high_threshold_percent and not (
        c.image_gc_low_threshold_percent == c.image_gc_high_threshold_percent == 100
    ):
        return [("", "imageGCLowThresholdPercent must be less than imageGCHighThresholdPercent "
                     f"({c.image_gc_low_threshold_percent} >= {c.image_gc_high_threshold_percent})")]
    if c.node_status_report_frequency < c.node_status_update_frequency:
        # Upstream validation only warns; raising the report period keeps the math simple.
        c.node_status_report_frequency = c.node_status_update_frequency
    return []


def parse_kubelet_config(data: object, *, source: str = "config") -> KubeletConfiguration:
    """Validate a decoded KubeletConfiguration document (dict) or raise ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a KubeletConfiguration mapping, got {type(data).__name__}")
    for key in ("apiVersion", "kind"):
        if key not in data:
            raise ConfigError(f"{source}: {key} is required ({key}: {API_VERSION if key == 'apiVersion' else KIND})")
    try:
        return KubeletConfiguration.from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_config_file(path: str | os.PathLike[str]) -> KubeletConfiguration:
    """Read a YAML or JSON KubeletConfiguration file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"--config: cannot read {p}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--config: {p} is not valid YAML/JSON: {e}") from None
    return parse_kubelet_config(data, source=str(p))


# --------------------------------------------------------------------------- options


@dataclass
class AgentOptions:
    """Everything the agent was started with: the config file model plus flag-only settings."""

    config: KubeletConfiguration = field(default_factory=KubeletConfiguration)
    config_path: Path | None = None
    kubeconfig: Path | None = None
    # TLS bootstrap (upstream --bootstrap-kubeconfig, --cert-dir; agent/certificate)
    bootstrap_kubeconfig: Path | None = None
    cert_dir: Path | None = None
    node_name: str = ""
    hostname: str = ""
    node_ip: str | None = None
    container_runtime_endpoint: str = DEFAULT_RUNTIME_ENDPOINT
    image_service_endpoint: str = ""
    root_dir: Path = Path(DEFAULT_ROOT_DIR)
    verbosity: int = 0
    node_labels: dict[str, str] = field(default_factory=dict)
    register_with_taints: list[dict[str, Any]] = field(default_factory=list)
    register_node: bool = True
    # Garbage collection (upstream: the period constants and the deprecated container GC flags).
    image_gc_period: float = 300.0
    container_gc_period: float = 60.0
    minimum_container_ttl_duration: float = 0.0
    maximum_dead_containers_per_container: int = 1
    maximum_dead_containers: int = -1
    # The service proxy (agent/proxy, kube-proxy's iptables mode): off unless asked for.
    service_proxy: bool = False
    service_proxy_chain_prefix: str = "PYK"
    # Convenience mirrors of config fields other subsystems read often.

    @property
    def pod_manifest_path(self) -> str:
        return self.config.static_pod_path

    @property
    def pod_logs_dir(self) -> Path:
        return Path(self.config.pod_logs_dir)

    @property
    def max_pods(self) -> int:
        return self.config.max_pods


class _ArgParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would sys.exit(2); we want a ConfigError
        m = re.search(r"unrecognized arguments: (.*)", message)
        if m:
            raise ConfigError(f"unknown flag: {m.group(1).split()[0]}")
        raise ConfigError(message)


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("1", "t", "true", "yes"):
        return True
    if s in ("0", "f", "false", "no"):
        return False
    raise ValueError(f"invalid boolean {v!r}")


def parse_node_labels(value: str) -> dict[str, str]:
    """``k=v,k2=v2`` → dict (upstream --node-labels mapStringString)."""
    out: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"invalid label {item!r}: expected key=value")
        k, v = item.split("=", 1)
        k, v = k.strip(), v.strip()
        if not _valid_label_key(k):
            raise ValueError(f"invalid label key {k!r}")
        if not _LABEL_VALUE.match(v):
            raise ValueError(f"invalid label value {v!r} for key {k!r}")
        out[k] = v
    return out


_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _valid_label_key(k: str) -> bool:
    prefix, _, name = k.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def parse_taints(value: str) -> list[dict[str, Any]]:
    """``key=value:Effect,key2:Effect`` → list of taint dicts (upstream --register-with-taints)."""
    out: list[dict[str, Any]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if ":" not in item:
            raise ValueError(f"invalid taint {item!r}: expected key[=value]:Effect")
        kv, effect = item.rsplit(":", 1)
        if effect not in TAINT_EFFECTS:
            raise ValueError(f"invalid taint effect {effect!r} in {item!r} (one of {', '.join(TAINT_EFFECTS)})")
        key, _, val = kv.partition("=")
        if not _valid_label_key(key):
            raise ValueError(f"invalid taint key {key!r}")
        if val and not _LABEL_VALUE.match(val):
            raise ValueError(f"invalid taint value {val!r}")
        taint: dict[str, Any] = {"key": key, "effect": effect}
        if val:
            taint["value"] = val
        out.append(taint)
    return out


def default_hostname() -> str:
    return socket.gethostname().strip().lower()


def _verbosity(v: str) -> int:
    n = int(v)
    if n < 0:
        raise ValueError("must be >= 0")
    return n


# flag name -> (config field, converter).  Flags listed here override the config file.
_CONFIG_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--pod-manifest-path": ("static_pod_path", str),
    "--pod-logs-dir": ("pod_logs_dir", str),
    "--container-log-max-size": ("container_log_max_size", str),
    "--container-log-max-files": ("container_log_max_files", int),
    "--max-pods": ("max_pods", int),
    "--event-qps": ("event_record_qps", int),
    "--event-burst": ("event_burst", int),
    "--port": ("port", int),
    "--address": ("address", str),
    "--healthz-port": ("healthz_port", int),
    "--healthz-bind-address": ("healthz_bind_address", str),
    "--read-only-port": ("read_only_port", int),
    "--tls-cert-file": ("tls_cert_file", str),
    "--tls-private-key-file": ("tls_private_key_file", str),
    "--rotate-certificates": ("rotate_certificates", _bool),
    "--cgroup-root": ("cgroup_root", str),
    "--cgroup-driver": ("cgroup_driver", str),
    "--cgroups-per-qos": ("cgroups_per_qos", _bool),
    "--sync-frequency": ("sync_frequency", parse_duration),
    "--file-check-frequency": ("file_check_frequency", parse_duration),
    "--node-status-update-frequency": ("node_status_update_frequency", parse_duration),
    "--runtime-request-timeout": ("runtime_request_timeout", parse_duration),
    "--pod-cidr": ("pod_cidr", str),
    "--cluster-domain": ("cluster_domain", str),
    "--manifest-url": ("static_pod_url", str),
    "--http-check-frequency": ("http_check_frequency", parse_duration),
    "--cluster-dns": ("cluster_dns", lambda s: [x.strip() for x in s.split(",") if x.strip()]),
    "--serialize-image-pulls": ("serialize_image_pulls", _bool),
    "--fail-swap-on": ("fail_swap_on", _bool),
    "--anonymous-auth": ("authentication.anonymous.enabled", _bool),
    "--authorization-mode": ("authorization.mode", str),
    "--client-ca-file": ("authentication.x509.client_ca_file", str),
}


# flag -> (AgentOptions field, converter, help): garbage collection settings that are not config fields
_GC_FLAGS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "--image-gc-period": ("image_gc_period", parse_duration, "how often image GC runs (upstream: fixed 5m)"),
    "--container-gc-period": ("container_gc_period", parse_duration,
                              "how often container GC runs (upstream: fixed 1m)"),
    "--minimum-container-ttl-duration": ("minimum_container_ttl_duration", parse_duration,
                                         "minimum age of a dead container before GC removes it"),
    "--maximum-dead-containers-per-container": ("maximum_dead_containers_per_container", int,
                                                "dead containers kept per container name (default 1)"),
    "--maximum-dead-containers": ("maximum_dead_containers", int, "dead containers kept on the node (-1: no limit)"),
    "--service-proxy": ("service_proxy", _bool, "run the service proxy (iptables ClusterIP/NodePort rules)"),
    "--service-proxy-chain-prefix": ("service_proxy_chain_prefix", str,
                                     "prefix of the proxy's iptables chains (default PYK: PYK-SERVICES...)"),
}


def _build_parser() -> _ArgParser:
    p = _ArgParser(prog="pykubelet agent", add_help=True, allow_abbrev=False,
                   description="Run the pykubelet node agent (a Kubernetes kubelet).")
    p.add_argument("--config", default=None, help="KubeletConfiguration file (YAML or JSON)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig for the API server; omit for standalone mode")
    p.add_argument("--bootstrap-kubeconfig", default=None,
                   help="kubeconfig with a bootstrap token: without a valid client certificate the agent "
                        "requests one by CSR and writes --kubeconfig to use it")
    p.add_argument("--cert-dir", default=None, help="where TLS bootstrap and rotation keep certificates "
                   "(default: <root-dir>/pki)")
    p.add_argument("--hostname-override", default=None)
    p.add_argument("--node-ip", default=None)
    p.add_argument("--container-runtime-endpoint", default=None)
    p.add_argument("--image-service-endpoint", default=None)
    p.add_argument("--root-dir", default=None)
    p.add_argument("--node-labels", default=None, help="k=v,k2=v2")
    p.add_argument("--register-with-taints", default=None, help="k=v:Effect,k2:Effect")
    p.add_argument("--register-node", default=None, nargs="?", const="true")
    p.add_argument("-v", "--v", dest="v", default=None, help="log verbosity")
    for flag, (_field, _conv_fn, help_) in _GC_FLAGS.items():
        p.add_argument(flag, dest="gc_" + flag[2:].replace("-", "_"), default=None, help=help_)
    for flag in _CONFIG_FLAGS:
        p.add_argument(flag, dest="cfg_" + flag[2:].replace("-", "_"), default=None)
    return p


def _set_path(obj: object, dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, leaf, value)


def _conv(flag: str, conv: Callable[[str], Any], raw: str) -> Any:
    try:
        return conv(raw)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{flag}: invalid value {raw!r}: {e}") from None


def load_options(argv: Sequence[str]) -> AgentOptions:
    """Parse flags (+ the --config file) into AgentOptions; raise ConfigError naming the culprit."""
    ns = _build_parser().parse_args(list(argv))
    config_path = Path(ns.config) if ns.config else None
    config = load_config_file(config_path) if config_path is not None else KubeletConfiguration()

    # Flags override the file (their converters give the fields' types); the result is validated
    # again.  Keep track of which flag set which field, to name it on error.
    flag_for_field: dict[str, str] = {}
    for flag, (fname, conv) in _CONFIG_FLAGS.items():
        raw = getattr(ns, "cfg_" + flag[2:].replace("-", "_"))
        if raw is None:
            continue
        _set_path(config, fname, _conv(flag, conv, raw))
        flag_for_field[_json_path(fname)] = flag
    if ns.container_runtime_endpoint is not None:
        config.container_runtime_endpoint = ns.container_runtime_endpoint
    if ns.image_service_endpoint is not None:
        config.image_service_endpoint = ns.image_service_endpoint
    if ns.register_node is not None:
        config.register_node = _conv("--register-node", _bool, ns.register_node)
    if ns.register_with_taints is not None:
        config.register_with_taints = _conv("--register-with-taints", parse_taints, ns.register_with_taints)
    problems = _validate(config)
    if problems:
        raise ConfigError("; ".join(f"{flag_for_field.get(path) or path or 'config'}: {msg}"
                                    for path, msg in problems))

    labels = _conv("--node-labels", parse_node_labels, ns.node_labels) if ns.node_labels is not None else {}
    verbosity = _conv("--v", _verbosity, ns.v) if ns.v is not None else 0
    hostname = default_hostname()
    node_name = (ns.hostname_override or hostname).strip().lower()
    if not node_name or not _DNS_SUBDOMAIN.match(node_name) or len(node_name) > 253:
        raise ConfigError(f"--hostname-override: invalid node name {node_name!r} (must be a DNS subdomain)")
    if ns.node_ip is not None:
        try:
            import ipaddress

            ipaddress.ip_address(ns.node_ip)
        except ValueError:
            raise ConfigError(f"--node-ip: invalid IP address {ns.node_ip!r}") from None
    root_dir = Path(ns.root_dir) if ns.root_dir else Path(DEFAULT_ROOT_DIR)
    gc: dict[str, Any] = {}
    for flag, (fname, conv, _help) in _GC_FLAGS.items():
        raw = getattr(ns, "gc_" + flag[2:].replace("-", "_"))
        if raw is not None:
            gc[fname] = _conv(flag, conv, raw)
    return AgentOptions(
        **gc,
        config=config,
        config_path=config_path,
        kubeconfig=Path(ns.kubeconfig) if ns.kubeconfig else None,
        bootstrap_kubeconfig=Path(ns.bootstrap_kubeconfig) if ns.bootstrap_kubeconfig else None,
        cert_dir=Path(ns.cert_dir) if ns.cert_dir else root_dir / "pki",
        node_name=node_name,
        hostname=(ns.hostname_override or hostname).strip().lower(),
        node_ip=ns.node_ip,
        container_runtime_endpoint=config.container_runtime_endpoint,
        image_service_endpoint=config.image_service_endpoint or config.container_runtime_endpoint,
        root_dir=root_dir,
        verbosity=verbosity,
        node_labels=labels,
        register_with_taints=list(config.register_with_taints),
        register_node=config.register_node,
    )
