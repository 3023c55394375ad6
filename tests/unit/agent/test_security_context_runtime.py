"""The kubelet with the fake CRI runtime: RuntimeClass handlers, refused sandboxes, sysctl admission,
the /etc/hosts mount and the privileged sandbox, as the runtime and the pod status see them."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient
from pykubelet.fakecri.server import serve
from tests import builders
from tests.builders import container, pod_path
from tests.fakes import FakeApi, FakeEventRecorder, eventually

JSON = dict[str, Any]


def node_pod(name: str, *containers: JSON, **spec: Any) -> JSON:
    return builders.pod(name, containers=list(containers) or [sleeper("c")], node_name="node1",
                        annotations={"kubernetes.io/config.source": "api"}, status={"phase": "Pending"},
                        terminationGracePeriodSeconds=1, **spec)


def sleeper(name: str, **fields: Any) -> JSON:
    return container(name, "busybox:latest", imagePullPolicy="IfNotPresent", command=["sleep", "infinity"], **fields)


class Node:
    def __init__(self, tmp: Path, runtime: CRIClient) -> None:
        self.api = FakeApi()
        self.recorder = FakeEventRecorder()
        self.runtime = runtime
        cfg = KubeletConfiguration()
        cfg.cgroups_per_qos = False
        cfg.pod_logs_dir = str(tmp / "logs")
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self.kubelet = Kubelet(options=AgentOptions(config=cfg, node_name="node1", node_ip="127.0.0.1",
                                                    root_dir=tmp / "root"),
                               api=self.api, runtime=runtime,  # type: ignore[arg-type]
                               recorder=self.recorder, updates=self.updates, mirror=None, pleg_period=0.2,
                               housekeeping_period=0.3, status_reconcile_period=1.0)

    async def add(self, *pods: JSON) -> None:
        for p in pods:
            self.api.put(pod_path(p), p)
        await self.updates.put(PodUpdate(PodOp.ADD, "api", [copy.deepcopy(p) for p in pods]))
        self.kubelet.mark_source_ready("api")

    def status(self, p: JSON) -> JSON:
        return (self.api.objects.get(pod_path(p)) or {}).get("status") or {}

    def messages(self, reason: str) -> list[str]:
        return [m for _t, r, m in self.recorder.events if r == reason]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    sock = str(tmp_path / "cri.sock")
    server, _rt = await serve(sock)
    client = CRIClient(f"unix://{sock}", timeout=10)
    await client.connect(wait=5)
    n = Node(tmp_path, client)
    await n.kubelet.start()
    try:
        yield n
    finally:
        await n.kubelet.stop()
        await client.close()
        await server.stop(0)


async def test_runtime_class_selects_the_handler_and_unknown_is_an_error(node: Node) -> None:
    node.api.put("/apis/node.k8s.io/v1/runtimeclasses/gvisor",
                 {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"},
                  "handler": "runsc"})
    good = node_pod("good", runtimeClassName="gvisor")
    bad = node_pod("bad", runtimeClassName="nope")
    await node.add(good, bad)
    await eventually(lambda: node.status(good).get("phase") == "Running")
    (sb,) = await node.runtime.list_pod_sandbox()
    assert sb.runtime_handler == "runsc"
    msgs = await eventually(lambda: node.messages("FailedCreatePodSandBox"))
    assert msgs[0] == 'Failed to create pod sandbox: runtimeclass.node.k8s.io "nope" not found'


async def test_host_users_false_is_refused_by_a_runtime_without_user_namespaces(node: Node) -> None:
    p = node_pod("userns", hostUsers=False)
    await node.add(p)
    msgs = await eventually(lambda: node.messages("FailedCreatePodSandBox"))
    assert 'RuntimeClass handler "" does not support user namespaces' in msgs[0]
    assert not await node.runtime.list_pod_sandbox()


async def test_unsafe_sysctl_fails_the_pod_at_admission(node: Node) -> None:
    p = node_pod("sysctl", securityContext={"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]})
    await node.add(p)
    st = await eventually(lambda: node.status(p).get("phase") == "Failed" and node.status(p))
    assert st["reason"] == "SysctlForbidden"
    assert st["message"] == 'forbidden sysctl: "net.core.somaxconn" not allowlisted'


async def test_containers_get_the_managed_hosts_file_and_privileged_sandbox(node: Node, tmp_path: Path) -> None:
    p = node_pod("hosts", sleeper("app"), sleeper("priv", securityContext={"privileged": True}),
                 hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo.remote"]}])
    await node.add(p)
    st = await eventually(lambda: node.status(p).get("phase") == "Running" and node.status(p))
    hosts = tmp_path / "root" / "pods" / p["metadata"]["uid"] / "etc-hosts"
    text = hosts.read_text()
    assert text.startswith("# Kubernetes-managed hosts file.")
    assert f"{st['podIP']}\thosts\n" in text and "10.1.2.3\tfoo.remote" in text
    for c in await node.runtime.list_containers():
        mounts = {m.container_path: m.host_path for m in (await node.runtime.container_status(c.id)).status.mounts}
        assert mounts["/etc/hosts"] == str(hosts)
    # a privileged container makes the sandbox privileged (containerd refuses it otherwise)
    assert node.kubelet.runtime_manager.sandbox_config(p, 0).linux.security_context.privileged
