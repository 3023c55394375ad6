"""Server-side apply field ownership and pod updates, through the real kubectl and raw HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .conftest import Http, Kubectl

CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  labels:
{labels}
data:
{data}
"""


def cm_yaml(labels: dict[str, str], data: dict[str, str]) -> str:
    return CM.format(labels="\n".join(f"    {k}: {v}" for k, v in labels.items()),
                     data="\n".join(f"  {k}: \"{v}\"" for k, v in data.items()))


async def test_server_side_apply_managed_fields_and_field_removal(kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "cm.yaml"
    f.write_text(cm_yaml({"app": "web", "tier": "x"}, {"a": "1", "b": "2"}))
    await kubectl.ok("apply", "--server-side", "-f", str(f))
    # another manager (a plain update) adds its own key
    await kubectl.ok("label", "configmap", "cfg", "owner=ops")

    out = await kubectl.ok("get", "configmap", "cfg", "-o", "yaml", "--show-managed-fields")
    obj = yaml.safe_load(out)
    mf = {(m["manager"], m["operation"]): m for m in obj["metadata"]["managedFields"]}
    applied = mf[("kubectl", "Apply")]
    assert applied["fieldsType"] == "FieldsV1" and applied["time"]
    assert applied["fieldsV1"]["f:data"] == {"f:a": {}, "f:b": {}}
    assert applied["fieldsV1"]["f:metadata"]["f:labels"] == {"f:app": {}, "f:tier": {}}
    label_mgr = [m for (mgr, op), m in mf.items() if op == "Update"]
    assert label_mgr and label_mgr[0]["fieldsV1"]["f:metadata"]["f:labels"] == {"f:owner": {}}
    # without the flag kubectl hides them
    plain = yaml.safe_load(await kubectl.ok("get", "configmap", "cfg", "-o", "yaml"))
    assert "managedFields" not in plain["metadata"]

    # the same manager stops applying data.b and label tier: both go; the other manager's label stays
    f.write_text(cm_yaml({"app": "web"}, {"a": "1"}))
    await kubectl.ok("apply", "--server-side", "-f", str(f))
    obj = json.loads(await kubectl.ok("get", "configmap", "cfg", "-o", "json", "--show-managed-fields"))
    assert obj["data"] == {"a": "1"}
    assert obj["metadata"]["labels"] == {"app": "web", "owner": "ops"}
    applied = next(m for m in obj["metadata"]["managedFields"] if m["operation"] == "Apply")
    assert applied["fieldsV1"]["f:data"] == {"f:a": {}}


async def test_server_side_apply_removes_container_field(kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "pod.yaml"
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "ssa", "labels": {"a": "1", "b": "2"}},
                           "spec": {"containers": [{"name": "c1", "image": "busybox:1.36"}]}}
    f.write_text(json.dumps(pod))
    assert "serverside-applied" in await kubectl.ok("apply", "--server-side", "-f", str(f))
    del pod["metadata"]["labels"]["b"]
    pod["spec"]["containers"][0]["image"] = "busybox:1.37"
    f.write_text(json.dumps(pod))
    await kubectl.ok("apply", "--server-side", "-f", str(f))
    obj = json.loads(await kubectl.ok("get", "pod", "ssa", "-o", "json"))
    assert obj["metadata"]["labels"] == {"a": "1"}
    assert obj["spec"]["containers"][0]["image"] == "busybox:1.37"
    # defaults the server added are nobody's applied fields and stay
    assert obj["spec"]["restartPolicy"] == "Always"


async def test_pod_partial_put_is_defaulted(http: Http) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pp"},
            "spec": {"containers": [{"name": "c1", "image": "busybox:1.36"}]}}
    st, created = await http.req("POST", "/api/v1/namespaces/default/pods", body)
    assert st == 201, created
    # PUT the original manifest with only the image changed (what `kubectl replace` sends)
    body["spec"]["containers"][0]["image"] = "busybox:1.37"
    st, updated = await http.req("PUT", "/api/v1/namespaces/default/pods/pp", body)
    assert st == 200, updated
    assert updated["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert updated["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert updated["spec"]["serviceAccountName"] == "default"
    assert updated["spec"]["tolerations"] == created["spec"]["tolerations"]
    # a real change of an immutable field is still refused with the upstream message
    body["spec"]["restartPolicy"] = "Never"
    st, err = await http.req("PUT", "/api/v1/namespaces/default/pods/pp", body)
    assert st == 422 and "pod updates may not change fields" in err["message"]


async def test_pod_wrong_shapes_are_client_errors(http: Http) -> None:
    base = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"}}
    cases: list[Any] = [
        {**base, "spec": None},
        {**base, "spec": "x"},
        {**base, "spec": {"containers": "c"}},
        {**base, "spec": {"containers": {"name": "c"}}},
        {**base, "spec": {"containers": [1, "x", None]}},
        {**base, "spec": {"containers": [{"name": "c", "image": "i", "ports": "80", "env": {"a": 1}}]}},
        {**base, "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": "all"}},
        {**base, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": []}}}]}},
        {**base, "metadata": "x"},
    ]
    for body in cases:
        st, err = await http.req("POST", "/api/v1/namespaces/default/pods", body)
        assert st in (400, 422), (body, st, err)
        assert err["kind"] == "Status", err
    # spec: null is the zero PodSpec: defaulted, then rejected for the missing containers
    st, err = await http.req("POST", "/api/v1/namespaces/default/pods", {**base, "spec": None})
    assert st == 422 and "spec.containers: Required value" in err["message"], err
    # same for updates of an existing pod
    good = {**base, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert (await http.req("POST", "/api/v1/namespaces/default/pods", good))[0] == 201
    for body in cases[:8]:
        st, err = await http.req("PUT", "/api/v1/namespaces/default/pods/bad", body)
        assert st in (400, 422), (body, st, err)
        st, err = await http.req("PATCH", "/api/v1/namespaces/default/pods/bad", {"spec": body["spec"]},
                                 content_type="application/merge-patch+json")
        assert st in (400, 422), (body, st, err)
