"""Every CRI call shows on /metrics under upstream's runtime-operation names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from pykubelet.agent.metrics import RuntimeOperations


def _scrape(ops: RuntimeOperations) -> str:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ops)
    return generate_latest(registry).decode()


def test_calls_errors_and_durations_are_exported_per_operation() -> None:
    ops = RuntimeOperations()
    ops.observe("exec_sync", 0.004, None)
    ops.observe("exec_sync", 0.02, None)
    ops.observe("exec_sync", 2.0, TimeoutError("deadline exceeded"))
    ops.observe("list_containers", 0.001, None)
    text = _scrape(ops)
    assert 'kubelet_runtime_operations_total{operation_type="exec_sync"} 3.0' in text
    assert 'kubelet_runtime_operations_total{operation_type="list_containers"} 1.0' in text
    assert 'kubelet_runtime_operations_errors_total{operation_type="exec_sync"} 1.0' in text
    assert 'operation_type="list_containers"} 1.0' in text
    assert 'kubelet_runtime_operations_errors_total{operation_type="list_containers"}' not in text
    # buckets are cumulative with upstream's bounds; +Inf holds every call; the sum adds up
    assert 'kubelet_runtime_operations_duration_seconds_bucket{le="0.005",operation_type="exec_sync"} 1.0' in text
    assert 'kubelet_runtime_operations_duration_seconds_bucket{le="0.03125",operation_type="exec_sync"} 2.0' in text
    assert 'kubelet_runtime_operations_duration_seconds_bucket{le="+Inf",operation_type="exec_sync"} 3.0' in text
    assert 'kubelet_runtime_operations_duration_seconds_count{operation_type="exec_sync"} 3.0' in text
    assert 'kubelet_runtime_operations_duration_seconds_sum{operation_type="exec_sync"} 2.024' in text


def test_a_scrape_before_any_call_shows_the_families_without_series() -> None:
    text = _scrape(RuntimeOperations())
    assert "# TYPE kubelet_runtime_operations_total counter" in text
    assert "# TYPE kubelet_runtime_operations_duration_seconds histogram" in text
    assert "operation_type=" not in text
