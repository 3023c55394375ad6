"""Pure decisions of RBAC, the Node authorizer, bootstrap tokens, the CSR approver and rotation."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pykubelet.agent.certificate.manager import node_address_names, rotation_deadline
from pykubelet.server import bootstrap_tokens, rbac
from pykubelet.server.controllers.csrapprover import decide
from pykubelet.server.nodeauthorizer import NodeAuthorizer, forbidden_labels, node_identity

Obj = dict[str, Any]


def req(verb: str, resource: str = "", *, group: str = "", sub: str = "", name: str = "", ns: str = "",
        path: str = "") -> rbac.Request:
    return rbac.Request("u", [], verb, ns, group, resource, sub, name, path, resource_request=not path)


def test_rules_match_verbs_groups_resources_subresources_and_names() -> None:
    rule = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "*/status"], "resourceNames": ["a"]}
    assert rbac.rule_allows(rule, req("get", "pods", name="a"))
    assert not rbac.rule_allows(rule, req("get", "pods", name="b"))
    assert not rbac.rule_allows(rule, req("list", "pods", name="a"))
    assert rbac.rule_allows(rule, req("get", "nodes", sub="status", name="a"))
    assert not rbac.rule_allows(rule, req("get", "pods", group="apps", name="a"))
    assert rbac.rule_allows({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]}, req("get", path="/apis/apps"))
    assert not rbac.rule_allows({"verbs": ["get"], "nonResourceURLs": ["/api"]}, req("get", path="/apis"))


def test_default_policy_aggregates_view_into_edit_into_admin() -> None:
    roles = rbac.default_cluster_roles()
    filled = rbac.aggregate(roles)
    assert set(filled) == {"admin", "edit", "view"}
    assert all(r in filled["edit"] for r in filled["view"])
    assert all(r in filled["admin"] for r in filled["edit"])
    names = {r["metadata"]["name"] for r in roles}
    assert {"cluster-admin", "system:basic-user", "system:discovery", "system:public-info-viewer",
            "system:node-proxier", "system:node"} <= names
    admin_binding = next(b for b in rbac.default_cluster_role_bindings() if b["metadata"]["name"] == "cluster-admin")
    assert admin_binding["subjects"] == [{"apiGroup": rbac.GROUP, "kind": "Group", "name": "system:masters"}]


def test_escalation_check_lists_the_rules_not_held() -> None:
    held = [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]
    wanted = [{"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}]
    missing = rbac.uncovered(held, wanted)
    assert missing == [{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}]
    assert rbac.format_rules(missing) == '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}'
    assert rbac.uncovered([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], wanted) == []


def test_validation_reports_upstream_field_errors() -> None:
    errs = rbac.validate("RoleBinding", {"roleRef": {"apiGroup": "x", "kind": "Pod", "name": ""},
                                         "subjects": [{"kind": "Robot", "name": "r"}]})
    assert [f for f, _ in errs] == ["roleRef.apiGroup", "roleRef.kind", "roleRef.name", "subjects[0].kind"]
    assert rbac.validate("Role", {"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]}) == [
        ("rules[0].nonResourceURLs", "Invalid value: namespaced rules cannot apply to non-resource URLs")]


class Store:
    def __init__(self, objs: dict[str, list[Obj]]) -> None:
        self.objs = objs

    def iter_raw(self, kind: str, ns: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]:
        for o in self.objs.get(kind, []):
            m = o["metadata"]
            if ns is None or m.get("namespace", "") == ns:
                yield (m.get("namespace", ""), m["name"]), o

    iter_unordered = iter_raw

    def peek(self, kind: str, ns: str, name: str) -> Obj | None:
        return next((o for (n, nm), o in self.iter_raw(kind, ns) if nm == name and n == ns), None)


def test_node_authorizer_follows_pods_to_secrets_claims_and_volumes() -> None:
    pod = {"metadata": {"name": "p", "namespace": "d"},
           "spec": {"nodeName": "n1", "imagePullSecrets": [{"name": "pull"}],
                    "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}},
                                {"name": "p", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}],
                    "containers": [{"name": "c"}]}}
    store = Store({"pods": [pod],
                   "persistentvolumeclaims": [{"metadata": {"name": "c", "namespace": "d"},
                                               "spec": {"volumeName": "pv1"}}],
                   "persistentvolumes": [{"metadata": {"name": "pv1"},
                                          "spec": {"csi": {"nodePublishSecretRef": {"name": "csi",
                                                                                    "namespace": "d"}}}}]})
    a = NodeAuthorizer(store)
    groups = ["system:nodes"]
    for res, name in (("secrets", "pull"), ("configmaps", "cm"), ("persistentvolumeclaims", "c"),
                      ("secrets", "csi")):
        assert a.authorize("system:node:n1", groups, req("get", res, name=name, ns="d")) == (True, ""), (res, name)
    assert a.authorize("system:node:n1", groups, req("get", "persistentvolumes", name="pv1")) == (True, "")
    assert a.authorize("system:node:n2", groups, req("get", "secrets", name="pull", ns="d")) == (
        None, "no relationship found between node 'n2' and this object")
    assert a.authorize("system:node:n1", groups, req("delete", "secrets", name="pull", ns="d"))[1] == \
        "can only read resources of this type"
    assert a.authorize("bob", ["system:authenticated"], req("get", "secrets", name="pull", ns="d")) == (None, "")
    assert node_identity("system:node:n1", []) == ("", False)


def test_nodes_may_not_set_restricted_labels() -> None:
    assert forbidden_labels({"node-restriction.kubernetes.io/a": "x", "kubernetes.io/hostname": "h",
                             "node-role.kubernetes.io/worker": "", "example.com/a": "b",
                             "node.kubernetes.io/instance-type": "t"}, {}) == [
        "node-restriction.kubernetes.io/a", "node-role.kubernetes.io/worker"]


def test_bootstrap_tokens_authenticate_until_they_expire() -> None:
    tid, secret = bootstrap_tokens.generate()
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    obj = bootstrap_tokens.token_secret(tid, secret, ttl_seconds=3600, now=now,
                                        extra_groups=["system:bootstrappers:edge", "system:masters"])

    def lookup(ns: str, name: str) -> Obj | None:
        return obj if (ns, name) == ("kube-system", f"bootstrap-token-{tid}") else None

    user = bootstrap_tokens.authenticate(f"{tid}.{secret}", lookup, now=now)
    assert user == (f"system:bootstrap:{tid}",
                    ["system:bootstrappers", "system:bootstrappers:edge", "system:authenticated"])
    assert bootstrap_tokens.authenticate(f"{tid}.{'x' * 16}", lookup, now=now) is None
    assert bootstrap_tokens.authenticate(f"{tid}.{secret}", lookup, now=now + dt.timedelta(hours=2)) is None
    assert bootstrap_tokens.authenticate("not-a-token", lookup, now=now) is None


def _csr(cn: str, org: str, signer: str, usages: list[str], username: str, groups: list[str],
         dns: list[str] | None = None) -> Obj:
    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    if dns:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    pem = b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return {"metadata": {"name": "c"}, "spec": {"request": base64.b64encode(pem).decode(), "signerName": signer,
                                               "usages": usages, "username": username, "groups": groups}}


def test_the_approver_checks_subject_usages_and_serving_names() -> None:
    client = "kubernetes.io/kube-apiserver-client-kubelet"
    new = decide(_csr("system:node:n1", "system:nodes", client, ["digital signature", "client auth"],
                      "system:bootstrap:abcdef", ["system:bootstrappers"]), None)
    assert (new.approve, new.sar_subresource) == (False, "nodeclient")
    renew = decide(_csr("system:node:n1", "system:nodes", client, ["client auth"], "system:node:n1",
                        ["system:nodes"]), None)
    assert renew.sar_subresource == "selfnodeclient"
    assert not decide(_csr("admin", "system:masters", client, ["client auth"], "x", []), None).sar_subresource
    node = {"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}}
    serving = "kubernetes.io/kubelet-serving"
    ok = decide(_csr("system:node:n1", "system:nodes", serving, ["digital signature", "server auth"],
                     "system:node:n1", ["system:nodes"], dns=["n1"]), node)
    assert ok.approve
    bad = decide(_csr("system:node:n1", "system:nodes", serving, ["server auth"], "system:node:n1",
                      ["system:nodes"], dns=["evil.example"]), node)
    assert not bad.approve and "not addresses" in bad.why


def test_rotation_deadline_is_70_to_90_percent_of_the_lifetime() -> None:
    assert rotation_deadline(100.0, 200.0, 0.0) == 170.0
    assert rotation_deadline(100.0, 200.0, 0.999) < 190.0
    assert node_address_names({"status": {"addresses": [{"address": "10.0.0.1"}, {"address": "n1"},
                                                        {"address": "10.0.0.1"}]}}) == (["n1"], ["10.0.0.1"])
