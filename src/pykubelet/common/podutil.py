"""Pod helpers shared by the agent and the control plane (pods are plain JSON dicts).

Design: every function takes the pod exactly as it travels over the wire (a ``dict`` in v1 JSON
form) and never mutates it; resource totals are ``dict[str, Decimal]`` so that CPU (fractional)
and memory (bytes) are both exact, with small helpers for millicores/bytes.

Upstream behaviour followed:
- QoS (pkg/apis/core/helper/qos/qos.go): only cpu and memory count; a pod is BestEffort when no
  container (init or app) has a non-zero request or limit; Guaranteed when every container has
  both cpu and memory limits and, summed over containers, requests equal limits; else Burstable.
- Pod requests/limits (k8s.io/component-helpers/resource): the sum of app containers, where
  restartable init containers ("sidecars", restartPolicy Always) are added to that sum and to the
  running total seen by later init containers; the effective value is
  max(sum, max over init containers) per resource, plus ``spec.overhead``.
- Static/mirror pods (pkg/kubelet/types): source annotation ``kubernetes.io/config.source``
  other than "api" means static; mirror pods carry ``kubernetes.io/config.mirror`` (names in
  ``common.labels``).
- Pod full name (pkg/kubelet/container): ``<name>_<namespace>``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from pykubelet.common.labels import API_SOURCE, CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION
from pykubelet.common.quantity import QuantityError, parse_quantity

QOS_GUARANTEED = "Guaranteed"
QOS_BURSTABLE = "Burstable"
QOS_BEST_EFFORT = "BestEffort"

_QOS_RESOURCES = ("cpu", "memory")

ResourceList = dict[str, Decimal]


def _meta(pod: dict[str, Any]) -> dict[str, Any]:
    return pod.get("metadata") or {}


def _spec(pod: dict[str, Any]) -> dict[str, Any]:
    return pod.get("spec") or {}


def pod_annotations(pod: dict[str, Any]) -> dict[str, str]:
    return _meta(pod).get("annotations") or {}


def pod_full_name(pod: dict[str, Any]) -> str:
    """Upstream GetPodFullName: ``name_namespace``."""
    m = _meta(pod)
    return f"{m.get('name', '')}_{m.get('namespace', '')}"


def pod_key(pod: dict[str, Any]) -> str:
    """``namespace/name`` as used in events and logs."""
    m = _meta(pod)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def is_mirror_pod(pod: dict[str, Any]) -> bool:
    return CONFIG_MIRROR_ANNOTATION in pod_annotations(pod)


def is_static_pod(pod: dict[str, Any]) -> bool:
    src = pod_annotations(pod).get(CONFIG_SOURCE_ANNOTATION)
    return src is not None and src != API_SOURCE


def is_restartable_init_container(container: dict[str, Any]) -> bool:
    """A sidecar: an init container with restartPolicy Always."""
    return container.get("restartPolicy") == "Always"


def all_containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Init containers, then app containers, then ephemeral containers."""
    spec = _spec(pod)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def find_container(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    for c in all_containers(pod):
        if c.get("name") == name:
            return c
    return None


def find_container_status(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == name:
                return cs
    return None


def _resource_list(raw: dict[str, Any] | None) -> ResourceList:
    out: ResourceList = {}
    for name, q in (raw or {}).items():
        try:
            out[name] = parse_quantity(q).value
        except QuantityError:
            continue
    return out


def container_requests(container: dict[str, Any]) -> ResourceList:
    return _resource_list((container.get("resources") or {}).get("requests"))


def container_limits(container: dict[str, Any]) -> ResourceList:
    return _resource_list((container.get("resources") or {}).get("limits"))


def _add(into: ResourceList, other: ResourceList) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Decimal(0)) + v


def _max(into: ResourceList, other: ResourceList) -> None:
    for k, v in other.items():
        if k not in into or v > into[k]:
            into[k] = v


def _aggregate(pod: dict[str, Any], which: str) -> ResourceList:
    get = container_requests if which == "requests" else container_limits
    spec = _spec(pod)
    total: ResourceList = {}
    for c in spec.get("containers") or []:
        _add(total, get(c))
    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for c in spec.get("initContainers") or []:
        reqs = get(c)
        if is_restartable_init_container(c):
            _add(sidecars, reqs)
            _add(total, reqs)
            effective = dict(sidecars)
        else:
            effective = dict(reqs)
            _add(effective, sidecars)
        _max(init_max, effective)
    _max(total, init_max)
    _add(total, _resource_list(spec.get("overhead")))
    return total


def pod_requests(pod: dict[str, Any]) -> ResourceList:
    """Effective pod requests (upstream PodRequests)."""
    return _aggregate(pod, "requests")


def pod_limits(pod: dict[str, Any]) -> ResourceList:
    """Effective pod limits (upstream PodLimits)."""
    return _aggregate(pod, "limits")


def to_millis(value: Decimal) -> int:
    """Decimal resource value -> milli-units, rounded up."""
    return math.ceil(value * 1000)


def qos_class(pod: dict[str, Any]) -> str:
    """Upstream GetPodQOS (ignores ephemeral containers, like upstream)."""
    spec = _spec(pod)
    requests: ResourceList = {}
    limits: ResourceList = {}
    guaranteed = True
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for name, v in container_requests(c).items():
            if name in _QOS_RESOURCES and v > 0:
                requests[name] = requests.get(name, Decimal(0)) + v
        found = set()
        for name, v in container_limits(c).items():
            if name in _QOS_RESOURCES and v > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + v
        if not found.issuperset(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QOS_BEST_EFFORT
    if guaranteed:
        for name, v in requests.items():
            if limits.get(name) != v:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return QOS_GUARANTEED
    return QOS_BURSTABLE


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def get_condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None
