"""Pod spec → CRI config builders, image manager, pod cgroups and the event recorder."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.cm.podcgroups import PodCgroupManager
from pykubelet.agent.events import EventRecorder
from pykubelet.agent.images.manager import (
    ImageManager,
    auths_from_secrets,
    default_pull_policy,
    registry_host,
)
from pykubelet.agent.kuberuntime import criconfig
from pykubelet.agent.container.runtime import hash_container
from pykubelet.cri import pb


def pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "ns1", "uid": "uid-1", "labels": {"app": "x"},
                         "annotations": {"a": "b"}},
            "spec": {"containers": containers, "nodeName": "node1", "serviceAccountName": "sa", **spec}}


MEM = 8 * 1024**3


async def build(p: dict[str, Any], c: dict[str, Any], lookup: Any = None, restart: int = 0) -> pb.ContainerConfig:
    return await criconfig.container_config(
        p, c, image_ref="sha256:img", restart_count=restart, pod_ips=["198.18.0.9"], host_ips=["10.0.0.1"],
        node_name="node1", memory_capacity=MEM, node_allocatable={"cpu": Decimal(2), "memory": Decimal(MEM)},
        lookup=lookup)


def test_sandbox_config_labels_logs_dns_ports(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 1.1.1.1\nsearch example.org\noptions ndots:2\n")
    p = pod([{"name": "a", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}]}])
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

    cfg = await build(pod([c]), c, lookup, restart=3)
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
    c = {"name": "a", "image": "i", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]}
    with pytest.raises(criconfig.ConfigError):
        await build(pod([c]), c, None)


def test_oom_score_adj_by_qos() -> None:
    res = {"cpu": "1", "memory": "1Gi"}
    g = {"name": "g", "image": "i", "resources": {"limits": res, "requests": res}}
    assert criconfig.oom_score_adj(pod([g]), g, MEM) == -997
    be = {"name": "b", "image": "i"}
    assert criconfig.oom_score_adj(pod([be]), be, MEM) == 1000
    bu = {"name": "b", "image": "i", "resources": {"requests": {"memory": "4Gi"}}}
    assert criconfig.oom_score_adj(pod([bu]), bu, MEM) == 500


def test_registry_and_pull_policy_helpers() -> None:
    assert registry_host("busybox") == "docker.io"
    assert registry_host("127.0.0.1:5000/x/y:1") == "127.0.0.1:5000"
    assert default_pull_policy("busybox") == "Always"
    assert default_pull_policy("busybox:latest") == "Always"
    assert default_pull_policy("busybox:1.36") == "IfNotPresent"
    cfgjson = {"auths": {"https://127.0.0.1:5000": {"auth": base64.b64encode(b"u:p").decode()},
                         "other.io": {"username": "x", "password": "y"}}}
    secret = {"type": "kubernetes.io/dockerconfigjson",
              "data": {".dockerconfigjson": base64.b64encode(json.dumps(cfgjson).encode()).decode()}}
    auths = auths_from_secrets([secret], "127.0.0.1:5000/app:1")
    assert [(a.username, a.password) for a in auths] == [("u", "p")]


class FakeImages:
    def __init__(self, present: set[str], fail: bool = False) -> None:
        self.present = present
        self.fail = fail
        self.pulls: list[tuple[str, Any]] = []

    async def image_status(self, image: str) -> pb.ImageStatusResponse:
        if image in self.present:
            return pb.ImageStatusResponse(image=pb.Image(id="sha256:" + image, size=10))
        return pb.ImageStatusResponse()

    async def pull_image(self, image: str, auth: Any = None, sandbox_config: Any = None) -> str:
        self.pulls.append((image, auth))
        if self.fail:
            raise RuntimeError("unreachable registry")
        self.present.add(image)
        return "sha256:" + image


async def test_image_manager_policies_and_backoff() -> None:
    rec = EventRecorder(None)
    p = pod([])
    rt = FakeImages({"busybox:1.36"})
    im = ImageManager(rt, rec)
    r = await im.ensure_image_exists(p, {"name": "a", "image": "busybox:1.36"})
    assert r.ok and not rt.pulls
    r = await im.ensure_image_exists(p, {"name": "a", "image": "busybox:1.36", "imagePullPolicy": "Always"})
    assert r.ok and rt.pulls == [("busybox:1.36", None)]
    r = await im.ensure_image_exists(p, {"name": "a", "image": "nothere:1", "imagePullPolicy": "Never"})
    assert r.error == "ErrImageNeverPull"
    r = await im.ensure_image_exists(p, {"name": "a", "image": "busybox"})  # :latest → Always
    assert r.ok and rt.pulls[-1][0] == "busybox:latest"
    failing = ImageManager(FakeImages(set(), fail=True), rec)
    r = await failing.ensure_image_exists(p, {"name": "a", "image": "x:1"})
    assert r.error == "ErrImagePull" and "unreachable registry" in r.message
    r = await failing.ensure_image_exists(p, {"name": "a", "image": "x:1"})
    assert r.error == "ImagePullBackOff"
    reasons = [reason for _ref, _t, reason, _m in rec.recorded]
    assert {"Pulled", "Pulling", "ErrImageNeverPull", "Failed", "BackOff"} <= set(reasons)


async def test_pod_cgroups_on_fake_cgroupfs(tmp_path: Path) -> None:
    for ctrl in ("cpu", "memory", "pids", "cpuset"):
        (tmp_path / ctrl).mkdir()
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0")
    cm = PodCgroupManager("", mount=str(tmp_path))
    assert cm.enabled
    c = {"name": "a", "image": "i", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "64Mi"}}}
    p = pod([c])
    assert cm.cgroup_parent(p) == "/pykubelet/kubepods/burstable/poduid-1"
    await cm.ensure(p)
    base = tmp_path / "memory" / "pykubelet/kubepods/burstable/poduid-1"
    assert base.is_dir()
    assert (base / "memory.limit_in_bytes").read_text() == str(64 * 1024**2)
    assert (tmp_path / "cpu/pykubelet/kubepods/burstable/poduid-1/cpu.shares").read_text() == "512"
    assert (tmp_path / "cpu/pykubelet/kubepods/burstable/poduid-1/cpu.cfs_quota_us").read_text() == "100000"
    assert (tmp_path / "cpuset/pykubelet/kubepods/burstable/poduid-1/cpuset.cpus").read_text() == "0-1"
    assert await cm.list_pod_uids() == {"uid-1"}
    await cm.destroy("uid-1")
    assert not base.exists() and await cm.list_pod_uids() == set()
    res = {"cpu": "1", "memory": "1Gi"}
    g = {"name": "g", "image": "i", "resources": {"limits": res, "requests": res}}
    assert PodCgroupManager("/custom", mount=str(tmp_path)).cgroup_parent(pod([g])) == "/custom/kubepods/poduid-1"
    assert PodCgroupManager("", mount=str(tmp_path / "nope")).cgroup_parent(p) == ""


class EventApi:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []

    async def create(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        self.created.append(body)
        return body

    async def patch(self, path: str, body: dict[str, Any], patch_type: str = "merge", params: Any = None) -> dict[str, Any]:
        self.patched.append((path, body))
        return body


async def test_event_recorder_aggregates() -> None:
    api = EventApi()
    rec = EventRecorder(api, host="node1")
    p = pod([])
    rec.event(p, "Warning", "BackOff", "Back-off restarting failed container a")
    rec.event(p, "Warning", "BackOff", "Back-off restarting failed container a")
    rec.event(p, "Normal", "Started", "Started container a")
    await rec.flush()
    await rec.close()
    assert len(api.created) == 2
    ev = api.created[0]
    assert ev["involvedObject"]["uid"] == "uid-1" and ev["source"] == {"component": "kubelet", "host": "node1"}
    assert ev["count"] == 1 and ev["reason"] == "BackOff"
    assert len(api.patched) == 1 and api.patched[0][1]["count"] == 2
    assert api.patched[0][0].startswith("/api/v1/namespaces/ns1/events/web.")
