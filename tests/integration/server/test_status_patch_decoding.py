"""A status PATCH answers, warns and fails as when the whole patched object was decoded.

The status merge PATCH no longer walks the parts of the patched object it shares with the stored
one (``schema.decode(decoded=...)``: the pod's spec, untouched metadata). That is the same only
because a stored object decodes to itself with nothing unknown; these tests pin both: every
stored object of the kinds written here is such a fixed point, and what a status PATCH that does
touch other parts answers (422 for a wrong type, a warning or a 400 for an unknown field, per
fieldValidation) is unchanged."""

from __future__ import annotations

import json
from typing import Any

from pykubelet.server import schema
from pykubelet.server.main import ServerHandle
from tests.builders import container, node, pod

from .conftest import Http

PODS = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"


def rich_pod(name: str) -> dict[str, Any]:
    c = container("app", requests={"cpu": "100m", "memory": "64Mi"})
    c.update({"ports": [{"containerPort": 8080, "protocol": "TCP"}], "env": [{"name": "A", "value": "1"}],
              "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
              "securityContext": {"runAsUser": 1000}, "volumeMounts": [{"name": "data", "mountPath": "/d"}]})
    return pod(name, containers=[c], init_containers=["init"], labels={"app": "x"}, annotations={"a": "b"},
               volumes=[{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
               tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
               affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                   {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}},
               securityContext={"fsGroup": 2000}, schedulerName="nobody")


async def status_patch(h: Http, name: str, body: Any, params: dict[str, str] | None = None) -> tuple[int, Any, list[str]]:
    hdr = {"Content-Type": MERGE, "Authorization": f"Bearer {h.token}"}
    async with h.session.patch(h.srv.url + f"{PODS}/{name}/status", data=json.dumps(body), headers=hdr,
                               params=params) as r:
        return r.status, json.loads(await r.text()), r.headers.getall("Warning", [])


async def test_stored_objects_decode_to_themselves(http33: Http, server33: ServerHandle) -> None:
    h = http33
    assert (await h.req("POST", PODS, rich_pod("rich")))[0] == 201
    assert (await h.req("POST", "/api/v1/nodes", node("n1", capacity={"cpu": "2", "memory": "4Gi"},
                                                      allocatable={"cpu": "2", "memory": "4Gi"})))[0] == 201
    st, created = await h.req("GET", f"{PODS}/rich")
    st, _patched, warnings = await status_patch(h, "rich", {"metadata": {"uid": created["metadata"]["uid"]}, "status": {
        "phase": "Running", "podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": "True",
                                                                  "lastProbeTime": None}]}})
    assert st == 200 and warnings == []
    for key, model in (("pods", "V1Pod"), ("nodes", "V1Node"), ("namespaces", "V1Namespace"),
                       ("serviceaccounts", "V1ServiceAccount"), ("services", "V1Service")):
        for _k, stored in server33.store.iter_raw(key):
            got = schema.decode(stored, model)
            assert got.unknown == [], (key, got.unknown)
            for part in ("metadata", "spec"):
                if isinstance(stored.get(part), dict):
                    assert schema.decode(stored, model).obj[part] == \
                        {k: v for k, v in stored[part].items() if v is not None}


async def test_status_patch_answers_as_a_get_and_keeps_the_spec(http33: Http) -> None:
    h = http33
    _st, created = await h.req("POST", PODS, rich_pod("keep"))
    for phase in ("Pending", "Running"):
        st, patched, warnings = await status_patch(h, "keep", {"metadata": {"uid": created["metadata"]["uid"]},
                                                               "status": {"phase": phase}})
        assert st == 200 and warnings == []
        assert patched["spec"] == created["spec"] and patched["status"]["phase"] == phase
        assert (await h.req("GET", f"{PODS}/keep"))[1] == patched


async def test_status_patch_touching_the_spec_still_fails_and_warns_as_before(http33: Http) -> None:
    h = http33
    await h.req("POST", PODS, rich_pod("bad"))
    st, body, _w = await status_patch(h, "bad", {"spec": {"nodeName": 5}, "status": {"phase": "Running"}})
    assert st == 422
    assert "cannot unmarshal number into Go struct field PodSpec.spec.nodeName of type string" in body["message"]
    st, _body, warnings = await status_patch(h, "bad", {"spec": {"bogus": 1}, "status": {"phase": "Running"}})
    assert st == 200 and any('unknown field \\"spec.bogus\\"' in w for w in warnings), warnings
    st, body, _w = await status_patch(h, "bad", {"spec": {"bogus": 1}, "status": {"phase": "Running"}},
                                      params={"fieldValidation": "Strict"})
    assert st == 400 and 'unknown field "spec.bogus"' in body["message"]
    st, body, _w = await status_patch(h, "bad", {"status": {"phase": 7}})
    assert st == 422 and "PodStatus.status.phase of type string" in body["message"]


async def test_a_pod_whose_stored_spec_breaks_a_rule_still_takes_status_writes(http33: Http,
                                                                                server33: ServerHandle) -> None:
    """ValidatePodStatusUpdate checks metadata and status only: a spec stored before a rule existed
    (here a container name that is not a DNS label) never blocks the kubelet's status, while an
    update of the pod itself is validated in full."""
    h = http33
    _st, created = await h.req("POST", PODS, rich_pod("old"))
    stored = server33.store.get("pods", "default", "old")
    assert stored is not None
    legacy = json.loads(json.dumps(stored))
    legacy["spec"]["containers"][0]["name"] = "Not_A_Label"
    server33.store.update("pods", "default", "old", legacy, kind_name="pods")
    st, patched, _w = await status_patch(h, "old", {"metadata": {"uid": created["metadata"]["uid"]},
                                                    "status": {"phase": "Running"}})
    assert st == 200 and patched["status"]["phase"] == "Running", patched
    st, body, _w = await status_patch(h, "old", {"status": {"phase": 7}})
    assert st == 422
    st, body = await h.req("PUT", f"{PODS}/old", {**patched, "metadata": {**patched["metadata"],
                                                                          "labels": {"app": "y"}}})
    assert st == 422 and "spec.containers[0].name" in body["message"], body
