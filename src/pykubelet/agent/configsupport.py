"""Which KubeletConfiguration fields pykubelet implements: one table, warnings and docs from it.

The project's rule is "nothing silently ignored". A KubeletConfiguration accepts every upstream
field (so real configs load), but many describe machinery this agent does not have (CPU/memory/
topology managers, swap, cloud providers...). :data:`TABLE` says, for every field (by its JSON name),
whether it is ``supported``, ``partly`` supported (the note says what is missing) or ``not``
supported. :func:`warnings` turns every non-default value of a field that is not fully supported
into a startup warning naming it -- ``imageServiceEndpoint is set but not supported; ignored`` is the
shape -- and :func:`markdown` renders ``docs/kubelet-configuration.md``
(``python -m pykubelet.agent.configsupport > docs/kubelet-configuration.md``).

A unit test checks the table covers exactly the model's fields, so a field added to the model
without a decision here fails the build.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

from pykubelet.agent.config import KubeletConfiguration, json_names


class Support(enum.Enum):
    SUPPORTED = "supported"
    PARTLY = "partly"
    NOT = "not supported"


@dataclass(frozen=True)
class FieldSupport:
    support: Support
    note: str = ""


def _s(note: str = "") -> FieldSupport:
    return FieldSupport(Support.SUPPORTED, note)


def _p(note: str) -> FieldSupport:
    return FieldSupport(Support.PARTLY, note)


def _n(note: str = "") -> FieldSupport:
    return FieldSupport(Support.NOT, note)


TABLE: dict[str, FieldSupport] = {
    "apiVersion": _s("must be kubelet.config.k8s.io/v1beta1"),
    "kind": _s("must be KubeletConfiguration"),
    "enableServer": _s("the kubelet API on port/address"),
    "staticPodPath": _s("static pods from a directory or file"),
    "podLogsDir": _s(),
    "syncFrequency": _s("periodic resync of every pod; volume contents refresh"),
    "fileCheckFrequency": _s(),
    "httpCheckFrequency": _s("agent/sources/http.py"),
    "staticPodURL": _s("agent/sources/http.py"),
    "staticPodURLHeader": _s("agent/sources/http.py"),
    "address": _s(),
    "port": _s(),
    "readOnlyPort": _s("0 disables it, as upstream"),
    "tlsCertFile": _s(),
    "tlsPrivateKeyFile": _s(),
    "tlsCipherSuites": _n("Python's default TLS ciphers are used"),
    "tlsMinVersion": _n("Python's default minimum TLS version is used"),
    "rotateCertificates": _s("the client certificate (from --bootstrap-kubeconfig or --cert-dir) is renewed "
                             "by CSR at 70-90 % of its lifetime"),
    "serverTLSBootstrap": _s("the serving certificate comes from a kubernetes.io/kubelet-serving CSR and is "
                             "rotated the same way"),
    "authentication": _s("x509.clientCAFile, webhook.enabled (TokenReview), anonymous.enabled"),
    "authorization": _s("mode AlwaysAllow or Webhook (SubjectAccessReview)"),
    "registryPullQPS": _n("image pulls are not rate limited"),
    "registryBurst": _n("image pulls are not rate limited"),
    "imagePullCredentialsVerificationPolicy": _n(),
    "preloadedImagesVerificationAllowlist": _n(),
    "eventRecordQPS": _s("event writes a second (0: no limit)"),
    "eventBurst": _s(),
    "enableDebuggingHandlers": _n("the debugging handlers (logs, exec, attach, port-forward) are always on"),
    "enableContentionProfiling": _n(),
    "healthzPort": _s(),
    "healthzBindAddress": _s(),
    "oomScoreAdj": _n("the agent's own oom_score_adj is not changed"),
    "clusterDomain": _s(),
    "clusterDNS": _s("pod resolv.conf for ClusterFirst"),
    "streamingConnectionIdleTimeout": _n("streams are closed when either side closes"),
    "nodeStatusUpdateFrequency": _s(),
    "nodeStatusReportFrequency": _s(),
    "nodeLeaseDurationSeconds": _s(),
    "imageMinimumGCAge": _s("image GC"),
    "imageMaximumGCAge": _s("image GC"),
    "imageGCHighThresholdPercent": _s("image GC"),
    "imageGCLowThresholdPercent": _s("image GC"),
    "volumeStatsAggPeriod": _n("volume stats are computed on request"),
    "kubeletCgroups": _n(),
    "systemCgroups": _n(),
    "cgroupRoot": _s(),
    "cgroupsPerQOS": _s(),
    "cgroupDriver": _s("cgroupfs, or systemd slices through systemd's D-Bus API; checked against the runtime's"),
    "cpuManagerPolicy": _s("none and static"),
    "singleProcessOOMKill": _n(),
    "cpuManagerPolicyOptions": _n("no static policy options"),
    "cpuManagerReconcilePeriod": _s(),
    "memoryManagerPolicy": _n("no memory manager: only None"),
    "topologyManagerPolicy": _n("no topology manager: only none"),
    "topologyManagerScope": _n("no topology manager"),
    "topologyManagerPolicyOptions": _n("no topology manager"),
    "qosReserved": _s("memory reservation of the QoS cgroups"),
    "runtimeRequestTimeout": _s(),
    "hairpinMode": _n("the CNI configuration decides"),
    "maxPods": _s(),
    "podCIDR": _s("reported in the node's spec when the server does not allocate one"),
    "podPidsLimit": _s(),
    "resolvConf": _s(),
    "runOnce": _n(),
    "cpuCFSQuota": _s(),
    "cpuCFSQuotaPeriod": _s(),
    "nodeStatusMaxImages": _s(),
    "maxOpenFiles": _n(),
    "contentType": _n("the agent talks JSON to the API server"),
    "kubeAPIQPS": _n("API requests are not rate limited"),
    "kubeAPIBurst": _n("API requests are not rate limited"),
    "serializeImagePulls": _s(),
    "maxParallelImagePulls": _s(),
    "evictionHard": _s("eviction manager"),
    "evictionSoft": _s("eviction manager"),
    "evictionSoftGracePeriod": _s("eviction manager"),
    "evictionPressureTransitionPeriod": _s("eviction manager"),
    "evictionMonitoringPeriod": _s("eviction manager pass period"),
    "evictionMaxPodGracePeriod": _s("eviction manager"),
    "evictionMinimumReclaim": _s("eviction manager"),
    "mergeDefaultEvictionSettings": _n(),
    "podsPerCore": _n(),
    "enableControllerAttachDetach": _n("no attachable volume types"),
    "protectKernelDefaults": _n(),
    "makeIPTablesUtilChains": _n(),
    "iptablesMasqueradeBit": _s("the agent's service proxy"),
    "iptablesDropBit": _n(),
    "featureGates": _n("feature gates are not consulted"),
    "failSwapOn": _s("checked at startup"),
    "memorySwap": _p("swapBehavior NoSwap/LimitedSwap on cgroup v2 pod cgroups"),
    "containerLogMaxSize": _s(),
    "containerLogMaxFiles": _s(),
    "containerLogMaxWorkers": _n("one rotation worker"),
    "containerLogMonitorInterval": _s(),
    "configMapAndSecretChangeDetectionStrategy": _p("Watch: one watch per referenced ConfigMap/Secret; Get: a "
                                                    "GET per read; Cache reads like Get (no TTL)"),
    "systemReserved": _s("node allocatable"),
    "kubeReserved": _s("node allocatable"),
    "reservedSystemCPUs": _s("the static CPU manager's reserved CPUs"),
    "showHiddenMetricsForVersion": _n(),
    "systemReservedCgroup": _s("limited when enforceNodeAllocatable has system-reserved"),
    "kubeReservedCgroup": _s("limited when enforceNodeAllocatable has kube-reserved"),
    "enforceNodeAllocatable": _s("pods, system-reserved, kube-reserved"),
    "allowedUnsafeSysctls": _s(),
    "volumePluginDir": _n("no FlexVolume plugins"),
    "providerID": _s(),
    "kernelMemcgNotification": _s("memory threshold events on cgroup v1; polling on v2"),
    "logging": _n("the agent logs as text; use -v for verbosity"),
    "enableSystemLogHandler": _n(),
    "enableSystemLogQuery": _n(),
    "shutdownGracePeriod": _n("no graceful node shutdown"),
    "shutdownGracePeriodCriticalPods": _n("no graceful node shutdown"),
    "shutdownGracePeriodByPodPriority": _n("no graceful node shutdown"),
    "crashLoopBackOff": _n("back-off is 10s doubling to 5m"),
    "reservedMemory": _n("no memory manager"),
    "enableProfilingHandler": _n(),
    "enableDebugFlagsHandler": _n(),
    "seccompDefault": _s("RuntimeDefault for pods that set no seccomp profile"),
    "memoryThrottlingFactor": _n("no memory QoS"),
    "registerWithTaints": _s(),
    "registerNode": _s(),
    "tracing": _n(),
    "localStorageCapacityIsolation": _s("eviction manager"),
    "containerRuntimeEndpoint": _s(),
    "imageServiceEndpoint": _s("its own gRPC channel when it differs from containerRuntimeEndpoint"),
    "failCgroupV1": _n(),
    "userNamespaces": _p("idsPerPod"),
}


# Sub-fields of supported fields that are not honoured (dotted JSON path -> attribute path, support).
NESTED: dict[str, tuple[str, FieldSupport]] = {
    "authentication.webhook.cacheTTL": ("authentication.webhook.cache_ttl",
                                        _n("token reviews are cached for upstream's default 2m")),
    "authorization.webhook.cacheAuthorizedTTL": ("authorization.webhook.cache_authorized_ttl",
                                                 _n("allowed decisions are cached for upstream's default 5m")),
    "authorization.webhook.cacheUnauthorizedTTL": ("authorization.webhook.cache_unauthorized_ttl",
                                                   _n("denied decisions are cached for upstream's default 30s")),
}


def _attr(obj: object, dotted: str) -> object:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def json_fields() -> list[str]:
    """The model's fields by JSON name, in declaration order."""
    return list(json_names(KubeletConfiguration).values())


def _value(config: KubeletConfiguration, json_name: str) -> object:
    for name, json in json_names(KubeletConfiguration).items():
        if json == json_name:
            return getattr(config, name)
    raise KeyError(json_name)


def warnings(config: KubeletConfiguration) -> list[str]:
    """A warning for every field set to a non-default value that pykubelet does not fully honour."""
    default = KubeletConfiguration()
    out = []
    for field in json_fields():
        entry = TABLE.get(field)
        if entry is None or entry.support is Support.SUPPORTED:
            continue
        if _value(config, field) == _value(default, field):
            continue
        if entry.support is Support.NOT:
            out.append(f"{field} is set but not supported; ignored" + (f" ({entry.note})" if entry.note else ""))
        else:
            out.append(f"{field} is set but only partly supported: {entry.note}")
    for field, (attr, entry) in NESTED.items():
        if _attr(config, attr) != _attr(default, attr):
            out.append(f"{field} is set but not supported; ignored ({entry.note})")
    return out


def markdown() -> str:
    counts = {s: sum(1 for e in TABLE.values() if e.support is s) for s in Support}
    lines = [
        "# KubeletConfiguration support",
        "",
        "Generated from `src/pykubelet/agent/configsupport.py` "
        "(`python -m pykubelet.agent.configsupport > docs/kubelet-configuration.md`).",
        "",
        "Every field of `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration` is accepted. A field that is "
        "not (fully) supported and set to a value other than its default produces a startup warning naming "
        "it, e.g. `cpuManagerPolicy is set but not supported; ignored`.",
        "",
        f"{counts[Support.SUPPORTED]} supported, {counts[Support.PARTLY]} partly, "
        f"{counts[Support.NOT]} not supported.",
        "",
        "| Field | Support | Note |",
        "|---|---|---|",
    ]
    for field in json_fields():
        e = TABLE[field]
        lines.append(f"| `{field}` | {e.support.value} | {e.note} |")
    for field, (_attr_path, e) in NESTED.items():
        lines.append(f"| `{field}` | {e.support.value} | {e.note} |")
    lines += [
        "",
        "Agent flags outside the configuration file: `--image-gc-period` and `--container-gc-period` (upstream's "
        "fixed 5m and 1m, configurable for tests), `--minimum-container-ttl-duration`, "
        "`--maximum-dead-containers-per-container` (1) and `--maximum-dead-containers` (-1) as upstream's "
        "deprecated container GC flags.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
