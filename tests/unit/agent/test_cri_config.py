"""Pod spec -> CRI configs (upstream kuberuntime's generatePodSandboxConfig / generateContainerConfig):
labels, annotations, logs, DNS, ports, cgroup parent, environment and $(VAR) expansion, resources, OOM
score by QoS class, and a clear error for a missing ConfigMap."""

from __future__ import annotations

import base64
import functools
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.container.runtime import hash_container
from pykubelet.agent.kuberuntime import criconfig
from pykubelet.cri import pb
from tests.builders import container, pod

# The pod every test here configures; the tests pass its containers.
web_pod = functools.partial(pod, "web", namespace="ns1", uid="uid-1", labels={"app": "x"}, annotations={"a": "b"},
                            node_name="node1", serviceAccountName="sa")

MEM = 8 * 1024**3


async def build(p: dict[str, Any], c: dict[str, Any], lookup: Any = None, restart: int = 0) -> pb.ContainerConfig:
    return await criconfig.container_config(
        p, c, image_ref="sha256:img", restart_count=restart, pod_ips=["198.18.0.9"], host_ips=["10.0.0.1"],
        node_name="node1", memory_capacity=MEM, node_allocatable={"cpu": Decimal(2), "memory": Decimal(MEM)},
        lookup=lookup)


def test_sandbox_config_labels_logs_dns_ports(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 1.1.1.1\nsearch example.org\noptions ndots:2\n")
    p = web_pod(containers=[container("a", "i", ports=[{"containerPort": 80, "hostPort": 8080}])])
    cfg = criconfig.sandbox_config(p, 2, pod_logs_dir="/var/log/pods", cgroup_parent="/pk/kubepods/besteffort/poduid-1",
                                   resolv_conf=str(resolv))
    assert cfg.metadata.name == "web" and cfg.metadata.attempt == 2 and cfg.metadata.uid == "uid-1"
    assert cfg.log_directory == "/var/log/pods/ns1_web_uid-1"
    assert cfg.labels["io.kubernetes.pod.uid"] == "uid-1" and cfg.labels["app"] == "x"
    assert cfg.annotations["a"] == "b"
    assert cfg.hostname == "web"
    assert list(cfg.dns_config.servers) == ["1.1.1.1"]  # no cluster DNS → host resolv.conf
    assert cfg.port_mappings[0].host_port == 8080 and cfg.port_mappings[0].container_port == 80
    assert cfg.linux.cgroup_parent == "/pk/kubepods/besteffort/poduid-1"
    assert cfg.linux.security_context.namespace_options.network == pb.POD
    cfg = criconfig.sandbox_config(p, 0, pod_logs_dir="/l", cluster_dns=["10.96.0.10"], resolv_conf=str(resolv))
    assert list(cfg.dns_config.servers) == ["10.96.0.10"]
    assert list(cfg.dns_config.searches)[:1] == ["ns1.svc.cluster.local"]


async def test_container_config_env_and_expansion() -> None:
    c = {"name": "a", "image": "busybox", "command": ["echo", "$(GREETING)", "$$(GREETING)", "$(NOPE)"],
         "args": ["$(POD_NAME)"], "workingDir": "/w",
         "env": [
             {"name": "GREETING", "value": "hi"},
             {"name": "COMBO", "value": "$(GREETING)-there"},
             {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
             {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
             {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
             {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
             {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
             {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
             {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
             {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
             {"name": "MEMLIM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
             {"name": "CPUREQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
             {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
             {"name": "SEC", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
             {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k", "optional": True}}},
         ],
         "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}}

    async def lookup(kind: str, ns: str, name: str) -> dict[str, Any] | None:
        assert ns == "ns1"
        if kind == "ConfigMap" and name == "cm":
            return {"data": {"k": "v"}}
        if kind == "Secret" and name == "s":
            return {"data": {"pw": base64.b64encode(b"secret").decode()}}
        return None

    cfg = await build(web_pod(containers=[c]), c, lookup, restart=3)
    env = {kv.key: kv.value for kv in cfg.envs}
    assert env["COMBO"] == "hi-there"
    assert env["POD_NAME"] == "web" and env["NS"] == "ns1" and env["UID"] == "uid-1"
    assert env["NODE"] == "node1" and env["SA"] == "sa" and env["IP"] == "198.18.0.9" and env["HOST"] == "10.0.0.1"
    assert env["LBL"] == "x" and env["MEMLIM"] == "128" and env["CPUREQ"] == "250"
    assert env["CM"] == "v" and env["SEC"] == "secret" and "OPT" not in env
    assert list(cfg.command) == ["echo", "hi", "$(GREETING)", "$(NOPE)"]
    assert list(cfg.args) == ["web"]
    assert cfg.working_dir == "/w" and cfg.log_path == "a/3.log" and cfg.metadata.attempt == 3
    assert cfg.image.image == "sha256:img"
    assert cfg.labels["io.kubernetes.container.name"] == "a"
    assert cfg.annotations["io.kubernetes.container.hash"] == hash_container(c)
    assert cfg.annotations["io.kubernetes.container.restartCount"] == "3"
    assert cfg.annotations["io.kubernetes.pod.terminationGracePeriod"] == "30"
    r = cfg.linux.resources
    assert r.cpu_shares == 256 and r.cpu_quota == 50000 and r.cpu_period == 100000
    assert r.memory_limit_in_bytes == 128 * 1024**2
    assert 2 <= r.oom_score_adj <= 999  # Burstable


async def test_missing_configmap_is_config_error() -> None:
    c = container("a", "i", env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}])
    with pytest.raises(criconfig.ConfigError):
        await build(web_pod(containers=[c]), c, None)


def test_oom_score_adj_by_qos() -> None:
    res = {"cpu": "1", "memory": "1Gi"}
    g = container("g", "i", resources={"limits": res, "requests": res})
    assert criconfig.oom_score_adj(web_pod(containers=[g]), g, MEM) == -997
    be = container("b", "i")
    assert criconfig.oom_score_adj(web_pod(containers=[be]), be, MEM) == 1000
    bu = container("b", "i", resources={"requests": {"memory": "4Gi"}})
    assert criconfig.oom_score_adj(web_pod(containers=[bu]), bu, MEM) == 500


async def test_a_bare_pods_configs_still_carry_every_message_the_runtime_reads(tmp_path: Path) -> None:
    # the configs are filled in place: a sub-message whose fields are all defaults is still sent
    # (containerd reads metadata, DNS and the Linux sections of every config, empty or not)
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("")
    p = {"metadata": {}, "spec": {"dnsPolicy": "None"}}
    sb = criconfig.sandbox_config(p, 0, pod_logs_dir="/l", resolv_conf=str(resolv))
    assert all(sb.HasField(f) for f in ("metadata", "dns_config", "linux"))
    assert sb.linux.HasField("security_context") and not sb.linux.HasField("overhead")
    assert b'"\x00' in sb.SerializeToString()  # dns_config (field 4), sent empty
    c = await build(p, {"name": "", "image": "i"})
    assert all(c.HasField(f) for f in ("metadata", "image", "linux"))
    assert c.linux.HasField("resources") and c.linux.HasField("security_context")
    assert c.metadata.name == "" and c.metadata.attempt == 0
