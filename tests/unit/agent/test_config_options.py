"""KubeletConfiguration parsing, upstream defaults, flag overrides and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubelet.agent.config import (
    API_VERSION,
    KIND,
    ConfigError,
    KubeletConfiguration,
    format_duration,
    load_options,
    parse_duration,
    parse_kubelet_config,
    parse_node_labels,
    parse_taints,
)


def test_upstream_defaults() -> None:
    c = KubeletConfiguration()
    assert c.sync_frequency == 60.0
    assert c.file_check_frequency == 20.0
    assert c.node_status_update_frequency == 10.0
    assert c.node_status_report_frequency == 300.0
    assert c.node_lease_duration_seconds == 40
    assert c.max_pods == 110
    assert c.port == 10250 and c.healthz_port == 10248 and c.healthz_bind_address == "127.0.0.1"
    assert c.eviction_hard["memory.available"] == "100Mi"
    assert c.eviction_hard["nodefs.available"] == "10%"
    assert c.cgroup_driver == "cgroupfs" and c.cgroups_per_qos is True
    assert c.pod_logs_dir == "/var/log/pods"
    assert c.container_log_max_size == "10Mi" and c.container_log_max_files == 5
    assert c.serialize_image_pulls is True and c.max_parallel_image_pulls is None
    assert c.runtime_request_timeout == 120.0
    assert c.authentication.webhook.enabled and not c.authentication.anonymous.enabled
    assert c.authorization.mode == "Webhook"
    assert c.node_status_max_images == 50
    assert c.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("0", 0.0), ("1.5s", 1.5), ("2h3m4s", 7384.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "10", "abc", "1x", "s"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_format_duration_roundtrip() -> None:
    for s in (0.5, 10.0, 90.0, 3600.0, 7384.0):
        assert parse_duration(format_duration(s)) == pytest.approx(s)


def test_config_file_camel_case_and_durations() -> None:
    c = parse_kubelet_config(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "cgroupsPerQOS": False,
            "syncFrequency": "2m",
            "maxPods": 20,
            "staticPodPath": "/etc/kubernetes/manifests",
            "authentication": {"x509": {"clientCAFile": "/ca.crt"}},
            "kubeAPIQPS": 10,
        }
    )
    assert c.cgroups_per_qos is False
    assert c.sync_frequency == 120.0
    assert c.max_pods == 20
    assert c.static_pod_path == "/etc/kubernetes/manifests"
    assert c.authentication.x509.client_ca_file == "/ca.crt"
    out = c.to_dict()
    assert out["syncFrequency"] == "2m0s" and out["cgroupsPerQOS"] is False


def test_unknown_field_is_named() -> None:
    with pytest.raises(ConfigError, match="maxPodz: unknown field"):
        parse_kubelet_config({"apiVersion": API_VERSION, "kind": KIND, "maxPodz": 3})
    with pytest.raises(ConfigError, match=r"authentication\.bogus: unknown field"):
        parse_kubelet_config({"apiVersion": API_VERSION, "kind": KIND, "authentication": {"bogus": 1}})


def test_wrong_kind_and_version() -> None:
    with pytest.raises(ConfigError, match="kind"):
        parse_kubelet_config({"apiVersion": API_VERSION, "kind": "Pod"})
    with pytest.raises(ConfigError, match="apiVersion"):
        parse_kubelet_config({"apiVersion": "v1", "kind": KIND})
    with pytest.raises(ConfigError, match="apiVersion"):
        parse_kubelet_config({"kind": KIND})


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"port": 0}, "port"),
        ({"syncFrequency": "soon"}, "syncFrequency"),
        ({"evictionHard": {"memory.available": "lots"}}, "evictionHard"),
        ({"evictionHard": {"bogus.signal": "1Mi"}}, "bogus.signal"),
        ({"cgroupDriver": "weird"}, "cgroupDriver"),
        ({"imageGCLowThresholdPercent": 90, "imageGCHighThresholdPercent": 80}, "imageGCLowThresholdPercent"),
        ({"systemReserved": {"memory": "x"}}, "systemReserved"),
    ],
)
def test_invalid_values_name_the_setting(doc: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_kubelet_config({"apiVersion": API_VERSION, "kind": KIND, **doc})


def test_flags_override_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text(
        f"apiVersion: {API_VERSION}\nkind: {KIND}\nmaxPods: 50\nport: 11250\nstaticPodPath: /from/file\n"
    )
    o = load_options(["--config", str(cfg), "--max-pods=7", "--pod-manifest-path", "/from/flag",
                      "--event-qps", "5", "--event-burst=10"])
    assert o.config.max_pods == 7  # flag wins
    assert (o.config.event_record_qps, o.config.event_burst) == (5, 10)
    assert o.config.port == 11250  # file value kept
    assert o.pod_manifest_path == "/from/flag"
    assert o.config_path == cfg


def test_all_flags(tmp_path: Path) -> None:
    o = load_options(
        [
            "--kubeconfig", str(tmp_path / "kc"),
            "--hostname-override", "My-Node",
            "--node-ip", "198.18.0.5",
            "--container-runtime-endpoint", "unix:///tmp/x.sock",
            "--root-dir", str(tmp_path),
            "--node-labels", "a=b,example.com/role=edge",
            "--register-with-taints", "dedicated=gpu:NoSchedule,spot:PreferNoSchedule",
            "--v=4",
            "--port", "12250",
            "--address", "127.0.0.1",
            "--healthz-port", "0",
            "--client-ca-file", "/ca.crt",
            "--tls-cert-file", "/t.crt",
            "--tls-private-key-file", "/t.key",
            "--cgroup-root", "/pykubelet",
            "--pod-logs-dir", str(tmp_path / "logs"),
            "--register-node=false",
        ]
    )
    assert o.node_name == "my-node"
    assert o.node_ip == "198.18.0.5"
    assert o.container_runtime_endpoint == "unix:///tmp/x.sock"
    assert o.root_dir == tmp_path
    assert o.node_labels == {"a": "b", "example.com/role": "edge"}
    assert o.register_with_taints == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
    ]
    assert o.verbosity == 4
    assert o.config.port == 12250 and o.config.address == "127.0.0.1" and o.config.healthz_port == 0
    assert o.config.authentication.x509.client_ca_file == "/ca.crt"
    assert o.config.tls_cert_file == "/t.crt" and o.config.tls_private_key_file == "/t.key"
    assert o.config.cgroup_root == "/pykubelet"
    assert o.pod_logs_dir == tmp_path / "logs"
    assert o.register_node is False
    assert o.kubeconfig == tmp_path / "kc"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--no-such-flag"], "unknown flag: --no-such-flag"),
        (["--max-pods", "many"], "--max-pods"),
        (["--port", "70000"], "--port"),
        (["--node-labels", "novalue"], "--node-labels"),
        (["--register-with-taints", "k=v:Sometimes"], "--register-with-taints"),
        (["--node-ip", "not-an-ip"], "--node-ip"),
        (["--v", "-1"], "--v"),
        (["--hostname-override", "bad_name!"], "--hostname-override"),
        (["--config", "/nonexistent/kubelet.yaml"], "--config"),
    ],
)
def test_flag_errors_name_the_flag(argv: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_options(argv)


def test_label_and_taint_parsers() -> None:
    assert parse_node_labels("") == {}
    assert parse_node_labels("x=") == {"x": ""}
    assert parse_taints("k:NoExecute") == [{"key": "k", "effect": "NoExecute"}]
    with pytest.raises(ValueError):
        parse_taints("k=v")


def test_main_exits_1_on_bad_config(capsys: pytest.CaptureFixture[str]) -> None:
    from pykubelet.agent.main import main

    assert main(["--bogus-flag"]) == 1
    assert "--bogus-flag" in capsys.readouterr().err
