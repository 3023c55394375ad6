"""Pure prober logic: result hysteresis, first-run jitter, named ports, env expansion, gRPC status names."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.agent.prober import ProbeError, ProbeState, ProbeType, Result, first_delay, resolve_port
from pykubelet.agent.prober.probes import _serving_status_name, build_url, expand_static

S, F, U = Result.SUCCESS, Result.FAILURE, Result.UNKNOWN


def test_initial_values_per_probe_type() -> None:
    assert ProbeState(ProbeType.LIVENESS).result is S
    assert ProbeState(ProbeType.READINESS).result is F
    assert ProbeState(ProbeType.STARTUP).result is U


def test_readiness_thresholds() -> None:
    st = ProbeState(ProbeType.READINESS, success_threshold=2, failure_threshold=3)
    assert st.observe(S) is F  # one success is below successThreshold
    assert st.observe(S) is S
    assert st.observe(F) is S
    assert st.observe(F) is S
    assert st.observe(S) is S  # streak broken
    assert [st.observe(F) for _ in range(3)] == [S, S, F]
    assert not st.on_hold  # readiness is never put on hold
    assert st.observe(S) is F and st.observe(S) is S


def test_probe_errors_leave_state_untouched() -> None:
    st = ProbeState(ProbeType.READINESS, failure_threshold=2)
    st.observe(S)
    st.observe(F)
    assert st.observe(U) is S
    assert st.observe(F) is F  # U did not break the failure streak


def test_liveness_failure_holds_until_reset() -> None:
    st = ProbeState(ProbeType.LIVENESS, failure_threshold=2)
    st.reset("c1")
    assert st.observe(F) is S
    assert st.observe(F) is F
    assert st.on_hold
    assert st.observe(S) is F  # on hold: ignored until the container is replaced
    st.reset("c2")
    assert st.container_id == "c2" and st.result is S and not st.on_hold
    assert st.observe(F) is S  # fresh streak after restart


def test_startup_failure_holds_and_success_sticks() -> None:
    st = ProbeState(ProbeType.STARTUP, failure_threshold=1)
    assert st.observe(S) is S
    st2 = ProbeState(ProbeType.STARTUP, failure_threshold=1)
    assert st2.observe(F) is F and st2.on_hold


def test_thresholds_clamped_to_one() -> None:
    st = ProbeState(ProbeType.READINESS, success_threshold=0, failure_threshold=0)
    assert st.observe(S) is S and st.observe(F) is F


def test_first_delay_only_when_manager_young() -> None:
    assert first_delay(10, 0.5, 0.3) == pytest.approx(3.0)
    assert first_delay(10, 11, 0.3) == 0.0


def test_resolve_port() -> None:
    c = {"name": "app", "ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 9090}]}
    assert resolve_port(80, c) == 80
    assert resolve_port("http", c) == 8080
    assert resolve_port("9999", c) == 9999  # upstream's last-ditch int parse of a string port
    with pytest.raises(ProbeError, match="couldn't find port"):
        resolve_port("grpc", c)
    with pytest.raises(ProbeError, match="invalid port number"):
        resolve_port(0, c)
    with pytest.raises(ProbeError, match="invalid port number"):
        resolve_port(70000, c)


def test_build_url_defaults_and_ipv6() -> None:
    c = {"name": "app", "ports": [{"name": "web", "containerPort": 81}]}
    assert str(build_url({"port": "web"}, c, "198.18.0.5")) == "http://198.18.0.5:81/"
    u = build_url({"port": 8443, "scheme": "HTTPS", "path": "healthz?x=1", "host": "127.0.0.1"}, c, "x")
    assert str(u) == "https://127.0.0.1:8443/healthz?x=1"
    assert str(build_url({"port": 8080}, c, "fd00::1")) == "http://[fd00::1]:8080/"


def test_expand_static_env() -> None:
    env: list[dict[str, Any]] = [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {}}}]
    assert expand_static(["echo", "$(A)", "$(B)", "$$(A)", "$(C)"], env) == ["echo", "1", "$(B)", "$(A)", "$(C)"]


def test_serving_status_names() -> None:
    # Go's ServingStatus.String(): the enum name, the number for a value the proto does not define
    names = [_serving_status_name(status) for status in (0, 1, 2, 3, 7)]
    assert names == ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", "7"]
