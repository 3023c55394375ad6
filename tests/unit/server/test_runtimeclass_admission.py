"""RuntimeClass admission: unknown classes refused, overhead and scheduling copied onto the pod."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.server.admission import AdmissionError
from pykubelet.server.runtimeclass import admit_pod
from tests.builders import pod

GVISOR: dict[str, Any] = {
    "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc",
    "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
    "scheduling": {"nodeSelector": {"sandbox": "gvisor"},
                   "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]},
}


def test_unknown_runtime_class_is_refused() -> None:
    with pytest.raises(AdmissionError, match=r'^pod rejected: RuntimeClass "nope" not found$'):
        admit_pod(pod("p", runtimeClassName="nope"), [GVISOR])


def test_overhead_and_scheduling_come_from_the_class() -> None:
    p = pod("p", runtimeClassName="gvisor", nodeSelector={"zone": "a"})
    admit_pod(p, [GVISOR])
    assert p["spec"]["overhead"] == {"cpu": "250m", "memory": "120Mi"}
    assert p["spec"]["nodeSelector"] == {"zone": "a", "sandbox": "gvisor"}
    assert p["spec"]["tolerations"] == GVISOR["scheduling"]["tolerations"]


def test_conflicting_overhead_or_selector_is_refused() -> None:
    with pytest.raises(AdmissionError, match="Overhead doesn't match"):
        admit_pod(pod("p", runtimeClassName="gvisor", overhead={"cpu": "1"}), [GVISOR])
    with pytest.raises(AdmissionError, match=r"conflict: runtimeClass.scheduling.nodeSelector\[sandbox\]"):
        admit_pod(pod("p", runtimeClassName="gvisor", nodeSelector={"sandbox": "kata"}), [GVISOR])
    with pytest.raises(AdmissionError, match="Overhead set without corresponding RuntimeClass"):
        admit_pod(pod("p", overhead={"cpu": "1"}), [GVISOR])
