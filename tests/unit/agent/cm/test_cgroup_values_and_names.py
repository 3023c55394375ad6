"""cgroup values and names as upstream's container manager computes them, for cgroup v1 and v2 and
both drivers (pure functions; no cgroup filesystem)."""

from __future__ import annotations

from pykubelet.agent.cm import cgroups as cg
from pykubelet.agent.cm.cgroups import CgroupDriver, CgroupVersion
from tests.builders import container, pod

GUARANTEED = {"cpu": "1", "memory": "256Mi"}


def test_cpu_shares_convert_to_cgroup_v2_weight_like_runc() -> None:
    assert cg.cpu_shares_to_weight(2) == 1
    assert cg.cpu_shares_to_weight(1024) == 39
    assert cg.cpu_shares_to_weight(262144) == 10000


def test_millicpu_to_shares_and_quota() -> None:
    assert cg.milli_cpu_to_shares(0) == 2
    assert cg.milli_cpu_to_shares(500) == 512
    assert cg.milli_cpu_to_quota(500, 100000) == 50000
    assert cg.milli_cpu_to_quota(1, 100000) == 1000  # upstream minimum


def test_systemd_driver_names_nested_slices() -> None:
    parts = ["kubepods", "burstable", "pod1234-abcd"]
    assert cg.cgroup_path(CgroupDriver.SYSTEMD, "", parts) == \
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice"
    assert cg.cgroup_path(CgroupDriver.CGROUPFS, "/pk", parts) == "/pk/kubepods/burstable/pod1234-abcd"


def test_guaranteed_pod_gets_weight_quota_memory_and_pids_on_v2() -> None:
    p = pod("g", containers=[container("c", requests=GUARANTEED, limits=GUARANTEED)])
    conf = cg.resource_config_for_pod(p, period_us=50000, pids_limit=100)
    assert cg.files_for(conf, CgroupVersion.V2) == {
        "cpu.weight": "39", "cpu.max": "50000 50000", "memory.max": str(256 * 1024**2), "pids.max": "100"}


def test_cfs_quota_off_leaves_cpu_unlimited() -> None:
    p = pod("g", containers=[container("c", requests=GUARANTEED, limits=GUARANTEED)])
    conf = cg.resource_config_for_pod(p, cfs_quota=False)
    assert cg.files_for(conf, CgroupVersion.V2)["cpu.max"] == "max 100000"
    assert cg.files_for(conf, CgroupVersion.V1)["cpu/cpu.cfs_quota_us"] == "-1"


def test_best_effort_pod_gets_the_minimum_weight_and_no_limits() -> None:
    conf = cg.resource_config_for_pod(pod("be"))
    files = cg.files_for(conf, CgroupVersion.V1)
    assert files == {"cpu/cpu.shares": "2", "pids/pids.max": "max"}


def test_hugepage_limits_become_hugetlb_files() -> None:
    lim = {**GUARANTEED, "hugepages-2Mi": "4Mi"}
    p = pod("h", containers=[container("c", requests=lim, limits=lim)])
    conf = cg.resource_config_for_pod(p)
    assert cg.files_for(conf, CgroupVersion.V1)["hugetlb/hugetlb.2MB.limit_in_bytes"] == str(4 * 1024**2)
    assert cg.files_for(conf, CgroupVersion.V2)["hugetlb.2MB.max"] == str(4 * 1024**2)


def test_burstable_tier_weight_is_the_sum_of_requests_and_qos_reserved_limits_memory() -> None:
    b1 = pod("b1", containers=[container("c", requests={"cpu": "500m", "memory": "100Mi"})])
    b2 = pod("b2", containers=[container("c", requests={"cpu": "500m"})])
    g = pod("g", containers=[container("c", requests=GUARANTEED, limits=GUARANTEED)])
    tiers = cg.qos_configs([b1, b2, g, pod("be")], allocatable_memory=1024 * 1024**2,
                           qos_reserved={"memory": "50%"})
    assert tiers["Burstable"].cpu_shares == 1024
    assert tiers["BestEffort"].cpu_shares == 2
    assert tiers["Burstable"].memory == (1024 - 128) * 1024**2
    assert tiers["BestEffort"].memory == (1024 - 128 - 50) * 1024**2


def test_swap_behavior_on_v2() -> None:
    b = pod("b", containers=[container("c", requests={"memory": "1Gi"})])
    assert cg.swap_limit(b, "NoSwap", node_memory=4 * 1024**3, node_swap=1024**3) == 0
    assert cg.swap_limit(b, "LimitedSwap", node_memory=4 * 1024**3, node_swap=1024**3) == 256 * 1024**2
