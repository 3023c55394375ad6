"""Service accounts against the real dev API server: the token volume admission adds to pods, and
TokenRequest tokens bound to a pod that stop working once the pod is gone."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.builders import container, pod
from tests.integration.server.conftest import Http


@pytest.fixture
def http(http33: Http) -> Http:
    """One server version is enough: nothing here depends on the minor version kubectl sees."""
    return http33


PODS = "/api/v1/namespaces/default/pods"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _claims(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


async def _create(http: Http, body: dict[str, Any], path: str = PODS) -> dict[str, Any]:
    st, obj = await http.req("POST", path, body)
    assert st == 201, obj
    return dict(obj)


async def test_every_namespace_has_a_default_account_and_the_root_ca(http: Http) -> None:
    await _create(http, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}, "/api/v1/namespaces")
    st, sa = await http.req("GET", "/api/v1/namespaces/team/serviceaccounts/default")
    assert st == 200, sa
    st, cm = await http.req("GET", "/api/v1/namespaces/team/configmaps/kube-root-ca.crt")
    assert st == 200 and cm["data"]["ca.crt"] == http.srv.ca_file.read_text()


async def test_pods_get_the_kube_api_access_volume_in_every_container(http: Http) -> None:
    p = pod("sa", uid="", containers=[container("app")], init_containers=[container("init")])
    created = await _create(http, p)
    spec = created["spec"]
    assert spec["serviceAccountName"] == "default"
    vols = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
    assert len(vols) == 1 and len(vols[0]["name"]) == len("kube-api-access-") + 5
    projected = vols[0]["projected"]
    assert projected["defaultMode"] == 420
    assert projected["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]
    for c in spec["initContainers"] + spec["containers"]:
        assert c["volumeMounts"] == [{"name": vols[0]["name"], "readOnly": True, "mountPath": SA_MOUNT}]


async def test_automount_false_on_the_pod_or_its_account_means_no_token_volume(http: Http) -> None:
    created = await _create(http, pod("no-token", uid="", automountServiceAccountToken=False))
    assert "volumes" not in created["spec"]
    await _create(http, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
                         "automountServiceAccountToken": False}, "/api/v1/namespaces/default/serviceaccounts")
    created = await _create(http, pod("quiet", uid="", serviceAccountName="quiet"))
    assert "volumes" not in created["spec"]
    # the pod's own preference wins over its account's
    created = await _create(http, pod("loud", uid="", serviceAccountName="quiet", automountServiceAccountToken=True))
    assert created["spec"]["volumes"][0]["name"].startswith("kube-api-access-")


async def test_a_container_that_mounts_the_token_path_itself_keeps_its_mount(http: Http) -> None:
    own = container("own", volumeMounts=[{"name": "mine", "mountPath": SA_MOUNT}])
    created = await _create(http, pod("own", uid="", containers=[own, container("other")],
                                      volumes=[{"name": "mine", "emptyDir": {}}]))
    by_name = {c["name"]: c for c in created["spec"]["containers"]}
    assert by_name["own"]["volumeMounts"] == [{"name": "mine", "mountPath": SA_MOUNT}]
    assert by_name["other"]["volumeMounts"][0]["name"].startswith("kube-api-access-")


async def test_a_pod_of_a_missing_account_is_forbidden(http: Http) -> None:
    st, err = await http.req("POST", PODS, pod("ghost", uid="", serviceAccountName="ghost"))
    assert st == 403, err
    assert err["message"] == ('pods "ghost" is forbidden: error looking up service account default/ghost: '
                              'serviceaccount "ghost" not found')


async def test_mirror_pods_are_not_given_a_token_volume(http: Http) -> None:
    created = await _create(http, pod("mirror", uid="", annotations={"kubernetes.io/config.mirror": "abc"}))
    assert "volumes" not in created["spec"]


async def test_replacing_a_pod_with_its_manifest_keeps_the_token_volume(http: Http) -> None:
    body = pod("rep", uid="", containers=[container("c", "busybox:1.36")])
    created = await _create(http, body)
    body["spec"]["containers"][0]["image"] = "busybox:1.37"
    st, updated = await http.req("PUT", f"{PODS}/rep", body)
    assert st == 200, updated
    assert updated["spec"]["volumes"] == created["spec"]["volumes"]
    assert updated["spec"]["containers"][0]["volumeMounts"] == created["spec"]["containers"][0]["volumeMounts"]


async def _pod_token(http: Http, name: str, uid: str) -> dict[str, Any]:
    st, tr = await http.req("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                                               "uid": uid}}})
    assert st == 201, tr
    return dict(tr)


async def _review(http: Http, token: str) -> dict[str, Any]:
    st, rv = await http.req("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    assert st == 201, rv
    return dict(rv["status"])


async def test_a_pod_bound_token_is_valid_only_while_the_pod_exists(http: Http) -> None:
    created = await _create(http, pod("bound", uid=""))
    uid = created["metadata"]["uid"]
    tr = await _pod_token(http, "bound", uid)
    token = tr["status"]["token"]
    claims = _claims(token)
    st, sa = await http.req("GET", "/api/v1/namespaces/default/serviceaccounts/default")
    assert claims["kubernetes.io"] == {"namespace": "default", "pod": {"name": "bound", "uid": uid},
                                       "serviceaccount": {"name": "default", "uid": sa["metadata"]["uid"]}}
    assert claims["sub"] == "system:serviceaccount:default:default"
    assert claims["exp"] - claims["iat"] == 3607 and claims["nbf"] == claims["iat"] and claims["aud"]

    status = await _review(http, token)
    assert status["authenticated"] is True
    assert status["user"]["username"] == "system:serviceaccount:default:default"
    assert status["user"]["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default",
                                        "system:authenticated"]
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]
    # the same token works as a bearer token against the API server
    st, _ = await http.req("GET", "/api/v1/namespaces/default/pods", token=token)
    assert st == 403  # authenticated (not 401), but no policy grants it yet

    st, _ = await http.req("DELETE", f"{PODS}/bound")  # unbound pod: gone at once
    assert st == 200
    status = await _review(http, token)
    assert status["authenticated"] is False
    assert status["error"] == 'invalid bearer token, pods "bound" not found'
    st, _ = await http.req("GET", "/api/v1/namespaces/default/pods", token=token)
    assert st == 401


async def test_a_token_for_a_recreated_pod_of_the_same_name_is_rejected(http: Http) -> None:
    first = await _create(http, pod("again", uid=""))
    token = (await _pod_token(http, "again", first["metadata"]["uid"]))["status"]["token"]
    await http.req("DELETE", f"{PODS}/again")
    second = await _create(http, pod("again", uid=""))
    status = await _review(http, token)
    assert status["authenticated"] is False
    assert status["error"] == (f"invalid bearer token, pod UID ({second['metadata']['uid']}) does not match "
                               f"claim ({first['metadata']['uid']})")


async def test_a_role_binding_lets_a_pods_account_list_pods_in_its_namespace(http: Http) -> None:
    created = await _create(http, pod("reader", uid=""))
    token = (await _pod_token(http, "reader", created["metadata"]["uid"]))["status"]["token"]
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}
    st, _ = await http.req("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", binding)
    assert st == 201
    st, lst = await http.req("GET", "/api/v1/namespaces/default/pods", token=token)
    assert st == 200 and [p["metadata"]["name"] for p in lst["items"]] == ["reader"]
    st, _ = await http.req("GET", "/api/v1/namespaces/kube-system/pods", token=token)
    assert st == 403
    st, _ = await http.req("DELETE", f"{PODS}/reader", token=token)
    assert st == 403
