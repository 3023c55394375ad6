"""CustomResourceDefinitions on the dev control plane: schema validation and pruning, printer
columns, subresources, discovery, deletion, restart, and the real kubectl (1.28 and 1.33)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.main import ServerHandle, run_server

from .conftest import Http, Kubectl

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CT_PATH = "/apis/stable.example.com/v1/namespaces/default/crontabs"

CRD_YAML = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct], categories: [all]}
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {type: string}
              image: {type: string, default: "busybox:1.36"}
              replicas: {type: integer, minimum: 0}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              replicas: {type: integer}
              message: {type: string}
"""

CT_YAML = """apiVersion: stable.example.com/v1
kind: CronTab
metadata:
  name: {name}
spec:
  cronSpec: "* * * * */5"
  replicas: {replicas}
"""


def crontab(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(params=["28", "33"], ids=["kubectl128", "kubectl133"])
async def crd_server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, version_minor=str(request.param), controllers=False) as srv:
        yield srv


@pytest.fixture
async def api(crd_server: ServerHandle) -> AsyncIterator[Http]:
    h = Http(crd_server)
    yield h
    await h.close()


@pytest.fixture
def kctl(crd_server: ServerHandle, tmp_path: Path) -> Kubectl:
    d = tmp_path / "kcache"
    d.mkdir()
    return Kubectl(crd_server, d)


async def install_crd(kctl: Kubectl, tmp_path: Path) -> None:
    (tmp_path / "crd.yaml").write_text(CRD_YAML)
    await kctl.ok("apply", "-f", str(tmp_path / "crd.yaml"))
    await kctl.ok("wait", "--for=condition=Established", "crd/crontabs.stable.example.com", "--timeout=20s")


async def test_kubectl_applies_crd_and_custom_resources_without_validate_false(
        kctl: Kubectl, api: Http, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await install_crd(kctl, tmp_path)
    (tmp_path / "ct.yaml").write_text(CT_YAML.format(name="every5", replicas=2))
    out = await kctl.ok("apply", "-f", str(tmp_path / "ct.yaml"))
    assert "crontab.stable.example.com/every5 created" in out
    # apply again with a change: the client-side apply PATCH path for a custom resource
    (tmp_path / "ct.yaml").write_text(CT_YAML.format(name="every5", replicas=3))
    out = await kctl.ok("apply", "-f", str(tmp_path / "ct.yaml"))
    assert "configured" in out
    table = await kctl.ok("get", "ct")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
    assert row.split()[:2] == ["every5", "*"] and row.split()[-2] == "3"
    assert "every5" in await kctl.ok("get", "all")
    got = json.loads(await kctl.ok("get", "crontab", "every5", "-o", "json"))
    assert got["spec"]["image"] == "busybox:1.36"  # schema default
    await kctl.ok("scale", "crontab/every5", "--replicas=5")
    _st, obj = await api.req("GET", f"{CT_PATH}/every5")
    assert obj["spec"]["replicas"] == 5
    assert "cronSpec" in await kctl.ok("explain", "crontab.spec")  # the CRD schema is published
    monkeypatch.setenv("KUBE_EDITOR", "sed -i 's/replicas: 5/replicas: 4/'")  # run through bash -c
    await kctl.ok("edit", "crontab/every5")
    _st, obj = await api.req("GET", f"{CT_PATH}/every5")
    assert obj["spec"]["replicas"] == 4
    await kctl.ok("delete", "crontab", "every5")
    st, _ = await api.req("GET", f"{CT_PATH}/every5")
    assert st == 404


async def test_kubectl_reports_schema_violation_with_upstream_message(kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    (tmp_path / "bad.yaml").write_text(CT_YAML.format(name="bad", replicas='"three"'))
    rc, _out, err = await kctl.run("apply", "-f", str(tmp_path / "bad.yaml"))
    assert rc != 0  # kubectl renders the 422's causes itself, as it does for a real API server
    assert 'The CronTab "bad" is invalid: spec.replicas: Invalid value: "string": spec.replicas in ' \
        'body must be of type integer: "string"' in err


async def test_builtin_pod_apply_needs_no_validate_false(kctl: Kubectl, api: Http, tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                                       "spec: {containers: [{name: c, image: busybox:1.36}]}\n")
    await kctl.ok("apply", "-f", str(tmp_path / "pod.yaml"))
    await kctl.ok("create", "configmap", "cm", "--from-literal=a=b")
    st, _ = await api.req("GET", "/api/v1/namespaces/default/pods/p")
    assert st == 200



# ---------------------------------------------------------------- wire-level behaviour
async def test_schema_violation_is_422_with_upstream_message(api: Http, kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    st, body = await api.req("POST", CT_PATH, crontab("bad", replicas="string"))
    assert st == 422 and body["reason"] == "Invalid"
    assert body["message"] == ('CronTab.stable.example.com "bad" is invalid: spec.replicas: Invalid value: "string": '
                               'spec.replicas in body must be of type integer: "string"')
    st, body = await api.req("POST", CT_PATH, crontab("neg", replicas=-1))
    assert st == 422
    assert "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0" \
        in body["message"]


async def test_unknown_fields_are_pruned_unless_preserved(api: Http, kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    obj = crontab("p", cronSpec="x", junk=1, extra={"anything": {"goes": True}})
    obj["status"] = {"replicas": 9}
    obj["topLevelJunk"] = "x"
    async with api.session.post(api.srv.url + CT_PATH, json=obj,
                                headers={"Authorization": f"Bearer {api.token}"}) as r:
        assert r.status == 201
        warnings = r.headers.getall("Warning", [])
        body = await r.json()
    assert "junk" not in body["spec"] and "topLevelJunk" not in body
    assert body["spec"]["extra"] == {"anything": {"goes": True}}
    assert "status" not in body  # status subresource: create ignores status
    assert any('unknown field \\"spec.junk\\"' in w for w in warnings)
    st, body = await api.req("POST", CT_PATH, crontab("strict", junk=1), params={"fieldValidation": "Strict"})
    assert st == 400 and 'strict decoding error: unknown field "spec.junk"' in body["message"]


async def test_status_subresource_and_other_versions(api: Http, kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    st, obj = await api.req("POST", CT_PATH, crontab("s", cronSpec="x", replicas=1))
    assert st == 201
    st, obj = await api.req("PATCH", f"{CT_PATH}/s/status", {"status": {"replicas": 1, "message": "ok"}},
                            content_type="application/merge-patch+json")
    assert st == 200 and obj["status"] == {"replicas": 1, "message": "ok"}
    st, obj = await api.req("PATCH", f"{CT_PATH}/s", {"status": {"message": "ignored"}, "spec": {"replicas": 2}},
                            content_type="application/merge-patch+json")
    assert obj["status"]["message"] == "ok" and obj["metadata"]["generation"] == 2
    st, scale = await api.req("GET", f"{CT_PATH}/s/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2 and scale["status"]["replicas"] == 1
    # conversion strategy None: the same object through the other served version
    st, other = await api.req("GET", "/apis/stable.example.com/v1beta1/namespaces/default/crontabs/s")
    assert st == 200 and other["apiVersion"] == "stable.example.com/v1beta1" and other["spec"]["replicas"] == 2


async def test_crd_status_and_discovery(api: Http, kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    st, crd = await api.req("GET", f"{CRD_PATH}/crontabs.stable.example.com")
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["listKind"] == "CronTabList"
    assert crd["status"]["storedVersions"] == ["v1"]
    st, rl = await api.req("GET", "/apis/stable.example.com/v1")
    entry = next(r for r in rl["resources"] if r["name"] == "crontabs")
    assert entry["shortNames"] == ["ct"] and entry["categories"] == ["all"] and entry["namespaced"]
    assert {r["name"] for r in rl["resources"]} >= {"crontabs/status", "crontabs/scale"}
    st, grp = await api.req("GET", "/apis/stable.example.com")
    assert grp["preferredVersion"]["version"] == "v1"
    # a second CRD claiming the same kind in the group is not accepted and serves nothing
    spec = json.loads(json.dumps(crd["spec"]))
    spec["names"] = {"plural": "crontabz", "singular": "crontabz", "kind": "CronTab"}
    clash = {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": "crontabz.stable.example.com"},
             "spec": spec}
    st, body = await api.req("POST", CRD_PATH, clash)
    assert st == 201
    conds = {c["type"]: (c["status"], c["reason"]) for c in body["status"]["conditions"]}
    assert conds == {"NamesAccepted": ("False", "KindConflict"), "Established": ("False", "NotAccepted")}
    st, _ = await api.req("GET", "/apis/stable.example.com/v1/namespaces/default/crontabz")
    assert st == 404


async def test_invalid_crd_is_rejected(api: Http) -> None:
    bad = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "foos.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "foos", "kind": "Foo"},
                    "versions": [{"name": "v1", "served": True, "storage": True}]}}
    st, body = await api.req("POST", CRD_PATH, bad)
    assert st == 422
    assert "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required" in body["message"]


async def test_deleting_crd_deletes_its_objects(api: Http, kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    for n in ("a", "b"):
        st, _ = await api.req("POST", CT_PATH, crontab(n, replicas=1))
        assert st == 201
    st, _ = await api.req("DELETE", f"{CRD_PATH}/crontabs.stable.example.com")
    assert st == 200
    st, _ = await api.req("GET", CT_PATH)
    assert st == 404
    assert api.srv.registry.store.count("crontabs.stable.example.com") == 0
    await install_crd(kctl, tmp_path)  # re-created: empty, served again
    st, lst = await api.req("GET", CT_PATH)
    assert st == 200 and lst["items"] == []


async def test_crds_survive_a_restart(tmp_path: Path) -> None:
    async with run_server(tmp_path / "data", port=0, version_minor="33", controllers=False) as srv:
        http = Http(srv)
        kctl = Kubectl(srv, tmp_path)
        await install_crd(kctl, tmp_path)
        st, _ = await http.req("POST", CT_PATH, crontab("kept", replicas=1))
        assert st == 201
        await http.close()
    async with run_server(tmp_path / "data", port=0, version_minor="33", controllers=False) as srv:
        http = Http(srv)
        st, obj = await http.req("GET", f"{CT_PATH}/kept")
        await http.close()
    assert st == 200 and obj["spec"]["replicas"] == 1


async def test_watch_true_capitalised_streams_events_with_official_client(api: Http) -> None:
    """Go's ParseBool spellings (the official Python client sends ``watch=True``)."""
    kubernetes = pytest.importorskip("kubernetes")
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(api.srv.kubeconfig), client_configuration=cfg)
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    st, _ = await api.req("POST", "/api/v1/namespaces/default/configmaps",
                          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}})
    assert st == 201

    def first_event() -> tuple[str, str]:
        w = kubernetes.watch.Watch()
        for ev in w.stream(core.list_namespaced_config_map, "default", timeout_seconds=5):
            w.stop()
            return ev["type"], ev["object"].metadata.name
        return "", ""

    assert await asyncio.to_thread(first_event) in (("ADDED", "w"), ("ADDED", "kube-root-ca.crt"))
    for spelling in ("1", "t", "T", "TRUE", "true", "True"):
        st, body = await api.req("GET", "/api/v1/namespaces/default/configmaps",
                                 params={"watch": spelling, "timeoutSeconds": "1"})
        assert st == 200 and isinstance(body, str) and '"type":"ADDED"' in body, spelling
    st, body = await api.req("GET", "/api/v1/namespaces/default/configmaps", params={"watch": "yes"})
    assert st == 400 and 'strconv.ParseBool: parsing "yes": invalid syntax' in body["message"]


OPERATOR = '''
import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.posting.enabled = False
    settings.watching.server_timeout = 10


@kopf.on.create("stable.example.com", "v1", "crontabs")
@kopf.on.update("stable.example.com", "v1", "crontabs")
def reconcile(spec, patch, **_):
    patch.status["message"] = "reconciled " + str(spec.get("cronSpec"))
    patch.status["replicas"] = spec.get("replicas", 0)
'''


async def test_kopf_operator_reconciles_a_custom_resource(tmp_path: Path) -> None:
    """A real Python operator (kopf, in its own process) list-watches the CRD and patches status."""
    pytest.importorskip("kopf")
    async with run_server(tmp_path / "data", port=0, version_minor="33", controllers=False) as srv:
        http = Http(srv)
        await install_crd(Kubectl(srv, tmp_path), tmp_path)
        (tmp_path / "operator.py").write_text(OPERATOR)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kopf", "run", "--standalone", "--namespace=default", str(tmp_path / "operator.py"),
            env={**os.environ, "KUBECONFIG": str(srv.kubeconfig)},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        try:
            st, _ = await http.req("POST", CT_PATH, crontab("op", cronSpec="*/1 * * * *", replicas=2))
            assert st == 201
            status: dict[str, Any] = {}
            for _ in range(150):
                _st, obj = await http.req("GET", f"{CT_PATH}/op")
                status = obj.get("status") or {}
                if status.get("message"):
                    break
                await asyncio.sleep(0.2)
            assert status == {"message": "reconciled */1 * * * *", "replicas": 2}
            st, _ = await http.req("PATCH", f"{CT_PATH}/op", {"spec": {"cronSpec": "0 * * * *"}},
                                   content_type="application/merge-patch+json")
            for _ in range(150):
                _st, obj = await http.req("GET", f"{CT_PATH}/op")
                if (obj.get("status") or {}).get("message") == "reconciled 0 * * * *":
                    break
                await asyncio.sleep(0.2)
            assert obj["status"]["message"] == "reconciled 0 * * * *"
        finally:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.communicate(), 15)  # to the pipe's end: its transport closes here
            except TimeoutError:
                proc.kill()
                await proc.communicate()
            await http.close()


async def test_crd_with_cel_rules_is_accepted_with_a_warning(api: Http) -> None:
    crd_obj = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "bars.example.com"},
               "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "bars", "kind": "Bar"},
                        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                            "type": "object", "x-kubernetes-validations": [{"rule": "self.spec.a > 0"}],
                            "properties": {"spec": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}}]}}
    async with api.session.post(api.srv.url + CRD_PATH, json=crd_obj,
                                headers={"Authorization": f"Bearer {api.token}"}) as r:
        assert r.status == 201
        warnings = r.headers.getall("Warning", [])
    assert any("x-kubernetes-validations (CEL) rules are not evaluated" in w for w in warnings)


async def test_deleting_a_namespace_deletes_its_custom_resources(api: Http, kctl: Kubectl, tmp_path: Path) -> None:
    await install_crd(kctl, tmp_path)
    st, _ = await api.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "team"}})
    assert st == 201
    path = "/apis/stable.example.com/v1/namespaces/team/crontabs"
    st, _ = await api.req("POST", path, crontab("in-team", replicas=1))
    assert st == 201
    st, _ = await api.req("DELETE", "/api/v1/namespaces/team")
    assert st == 200
    for _ in range(100):
        st, _ = await api.req("GET", "/api/v1/namespaces/team")
        if st == 404:
            break
        await asyncio.sleep(0.1)
    assert st == 404
    assert not list(api.srv.registry.store.iter_raw("crontabs.stable.example.com", "team"))


async def test_kubectl_1_27_creates_and_applies_without_validate_false(tmp_path: Path) -> None:
    async with run_server(tmp_path / "data", port=0, version_minor="27", controllers=False) as srv:
        kctl = Kubectl(srv, tmp_path)
        assert json.loads(await kctl.ok("version", "-o", "json"))["clientVersion"]["minor"] == "27"
        await install_crd(kctl, tmp_path)
        (tmp_path / "ct.yaml").write_text(CT_YAML.format(name="old", replicas=1))
        await kctl.ok("create", "-f", str(tmp_path / "ct.yaml"))
        (tmp_path / "ct.yaml").write_text(CT_YAML.format(name="old", replicas=2))
        assert "configured" in await kctl.ok("apply", "-f", str(tmp_path / "ct.yaml"))
        (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                                           "spec: {containers: [{name: c, image: busybox:1.36}]}\n")
        await kctl.ok("apply", "-f", str(tmp_path / "pod.yaml"))
