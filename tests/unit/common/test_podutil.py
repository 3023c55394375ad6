from decimal import Decimal
from typing import Any

from pykubelet.common.podutil import (
    find_container,
    is_mirror_pod,
    is_static_pod,
    pod_full_name,
    pod_limits,
    pod_requests,
    qos_class,
    to_millis,
)


def ctr(name: str, req: dict[str, str] | None = None, lim: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if req:
        res["requests"] = req
    if lim:
        res["limits"] = lim
    return {"name": name, "image": "busybox", "resources": res, **kw}


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": containers, "initContainers": init or [], **spec},
    }


def test_qos_best_effort() -> None:
    assert qos_class(pod([ctr("a"), ctr("b")])) == "BestEffort"


def test_qos_guaranteed_requires_equal_cpu_and_memory_everywhere() -> None:
    full = {"cpu": "1", "memory": "1Gi"}
    assert qos_class(pod([ctr("a", full, full)])) == "Guaranteed"
    assert qos_class(pod([ctr("a", full, full), ctr("b")])) == "Burstable"
    assert qos_class(pod([ctr("a", {"cpu": "500m", "memory": "1Gi"}, full)])) == "Burstable"
    assert qos_class(pod([ctr("a", None, {"cpu": "1"})])) == "Burstable"


def test_qos_ignores_zero_and_other_resources() -> None:
    assert qos_class(pod([ctr("a", {"cpu": "0", "ephemeral-storage": "1Gi"})])) == "BestEffort"


def test_requests_sum_containers_and_max_init() -> None:
    p = pod(
        [ctr("a", {"cpu": "100m", "memory": "100Mi"}), ctr("b", {"cpu": "200m"})],
        init=[ctr("i", {"cpu": "1", "memory": "10Mi"})],
    )
    r = pod_requests(p)
    assert to_millis(r["cpu"]) == 1000
    assert r["memory"] == Decimal(100 << 20)


def test_requests_sidecars_add_and_overhead() -> None:
    p = pod(
        [ctr("a", {"cpu": "100m"})],
        init=[
            ctr("side", {"cpu": "200m"}, restartPolicy="Always"),
            ctr("i", {"cpu": "250m"}),
        ],
        overhead={"cpu": "50m"},
    )
    # app 100 + sidecar 200 = 300; init after sidecar = 250 + 200 = 450 -> max 450, + overhead 50
    assert to_millis(pod_requests(p)["cpu"]) == 500


def test_limits() -> None:
    p = pod([ctr("a", None, {"memory": "1Gi"}), ctr("b", None, {"memory": "1Gi"})])
    assert pod_limits(p)["memory"] == Decimal(2 << 30)


def test_static_and_mirror_and_names() -> None:
    p = pod([ctr("a")], init=[ctr("i")])
    assert pod_full_name(p) == "web_default"
    assert not is_static_pod(p) and not is_mirror_pod(p)
    p["metadata"]["annotations"] = {"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": "h"}
    assert is_static_pod(p) and is_mirror_pod(p)
    p["metadata"]["annotations"] = {"kubernetes.io/config.source": "api"}
    assert not is_static_pod(p)
    found = find_container(p, "i")
    assert found is not None and found["name"] == "i"
    assert find_container(p, "zz") is None
