"""Scheduler and node lifecycle controller on a real server (HTTP + the real kubectl).

The server is started from ``pykubelet server`` flags (parsed by its own parser) with short
periods, so the upstream-named flags are what these tests exercise.  A "fake kubelet" here is
just API calls: register the Node, keep its Lease renewed, post Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.main import ServerHandle, build_parser, run_server, server_options
from tests.builders import container, pod

from .conftest import Http, Kubectl, eventually

DEADLINE = 30.0
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
async def csrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args([
        "--secure-port", "0", "--node-monitor-grace-period", "2s", "--node-monitor-period", "200ms",
        "--scheduler-retry-interval", "1s",
    ])
    async with run_server(tmp_path / "data", **server_options(args)) as srv:
        yield srv


@pytest.fixture
async def chttp(csrv: ServerHandle) -> AsyncIterator[Http]:
    h = Http(csrv)
    yield h
    await h.close()


@pytest.fixture
def ckubectl(csrv: ServerHandle, tmp_path: Path) -> Kubectl:
    d = tmp_path / "kcache"
    d.mkdir()
    return Kubectl(csrv, d)


def ready_condition(status: str = "True") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": "KubeletReady", "message": "kubelet is posting ready status",
            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}


class FakeKubelet:
    """Registers a node and renews its Lease while ``renewing`` is set, as the node agent does."""

    def __init__(self, http: Http, name: str, labels: dict[str, str] | None = None) -> None:
        self.http = http
        self.name = name
        self.labels = labels or {}
        self.renewing = True
        self.task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name, **self.labels}},
                "status": {"conditions": [ready_condition()],
                           "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}
        st, body = await self.http.req("POST", "/api/v1/nodes", node)
        assert st == 201, body
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 2, "renewTime": _now()}}
        st, body = await self.http.req("POST", LEASES, lease)
        assert st == 201, body

    async def post_ready(self) -> None:
        st, body = await self.http.req("PATCH", f"/api/v1/nodes/{self.name}/status",
                                       {"status": {"conditions": [ready_condition()]}},
                                       content_type="application/strategic-merge-patch+json")
        assert st == 200, body

    async def _loop(self) -> None:
        while True:
            if self.renewing:
                await self.http.req("PATCH", f"{LEASES}/{self.name}", {"spec": {"renewTime": _now()}},
                                    content_type="application/merge-patch+json")
            await asyncio.sleep(0.3)

    async def __aenter__(self) -> FakeKubelet:
        await self.register()
        self.task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


# What a user submits: a one-container pod manifest (the server assigns uid and defaults).
manifest = functools.partial(pod, uid="", containers=[container(image="busybox:1.36")])


async def get(http: Http, path: str) -> dict[str, Any] | None:
    st, body = await http.req("GET", path)
    return body if st == 200 else None


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return {}


async def test_unreachable_node_taint_eviction_and_recovery(chttp: Http, ckubectl: Kubectl) -> None:
    async with FakeKubelet(chttp, "n1") as kubelet:
        short = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 2}
        for p in (manifest("short", nodeName="n1", tolerations=[short]), manifest("default", nodeName="n1")):
            st, body = await chttp.req("POST", "/api/v1/namespaces/default/pods", p)
            assert st == 201, body
        # the default pod got the DefaultTolerationSeconds admission tolerations
        dpod = await get(chttp, "/api/v1/namespaces/default/pods/default")
        assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300} in dpod["spec"]["tolerations"]  # type: ignore[index]
        out = await ckubectl.ok("get", "nodes")
        assert "n1" in out and " Ready " in out

        kubelet.renewing = False

        async def unreachable() -> dict[str, Any] | None:
            node = await get(chttp, "/api/v1/nodes/n1")
            taints = {(t["key"], t["effect"]) for t in ((node or {}).get("spec") or {}).get("taints") or []}
            if condition(node, "Ready").get("status") == "Unknown" and \
                    ("node.kubernetes.io/unreachable", "NoExecute") in taints:
                return node
            return None

        node = await eventually(unreachable, "node Ready=Unknown with the unreachable taint")
        ready = condition(node, "Ready")
        assert ready["reason"] == "NodeStatusUnknown"
        assert ready["message"] == "Kubelet stopped posting node status."
        out = await ckubectl.ok("get", "nodes")
        assert "NotReady" in out
        out = await ckubectl.ok("describe", "node", "n1")
        assert "node.kubernetes.io/unreachable:NoExecute" in out
        assert "Unknown" in out

        async def short_evicted() -> bool:
            p = await get(chttp, "/api/v1/namespaces/default/pods/short")
            return p is None or bool(p["metadata"].get("deletionTimestamp"))

        await eventually(short_evicted, "pod with tolerationSeconds=2 evicted")
        p = await get(chttp, "/api/v1/namespaces/default/pods/short")
        if p is not None:
            assert condition(p, "DisruptionTarget").get("reason") == "DeletionByTaintManager"
        # the pod with the default 300 s toleration stays (the other pod's eviction already
        # happened 2 s after the taint, so this is not a race with a fixed sleep)
        dpod = await get(chttp, "/api/v1/namespaces/default/pods/default")
        assert dpod is not None and not dpod["metadata"].get("deletionTimestamp")

        kubelet.renewing = True
        await kubelet.post_ready()

        async def recovered() -> bool:
            node = await get(chttp, "/api/v1/nodes/n1")
            keys = {t["key"] for t in ((node or {}).get("spec") or {}).get("taints") or []}
            return condition(node, "Ready").get("status") == "True" and \
                "node.kubernetes.io/unreachable" not in keys

        await eventually(recovered, "taint removed after the kubelet came back")
        out = await ckubectl.ok("get", "nodes")
        assert " Ready " in out and "NotReady" not in out
        dpod = await get(chttp, "/api/v1/namespaces/default/pods/default")
        assert dpod is not None and not dpod["metadata"].get("deletionTimestamp")


async def test_scheduler_unschedulable_then_scheduled(chttp: Http, ckubectl: Kubectl) -> None:
    st, body = await chttp.req("POST", "/api/v1/namespaces/default/pods", manifest("p1"))
    assert st == 201, body

    async def unschedulable() -> dict[str, Any]:
        return condition(await get(chttp, "/api/v1/namespaces/default/pods/p1"), "PodScheduled")

    cond = await eventually(unschedulable, "PodScheduled=False")
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"] == "no nodes available to schedule pods"

    async def described() -> str | None:
        out = await ckubectl.ok("describe", "pod", "p1")
        return out if "FailedScheduling" in out else None

    out = await eventually(described, "FailedScheduling in describe pod")
    assert "no nodes available to schedule pods" in out and "default-scheduler" in out
    out = await ckubectl.ok("get", "events")
    assert "FailedScheduling" in out and "pod/p1" in out

    async with FakeKubelet(chttp, "n1"):
        async def bound() -> str | None:
            p = await get(chttp, "/api/v1/namespaces/default/pods/p1")
            return ((p or {}).get("spec") or {}).get("nodeName")

        assert await eventually(bound, "p1 scheduled once a Ready node exists") == "n1"
        cond = condition(await get(chttp, "/api/v1/namespaces/default/pods/p1"), "PodScheduled")
        assert cond["status"] == "True"
        out = await eventually(lambda: _events_with(ckubectl, "Scheduled"), "Scheduled event")
        assert "Successfully assigned default/p1 to n1" in out

        # nodeSelector mismatch: the upstream FitError text
        st, body = await chttp.req("POST", "/api/v1/namespaces/default/pods",
                                   manifest("sel", nodeSelector={"disk": "ssd"}))
        assert st == 201, body
        cond = await eventually(lambda: _unsched_cond(chttp, "sel"), "sel unschedulable")
        assert cond["message"] == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        out = await eventually(lambda: _describe_with(ckubectl, "sel", "FailedScheduling"), "sel event")
        assert "didn't match Pod's node affinity/selector" in out

        # cordon: new pods are not scheduled there; uncordon lets them in
        await ckubectl.ok("cordon", "n1")
        st, body = await chttp.req("POST", "/api/v1/namespaces/default/pods", manifest("p2"))
        assert st == 201, body
        cond = await eventually(lambda: _unsched_cond(chttp, "p2"), "p2 unschedulable on a cordoned node")
        assert cond["message"] == "0/1 nodes are available: 1 node(s) were unschedulable."
        out = await ckubectl.ok("get", "nodes")
        assert "SchedulingDisabled" in out
        await ckubectl.ok("uncordon", "n1")

        async def p2_bound() -> str | None:
            p = await get(chttp, "/api/v1/namespaces/default/pods/p2")
            return ((p or {}).get("spec") or {}).get("nodeName")

        assert await eventually(p2_bound, "p2 scheduled after uncordon") == "n1"


async def _events_with(kubectl: Kubectl, text: str) -> str | None:
    out = await kubectl.ok("get", "events")
    return out if text in out else None


async def _describe_with(kubectl: Kubectl, name: str, text: str) -> str | None:
    out = await kubectl.ok("describe", "pod", name)
    return out if text in out else None


async def _unsched_cond(http: Http, name: str) -> dict[str, Any] | None:
    c = condition(await get(http, f"/api/v1/namespaces/default/pods/{name}"), "PodScheduled")
    return c if c.get("status") == "False" and c.get("reason") == "Unschedulable" else None
