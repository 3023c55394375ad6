"""Wire behaviour of a strict API server: typed decoding, field validation warnings, dry runs,
Secret stringData, watch timeouts, Tables that survive a bad stored object, and the clients that
must keep working (kubectl, the official Python client)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from typing import Any

import aiohttp
import pytest

from pykubelet.server.main import ServerHandle
from tests.builders import container, pod

from .conftest import Http, Kubectl

PODS = "/api/v1/namespaces/default/pods"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


async def test_a_pod_with_wrong_types_is_refused_with_the_go_decoder_message(http33: Http) -> None:
    st, body = await http33.req("POST", PODS, pod("typed", uid="", containers=[container(image=5)]))
    assert st == 400 and body["reason"] == "BadRequest"
    assert body["message"] == ('Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number into '
                               "Go struct field Container.spec.containers.image of type string")
    assert (await http33.req("GET", f"{PODS}/typed"))[0] == 404


async def test_semantic_pod_errors_are_invalid_with_field_causes(http33: Http) -> None:
    p = pod("sec", uid="", containers=[container(securityContext={"runAsUser": -1})],
            securityContext={"sysctls": [{"name": "kernel.$$$", "value": "1"}]})
    st, body = await http33.req("POST", PODS, p)
    assert st == 422 and body["reason"] == "Invalid"
    causes = {c["field"]: c for c in body["details"]["causes"]}
    assert causes["spec.containers[0].securityContext.runAsUser"]["message"] == (
        "Invalid value: -1: must be between 0 and 2147483647, inclusive")
    assert causes["spec.securityContext.sysctls[0].name"]["reason"] == "FieldValueInvalid"


async def test_unknown_fields_warn_by_default_and_fail_when_strict(http33: Http) -> None:
    p = pod("warned", uid="", containers=[container(bogus=1)])
    async with http33.session.post(http33.srv.url + PODS, data=json.dumps(p),
                                   headers={"Authorization": f"Bearer {http33.token}",
                                            "Content-Type": "application/json"}) as r:
        assert r.status == 201
        assert r.headers.getall("Warning") == ['299 - "unknown field \\"spec.containers[0].bogus\\""']
        assert "bogus" not in json.dumps(await r.json())
    p["metadata"]["name"] = "ignored"
    async with http33.session.post(http33.srv.url + PODS, data=json.dumps(p), params={"fieldValidation": "Ignore"},
                                   headers={"Authorization": f"Bearer {http33.token}",
                                            "Content-Type": "application/json"}) as r:
        assert r.status == 201 and "Warning" not in r.headers
    p["metadata"]["name"] = "strict"
    st, body = await http33.req("POST", PODS, p, params={"fieldValidation": "Strict"})
    assert st == 400 and body["message"].endswith('strict decoding error: unknown field "spec.containers[0].bogus"')


async def test_a_body_without_content_type_is_json_and_a_wrong_one_is_415(http33: Http) -> None:
    raw = json.dumps(pod("noct", uid="")).encode()
    async with http33.session.post(http33.srv.url + PODS, data=raw, skip_auto_headers=["Content-Type"],
                                   headers={"Authorization": f"Bearer {http33.token}"}) as r:
        assert r.status == 201
    st, body = await http33.req("POST", PODS, raw=raw, content_type="text/plain")
    assert st == 415 and body["reason"] == "UnsupportedMediaType"
    st, body = await http33.req("PATCH", f"{PODS}/noct", {"metadata": {}}, content_type="application/json")
    assert st == 415 and "application/strategic-merge-patch+json" in body["message"]


async def test_dry_run_all_persists_nothing_on_any_verb(http33: Http) -> None:
    dry = {"dryRun": "All"}
    st, body = await http33.req("POST", PODS, pod("dry", uid=""), params=dry)
    assert st == 201 and body["metadata"]["name"] == "dry"
    assert (await http33.req("GET", f"{PODS}/dry"))[0] == 404
    _, created = await http33.req("POST", PODS, pod("dry", uid=""))
    rv = created["metadata"]["resourceVersion"]
    labelled = {**created, "metadata": {**created["metadata"], "labels": {"x": "y"}}}
    assert (await http33.req("PUT", f"{PODS}/dry", labelled, params=dry))[0] == 200
    assert (await http33.req("PATCH", f"{PODS}/dry", {"metadata": {"labels": {"x": "y"}}}, params=dry,
                             content_type="application/merge-patch+json"))[0] == 200
    assert (await http33.req("PATCH", f"{PODS}/dry", pod("dry", uid="", labels={"x": "y"}),
                             params={**dry, "fieldManager": "t"}, content_type="application/apply-patch+yaml"))[0] == 200
    assert (await http33.req("DELETE", f"{PODS}/dry", params=dry))[0] == 200
    assert (await http33.req("DELETE", PODS, params=dry))[0] == 200
    st, now = await http33.req("GET", f"{PODS}/dry")
    assert st == 200 and now["metadata"]["resourceVersion"] == rv and "labels" not in now["metadata"]
    st, body = await http33.req("POST", PODS, pod("dry2", uid=""), params={"dryRun": "Bogus"})
    assert st == 422 and body["details"]["kind"] == "CreateOptions"


async def test_apply_needs_a_field_manager(http33: Http) -> None:
    st, body = await http33.req("PATCH", f"{PODS}/applied", pod("applied", uid=""),
                                content_type="application/apply-patch+yaml")
    assert st == 422 and body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                             "is required for apply patch")


async def test_secret_string_data_is_stored_as_data(http33: Http) -> None:
    path = "/api/v1/namespaces/default/secrets"
    st, created = await http33.req("POST", path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                                                  "data": {"a": "eA=="}, "stringData": {"b": "hello"}})
    assert st == 201 and "stringData" not in created
    _, got = await http33.req("GET", f"{path}/s")
    assert got["data"] == {"a": "eA==", "b": base64.b64encode(b"hello").decode()} and "stringData" not in got
    st, patched = await http33.req("PATCH", f"{path}/s", {"stringData": {"a": "over"}},
                                   content_type="application/merge-patch+json")
    assert st == 200 and base64.b64decode(patched["data"]["a"]) == b"over" and "stringData" not in patched


async def test_status_patches_are_decoded_like_spec_updates(http33: Http) -> None:
    await http33.req("POST", PODS, pod("st", uid=""))
    for bad in ({"phase": 5}, {"conditions": "x"}, {"podIP": "not-an-ip"}):
        st, body = await http33.req("PATCH", f"{PODS}/st/status", {"status": bad},
                                    content_type="application/merge-patch+json")
        assert st == 422 and body["reason"] == "Invalid", bad
    st, body = await http33.req("PATCH", f"{PODS}/st/status", {"status": {"phase": "Running"}},
                                content_type="application/merge-patch+json")
    assert st == 200 and body["status"]["phase"] == "Running"


async def test_a_watch_never_outlives_the_servers_own_timeout(server33: ServerHandle) -> None:
    server33.http.min_request_timeout = 1.0
    ctx = ssl.create_default_context(cafile=str(server33.ca_file))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        t0 = time.monotonic()
        async with s.get(server33.url + PODS, params={"watch": "true", "timeoutSeconds": str(2**63 - 1)},
                         headers={"Authorization": f"Bearer {server33.admin_token}"},
                         timeout=aiohttp.ClientTimeout(total=10)) as r:
            assert r.status == 200
            await r.read()
        assert time.monotonic() - t0 < 5
        async with s.get(server33.url + PODS, params={"watch": "true", "timeoutSeconds": "1" * 25},
                         headers={"Authorization": f"Bearer {server33.admin_token}"}) as r:
            assert r.status == 400


async def test_kubectl_keeps_its_columns_next_to_a_pod_it_cannot_print(kubectl: Kubectl) -> None:
    srv = kubectl.srv
    await kubectl.ok("run", "fine", "--image=busybox", "--restart=Never")
    # an object stored before bodies were type-checked (written past the API on purpose)
    bad = pod("legacy", metadata={"creationTimestamp": "2024-01-01T00:00:00Z"}, status={"conditions": "x"})
    srv.store.create("pods", "default", "legacy", bad)
    out = await kubectl.ok("get", "pods")
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert any(r.split()[:2] == ["fine", "0/1"] for r in rows)
    assert any(r.split()[:4] == ["legacy", "<unknown>", "<unknown>", "<unknown>"] for r in rows)


async def test_kubectl_reports_server_side_validation_errors(kubectl: Kubectl, tmp_path: Any) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n"
                 "  - {name: c, image: busybox, securityContext: {privileged: 'yes'}}\n")
    rc, _out, err = await kubectl.run("apply", "-f", str(f))
    assert rc != 0 and "cannot unmarshal string into Go struct field SecurityContext" in err
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n"
                 "  - {name: c, image: busybox, imagee: x}\n")
    rc, _out, err = await kubectl.run("apply", "-f", str(f))
    assert rc != 0 and 'strict decoding error: unknown field "spec.containers[0].imagee"' in err


async def test_the_official_python_client_still_works(server33: ServerHandle) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes import client, config

    def drive() -> dict[str, Any]:
        api_client = config.new_client_from_config(config_file=str(server33.kubeconfig))
        try:
            v1 = client.CoreV1Api(api_client)
            body = client.V1Pod(metadata=client.V1ObjectMeta(name="pyclient", labels={"app": "x"}),
                                spec=client.V1PodSpec(containers=[client.V1Container(
                                    name="c", image="busybox", resources=client.V1ResourceRequirements(
                                        limits={"cpu": "500m", "memory": "64Mi"}))]))
            v1.create_namespaced_pod("default", body)
            v1.patch_namespaced_pod("pyclient", "default", {"metadata": {"labels": {"patched": "yes"}}})
            got = v1.read_namespaced_pod("pyclient", "default")
            got.metadata.annotations = {"replaced": "yes"}
            v1.replace_namespaced_pod("pyclient", "default", got)
            v1.create_namespaced_secret("default", client.V1Secret(
                metadata=client.V1ObjectMeta(name="pysecret"), string_data={"k": "v"}))
            secret = v1.read_namespaced_secret("pysecret", "default")
            listed = v1.list_namespaced_pod("default", label_selector="app=x,patched in (yes)")
            final = v1.read_namespaced_pod("pyclient", "default")
            v1.delete_namespaced_pod("pyclient", "default", grace_period_seconds=0)
            return {"labels": final.metadata.labels, "annotations": final.metadata.annotations,
                    "listed": [p.metadata.name for p in listed.items], "secret": secret.data}
        finally:
            api_client.close()

    assert kubernetes is not None
    out = await asyncio.to_thread(drive)
    assert out["labels"] == {"app": "x", "patched": "yes"} and out["annotations"] == {"replaced": "yes"}
    assert out["listed"] == ["pyclient"] and out["secret"] == {"k": base64.b64encode(b"v").decode()}


async def test_a_status_patch_for_a_recreated_pod_is_a_uid_conflict(http33: Http) -> None:
    st, created = await http33.req("POST", PODS, pod("reborn", uid=""))
    assert st == 201
    merge = "application/merge-patch+json"
    st, body = await http33.req("PATCH", f"{PODS}/reborn/status",
                                {"metadata": {"uid": "the-old-pods-uid"}, "status": {"phase": "Running"}},
                                content_type=merge)
    assert st == 409 and body["reason"] == "Conflict"
    assert body["message"].endswith("Precondition failed: UID in precondition: the-old-pods-uid, "
                                    f"UID in object meta: {created['metadata']['uid']}")
    st, body = await http33.req("PATCH", f"{PODS}/reborn/status",
                                {"metadata": {"uid": created["metadata"]["uid"]}, "status": {"phase": "Running"}},
                                content_type=merge)
    assert st == 200 and body["status"]["phase"] == "Running"
