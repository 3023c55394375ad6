"""Authorization on the dev control plane: the Node authorizer + NodeRestriction for kubelet
credentials, RBAC (default roles, bindings, escalation checks, aggregation) for everyone else,
checked over HTTP and with the real kubectl."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubelet.server.auth import PKI, TokenAuth, write_kubeconfig
from pykubelet.server.main import ServerHandle, run_server
from tests.integration.server.conftest import Http, Kubectl

RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, controllers=False) as s:
        yield s


@pytest.fixture
async def admin(srv: ServerHandle) -> AsyncIterator[Http]:
    h = Http(srv)
    yield h
    await h.close()


def node_token(srv: ServerHandle, node: str) -> str:
    cfg = yaml.safe_load(srv.node_kubeconfig(node).read_text())
    return str(cfg["users"][0]["user"]["token"])


def user_token(srv: ServerHandle, user: str, groups: list[str] | None = None) -> str:
    return TokenAuth(srv.data_dir, PKI(srv.data_dir)).add_token(user, user, groups or [])


def pod_with_secret(name: str, node: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "busybox",
                                     "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": secret,
                                                                                          "key": "k"}}}]}]}}


async def _setup_two_nodes(admin: Http) -> None:
    for n in ("n1", "n2"):
        st, _ = await admin.req("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}})
        assert st == 201
    for s in ("s1", "s2"):
        st, _ = await admin.req("POST", "/api/v1/namespaces/default/secrets",
                                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": s},
                                 "stringData": {"k": "v"}})
        assert st == 201
    for pod, node, secret in (("p1", "n1", "s1"), ("p2", "n2", "s2")):
        st, body = await admin.req("POST", "/api/v1/namespaces/default/pods", pod_with_secret(pod, node, secret))
        assert st == 201, body


async def test_a_node_reads_only_the_secrets_of_its_own_pods(srv: ServerHandle, admin: Http) -> None:
    await _setup_two_nodes(admin)
    tok = node_token(srv, "n1")
    st, _ = await admin.req("GET", "/api/v1/namespaces/default/secrets/s1", token=tok)
    assert st == 200
    st, body = await admin.req("GET", "/api/v1/namespaces/default/secrets/s2", token=tok)
    assert st == 403
    assert body["message"] == ('secrets "s2" is forbidden: User "system:node:n1" cannot get resource "secrets" in '
                               "API group \"\" in the namespace \"default\": no relationship found between node "
                               "'n1' and this object")
    st, body = await admin.req("GET", "/api/v1/namespaces/default/secrets", token=tok)
    assert st == 403 and "No Object name found" in body["message"]
    st, _ = await admin.req("GET", "/api/v1/namespaces/default/secrets",
                            params={"fieldSelector": "metadata.name=s1"}, token=tok)
    assert st == 200


async def test_a_node_modifies_only_its_own_node_and_pods(srv: ServerHandle, admin: Http) -> None:
    await _setup_two_nodes(admin)
    tok = node_token(srv, "n1")
    merge = {"Content-Type": "application/merge-patch+json"}
    st, body = await admin.req("PATCH", "/api/v1/nodes/n2", raw=b'{"metadata":{"labels":{"a":"b"}}}',
                               content_type=merge["Content-Type"], token=tok)
    assert st == 403
    assert body["message"] == 'nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"'
    st, _ = await admin.req("PATCH", "/api/v1/nodes/n1", raw=b'{"metadata":{"labels":{"a":"b"}}}',
                            content_type=merge["Content-Type"], token=tok)
    assert st == 200
    st, body = await admin.req(
        "PATCH", "/api/v1/nodes/n1", raw=b'{"metadata":{"labels":{"node-restriction.kubernetes.io/pci":"yes"}}}',
        content_type=merge["Content-Type"], token=tok)
    assert st == 403
    assert body["message"] == ('nodes "n1" is forbidden: is not allowed to modify labels: '
                               "node-restriction.kubernetes.io/pci")
    st, body = await admin.req("PATCH", "/api/v1/namespaces/default/pods/p2/status",
                               raw=b'{"status":{"phase":"Running"}}', content_type=merge["Content-Type"], token=tok)
    assert st == 403
    assert body["message"].endswith('node "n1" can only update pod status for pods with spec.nodeName set to itself')
    st, _ = await admin.req("PATCH", "/api/v1/namespaces/default/pods/p1/status",
                            raw=b'{"status":{"phase":"Running"}}', content_type=merge["Content-Type"], token=tok)
    assert st == 200
    st, body = await admin.req("DELETE", "/api/v1/namespaces/default/pods/p2", token=tok)
    assert st == 403
    assert body["message"] == 'pods "p2" is forbidden: node "n1" can only delete pods with spec.nodeName set to itself'
    st, body = await admin.req("POST", "/api/v1/namespaces/default/pods", pod_with_secret("m", "n1", "s1"), token=tok)
    assert st == 403 and "can only create mirror pods" in body["message"]
    st, body = await admin.req("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2",
                               {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                "metadata": {"name": "n2"}}, token=tok)
    assert st == 403
    assert body["message"].endswith("can only access node lease with the same name as the requesting node")


async def test_a_user_bound_to_view_in_one_namespace_reads_there_only(srv: ServerHandle, admin: Http,
                                                                     tmp_path: Path) -> None:
    st, _ = await admin.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": "team"}})
    assert st == 201
    tok = user_token(srv, "alice")
    st, body = await admin.req("GET", "/api/v1/namespaces/team/pods", token=tok)
    assert st == 403
    assert body["message"] == ('pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the '
                               'namespace "team"')
    kc = Kubectl(srv, tmp_path / "kcache")
    (tmp_path / "kcache").mkdir()
    await kc.ok("create", "rolebinding", "alice-view", "--clusterrole=view", "--user=alice", "-n", "team")
    assert (await admin.req("GET", "/api/v1/namespaces/team/pods", token=tok))[0] == 200
    assert (await admin.req("GET", "/api/v1/namespaces/default/pods", token=tok))[0] == 403
    assert (await admin.req("DELETE", "/api/v1/namespaces/team/pods/x", token=tok))[0] == 403
    alice_cfg = write_kubeconfig(tmp_path / "alice.kubeconfig", srv.url, srv.ca_file, "alice", tok)
    alice = Kubectl(srv, tmp_path / "kcache")
    alice.srv = ServerHandle(srv.url, alice_cfg, tok, srv.data_dir, srv.ca_file, None, srv.registry, srv.http)
    rc, out, _ = await alice.run("auth", "can-i", "list", "pods", "-n", "team")
    assert (rc, out.strip()) == (0, "yes")
    rc, out, _ = await alice.run("auth", "can-i", "list", "pods", "-n", "default")
    assert (rc, out.strip()) == (1, "no")
    rc, out, _ = await alice.run("auth", "can-i", "create", "pods", "-n", "team")
    assert out.strip() == "no"
    out = await kc.ok("get", "rolebinding", "-n", "team", "-o", "wide")
    assert "ClusterRole/view" in out and "alice" in out


async def test_kubectl_creates_roles_and_bindings_and_service_accounts_get_nothing(srv: ServerHandle, admin: Http,
                                                                                  tmp_path: Path) -> None:
    (tmp_path / "kc").mkdir()
    kc = Kubectl(srv, tmp_path / "kc")
    await kc.ok("create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", "default")
    await kc.ok("create", "clusterrole", "node-reader", "--verb=get", "--resource=nodes")
    await kc.ok("create", "clusterrolebinding", "bob-nodes", "--clusterrole=node-reader", "--user=bob")
    await kc.ok("create", "rolebinding", "sa-reader", "--role=pod-reader", "--serviceaccount=default:default")
    out = await kc.ok("get", "clusterroles")
    assert "node-reader" in out and "cluster-admin" in out and "CREATED AT" in out
    role = json.loads(await kc.ok("get", "role", "pod-reader", "-o", "json"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    bob = user_token(srv, "bob")
    assert (await admin.req("GET", "/api/v1/nodes", token=bob))[0] == 403
    st, _ = await admin.req("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}})
    assert st == 201
    assert (await admin.req("GET", "/api/v1/nodes/x", token=bob))[0] == 200
    st, tr = await admin.req("POST", "/api/v1/namespaces/kube-system/serviceaccounts/default/token",
                             {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    assert st == 201
    sa = tr["status"]["token"]
    assert (await admin.req("GET", "/api/v1/namespaces/kube-system/pods", token=sa))[0] == 403
    assert (await admin.req("GET", "/api/v1/namespaces/kube-system/secrets", token=sa))[0] == 403
    assert (await admin.req("GET", "/api", token=sa))[0] == 200  # system:discovery


async def test_a_user_cannot_grant_rights_they_do_not_hold(srv: ServerHandle, admin: Http) -> None:
    st, _ = await admin.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": "team"}})
    assert st == 201
    st, _ = await admin.req("POST", f"{RBAC}/namespaces/team/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "carol-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]})
    assert st == 201
    tok = user_token(srv, "carol")

    def binding(name: str, role: str) -> dict[str, Any]:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]}
    st, _ = await admin.req("POST", f"{RBAC}/namespaces/team/rolebindings", binding("dave-view", "view"), token=tok)
    assert st == 201
    st, body = await admin.req("POST", f"{RBAC}/namespaces/team/rolebindings", binding("dave-root", "cluster-admin"),
                               token=tok)
    assert st == 403
    assert body["message"].startswith('rolebindings.rbac.authorization.k8s.io "dave-root" is forbidden: user "carol" '
                                      '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
                                      "currently held:\n{APIGroups:[")
    st, body = await admin.req("POST", f"{RBAC}/namespaces/team/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "nodes"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}, token=tok)
    assert st == 403 and '{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}' in body["message"]


async def test_a_cluster_role_labelled_for_aggregation_widens_view(srv: ServerHandle, admin: Http) -> None:
    st, _ = await admin.req("POST", f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]})
    assert st == 201
    for _ in range(100):
        _st, view = await admin.req("GET", f"{RBAC}/clusterroles/view")
        if {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]} in view["rules"]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"view was not aggregated: {view['rules']}")
    _st, adm = await admin.req("GET", f"{RBAC}/clusterroles/admin")
    assert {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]} in adm["rules"]
