"""apps/v1 workloads on the dev control plane: ReplicaSets, Deployments, DaemonSets, StatefulSets.

The server runs with all its controllers; a "pod runner" plays the kubelet of one node over the
API: it registers the node, renews its Lease, marks every pod bound to it Running and Ready and
finishes pods being deleted (grace 0), so rollouts progress as on a real node.  The real kubectl
drives the objects where its client-side logic matters (scale, set image, rollout undo/status).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.server.main import ServerHandle, build_parser, run_server, server_options

from .conftest import Kubectl, eventually

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
NODE = "worker-1"
APPS = "/apis/apps/v1/namespaces/default"
PODS = "/api/v1/namespaces/default/pods"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodRunner:
    """The kubelet of one node, reduced to API calls: pods bound here become Running + Ready."""

    def __init__(self, api: ApiClient, node: str = NODE) -> None:
        self.api = api
        self.node = node
        self.tasks: list[asyncio.Task[None]] = []
        self.max_pods_seen = 0

    async def start(self) -> None:
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": _now(),
                 "lastTransitionTime": _now()}
        await self.api.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node}},
            "status": {"conditions": [ready], "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}})
        await self.api.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                       "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                                       "spec": {"holderIdentity": self.node, "leaseDurationSeconds": 40,
                                                "renewTime": dt.datetime.now(dt.UTC).isoformat()}})
        self.tasks.append(asyncio.create_task(self._pods()))

    async def _handle(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if spec.get("nodeName") != self.node:
            return
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        with contextlib.suppress(ApiError):
            if meta.get("deletionTimestamp"):
                await self.api.delete(path, {"gracePeriodSeconds": 0})
            elif (pod.get("status") or {}).get("phase") != "Running":
                now = _now()
                await self.api.patch(path + "/status", {"status": {
                    "phase": "Running", "podIP": "198.18.0.10",
                    "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                   for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]}})

    async def _pods(self) -> None:
        while True:
            with contextlib.suppress(ApiError):
                lst = await self.api.list("/api/v1/pods")
                for p in lst.get("items") or []:
                    await self._handle(p)
                async for etype, p in self.api.watch("/api/v1/pods",
                                                     resource_version=lst["metadata"]["resourceVersion"]):
                    if etype in ("ADDED", "MODIFIED"):
                        await self._handle(p)
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.fixture
async def wsrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args(["--secure-port", "0", "--scheduler-retry-interval", "1s"])
    async with run_server(tmp_path / "data", **server_options(args)) as srv:
        yield srv


@pytest.fixture
async def api(wsrv: ServerHandle) -> AsyncIterator[ApiClient]:
    client = ApiClient(wsrv.url, token=wsrv.admin_token, ca_file=str(wsrv.ca_file))
    yield client
    await client.close()


@pytest.fixture
async def runner(api: ApiClient) -> AsyncIterator[PodRunner]:
    r = PodRunner(api)
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
def wkubectl(wsrv: ServerHandle, tmp_path: Path) -> Kubectl:
    d = tmp_path / "kcache"
    d.mkdir()
    return Kubectl(wsrv, d)


def template(labels: dict[str, str], image: str = "busybox:1.36") -> dict[str, Any]:
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}]}}


def workload(kind: str, name: str, replicas: int | None = 1, **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    s: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": template(labels), **spec}
    if replicas is not None:
        s["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"}, "spec": s}


async def pods_of(api: ApiClient, app: str, *, active: bool = True) -> list[dict[str, Any]]:
    items = (await api.list(PODS, {"labelSelector": f"app={app}"})).get("items") or []
    if active:
        items = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return items


# --- ReplicaSet -------------------------------------------------------------------------------


async def test_replicaset_creates_its_pods_owned_by_it_and_reports_them_ready(
        api: ApiClient, runner: PodRunner) -> None:
    rs = await api.create(f"{APPS}/replicasets", workload("ReplicaSet", "rs1", 3))
    pods = await eventually(lambda: _count(api, "rs1", 3))
    for p in pods:
        ref = p["metadata"]["ownerReferences"][0]
        assert ref == {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": rs["metadata"]["uid"],
                       "controller": True, "blockOwnerDeletion": True}
        assert p["metadata"]["name"].startswith("rs1-")

    async def ready() -> bool:
        st = (await api.get(f"{APPS}/replicasets/rs1")).get("status") or {}
        return st.get("readyReplicas") == 3 and st.get("availableReplicas") == 3 and \
            st.get("fullyLabeledReplicas") == 3 and st.get("observedGeneration") == 1
    await eventually(ready)


async def _count(api: ApiClient, app: str, n: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(api, app)
    return pods if len(pods) == n else None


async def test_replicaset_adopts_matching_orphans_and_releases_relabelled_pods(
        api: ApiClient, runner: PodRunner) -> None:
    orphan = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan", "labels": {"app": "rs2"}},
              "spec": template({})["spec"]}
    await api.create(PODS, orphan)
    await api.create(f"{APPS}/replicasets", workload("ReplicaSet", "rs2", 2))
    await eventually(lambda: _count(api, "rs2", 2))
    adopted = await api.get(f"{PODS}/orphan")
    assert adopted["metadata"]["ownerReferences"][0]["name"] == "rs2"
    # relabel: the set releases it and makes a replacement
    await api.patch(f"{PODS}/orphan", {"metadata": {"labels": {"app": "other"}}})

    async def released() -> bool:
        p = await api.get(f"{PODS}/orphan")
        return not p["metadata"].get("ownerReferences") and len(await pods_of(api, "rs2")) == 2
    await eventually(released)


async def test_scaling_a_replicaset_down_removes_unscheduled_pods_first(api: ApiClient) -> None:
    # no node: every pod stays Pending and unscheduled; scale down deletes the newest first
    await api.create(f"{APPS}/replicasets", workload("ReplicaSet", "rs3", 3))
    await eventually(lambda: _count(api, "rs3", 3))
    await api.patch(f"{APPS}/replicasets/rs3/scale", {"spec": {"replicas": 1}})
    await eventually(lambda: _count(api, "rs3", 1))
    scale = await api.get(f"{APPS}/replicasets/rs3/scale")
    assert scale["spec"]["replicas"] == 1 and scale["status"]["selector"] == "app=rs3"


# --- Deployment -------------------------------------------------------------------------------


async def _deployment_done(api: ApiClient, name: str, image: str | None = None) -> bool:
    d = await api.get(f"{APPS}/deployments/{name}")
    st, n = d.get("status") or {}, d["spec"]["replicas"]
    pods = await pods_of(api, name)
    images_ok = image is None or all(p["spec"]["containers"][0]["image"] == image for p in pods)
    return (st.get("observedGeneration") == d["metadata"]["generation"] and st.get("updatedReplicas") == n
            and st.get("availableReplicas") == n and st.get("replicas") == n and len(pods) == n and images_ok)


async def test_kubectl_create_scale_set_image_and_undo_a_deployment(
        api: ApiClient, runner: PodRunner, wkubectl: Kubectl) -> None:
    await wkubectl.ok("create", "deployment", "web", "--image=busybox:1.36", "--", "httpd", "-f", "-p", "80")
    out = await wkubectl.ok("rollout", "status", "deployment/web", "--timeout=30s")
    assert 'deployment "web" successfully rolled out' in out
    await wkubectl.ok("scale", "deployment/web", "--replicas=3")
    await eventually(lambda: _deployment_done(api, "web"))
    rs_list = (await api.list(f"{APPS}/replicasets")).get("items") or []
    assert len(rs_list) == 1 and rs_list[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    hash_ = rs_list[0]["metadata"]["labels"]["pod-template-hash"]
    assert rs_list[0]["metadata"]["name"] == f"web-{hash_}"
    assert all(p["metadata"]["labels"]["pod-template-hash"] == hash_ for p in await pods_of(api, "web"))

    await wkubectl.ok("set", "image", "deployment/web", "busybox=busybox:1.37")
    out = await wkubectl.ok("rollout", "status", "deployment/web", "--timeout=30s")
    assert "successfully rolled out" in out
    await eventually(lambda: _deployment_done(api, "web", "busybox:1.37"))
    d = await api.get(f"{APPS}/deployments/web")
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    conds = {c["type"]: c for c in d["status"]["conditions"]}
    assert conds["Available"]["reason"] == "MinimumReplicasAvailable"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    history = await wkubectl.ok("rollout", "history", "deployment/web")
    assert "1 " in history and "2 " in history

    await wkubectl.ok("rollout", "undo", "deployment/web")
    await eventually(lambda: _deployment_done(api, "web", "busybox:1.36"))
    d = await api.get(f"{APPS}/deployments/web")
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    table = await wkubectl.ok("get", "deploy", "web")
    assert table.split("\n")[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table.split("\n")[1].split()[1:4] == ["3/3", "3", "3"]


async def test_rolling_update_keeps_within_max_surge_and_max_unavailable(api: ApiClient, runner: PodRunner) -> None:
    dep = workload("Deployment", "roll", 4, strategy={"type": "RollingUpdate",
                                                      "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}})
    await api.create(f"{APPS}/deployments", dep)
    await eventually(lambda: _deployment_done(api, "roll"))
    lst = await api.list(PODS)
    live: dict[str, bool] = {}  # active pod -> ready
    for p in lst["items"]:
        if p["metadata"]["labels"].get("app") == "roll" and not p["metadata"].get("deletionTimestamp"):
            live[p["metadata"]["name"]] = any(c["type"] == "Ready" and c["status"] == "True"
                                              for c in (p.get("status") or {}).get("conditions") or [])
    most, fewest_ready = len(live), sum(live.values())

    async def observe() -> None:
        nonlocal most, fewest_ready
        async for etype, p in api.watch(PODS, resource_version=lst["metadata"]["resourceVersion"]):
            if p["metadata"]["labels"].get("app") != "roll":
                continue
            name = p["metadata"]["name"]
            if etype == "DELETED" or p["metadata"].get("deletionTimestamp"):
                live.pop(name, None)
            else:
                live[name] = any(c["type"] == "Ready" and c["status"] == "True"
                                 for c in (p.get("status") or {}).get("conditions") or [])
            most = max(most, len(live))
            fewest_ready = min(fewest_ready, sum(live.values()))

    watcher = asyncio.create_task(observe())
    try:
        await api.patch(f"{APPS}/deployments/roll",
                        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}},
                        "strategic")
        await eventually(lambda: _deployment_done(api, "roll", "busybox:1.37"))
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert most <= 4 + 1  # never more than maxSurge extra pods
    assert fewest_ready >= 4 - 1  # never more than maxUnavailable missing


async def test_recreate_deployment_removes_old_pods_before_creating_new_ones(
        api: ApiClient, runner: PodRunner) -> None:
    await api.create(f"{APPS}/deployments", workload("Deployment", "rec", 2, strategy={"type": "Recreate"}))
    await eventually(lambda: _deployment_done(api, "rec"))
    old = {p["metadata"]["name"] for p in await pods_of(api, "rec")}
    await api.patch(f"{APPS}/deployments/rec",
                    {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "x"}}}}},
                    "strategic")
    await eventually(lambda: _deployment_done(api, "rec"))
    assert not old & {p["metadata"]["name"] for p in await pods_of(api, "rec")}


async def test_paused_deployment_does_not_roll_out_and_reports_paused(api: ApiClient, runner: PodRunner) -> None:
    await api.create(f"{APPS}/deployments", workload("Deployment", "pz", 1))
    await eventually(lambda: _deployment_done(api, "pz"))
    await api.patch(f"{APPS}/deployments/pz", {"spec": {"paused": True}})
    await api.patch(f"{APPS}/deployments/pz",
                    {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}},
                    "strategic")

    async def paused() -> bool:
        d = await api.get(f"{APPS}/deployments/pz")
        return any(c["type"] == "Progressing" and c["reason"] == "DeploymentPaused"
                   for c in d["status"].get("conditions") or [])
    await eventually(paused)
    assert len((await api.list(f"{APPS}/replicasets")).get("items") or []) == 1
    await api.patch(f"{APPS}/deployments/pz", {"spec": {"paused": False}})
    await eventually(lambda: _deployment_done(api, "pz", "busybox:1.37"))


async def test_invalid_deployment_is_rejected_with_upstream_messages(api: ApiClient) -> None:
    bad = workload("Deployment", "bad", 1)
    bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiError) as e:
        await api.create(f"{APPS}/deployments", bad)
    assert e.value.status == 422
    assert "spec.template.metadata.labels: Invalid value" in e.value.message
    assert "`selector` does not match template `labels`" in e.value.message


# --- DaemonSet --------------------------------------------------------------------------------


async def test_daemonset_runs_one_pod_per_eligible_node_through_the_scheduler(
        api: ApiClient, runner: PodRunner) -> None:
    # a second, tainted node the daemon pods do not tolerate
    await api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                       "metadata": {"name": "tainted", "labels": {"kubernetes.io/hostname": "tainted"}},
                                       "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}})
    await api.create(f"{APPS}/daemonsets", workload("DaemonSet", "agent", None))

    async def one_running() -> list[dict[str, Any]] | None:
        pods = await pods_of(api, "agent")
        ok = len(pods) == 1 and pods[0]["spec"].get("nodeName") == NODE and \
            (pods[0].get("status") or {}).get("phase") == "Running"
        return pods if ok else None
    pods = await eventually(one_running)
    spec = pods[0]["spec"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    tolerated = {(t["key"], t["effect"]) for t in spec["tolerations"]}
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in tolerated
    assert ("node.kubernetes.io/not-ready", "NoExecute") in tolerated
    assert "controller-revision-hash" in pods[0]["metadata"]["labels"]

    async def status_ok() -> bool:
        st = (await api.get(f"{APPS}/daemonsets/agent")).get("status") or {}
        return st.get("desiredNumberScheduled") == 1 and st.get("numberReady") == 1 and \
            st.get("updatedNumberScheduled") == 1 and st.get("numberAvailable") == 1
    await eventually(status_ok)
    revs = (await api.list(f"{APPS}/controllerrevisions")).get("items") or []
    assert [r["revision"] for r in revs] == [1]

    # a template change rolls the pod to the new revision
    old_name = pods[0]["metadata"]["name"]
    await api.patch(f"{APPS}/daemonsets/agent",
                    {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}},
                    "strategic")

    async def rolled() -> bool:
        ps = await pods_of(api, "agent")
        return len(ps) == 1 and ps[0]["metadata"]["name"] != old_name and \
            ps[0]["spec"]["containers"][0]["image"] == "busybox:1.37"
    await eventually(rolled)


# --- StatefulSet ------------------------------------------------------------------------------


async def test_statefulset_creates_pods_in_order_with_claims_and_rolls_from_the_top(
        api: ApiClient, runner: PodRunner) -> None:
    sts = workload("StatefulSet", "db", 3, serviceName="db",
                   volumeClaimTemplates=[{"metadata": {"name": "data"},
                                          "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Mi"}}}}])
    lst = await api.list(PODS)
    order: list[str] = []

    async def observe() -> None:
        async for etype, p in api.watch(PODS, resource_version=lst["metadata"]["resourceVersion"]):
            if etype == "ADDED" and p["metadata"]["labels"].get("app") == "db":
                order.append(p["metadata"]["name"])

    watcher = asyncio.create_task(observe())
    try:
        await api.create(f"{APPS}/statefulsets", sts)

        async def all_ready() -> bool:
            st = (await api.get(f"{APPS}/statefulsets/db")).get("status") or {}
            return st.get("readyReplicas") == 3 and st.get("updatedReplicas") == 3
        await eventually(all_ready)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert order == ["db-0", "db-1", "db-2"]
    pod0 = await api.get(f"{PODS}/db-0")
    assert pod0["spec"]["hostname"] == "db-0" and pod0["spec"]["subdomain"] == "db"
    assert pod0["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "db-0"
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}} in pod0["spec"]["volumes"]
    claims = await api.list("/api/v1/namespaces/default/persistentvolumeclaims")
    assert sorted(c["metadata"]["name"] for c in claims["items"]) == ["data-db-0", "data-db-1", "data-db-2"]

    # rolling update with partition 1: db-2 and db-1 move to the new revision, db-0 stays
    await api.patch(f"{APPS}/statefulsets/db", {"spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}}, "strategic")

    async def partitioned() -> bool:
        st = (await api.get(f"{APPS}/statefulsets/db")).get("status") or {}
        images = {p["metadata"]["name"]: p["spec"]["containers"][0]["image"] for p in await pods_of(api, "db")}
        return st.get("updatedReplicas") == 2 and st.get("readyReplicas") == 3 and images == {
            "db-0": "busybox:1.36", "db-1": "busybox:1.37", "db-2": "busybox:1.37"}
    await eventually(partitioned)

    # scale down removes the highest ordinal
    await api.patch(f"{APPS}/statefulsets/db/scale", {"spec": {"replicas": 2}})

    async def scaled() -> bool:
        return sorted(p["metadata"]["name"] for p in await pods_of(api, "db")) == ["db-0", "db-1"]
    await eventually(scaled)


async def test_a_rollout_without_progress_is_marked_progress_deadline_exceeded(api: ApiClient) -> None:
    # no node: the pods never run, so the rollout cannot progress
    await api.create(f"{APPS}/deployments", workload("Deployment", "stuck", 1, progressDeadlineSeconds=1))

    async def exceeded() -> dict[str, Any] | None:
        d = await api.get(f"{APPS}/deployments/stuck")
        cond = next((c for c in (d.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"), None)
        return cond if cond and cond["reason"] == "ProgressDeadlineExceeded" else None
    cond = await eventually(exceeded)
    assert cond["status"] == "False" and cond["message"].endswith("has timed out progressing.")
    d = await api.get(f"{APPS}/deployments/stuck")
    available = next(c for c in d["status"]["conditions"] if c["type"] == "Available")
    assert available["status"] == "False" and available["reason"] == "MinimumReplicasUnavailable"


async def test_a_replicaset_whose_pods_are_refused_reports_replica_failure(api: ApiClient) -> None:
    rs = workload("ReplicaSet", "refused", 2)
    rs["spec"]["template"]["spec"]["serviceAccountName"] = "missing"
    await api.create(f"{APPS}/replicasets", rs)

    async def failure() -> dict[str, Any] | None:
        st = (await api.get(f"{APPS}/replicasets/refused")).get("status") or {}
        return next((c for c in st.get("conditions") or [] if c["type"] == "ReplicaFailure"), None)
    cond = await eventually(failure)
    assert cond["status"] == "True" and cond["reason"] == "FailedCreate" and "missing" in cond["message"]
    events = (await api.list("/api/v1/namespaces/default/events")).get("items") or []
    assert any(e["reason"] == "FailedCreate" and e["involvedObject"]["name"] == "refused" for e in events)
    assert await pods_of(api, "refused") == []
