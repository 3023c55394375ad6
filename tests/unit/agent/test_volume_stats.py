"""Volume usage reported per pod in /stats/summary (upstream VolumeStats)."""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.volumemanager.stats import pod_volume_stats


def test_each_materialized_volume_reports_usage_and_capacity(tmp_path: Path) -> None:
    vols = tmp_path / "u1" / "volumes"
    (vols / "kubernetes.io~empty-dir" / "scratch").mkdir(parents=True)
    (vols / "kubernetes.io~empty-dir" / "scratch" / "blob").write_bytes(b"x" * 100_000)
    (vols / "kubernetes.io~configmap" / "cfg").mkdir(parents=True)
    stats = pod_volume_stats(tmp_path, "u1")
    assert [s["name"] for s in stats] == ["cfg", "scratch"]
    scratch = stats[1]
    assert scratch["usedBytes"] >= 100_000 and scratch["inodesUsed"] == 2
    assert scratch["capacityBytes"] > 0 and scratch["availableBytes"] >= 0 and scratch["inodes"] > 0
    assert {"time", "inodesFree"} <= set(scratch)


def test_a_pod_without_volumes_reports_none(tmp_path: Path) -> None:
    assert pod_volume_stats(tmp_path, "nobody") == []
