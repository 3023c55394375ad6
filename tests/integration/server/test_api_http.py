"""Wire-level behaviour: error Statuses for bad input, auth, restart durability, watch resume."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykubelet.server.auth import node_kubeconfig
from pykubelet.server.main import run_server

from .conftest import Http

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def pod(name: str) -> dict[str, Any]:
    return {**POD, "metadata": {"name": name}}


async def test_bad_input_statuses(http33: Http) -> None:
    h = http33
    base = "/api/v1/namespaces/default/pods"
    st, body = await h.req("POST", base, raw=b'{"apiVersion": "v1", "kind": ')
    assert st == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"
    st, body = await h.req("POST", base, raw=b"kind: Pod\n  bad: [", content_type="application/yaml")
    assert st == 400 and body["reason"] == "BadRequest"
    st, body = await h.req("POST", base, raw=b"apiVersion: v1\nkind: Pod\nmetadata: {name: y1}\nspec:\n"
                           b"  containers: [{name: c, image: busybox}]\n", content_type="application/yaml")
    assert st == 201, body
    bad = json.loads(json.dumps(POD))
    bad["spec"]["foo"] = 1
    st, body = await h.req("POST", base, bad, params={"fieldValidation": "Strict"})
    assert st == 400 and body["message"] == ('Pod in version "v1" cannot be handled as a Pod: '
                                             'strict decoding error: unknown field "spec.foo"')
    st, body = await h.req("POST", base, pod("Bad_Name"))
    assert st == 422 and body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "metadata.name"
    st, created = await h.req("POST", base, pod("p1"))
    assert st == 201
    st, body = await h.req("POST", base, pod("p1"))
    assert st == 409 and body["reason"] == "AlreadyExists"
    stale = json.loads(json.dumps(created))
    stale["metadata"]["labels"] = {"a": "b"}
    assert (await h.req("PUT", f"{base}/p1", stale))[0] == 200
    st, body = await h.req("PUT", f"{base}/p1", stale)
    assert st == 409 and body["reason"] == "Conflict"
    st, body = await h.req("POST", "/api/v1/namespaces/default/configmaps", raw=b" " * (3 * 1024 * 1024 + 10))
    assert st == 413 and body["code"] == 413
    st, body = await h.req("GET", "/api/v1/namespaces/default/widgets")
    assert st == 404 and body["reason"] == "NotFound"
    st, body = await h.req("GET", "/apis/nope.example.com/v1/things")
    assert st == 404
    st, body = await h.req("PUT", base, pod("x"))
    assert st == 405 and body["reason"] == "MethodNotAllowed"
    st, body = await h.req("PATCH", f"{base}/p1", {"a": 1}, content_type="application/xml")
    assert st == 415
    st, body = await h.req("GET", base, params={"labelSelector": "a in (b"})
    assert st == 400
    st, body = await h.req("GET", base, params={"fieldSelector": "spec.bogus=1"})
    assert st == 400
    st, body = await h.req("POST", "/api/v1/namespaces/nope/configmaps",
                           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert st == 404 and 'namespaces "nope" not found' in body["message"]
    # still serving
    st, body = await h.req("GET", "/healthz")
    assert st == 200 and body == "ok"


async def test_authn_authz(http33: Http) -> None:
    h = http33
    st, body = await h.req("GET", "/api/v1/pods", token="")
    assert st == 401 and body["reason"] == "Unauthorized"
    st, body = await h.req("GET", "/api/v1/pods", token="bogus")
    assert st == 401
    assert (await h.req("GET", "/version", token=""))[0] == 200
    # node credentials work
    import yaml

    kc = yaml.safe_load(node_kubeconfig(h.srv.data_dir, "n1", h.srv.url).read_text())
    node_tok = kc["users"][0]["user"]["token"]
    assert (await h.req("GET", "/api/v1/pods", token=node_tok))[0] == 200
    # service-account token: authenticated by TokenReview, but not authorized by default (as a
    # bearer token it must carry the API server's audience, as upstream's --api-audiences)
    st, tr = await h.req("POST", "/api/v1/namespaces/default/serviceaccounts/default/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"audiences": ["api", "https://kubernetes.default.svc.cluster.local"],
                                   "expirationSeconds": 3600}})
    assert st == 201
    sa_tok = tr["status"]["token"]
    st, rev = await h.req("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                           "spec": {"token": sa_tok, "audiences": ["api"]}})
    assert st == 201 and rev["status"]["authenticated"] is True
    assert rev["status"]["user"]["username"] == "system:serviceaccount:default:default"
    st, body = await h.req("GET", "/api/v1/namespaces/default/pods", token=sa_tok)
    assert st == 403 and body["reason"] == "Forbidden"
    st, sar = await h.req("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                          {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                           "spec": {"user": "system:node:n1", "groups": ["system:nodes"],
                                    "resourceAttributes": {"verb": "get", "resource": "pods"}}})
    assert st == 201 and sar["status"]["allowed"] is True
    st, _ = await h.req("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
                        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                         "metadata": {"name": "sa-view"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                         "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]})
    assert st == 201
    assert (await h.req("GET", "/api/v1/namespaces/default/pods", token=sa_tok))[0] == 200
    assert (await h.req("POST", "/api/v1/namespaces/default/pods", pod("z"), token=sa_tok))[0] == 403


async def test_restart_loses_nothing(tmp_path: Path) -> None:
    d = tmp_path / "data"
    async with run_server(d, port=0, controllers=False) as srv:
        h = Http(srv)
        try:
            for i in range(5):
                assert (await h.req("POST", "/api/v1/namespaces/default/pods", pod(f"p{i}")))[0] == 201
            _st, lst = await h.req("GET", "/api/v1/pods")
            rv_before = int(lst["metadata"]["resourceVersion"])
        finally:
            await h.close()
    async with run_server(d, port=0, controllers=False) as srv:
        h = Http(srv)
        try:
            _st, lst = await h.req("GET", "/api/v1/namespaces/default/pods")
            assert sorted(p["metadata"]["name"] for p in lst["items"]) == [f"p{i}" for i in range(5)]
            assert int(lst["metadata"]["resourceVersion"]) == rv_before
            _st, created = await h.req("POST", "/api/v1/namespaces/default/pods", pod("after"))
            assert int(created["metadata"]["resourceVersion"]) > rv_before
            # a watch from the pre-restart revision still works (nothing was missed)
            events = await _watch(h, "/api/v1/namespaces/default/pods", rv_before)
            assert [e["object"]["metadata"]["name"] for e in events] == ["after"]
        finally:
            await h.close()


async def _watch(h: Http, path: str, rv: int | str, secs: int = 1, **params: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {h.srv.admin_token}"}
    q = {"watch": "true", "resourceVersion": str(rv), "timeoutSeconds": str(secs), **params}
    async with h.session.get(h.srv.url + path, params=q, headers=headers) as r:
        assert r.status == 200
        return [json.loads(line) for line in (await r.text()).splitlines() if line.strip()]


async def test_watch_resume_and_expired(tmp_path: Path) -> None:
    async with run_server(tmp_path / "d", port=0, controllers=False, history=50) as srv:
        h = Http(srv)
        try:
            _st, lst = await h.req("GET", "/api/v1/namespaces/default/pods")
            rv0 = lst["metadata"]["resourceVersion"]
            for i in range(5):
                await h.req("POST", "/api/v1/namespaces/default/pods", pod(f"w{i}"))
            await h.req("DELETE", "/api/v1/namespaces/default/pods/w0")
            evs = await _watch(h, "/api/v1/namespaces/default/pods", rv0)
            assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == \
                [("ADDED", f"w{i}") for i in range(5)] + [("DELETED", "w0")]
            # label-filtered watch, bookmarks allowed
            evs = await _watch(h, "/api/v1/namespaces/default/pods", rv0, fieldSelector="metadata.name=w3",
                               allowWatchBookmarks="true")
            assert [e["object"]["metadata"]["name"] for e in evs if e["type"] != "BOOKMARK"] == ["w3"]
            # resourceVersion=0: synthetic ADDED for current state
            evs = await _watch(h, "/api/v1/namespaces/default/pods", "0")
            assert sorted(e["object"]["metadata"]["name"] for e in evs) == [f"w{i}" for i in range(1, 5)]
            for i in range(60):
                await h.req("POST", "/api/v1/namespaces/default/configmaps",
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}"}})
            evs = await _watch(h, "/api/v1/namespaces/default/pods", rv0)
            assert evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 410
            assert evs[0]["object"]["reason"] == "Expired"
        finally:
            await h.close()


async def test_watch_live_delivery(http33: Http) -> None:
    h = http33
    _st, lst = await h.req("GET", "/api/v1/namespaces/default/pods")
    task = asyncio.create_task(_watch(h, "/api/v1/namespaces/default/pods", lst["metadata"]["resourceVersion"],
                                      secs=3))
    await asyncio.sleep(0.3)
    await h.req("POST", "/api/v1/namespaces/default/pods", pod("live"))
    await h.req("PATCH", "/api/v1/namespaces/default/pods/live", {"metadata": {"labels": {"x": "y"}}},
                content_type="application/merge-patch+json")
    evs = await task
    assert [e["type"] for e in evs] == ["ADDED", "MODIFIED"]


async def test_pagination_and_selectors(http33: Http) -> None:
    h = http33
    for i in range(7):
        await h.req("POST", "/api/v1/namespaces/default/configmaps",
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": f"cm{i}", "labels": {"parity": "even" if i % 2 == 0 else "odd"}}})
    names: list[str] = []
    cont = ""
    while True:
        params = {"limit": "3", "labelSelector": "parity in (even,odd)"}
        if cont:
            params["continue"] = cont
        _st, page = await h.req("GET", "/api/v1/namespaces/default/configmaps", params=params)
        names += [c["metadata"]["name"] for c in page["items"]]
        cont = page["metadata"].get("continue", "")
        if not cont:
            break
    assert names == [f"cm{i}" for i in range(7)]
    _st, lst = await h.req("GET", "/api/v1/namespaces/default/configmaps", params={"labelSelector": "parity!=even,parity"})
    assert [c["metadata"]["name"] for c in lst["items"]] == ["cm1", "cm3", "cm5"]


async def test_namespace_lifecycle(http33: Http) -> None:
    h = http33
    st, _ = await h.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": "team"}})
    assert st == 201
    st, _sa = await h.req("GET", "/api/v1/namespaces/team/serviceaccounts/default")
    assert st == 200
    await h.req("POST", "/api/v1/namespaces/team/pods", pod("t1"))
    st, ns = await h.req("DELETE", "/api/v1/namespaces/team")
    assert st == 200 and ns["status"]["phase"] == "Terminating"
    for _ in range(100):
        if (await h.req("GET", "/api/v1/namespaces/team"))[0] == 404:
            break
        await asyncio.sleep(0.1)
    assert (await h.req("GET", "/api/v1/namespaces/team"))[0] == 404
    assert (await h.req("GET", "/api/v1/namespaces/team/pods/t1"))[0] == 404


_paths = st.sampled_from([
    "/api/v1/namespaces/default/pods", "/api/v1/namespaces/default/pods/x", "/api/v1/nodes",
    "/api/v1/namespaces/default/configmaps", "/apis/coordination.k8s.io/v1/namespaces/default/leases",
    "/api/v1/namespaces/default/pods/x/status", "/api/v1/namespaces/default/pods/x/eviction",
    "/apis/certificates.k8s.io/v1/certificatesigningrequests/x/approval", "/api/v1/namespaces/x%2Fy/pods",
    "/apis/authentication.k8s.io/v1/tokenreviews", "/api/v1/namespaces/default/serviceaccounts/default/token",
])
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                     max_leaves=20)
_bodies = st.one_of(
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.fixed_dictionaries({"apiVersion": st.sampled_from(["v1", "x"]), "kind": st.sampled_from(["Pod", "ConfigMap"]),
                           "metadata": st.dictionaries(st.sampled_from(["name", "labels", "namespace"]), _json),
                           "spec": _json}).map(lambda v: json.dumps(v).encode()),
)
_ctypes = st.sampled_from(["application/json", "application/yaml", "application/merge-patch+json",
                           "application/strategic-merge-patch+json", "application/json-patch+json",
                           "application/apply-patch+yaml", "application/vnd.kubernetes.protobuf", "text/plain"])


async def test_fuzz_bodies_and_paths(tmp_path: Path) -> None:
    async with run_server(tmp_path / "fz", port=0, controllers=False) as srv:
        ctx = ssl.create_default_context(cafile=str(srv.ca_file))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            loop = asyncio.get_running_loop()
            results: list[tuple[int, Any]] = []

            async def one(method: str, path: str, body: bytes, ct: str) -> None:
                headers = {"Authorization": f"Bearer {srv.admin_token}", "Content-Type": ct}
                async with session.request(method, srv.url + path, data=body, headers=headers) as r:
                    text = await r.text()
                    results.append((r.status, text))
                    assert r.status < 500, (method, path, body, ct, r.status, text)
                    if r.status >= 400:
                        assert json.loads(text)["kind"] == "Status"

            @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
            @given(st.sampled_from(["POST", "PUT", "PATCH", "DELETE", "GET"]), _paths, _bodies, _ctypes)
            def run(method: str, path: str, body: bytes, ct: str) -> None:
                fut = asyncio.run_coroutine_threadsafe(one(method, path, body, ct), loop)
                fut.result(timeout=30)

            await asyncio.to_thread(run)
            assert results
            async with session.get(srv.url + "/readyz") as r:
                assert r.status == 200
