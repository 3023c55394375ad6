"""PersistentVolumeClaims on a real server with its controllers: the default class, the local-path
provisioner (WaitForFirstConsumer), binding, scheduling by volume node affinity, reclaiming."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.main import ServerHandle, build_parser, run_server, server_options
from tests.builders import container, pod

from .conftest import Http
from .test_controllers import FakeKubelet, condition, eventually, get

PVCS = "/api/v1/namespaces/default/persistentvolumeclaims"
PVS = "/api/v1/persistentvolumes"
PODS = "/api/v1/namespaces/default/pods"
TABLE = {"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"}


@pytest.fixture
async def vsrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args(["--secure-port", "0", "--scheduler-retry-interval", "1s",
                                      "--local-path-dir", str(tmp_path / "volumes")])
    async with run_server(tmp_path / "data", **server_options(args)) as srv:
        yield srv


@pytest.fixture
async def vhttp(vsrv: ServerHandle) -> AsyncIterator[Http]:
    h = Http(vsrv)
    yield h
    await h.close()


def claim(name: str = "data", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}}


def pod_with_claim(name: str, claim_name: str = "data") -> dict[str, Any]:
    return pod(name, uid="", containers=[container(image="busybox:1.36")],
               volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}])


async def test_a_claim_is_provisioned_and_bound_once_its_pod_is_scheduled(vhttp: Http, tmp_path: Path) -> None:
    st, sc = await vhttp.req("GET", "/apis/storage.k8s.io/v1/storageclasses", headers=TABLE)
    assert [r["cells"][:4] for r in sc["rows"]] == [
        ["standard (default)", "pykubelet.io/local-path", "Delete", "WaitForFirstConsumer"]]
    async with FakeKubelet(vhttp, "n1"), FakeKubelet(vhttp, "n2"):
        st, created = await vhttp.req("POST", PVCS, claim())
        assert st == 201 and created["spec"]["storageClassName"] == "standard"
        assert created["status"]["phase"] == "Pending"
        # WaitForFirstConsumer: nothing happens before a pod uses the claim
        st, _ = await vhttp.req("POST", PODS, pod_with_claim("user"))
        assert st == 201
        pvc = await eventually(lambda: _bound(vhttp, "data"), "claim bound")
        node = pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
        pv_name = pvc["spec"]["volumeName"]
        assert pv_name == f"pvc-{created['metadata']['uid']}"
        assert pvc["status"]["capacity"] == {"storage": "1Gi"} and pvc["status"]["accessModes"] == ["ReadWriteOnce"]
        pv = await eventually(lambda: _phase(vhttp, f"{PVS}/{pv_name}", "Bound"), "volume bound")
        assert pv["spec"]["hostPath"]["path"] == str(tmp_path / "volumes" / pv_name)
        assert (tmp_path / "volumes" / pv_name).is_dir()
        assert pv["spec"]["claimRef"]["uid"] == created["metadata"]["uid"]
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
        assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]
        user = await eventually(lambda: _scheduled(vhttp, "user"), "pod scheduled")
        assert user["spec"]["nodeName"] == node
        # a second pod of the same claim goes where the volume is
        await vhttp.req("POST", PODS, pod_with_claim("second"))
        second = await eventually(lambda: _scheduled(vhttp, "second"), "second pod scheduled")
        assert second["spec"]["nodeName"] == node
        st, table = await vhttp.req("GET", PVCS, headers=TABLE)
        assert table["rows"][0]["cells"][:6] == ["data", "Bound", pv_name, "1Gi", "RWO", "standard"]

        # deleting the claim waits for its pods (pvc-protection), then the volume and its directory go
        st, _ = await vhttp.req("DELETE", f"{PVCS}/data")
        assert st == 200
        st, table = await vhttp.req("GET", PVCS, headers=TABLE)
        assert table["rows"][0]["cells"][1] == "Terminating"
        for name in ("user", "second"):
            await vhttp.req("DELETE", f"{PODS}/{name}", params={"gracePeriodSeconds": "0"})
        await eventually(lambda: _gone(vhttp, f"{PVCS}/data"), "claim deleted")
        await eventually(lambda: _gone(vhttp, f"{PVS}/{pv_name}"), "volume deleted")
        assert not (tmp_path / "volumes" / pv_name).exists()


async def test_a_pod_waits_while_its_claim_does_not_exist(vhttp: Http) -> None:
    async with FakeKubelet(vhttp, "n1"):
        await vhttp.req("POST", PODS, pod_with_claim("early", "later"))

        async def unschedulable() -> dict[str, Any] | None:
            p = await get(vhttp, f"{PODS}/early")
            return p if condition(p, "PodScheduled").get("reason") == "Unschedulable" else None

        p = await eventually(unschedulable, "FailedScheduling")
        assert condition(p, "PodScheduled")["message"] == \
            '0/1 nodes are available: persistentvolumeclaim "later" not found.'
        st, _ = await vhttp.req("POST", PVCS, claim("later"))
        assert st == 201
        p = await eventually(lambda: _scheduled(vhttp, "early"), "pod scheduled after the claim appeared")
        assert p["spec"]["nodeName"] == "n1"


async def test_a_claim_binds_a_matching_static_volume_and_retain_keeps_it(vhttp: Http) -> None:
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "static"},
          "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                   "storageClassName": "manual", "hostPath": {"path": "/tmp/static-pv"}}}
    st, created = await vhttp.req("POST", PVS, pv)
    assert st == 201 and created["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    await eventually(lambda: _phase(vhttp, f"{PVS}/static", "Available"), "volume available")
    await vhttp.req("POST", PVCS, claim("manual", storageClassName="manual"))
    pvc = await eventually(lambda: _bound(vhttp, "manual"), "claim bound to the static volume")
    assert pvc["spec"]["volumeName"] == "static" and pvc["status"]["capacity"] == {"storage": "5Gi"}
    await vhttp.req("DELETE", f"{PVCS}/manual")
    released = await eventually(lambda: _phase(vhttp, f"{PVS}/static", "Released"), "volume released")
    st, table = await vhttp.req("GET", PVS, headers=TABLE)
    assert table["rows"][0]["cells"][:7] == ["static", "5Gi", "RWO,ROX", "Retain", "Released", "default/manual",
                                             "manual"]
    assert released["spec"]["claimRef"]["name"] == "manual"


async def _bound(http: Http, name: str) -> dict[str, Any] | None:
    p = await get(http, f"{PVCS}/{name}")
    return p if p and (p.get("status") or {}).get("phase") == "Bound" else None


async def _phase(http: Http, path: str, phase: str) -> dict[str, Any] | None:
    p = await get(http, path)
    return p if p and (p.get("status") or {}).get("phase") == phase else None


async def _scheduled(http: Http, name: str) -> dict[str, Any] | None:
    p = await get(http, f"{PODS}/{name}")
    return p if p and (p.get("spec") or {}).get("nodeName") else None


async def _gone(http: Http, path: str) -> bool:
    st, _ = await http.req("GET", path)
    return st == 404
