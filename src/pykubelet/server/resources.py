"""The resource registry: what the dev API server serves, and how discovery describes it.

One :class:`ResourceInfo` per (group, version, resource).  It is the single source for legacy
discovery (``APIResourceList``), aggregated discovery (``APIGroupDiscoveryList``), OpenAPI paths,
routing and storage keys.  Short names, verbs and scopes copy upstream's so kubectl's
``get po``/``get no``/``get csr``/``get ev`` and friends resolve the same way.  ``events.k8s.io``
events share storage with core events (as upstream, which converts between the two versions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
CREATE_ONLY = ["create"]


@dataclass(frozen=True)
class SubresourceInfo:
    name: str
    kind: str
    verbs: list[str]
    group: str = ""
    version: str = "v1"


@dataclass(frozen=True)
class ResourceInfo:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    singular: str = ""
    categories: list[str] = field(default_factory=list)
    subresources: list[SubresourceInfo] = field(default_factory=list)
    storage: str = ""  # storage key; defaults to resource[.group]
    virtual: bool = False  # create-only review resources, never stored

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        if self.storage:
            return self.storage
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    def sub(self, name: str) -> SubresourceInfo | None:
        return next((s for s in self.subresources if s.name == name), None)


_GET_UPDATE_PATCH = ["get", "patch", "update"]

RESOURCES: list[ResourceInfo] = [
    ResourceInfo("", "v1", "namespaces", "Namespace", False, ["ns"],
                 verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
                 subresources=[SubresourceInfo("status", "Namespace", _GET_UPDATE_PATCH),
                               SubresourceInfo("finalize", "Namespace", ["update"])]),
    ResourceInfo("", "v1", "nodes", "Node", False, ["no"],
                 subresources=[SubresourceInfo("status", "Node", _GET_UPDATE_PATCH),
                               SubresourceInfo("proxy", "NodeProxyOptions",
                                               ["create", "delete", "get", "patch", "update"])]),
    ResourceInfo("", "v1", "pods", "Pod", True, ["po"], categories=["all"],
                 subresources=[
                     SubresourceInfo("status", "Pod", _GET_UPDATE_PATCH),
                     SubresourceInfo("binding", "Binding", CREATE_ONLY),
                     SubresourceInfo("eviction", "Eviction", CREATE_ONLY, group="policy", version="v1"),
                     SubresourceInfo("log", "Pod", ["get"]),
                     SubresourceInfo("exec", "PodExecOptions", ["create", "get"]),
                     SubresourceInfo("attach", "PodAttachOptions", ["create", "get"]),
                     SubresourceInfo("portforward", "PodPortForwardOptions", ["create", "get"]),
                     SubresourceInfo("proxy", "PodProxyOptions", ["create", "delete", "get", "patch", "update"]),
                     SubresourceInfo("ephemeralcontainers", "Pod", _GET_UPDATE_PATCH),
                 ]),
    ResourceInfo("", "v1", "bindings", "Binding", True, verbs=CREATE_ONLY, virtual=True),
    ResourceInfo("", "v1", "events", "Event", True, ["ev"]),
    ResourceInfo("", "v1", "configmaps", "ConfigMap", True, ["cm"]),
    ResourceInfo("", "v1", "secrets", "Secret", True),
    ResourceInfo("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"],
                 subresources=[SubresourceInfo("token", "TokenRequest", CREATE_ONLY,
                                               group="authentication.k8s.io")]),
    ResourceInfo("", "v1", "services", "Service", True, ["svc"], categories=["all"],
                 verbs=["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                 subresources=[SubresourceInfo("status", "Service", _GET_UPDATE_PATCH)]),
    ResourceInfo("", "v1", "endpoints", "Endpoints", True, ["ep"]),
    ResourceInfo("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    ResourceInfo("", "v1", "persistentvolumes", "PersistentVolume", False, ["pv"],
                 subresources=[SubresourceInfo("status", "PersistentVolume", _GET_UPDATE_PATCH)]),
    ResourceInfo("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ["pvc"],
                 subresources=[SubresourceInfo("status", "PersistentVolumeClaim", _GET_UPDATE_PATCH)]),
    ResourceInfo("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceInfo("events.k8s.io", "v1", "events", "Event", True, ["ev"], storage="events"),
    ResourceInfo("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest",
                 False, ["csr"],
                 subresources=[SubresourceInfo("approval", "CertificateSigningRequest", _GET_UPDATE_PATCH,
                                               group="certificates.k8s.io"),
                               SubresourceInfo("status", "CertificateSigningRequest", _GET_UPDATE_PATCH,
                                               group="certificates.k8s.io")]),
    ResourceInfo("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False,
                 verbs=CREATE_ONLY, virtual=True),
    ResourceInfo("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False,
                 verbs=CREATE_ONLY, virtual=True),
    ResourceInfo("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False,
                 verbs=CREATE_ONLY, virtual=True),
    ResourceInfo("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
                 False, verbs=CREATE_ONLY, virtual=True),
    ResourceInfo("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
    ResourceInfo("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ResourceInfo("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceInfo("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceInfo("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceInfo("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ["sc"]),
    ResourceInfo("batch", "v1", "jobs", "Job", True, categories=["all"],
                 subresources=[SubresourceInfo("status", "Job", _GET_UPDATE_PATCH, group="batch")]),
    ResourceInfo("batch", "v1", "cronjobs", "CronJob", True, ["cj"], categories=["all"],
                 subresources=[SubresourceInfo("status", "CronJob", _GET_UPDATE_PATCH, group="batch")]),
    # metrics.k8s.io is served from the kubelets' /metrics/resource (server/metricsapi.py), never stored
    ResourceInfo("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, verbs=["get", "list"], virtual=True),
    ResourceInfo("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, verbs=["get", "list"], virtual=True),
    ResourceInfo("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"],
                 subresources=[SubresourceInfo("status", "PodDisruptionBudget", _GET_UPDATE_PATCH,
                                               group="policy")]),
    *[ResourceInfo("apps", "v1", res, kind, True, short, categories=["all"],
                   subresources=[SubresourceInfo("status", kind, _GET_UPDATE_PATCH, group="apps"),
                                 *([SubresourceInfo("scale", "Scale", _GET_UPDATE_PATCH, group="autoscaling")]
                                   if res != "daemonsets" else [])])
      for res, kind, short in (("deployments", "Deployment", ["deploy"]), ("replicasets", "ReplicaSet", ["rs"]),
                               ("daemonsets", "DaemonSet", ["ds"]), ("statefulsets", "StatefulSet", ["sts"]))],
    ResourceInfo("apps", "v1", "controllerrevisions", "ControllerRevision", True),
    # CRDs (server/crd.py), priority, quota and limits (server/priority.py, quota.py, limitrange.py)
    ResourceInfo("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
                 ["crd", "crds"], categories=["api-extensions"],
                 subresources=[SubresourceInfo("status", "CustomResourceDefinition", _GET_UPDATE_PATCH,
                                               group="apiextensions.k8s.io")]),
    ResourceInfo("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ["pc"]),
    ResourceInfo("", "v1", "resourcequotas", "ResourceQuota", True, ["quota"],
                 subresources=[SubresourceInfo("status", "ResourceQuota", _GET_UPDATE_PATCH)]),
    ResourceInfo("", "v1", "limitranges", "LimitRange", True, ["limits"]),
]

BY_GVR: dict[tuple[str, str, str], ResourceInfo] = {(r.group, r.version, r.resource): r for r in RESOURCES}
BY_KEY: dict[str, ResourceInfo] = {}
for _r in RESOURCES:
    BY_KEY.setdefault(_r.key, _r)


def add_resource(r: ResourceInfo) -> None:
    """Serve ``r`` from now on (custom resources, server/crd.py): discovery, OpenAPI, routing,
    tables and watch all read RESOURCES/BY_GVR/BY_KEY, which are updated in place."""
    remove_resource(r.group, r.version, r.resource)
    RESOURCES.append(r)
    BY_GVR[(r.group, r.version, r.resource)] = r
    BY_KEY.setdefault(r.key, r)


def remove_resource(group: str, version: str, resource: str) -> ResourceInfo | None:
    """Stop serving a resource added by :func:`add_resource`; returns what was removed."""
    r = BY_GVR.pop((group, version, resource), None)
    if r is None:
        return None
    RESOURCES.remove(r)
    if BY_KEY.get(r.key) is r:
        del BY_KEY[r.key]
        other = next((o for o in RESOURCES if o.key == r.key), None)
        if other is not None:
            BY_KEY[r.key] = other
    return r


def groups() -> dict[str, list[str]]:
    """group -> versions (preferred first), in registration order; "" is the core group."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        vs = out.setdefault(r.group, [])
        if r.version not in vs:
            vs.append(r.version)
    return out


def lookup(group: str, version: str, resource: str) -> ResourceInfo | None:
    return BY_GVR.get((group, version, resource))


def namespaced_resources() -> list[ResourceInfo]:
    """Stored namespaced resources (one per storage key), for namespace deletion."""
    seen: set[str] = set()
    out = []
    for r in RESOURCES:
        if r.namespaced and not r.virtual and r.key not in seen:
            seen.add(r.key)
            out.append(r)
    return out
