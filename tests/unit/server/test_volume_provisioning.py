"""The persistent-volume controller's plan and the scheduler's VolumeBinding checks, as pure functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pykubelet.server import persistentvolume as pvc_ctl
from pykubelet.server.persistentvolume import ActionType, plan
from pykubelet.server.scheduler import VolumeState, claims_to_select, schedule
from tests.builders import node, pod

BASE = Path("/var/lib/pv")
STANDARD: dict[str, Any] = {"metadata": {"name": "standard"}, "provisioner": pvc_ctl.PROVISIONER,
                            "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"}


def claim(name: str = "data", *, uid: str = "u1", cls: str = "standard", node_name: str | None = None,
          volume: str | None = None, **meta: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid, **meta}
    if node_name:
        m["annotations"] = {pvc_ctl.SELECTED_NODE: node_name}
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}},
                            "storageClassName": cls}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": m, "spec": spec, "status": {"phase": "Bound" if volume else "Pending"}}


def volume(name: str, *, size: str = "5Gi", cls: str = "manual", ref: dict[str, Any] | None = None,
           policy: str = "Retain", phase: str = "Available", **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                            "persistentVolumeReclaimPolicy": policy, "hostPath": {"path": f"/srv/{name}"}}
    if ref:
        spec["claimRef"] = ref
    return {"metadata": {"name": name, **meta}, "spec": spec, "status": {"phase": phase}}


def types(actions: list[pvc_ctl.Action]) -> list[tuple[ActionType, str]]:
    return [(a.type, a.name) for a in actions]


def test_a_wait_for_first_consumer_claim_waits_for_the_selected_node() -> None:
    assert plan([claim()], [], [STANDARD], [node("n1")], [], base_dir=BASE) == []


def test_a_claim_with_a_selected_node_gets_a_hostpath_volume_pinned_there() -> None:
    [a] = plan([claim(node_name="n2")], [], [STANDARD], [node("n1"), node("n2")], [], base_dir=BASE)
    assert a.type is ActionType.CREATE_PV and a.name == "pvc-u1" and a.path == "/var/lib/pv/pvc-u1"
    spec = a.obj["spec"]
    assert spec["hostPath"] == {"path": "/var/lib/pv/pvc-u1", "type": "DirectoryOrCreate"}
    assert spec["capacity"] == {"storage": "2Gi"} and spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["claimRef"]["uid"] == "u1" and spec["storageClassName"] == "standard"
    assert spec["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]


def test_an_immediate_claim_is_provisioned_on_the_first_ready_node() -> None:
    immediate = {**STANDARD, "volumeBindingMode": "Immediate"}
    [a] = plan([claim()], [], [immediate], [node("n2"), node("n1", ready="False")], [], base_dir=BASE)
    assert a.obj["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "n2"]


def test_a_provisioned_volume_reserved_for_the_claim_is_bound_to_it() -> None:
    pv = volume("pvc-u1", cls="standard", ref={"namespace": "default", "name": "data", "uid": "u1"}, phase="Pending")
    actions = plan([claim(node_name="n1")], [pv], [STANDARD], [node("n1")], [], base_dir=BASE)
    assert types(actions) == [(ActionType.BIND_PVC, "data")]
    assert actions[0].obj == {"volumeName": "pvc-u1", "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"]}


def test_the_smallest_matching_static_volume_is_claimed() -> None:
    pvs = [volume("big", size="10Gi"), volume("small", size="1Gi"), volume("fit", size="3Gi"),
           volume("other-class", size="2Gi", cls="fast")]
    actions = plan([claim(cls="manual")], pvs, [], [], [], base_dir=BASE)
    assert (ActionType.CLAIM_PV, "fit") in types(actions)
    assert [a.obj["uid"] for a in actions if a.type is ActionType.CLAIM_PV] == ["u1"]


def test_a_volume_whose_claim_is_gone_is_released_and_deleted_with_its_directory() -> None:
    ref = {"namespace": "default", "name": "data", "uid": "u1"}
    pv = volume("pvc-u1", ref=ref, policy="Delete", phase="Bound",
                annotations={pvc_ctl.PROVISIONED_BY: pvc_ctl.PROVISIONER})
    pv["spec"]["hostPath"]["path"] = "/var/lib/pv/pvc-u1"
    actions = plan([], [pv], [STANDARD], [], [], base_dir=BASE)
    assert types(actions) == [(ActionType.SET_PV_PHASE, "pvc-u1"), (ActionType.DELETE_PV, "pvc-u1")]
    assert actions[1].path == "/var/lib/pv/pvc-u1"
    # a claim of the same name but another uid does not keep the volume
    assert types(plan([claim(uid="u2", cls="x")], [pv], [], [], [], base_dir=BASE))[-1] == (
        ActionType.DELETE_PV, "pvc-u1")


def test_a_retained_volume_is_only_released() -> None:
    pv = volume("keep", ref={"namespace": "default", "name": "data", "uid": "u1"}, phase="Bound")
    assert types(plan([], [pv], [], [], [], base_dir=BASE)) == [(ActionType.SET_PV_PHASE, "keep")]


def test_a_deleted_claim_keeps_its_finalizer_while_a_running_pod_uses_it() -> None:
    deleting = claim(volume="pv1", deletionTimestamp="2024-01-01T00:00:00Z",
                     finalizers=[pvc_ctl.PVC_PROTECTION])
    user = pod("user", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    assert plan([deleting], [], [], [], [user], base_dir=BASE) == []
    done = {**user, "status": {"phase": "Succeeded"}}
    assert types(plan([deleting], [], [], [], [done], base_dir=BASE)) == [(ActionType.REMOVE_FINALIZER, "data")]


def test_directories_outside_the_base_dir_are_never_removed() -> None:
    assert pvc_ctl.inside(BASE, "/var/lib/pv/pvc-1")
    assert not pvc_ctl.inside(BASE, "/var/lib/pv")
    assert not pvc_ctl.inside(BASE, "/var/lib/pv/../etc")
    assert not pvc_ctl.inside(BASE, "/srv/x")


def _vols(*pvcs: dict[str, Any], pvs: tuple[dict[str, Any], ...] = ()) -> VolumeState:
    return VolumeState({f"default/{c['metadata']['name']}": c for c in pvcs},
                       {v["metadata"]["name"]: v for v in pvs}, {"standard": STANDARD})


def _user() -> dict[str, Any]:
    return pod("user", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])


def test_a_pod_of_a_missing_claim_is_unschedulable_with_upstreams_message() -> None:
    d = schedule(_user(), [node("n1")], [], _vols())
    assert d.node is None and d.message == '0/1 nodes are available: persistentvolumeclaim "data" not found.'


def test_a_pod_of_a_bound_claim_goes_to_the_volumes_node() -> None:
    pv = volume("pv1", ref={"uid": "u1"}, phase="Bound")
    pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}
    vols = _vols(claim(volume="pv1"), pvs=(pv,))
    assert schedule(_user(), [node("n1"), node("n2"), node("n3")], [], vols).node == "n2"
    d = schedule(_user(), [node("n1")], [], vols)
    assert d.message == "0/1 nodes are available: 1 node(s) had volume node affinity conflict."


def test_an_unbound_wait_for_first_consumer_claim_is_annotated_and_the_pod_waits() -> None:
    vols = _vols(claim())
    d = schedule(_user(), [node("n1")], [], vols)
    assert d.node == "n1"
    assert claims_to_select(_user(), "n1", vols) == (["data"], True)
    annotated = _vols(claim(node_name="n1"))
    assert claims_to_select(_user(), "n1", annotated) == ([], True)
    assert schedule(_user(), [node("n2"), node("n1")], [], annotated).node == "n1"
    assert claims_to_select(_user(), "n1", _vols(claim(volume="pv1"))) == ([], False)
