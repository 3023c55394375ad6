"""An invalid agent config file stops `pykubelet agent` at once with a message naming the setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("maxPods: lots\n", "maxPods"),
        ("syncFrequency: soon\n", "syncFrequency"),
        ("maxPods: [1\n", "not valid YAML"),
    ],
)
def test_invalid_config_file_exits_1_naming_the_setting(tmp_path: Path, body: str, expected: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(HEADER + body)
    root = tmp_path / "root"
    res = subprocess.run(
        [sys.executable, "-m", "pykubelet", "agent", "--config", str(cfg), "--root-dir", str(root),
         "--hostname-override", "cfg-test", "--pod-manifest-path", str(tmp_path / "manifests")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert res.returncode == 1, res.stderr
    assert "invalid configuration" in res.stderr
    assert expected in res.stderr
    assert "bad.yaml" in res.stderr
    assert "Traceback" not in res.stderr
    assert not root.exists()  # refused before doing anything
