from decimal import Decimal

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
from tests.builders import container, pod


def test_qos_best_effort() -> None:
    assert qos_class(pod("web", containers=[container("a"), container("b")])) == "BestEffort"


def test_qos_guaranteed_requires_equal_cpu_and_memory_everywhere() -> None:
    full = {"cpu": "1", "memory": "1Gi"}
    assert qos_class(pod("web", containers=[container("a", requests=full, limits=full)])) == "Guaranteed"
    assert qos_class(pod("web", containers=[container("a", requests=full, limits=full), container("b")])) == "Burstable"
    assert qos_class(pod("web", containers=[container("a", requests={"cpu": "500m", "memory": "1Gi"}, limits=full)])) == "Burstable"
    assert qos_class(pod("web", containers=[container("a", limits={"cpu": "1"})])) == "Burstable"


def test_qos_ignores_zero_and_other_resources() -> None:
    assert qos_class(pod("web", containers=[container("a", requests={"cpu": "0", "ephemeral-storage": "1Gi"})])) == "BestEffort"


def test_requests_sum_containers_and_max_init() -> None:
    p = pod(
        "web",
        containers=[container("a", requests={"cpu": "100m", "memory": "100Mi"}), container("b", requests={"cpu": "200m"})],
        init_containers=[container("i", requests={"cpu": "1", "memory": "10Mi"})],
    )
    r = pod_requests(p)
    assert to_millis(r["cpu"]) == 1000
    assert r["memory"] == Decimal(100 << 20)


def test_requests_sidecars_add_and_overhead() -> None:
    p = pod(
        "web",
        containers=[container("a", requests={"cpu": "100m"})],
        init_containers=[
            container("side", requests={"cpu": "200m"}, restartPolicy="Always"),
            container("i", requests={"cpu": "250m"}),
        ],
        overhead={"cpu": "50m"},
    )
    # app 100 + sidecar 200 = 300; init after sidecar = 250 + 200 = 450 -> max 450, + overhead 50
    assert to_millis(pod_requests(p)["cpu"]) == 500


def test_limits() -> None:
    p = pod("web", containers=[container("a", limits={"memory": "1Gi"}), container("b", limits={"memory": "1Gi"})])
    assert pod_limits(p)["memory"] == Decimal(2 << 30)


def test_static_and_mirror_and_names() -> None:
    p = pod("web", containers=[container("a")], init_containers=[container("i")])
    assert pod_full_name(p) == "web_default"
    assert not is_static_pod(p) and not is_mirror_pod(p)
    p["metadata"]["annotations"] = {"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": "h"}
    assert is_static_pod(p) and is_mirror_pod(p)
    p["metadata"]["annotations"] = {"kubernetes.io/config.source": "api"}
    assert not is_static_pod(p)
    found = find_container(p, "i")
    assert found is not None and found["name"] == "i"
    assert find_container(p, "zz") is None
