"""Field schemas for strict decoding (``fieldValidation=Strict|Warn|Ignore``).

Upstream rejects (Strict) or warns about (Warn, the default) JSON fields the Go structs do not
know, with messages like ``strict decoding error: unknown field "spec.foo"`` and list indices in
the path (``spec.containers[0].foo``); unknown fields are dropped either way.  We have no Go
structs, so this module holds a compact description of the known fields of the types that
matter: a dict maps field -> sub-schema, ``ANY`` accepts anything, ``ListOf(s)`` / ``MapOf(s)``
describe element types.  Where a type is not spelled out it is ``ANY`` so no valid object is ever
refused.  The same description feeds the OpenAPI component schemas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()


@dataclass(frozen=True)
class ListOf:
    item: Schema


@dataclass(frozen=True)
class MapOf:
    value: Schema


Schema = Union[dict[str, Any], _Any, ListOf, MapOf]  # noqa: UP007 (runtime alias before 3.12)


def _fields(names: str, sub: Schema = ANY) -> dict[str, Schema]:
    return {n: sub for n in names.split()}


OWNER_REF = _fields("apiVersion kind name uid controller blockOwnerDeletion")
OBJECT_META: dict[str, Schema] = {
    **_fields("name generateName namespace selfLink uid resourceVersion generation creationTimestamp "
              "deletionTimestamp deletionGracePeriodSeconds labels annotations finalizers managedFields"),
    "ownerReferences": ListOf(OWNER_REF),
}

RESOURCES_REQ = _fields("limits requests claims")
CONTAINER: dict[str, Schema] = {
    **_fields("name image command args workingDir envFrom imagePullPolicy securityContext stdin stdinOnce tty "
              "terminationMessagePath terminationMessagePolicy livenessProbe readinessProbe startupProbe "
              "lifecycle volumeDevices resizePolicy restartPolicy targetContainerName"),
    "ports": ListOf(_fields("name hostPort containerPort protocol hostIP")),
    "env": ListOf(_fields("name value valueFrom")),
    "resources": RESOURCES_REQ,
    "volumeMounts": ListOf(_fields("name readOnly recursiveReadOnly mountPath subPath mountPropagation "
                                   "subPathExpr")),
}
POD_SPEC: dict[str, Schema] = {
    **_fields("restartPolicy terminationGracePeriodSeconds activeDeadlineSeconds dnsPolicy nodeSelector "
              "serviceAccountName serviceAccount automountServiceAccountToken nodeName hostNetwork hostPID "
              "hostIPC shareProcessNamespace securityContext imagePullSecrets hostname subdomain affinity "
              "schedulerName tolerations hostAliases priorityClassName priority dnsConfig readinessGates "
              "runtimeClassName enableServiceLinks preemptionPolicy overhead topologySpreadConstraints "
              "setHostnameAsFQDN os hostUsers schedulingGates resourceClaims resources volumes"),
    "containers": ListOf(CONTAINER),
    "initContainers": ListOf(CONTAINER),
    "ephemeralContainers": ListOf(CONTAINER),
}
POD_STATUS = _fields("phase conditions message reason nominatedNodeName hostIP hostIPs podIP podIPs startTime "
                     "initContainerStatuses containerStatuses qosClass ephemeralContainerStatuses resize "
                     "resourceClaimStatuses observedGeneration")


def _top(**extra: Schema) -> dict[str, Schema]:
    return {"apiVersion": ANY, "kind": ANY, "metadata": OBJECT_META, **extra}


KIND_SCHEMAS: dict[tuple[str, str], dict[str, Schema]] = {
    ("", "Pod"): _top(spec=POD_SPEC, status=POD_STATUS),
    ("", "Node"): _top(spec=_fields("podCIDR podCIDRs providerID unschedulable taints configSource externalID"),
                       status=ANY),
    ("", "Namespace"): _top(spec=_fields("finalizers"), status=_fields("phase conditions")),
    ("", "ConfigMap"): _top(data=ANY, binaryData=ANY, immutable=ANY),
    ("", "Secret"): _top(data=ANY, stringData=ANY, type=ANY, immutable=ANY),
    ("", "ServiceAccount"): _top(secrets=ANY, imagePullSecrets=ANY, automountServiceAccountToken=ANY),
    ("", "Service"): _top(spec=ANY, status=ANY),
    ("", "Endpoints"): _top(subsets=ANY),
    ("", "Event"): _top(**_fields("involvedObject reason message source firstTimestamp lastTimestamp count type "
                                  "eventTime series action related reportingComponent reportingInstance")),
    ("events.k8s.io", "Event"): _top(**_fields("eventTime series reportingController reportingInstance action "
                                               "reason regarding related note type deprecatedSource "
                                               "deprecatedFirstTimestamp deprecatedLastTimestamp "
                                               "deprecatedCount")),
    ("coordination.k8s.io", "Lease"): _top(spec=_fields("holderIdentity leaseDurationSeconds acquireTime "
                                                        "renewTime leaseTransitions strategy "
                                                        "preferredHolder")),
    ("node.k8s.io", "RuntimeClass"): _top(handler=ANY, overhead=ANY, scheduling=ANY),
    ("certificates.k8s.io", "CertificateSigningRequest"): _top(
        spec=_fields("request signerName expirationSeconds usages username uid groups extra"),
        status=_fields("conditions certificate")),
}


def unknown_fields(obj: Any, schema: Schema, path: str = "") -> list[str]:
    """Paths of fields not in the schema, in document order."""
    out: list[str] = []
    if isinstance(schema, _Any) or obj is None:
        return out
    if isinstance(schema, ListOf):
        if isinstance(obj, list):
            for i, e in enumerate(obj):
                out += unknown_fields(e, schema.item, f"{path}[{i}]")
        return out
    if isinstance(schema, MapOf):
        if isinstance(obj, dict):
            for k, v in obj.items():
                out += unknown_fields(v, schema.value, f"{path}.{k}" if path else k)
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{path}.{k}" if path else k
            if k not in schema:
                out.append(p)
            else:
                out += unknown_fields(v, schema[k], p)
    return out


def type_errors(obj: Any, schema: Schema, path: str = "") -> list[str]:
    """Where a value cannot decode into the declared shape (object vs. array), as Go's
    json.Unmarshal would refuse it.  null is accepted and pruned to "absent"."""
    out: list[str] = []
    if isinstance(schema, _Any) or obj is None:
        return out
    if isinstance(schema, ListOf):
        if not isinstance(obj, list):
            return [f"{path or '<root>'}: expected an array, got {type(obj).__name__}"]
        for i, e in enumerate(obj):
            out += type_errors(e, schema.item, f"{path}[{i}]")
        return out
    if isinstance(schema, MapOf):
        if not isinstance(obj, dict):
            return [f"{path or '<root>'}: expected an object, got {type(obj).__name__}"]
        return out
    if not isinstance(obj, dict):
        return [f"{path or '<root>'}: expected an object, got {type(obj).__name__}"]
    for k, v in obj.items():
        if k in schema:
            out += type_errors(v, schema[k], f"{path}.{k}" if path else k)
    return out


def prune(obj: Any, schema: Schema) -> Any:
    """Drop unknown fields (what Go decoding does implicitly)."""
    if isinstance(schema, _Any) or obj is None:
        return obj
    if isinstance(schema, ListOf):
        return [prune(e, schema.item) for e in obj] if isinstance(obj, list) else obj
    if isinstance(schema, MapOf):
        return {k: prune(v, schema.value) for k, v in obj.items()} if isinstance(obj, dict) else obj
    if isinstance(obj, dict):
        return {k: prune(v, schema[k]) for k, v in obj.items()
                if k in schema and not (v is None and not isinstance(schema[k], _Any))}
    return obj


def schema_for(group: str, kind: str) -> dict[str, Schema] | None:
    return KIND_SCHEMAS.get((group, kind))


def to_openapi(schema: Schema) -> dict[str, Any]:
    """Render as an OpenAPI v3 schema fragment (types left open where unknown)."""
    if isinstance(schema, _Any):
        return {}
    if isinstance(schema, ListOf):
        return {"type": "array", "items": to_openapi(schema.item)}
    if isinstance(schema, MapOf):
        return {"type": "object", "additionalProperties": to_openapi(schema.value)}
    return {"type": "object", "properties": {k: to_openapi(v) for k, v in schema.items()}}
