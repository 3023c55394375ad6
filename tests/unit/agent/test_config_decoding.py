"""Reading a KubeletConfiguration: strict types, problems named by their JSON path, /configz round trip."""

from __future__ import annotations

import pytest

from pykubelet.agent.config import API_VERSION, KIND, ConfigError, KubeletConfiguration, parse_kubelet_config

HEADER = {"apiVersion": API_VERSION, "kind": KIND}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"maxPods": "20"}, "maxPods: expected `int`, got `str`"),
        ({"maxPods": True}, "maxPods: expected `int`, got `bool`"),
        ({"cgroupsPerQOS": "false"}, "cgroupsPerQOS: expected `bool`, got `str`"),
        ({"staticPodPath": None}, "staticPodPath: expected `str`, got `null`"),
        ({"syncFrequency": ["1m"]}, "syncFrequency: expected a duration such as '10s' or '1m30s', got list"),
        ({"syncFrequency": "soon"}, "syncFrequency: invalid duration 'soon'"),
        ({"authentication": 5}, "authentication: expected `object`, got `int`"),
        ({"authentication": {"x509": {"clientCAFile": 3}}},
         "authentication.x509.clientCAFile: expected `str`, got `int`"),
        ({"evictionHard": {"memory.available": 100}}, "evictionHard[...]: expected `str`, got `int`"),
        ({"registerWithTaints": ["k:NoSchedule"]}, "registerWithTaints[0]: expected `object`, got `str`"),
        ({"maxPodz": 1}, "maxPodz: unknown field"),
        ({"authentication": {"bogus": 1}}, "authentication.bogus: unknown field"),
        ({"authorization": {"mode": "RBAC"}}, "authorization.mode: must be AlwaysAllow or Webhook, got 'RBAC'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_path(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_kubelet_config({**HEADER, **doc}, source="kubelet.yaml")
    assert str(err.value).startswith(f"kubelet.yaml: {message}")


def test_every_setting_that_fails_validation_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        parse_kubelet_config({**HEADER, "port": 0, "maxPods": -1, "cgroupDriver": "x", "eventRecordQPS": -1})
    assert str(err.value) == ("config: port: must be between 1 and 65535, got 0; "
                              "cgroupDriver: must be cgroupfs or systemd, got 'x'; maxPods: must be >= 0, got -1; "
                              "eventRecordQPS: must be >= 0, got -1")


def test_numbers_are_accepted_for_floats_and_durations() -> None:
    c = KubeletConfiguration.from_dict({"memoryThrottlingFactor": 1, "syncFrequency": 90,
                                        "authentication": {"webhook": {"cacheTTL": "10s"}}})
    assert c.memory_throttling_factor == 1.0 and isinstance(c.memory_throttling_factor, float)
    assert c.sync_frequency == 90.0
    assert c.authentication.webhook.cache_ttl == 10.0
    assert c.file_check_frequency == 20.0  # not in the document: upstream's default


def test_the_configz_form_reads_back_to_the_same_configuration() -> None:
    c = parse_kubelet_config({**HEADER, "syncFrequency": "1m30s", "evictionHard": {"memory.available": "1Gi"},
                              "registerWithTaints": [{"key": "k", "effect": "NoSchedule"}], "tracing": {"a": 1}})
    out = c.to_dict()
    assert out["syncFrequency"] == "1m30s" and out["authorization"]["webhook"]["cacheAuthorizedTTL"] == "5m0s"
    assert KubeletConfiguration.from_dict(out) == c
    out["evictionHard"]["memory.available"] = "2Gi"  # a copy: changing it leaves the configuration alone
    assert c.eviction_hard["memory.available"] == "1Gi"


def test_a_report_period_shorter_than_the_update_period_is_raised_to_it() -> None:
    c = KubeletConfiguration.from_dict({"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "5s"})
    assert c.node_status_report_frequency == 20.0


def test_constructing_an_invalid_configuration_in_python_is_refused() -> None:
    with pytest.raises(ConfigError, match="port: must be between 1 and 65535, got 0"):
        KubeletConfiguration(port=0)
