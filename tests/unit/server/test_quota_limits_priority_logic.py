"""Pure logic of the Priority, LimitRanger and ResourceQuota admission plugins."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pykubelet.server import limitrange, priority, quota
from pykubelet.server.admission import AdmissionError

Obj = dict[str, Any]


def pod(*containers: Obj, init: list[Obj] | None = None, **spec: Any) -> Obj:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), "initContainers": init or [],
                                                **spec}}


def c(name: str = "c", requests: Obj | None = None, limits: Obj | None = None) -> Obj:
    res: Obj = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": name, "resources": res}


class FakeStore:
    def __init__(self, objs: dict[str, list[Obj]]) -> None:
        self.objs = objs

    def iter_raw(self, resource: str, namespace: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]:
        for o in self.objs.get(resource, []):
            yield ("ns", o["metadata"]["name"]), o

    def update(self, resource: str, namespace: str, name: str, obj: Obj) -> Obj:
        self.objs[resource] = [obj if o["metadata"]["name"] == name else o for o in self.objs[resource]]
        return obj


def test_pod_usage_sums_app_containers_and_takes_the_largest_init_container() -> None:
    u = quota.usage("pods", pod(c(requests={"cpu": "100m"}), c("d", requests={"cpu": "200m"}),
                                init=[c("i", requests={"cpu": "500m"})]))
    assert u["requests.cpu"] == u["cpu"] and str(u["requests.cpu"]) == "0.5"
    assert quota.usage("pods", {**pod(c()), "status": {"phase": "Succeeded"}}) == {}


def test_best_effort_scope_counts_only_pods_without_resources() -> None:
    q = {"metadata": {"name": "be"}, "spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort"]}}
    store = FakeStore({"resourcequotas": [q], "pods": [{**pod(c()), "metadata": {"name": "a"}}]})
    quota.admit(store, "pods", "ns", pod(c(requests={"cpu": "1"})))  # not best-effort: not counted
    with pytest.raises(quota.QuotaExceeded, match=r"exceeded quota: be, requested: pods=1, used: pods=1"):
        quota.admit(store, "pods", "ns", pod(c()))
    quota.sync(store, "ns")
    assert store.objs["resourcequotas"][0]["status"] == {"hard": {"pods": "1"}, "used": {"pods": "1"}}


def test_count_quota_for_any_resource() -> None:
    q = {"metadata": {"name": "q"}, "spec": {"hard": {"count/deployments.apps": "0"}}}
    store = FakeStore({"resourcequotas": [q]})
    with pytest.raises(quota.QuotaExceeded, match=r"limited: count/deployments\.apps=0"):
        quota.admit(store, "deployments.apps", "ns", {"metadata": {"name": "d"}})


def test_limit_range_items_are_defaulted_from_max_and_min() -> None:
    lr = {"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}}]}}
    limitrange.default_limit_range(lr)
    item = lr["spec"]["limits"][0]
    assert item["default"] == {"cpu": "2"} and item["defaultRequest"] == {"cpu": "2", "memory": "1Mi"}


def test_pod_limit_range_checks_the_pod_total() -> None:
    lr = {"spec": {"limits": [{"type": "Pod", "max": {"memory": "1Gi"}}]}}
    p = pod(c(limits={"memory": "600Mi"}), c("d", limits={"memory": "600Mi"}))
    with pytest.raises(AdmissionError, match=r"maximum memory usage per Pod is 1Gi, but limit is 1200Mi"):
        limitrange.admit_pod(p, [lr])


def test_missing_limit_under_a_max_is_reported() -> None:
    lr = {"spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}, "default": {}}]}}
    with pytest.raises(AdmissionError, match=r"maximum memory usage per Container is 1Gi\.  No limit is specified"):
        limitrange.admit_pod(pod(c()), [lr])


def test_priority_class_rules() -> None:
    assert priority.validate_class({"metadata": {"name": "system-mine"}, "value": 5,
                                    "preemptionPolicy": "Never"}, None) == [
        ("metadata.name", "Invalid value: \"system-mine\": priority class names with 'system-' prefix are reserved "
         "for system use only")]
    old = {"metadata": {"name": "x"}, "value": 5, "preemptionPolicy": "Never"}
    assert ("value", "Invalid value: 6: field is immutable") in priority.validate_class({**old, "value": 6}, old)
    p = pod(c(), priorityClassName="low", priority=7)
    with pytest.raises(AdmissionError, match=r"the integer value of priority \(7\) must not be provided"):
        priority.admit_pod(p, [{"metadata": {"name": "low"}, "value": 1}])
