"""RBAC (``rbac.authorization.k8s.io/v1``): the authorizer, the default policy, escalation checks.

Upstream's RBAC authorizer (``plugin/pkg/auth/authorizer/rbac``) answers "may this user do this?"
by walking every ClusterRoleBinding, and for a namespaced request the RoleBindings of that
namespace, whose subjects match the user (``User`` by name, ``Group`` by membership,
``ServiceAccount`` as ``system:serviceaccount:NS:NAME``), and asking whether one rule of the bound
role covers the request.  A rule covers a resource request when its verbs, apiGroups and
resources match (``*`` anywhere, ``res/sub`` for a subresource, ``*/sub`` for a subresource of
any resource) and, if it lists resourceNames, the name; a non-resource request when its verbs
and nonResourceURLs match (exact, ``*``, or a prefix ending in ``*``).  RBAC only ever allows:
there are no deny rules, so "no rule matched" is a denial without a reason.

The default policy is upstream's bootstrap policy (``bootstrappolicy/policy.go`` and
``controller_policy.go``) trimmed to the resources this server serves: ``cluster-admin`` bound to
``system:masters``, the user-facing ``admin``/``edit``/``view`` (aggregated, as upstream, from the
``system:aggregate-to-*`` roles, so a new ClusterRole labelled
``rbac.authorization.k8s.io/aggregate-to-view: "true"`` widens ``view``), ``system:basic-user``,
``system:discovery`` and ``system:public-info-viewer`` for everyone authenticated, the
``system:node*`` and node-bootstrapper roles, and the roles of the components we run
(``system:kube-scheduler``, ``system:kube-controller-manager``, ``system:node-proxier``).
Service accounts get nothing beyond discovery, as upstream.  Default objects carry the label
``kubernetes.io/bootstrapping: rbac-defaults`` and the ``rbac.authorization.kubernetes.io/
autoupdate: "true"`` annotation, and are (re)created at start-up when missing.

Aggregation: a ClusterRole with an ``aggregationRule`` has its ``rules`` filled with the union of
the rules of the ClusterRoles its selectors match (upstream's clusterrole-aggregation controller);
:func:`aggregate` does that, and the registry calls it after every ClusterRole write.

Escalation prevention (upstream ``rbac/validation``): creating or updating a Role/ClusterRole
needs every rule it grants to be held by the writer already, and binding a role needs either the
role's rules or the ``bind`` verb on it; otherwise 403 with upstream's ``attempting to grant RBAC
permissions not currently held`` message.  ``escalate`` on roles lifts the first check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"
ROLES = f"roles.{GROUP}"
CLUSTER_ROLES = f"clusterroles.{GROUP}"
ROLE_BINDINGS = f"rolebindings.{GROUP}"
CLUSTER_ROLE_BINDINGS = f"clusterrolebindings.{GROUP}"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}
AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}

READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]
RW = READ + WRITE


class Store(Protocol):
    """What the authorizer needs from storage (``Storage.iter_raw``/``peek``)."""

    def iter_raw(self, kind: str, ns: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]: ...

    def peek(self, kind: str, ns: str, name: str) -> Obj | None: ...


@dataclass
class Request:
    """The authorization attributes RBAC looks at (a subset of ``auth.Attributes``)."""

    user: str
    groups: list[str]
    verb: str
    namespace: str = ""
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


# ------------------------------------------------------------------ rule matching
def _has(values: Iterable[str], want: str) -> bool:
    return any(v == "*" or v == want for v in values)


def _resource_matches(rule_resources: list[str], resource: str, sub: str) -> bool:
    combined = f"{resource}/{sub}" if sub else resource
    for r in rule_resources:
        if r == "*" or r == combined:
            return True
        if sub and r == f"*/{sub}":
            return True
    return False


def _url_matches(urls: list[str], path: str) -> bool:
    for u in urls:
        if u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])):
            return True
    return False


def rule_allows(rule: Obj, req: Request) -> bool:
    """``RuleAllows``: does this PolicyRule cover the request?"""
    verbs = list(rule.get("verbs") or [])
    if not _has(verbs, req.verb):
        return False
    if not req.resource_request:
        return _url_matches(list(rule.get("nonResourceURLs") or []), req.path)
    if not _has(rule.get("apiGroups") or [], req.api_group):
        return False
    if not _resource_matches(list(rule.get("resources") or []), req.resource, req.subresource):
        return False
    names = list(rule.get("resourceNames") or [])
    return not names or req.name in names


def subject_matches(subject: Obj, user: str, groups: list[str], binding_ns: str) -> bool:
    kind = subject.get("kind")
    name = subject.get("name", "")
    if kind == "User":
        return bool(user == name)
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return bool(user == f"system:serviceaccount:{ns}:{name}")
    return False


def _describe_subject(s: Obj, binding_ns: str) -> str:
    if s.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{s.get("namespace") or binding_ns}/{s.get("name", "")}"'
    return f'{s.get("kind")} "{s.get("name", "")}"'


# ------------------------------------------------------------------ authorizer
class RBACAuthorizer:
    """Reads Roles and bindings straight from storage on every decision (no cache needed: the
    dev server's objects are in memory and counts are small)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def role_rules(self, kind: str, name: str, ns: str) -> list[Obj]:
        if kind == "ClusterRole":
            role = self.store.peek(CLUSTER_ROLES, "", name)
        elif kind == "Role":
            role = self.store.peek(ROLES, ns, name)
        else:
            return []
        return list((role or {}).get("rules") or [])

    def _bindings(self, ns: str) -> Iterator[tuple[str, Obj]]:
        for _k, b in self.store.iter_raw(CLUSTER_ROLE_BINDINGS, ""):
            yield "ClusterRoleBinding", b
        if ns:
            for _k, b in self.store.iter_raw(ROLE_BINDINGS, ns):
                yield "RoleBinding", b

    def visit_rules(self, user: str, groups: list[str], ns: str) -> Iterator[tuple[str, Obj]]:
        """(why, rule) for every rule the user holds in ``ns`` (cluster-wide when ns is "")."""
        for kind, b in self._bindings(ns):
            meta = b.get("metadata") or {}
            bns = meta.get("namespace", "")
            for s in b.get("subjects") or []:
                if not isinstance(s, dict) or not subject_matches(s, user, groups, bns):
                    continue
                ref = b.get("roleRef") or {}
                why = (f'{kind} "{meta.get("name", "")}"' + (f' in namespace "{bns}"' if bns else "")
                       + f' of {ref.get("kind")} "{ref.get("name", "")}" to {_describe_subject(s, bns)}')
                for rule in self.role_rules(str(ref.get("kind", "")), str(ref.get("name", "")), bns):
                    yield why, rule
                break

    def authorize(self, req: Request) -> tuple[bool, str]:
        ns = req.namespace if req.resource_request else ""
        for why, rule in self.visit_rules(req.user, req.groups, ns):
            if rule_allows(rule, req):
                return True, f"RBAC: allowed by {why}"
        return False, ""

    def rules_for(self, user: str, groups: list[str], ns: str) -> list[Obj]:
        return [r for _why, r in self.visit_rules(user, groups, ns)]


# ------------------------------------------------------------------ escalation prevention
def _expand(rule: Obj) -> Iterator[Request]:
    """Every (verb, group, resource, name) or (verb, url) atom a rule grants, as requests."""
    names = list(rule.get("resourceNames") or []) or [""]
    for verb in rule.get("verbs") or []:
        for url in rule.get("nonResourceURLs") or []:
            yield Request("", [], verb, path=url, resource_request=False)
        for g in rule.get("apiGroups") or []:
            for res in rule.get("resources") or []:
                base, _, sub = str(res).partition("/")
                for n in names:
                    yield Request("", [], verb, api_group=g, resource=base, subresource=sub, name=n)


def _covers(held: list[Obj], atom: Request) -> bool:
    for rule in held:
        if not _has(rule.get("verbs") or [], atom.verb):
            continue
        if not atom.resource_request:
            urls = list(rule.get("nonResourceURLs") or [])
            if _url_matches(urls, atom.path) and (not atom.path.endswith("*") or
                                                 any(u == "*" or (u.endswith("*") and atom.path.startswith(u[:-1]))
                                                     for u in urls)):
                return True
            continue
        groups = rule.get("apiGroups") or []
        if not (_has(groups, atom.api_group)):
            continue
        resources = list(rule.get("resources") or [])
        wanted = atom.resource + (f"/{atom.subresource}" if atom.subresource else "")
        if not ("*" in resources or wanted in resources or
                (atom.subresource and f"*/{atom.subresource}" in resources)):
            continue
        if atom.resource == "*" and "*" not in resources:
            continue
        rnames = list(rule.get("resourceNames") or [])
        if rnames and (not atom.name or atom.name not in rnames):
            continue
        return True
    return False


def uncovered(held: list[Obj], wanted: list[Obj]) -> list[Obj]:
    """The wanted rules (as single-verb rules) the held ones do not cover (``ConfirmNoEscalation``)."""
    missing: list[Obj] = []
    for rule in wanted:
        for atom in _expand(rule):
            if _covers(held, atom):
                continue
            if atom.resource_request:
                r: Obj = {"verbs": [atom.verb], "apiGroups": [atom.api_group],
                          "resources": [atom.resource + (f"/{atom.subresource}" if atom.subresource else "")]}
                if atom.name:
                    r["resourceNames"] = [atom.name]
            else:
                r = {"verbs": [atom.verb], "nonResourceURLs": [atom.path]}
            if r not in missing:
                missing.append(r)
    return missing


def format_rules(rules: list[Obj]) -> str:
    """Upstream's ``{APIGroups:["x"], Resources:["y"], Verbs:["get"]}`` list."""
    def q(vs: list[str]) -> str:
        return "[" + " ".join(f'"{v}"' for v in vs) + "]"
    out = []
    for r in rules:
        parts = []
        if "apiGroups" in r:
            parts.append(f"APIGroups:{q(r['apiGroups'])}")
        if "resources" in r:
            parts.append(f"Resources:{q(r['resources'])}")
        if r.get("resourceNames"):
            parts.append(f"ResourceNames:{q(r['resourceNames'])}")
        if "nonResourceURLs" in r:
            parts.append(f"NonResourceURLs:{q(r['nonResourceURLs'])}")
        parts.append(f"Verbs:{q(r['verbs'])}")
        out.append("{" + ", ".join(parts) + "}")
    return "\n".join(out)


# ------------------------------------------------------------------ aggregation
def _selector_matches(sel: Obj, labels: dict[str, str]) -> bool:
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        key, op, vals = e.get("key", ""), e.get("operator", ""), list(e.get("values") or [])
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def aggregate(cluster_roles: list[Obj]) -> dict[str, list[Obj]]:
    """name -> the rules an aggregated ClusterRole should have (only for roles whose rules differ).
    Aggregated roles may themselves be aggregated (edit into admin), so this runs to a fixpoint."""
    current = {(r.get("metadata") or {}).get("name", ""): r for r in cluster_roles}
    changed: dict[str, list[Obj]] = {}
    for _ in range(10):
        step = _aggregate_once(list(current.values()))
        if not step:
            break
        for name, rules in step.items():
            current[name] = {**current[name], "rules": rules}
            changed[name] = rules
    return changed


def _aggregate_once(cluster_roles: list[Obj]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for role in cluster_roles:
        agg = role.get("aggregationRule")
        if not isinstance(agg, dict):
            continue
        name = (role.get("metadata") or {}).get("name", "")
        rules: list[Obj] = []
        for other in sorted(cluster_roles, key=lambda r: (r.get("metadata") or {}).get("name", "")):
            oname = (other.get("metadata") or {}).get("name", "")
            if oname == name:
                continue
            labels = (other.get("metadata") or {}).get("labels") or {}
            if any(isinstance(s, dict) and _selector_matches(s, labels) for s in agg.get("clusterRoleSelectors") or []):
                for r in other.get("rules") or []:
                    if r not in rules:
                        rules.append(r)
        if rules != list(role.get("rules") or []):
            out[name] = rules
    return out


# ------------------------------------------------------------------ validation
def validate(kind: str, obj: Obj) -> list[tuple[str, str]]:
    """Field errors of a Role/ClusterRole/RoleBinding/ClusterRoleBinding (``rbac/validation``)."""
    errs: list[tuple[str, str]] = []
    if kind in ("Role", "ClusterRole"):
        for i, r in enumerate(obj.get("rules") or []):
            if not isinstance(r, dict):
                errs.append((f"rules[{i}]", "Invalid value: must be an object"))
                continue
            if not r.get("verbs"):
                errs.append((f"rules[{i}].verbs", "Required value: verbs must contain at least one value"))
            if r.get("nonResourceURLs"):
                if kind == "Role":
                    errs.append((f"rules[{i}].nonResourceURLs",
                                 "Invalid value: namespaced rules cannot apply to non-resource URLs"))
                if r.get("apiGroups") or r.get("resources"):
                    errs.append((f"rules[{i}].nonResourceURLs",
                                 "Invalid value: rules cannot apply to both regular resources and non-resource "
                                 "URLs"))
            elif not r.get("apiGroups"):
                errs.append((f"rules[{i}].apiGroups", "Required value: resource rules must supply at least one "
                             "api group"))
            elif not r.get("resources"):
                errs.append((f"rules[{i}].resources", "Required value: resource rules must supply at least one "
                             "resource"))
        return errs
    ref = obj.get("roleRef")
    if not isinstance(ref, dict) or not ref:
        return [("roleRef", "Required value")]
    if ref.get("apiGroup") != GROUP:
        errs.append(("roleRef.apiGroup", f'Unsupported value: "{ref.get("apiGroup", "")}": supported values: '
                     f'"{GROUP}"'))
    allowed = ["Role", "ClusterRole"] if kind == "RoleBinding" else ["ClusterRole"]
    if ref.get("kind") not in allowed:
        errs.append(("roleRef.kind", f'Unsupported value: "{ref.get("kind", "")}": supported values: '
                     + ", ".join(f'"{k}"' for k in allowed)))
    if not ref.get("name"):
        errs.append(("roleRef.name", "Required value"))
    for i, s in enumerate(obj.get("subjects") or []):
        if not isinstance(s, dict):
            errs.append((f"subjects[{i}]", "Invalid value: must be an object"))
            continue
        if not s.get("name"):
            errs.append((f"subjects[{i}].name", "Required value"))
        k = s.get("kind")
        if k == "ServiceAccount":
            if s.get("apiGroup"):
                errs.append((f"subjects[{i}].apiGroup", f'Unsupported value: "{s["apiGroup"]}": supported values: ""'))
            if kind == "ClusterRoleBinding" and not s.get("namespace"):
                errs.append((f"subjects[{i}].namespace", "Required value"))
        elif k in ("User", "Group"):
            if s.get("apiGroup") != GROUP:
                errs.append((f"subjects[{i}].apiGroup", f'Unsupported value: "{s.get("apiGroup", "")}": '
                             f'supported values: "{GROUP}"'))
        else:
            errs.append((f"subjects[{i}].kind", f'Unsupported value: "{k}": supported values: "ServiceAccount", '
                         '"User", "Group"'))
    return errs


# ------------------------------------------------------------------ the default policy
def _r(verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None) -> Obj:
    rule: Obj = {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def _nr(verbs: list[str], urls: list[str]) -> Obj:
    return {"verbs": list(verbs), "nonResourceURLs": list(urls)}


def _role(name: str, rules: list[Obj], labels: dict[str, str] | None = None,
          aggregate_from: str | None = None) -> Obj:
    meta: Obj = {"name": name, "labels": {**BOOTSTRAP_LABEL, **(labels or {})}, "annotations": dict(AUTOUPDATE)}
    role: Obj = {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules}
    if aggregate_from:
        role["aggregationRule"] = {"clusterRoleSelectors": [
            {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_from}": "true"}}]}
    return role


def _binding(name: str, role: str, subjects: list[tuple[str, str]]) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": dict(BOOTSTRAP_LABEL), "annotations": dict(AUTOUPDATE)},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": GROUP, "kind": k, "name": n} for k, n in subjects]}


def _node_rules() -> list[Obj]:
    """``NodeRules()``: what a kubelet may do at all (the Node authorizer grants these to
    ``system:nodes``; NodeRestriction and the graph narrow them to the node's own objects)."""
    return [
        _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews", "localsubjectaccessreviews"]),
        _r(READ, [""], ["services"]),
        _r(["create", "get", "list", "watch"], [""], ["nodes"]),
        _r(["update", "patch"], [""], ["nodes/status"]),
        _r(["update", "patch"], [""], ["nodes"]),
        _r(["create", "update", "patch"], [""], ["events"]),
        _r(["create", "update", "patch"], ["events.k8s.io"], ["events"]),
        _r(READ, [""], ["pods"]),
        _r(["create", "delete"], [""], ["pods"]),
        _r(["update", "patch"], [""], ["pods/status"]),
        _r(["create"], [""], ["pods/eviction"]),
        _r(READ, [""], ["secrets", "configmaps"]),
        _r(["get"], [""], ["persistentvolumeclaims", "persistentvolumes"]),
        _r(["get"], [""], ["endpoints"]),
        _r(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
        _r(["get", "create", "update", "patch", "delete"], ["coordination.k8s.io"], ["leases"]),
        _r(["get"], ["storage.k8s.io"], ["volumeattachments"]),
        _r(["create"], [""], ["serviceaccounts/token"]),
        _r(["update", "patch"], [""], ["persistentvolumeclaims/status"]),
        _r(RW, ["storage.k8s.io"], ["csinodes"]),
        _r(READ, ["storage.k8s.io"], ["csidrivers"]),
        _r(READ, ["node.k8s.io"], ["runtimeclasses"]),
    ]


NODE_RULES = _node_rules()


def default_cluster_roles() -> list[Obj]:
    view = [
        _r(READ, [""], ["pods", "pods/status", "pods/log", "configmaps", "endpoints", "persistentvolumeclaims",
                        "persistentvolumeclaims/status", "serviceaccounts", "services", "services/status",
                        "events", "bindings", "namespaces", "namespaces/status", "limitranges",
                        "resourcequotas", "resourcequotas/status", "replicationcontrollers",
                        "replicationcontrollers/status", "replicationcontrollers/scale"]),
        _r(READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
                            "deployments/scale", "deployments/status", "replicasets", "replicasets/scale",
                            "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"]),
        _r(READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        _r(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        _r(READ, ["events.k8s.io"], ["events"]),
        _r(READ, ["coordination.k8s.io"], ["leases"]),
        _r(READ, ["discovery.k8s.io"], ["endpointslices"]),
        _r(READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
    ]
    edit = [
        _r(RW, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "services/proxy"]),
        _r(["impersonate"], [""], ["serviceaccounts"]),
        _r(WRITE, [""], ["pods", "configmaps", "endpoints", "persistentvolumeclaims", "replicationcontrollers",
                         "replicationcontrollers/scale", "secrets", "serviceaccounts", "services"]),
        _r(READ, [""], ["secrets"]),
        _r(["create"], [""], ["serviceaccounts/token", "pods/eviction"]),
        _r(WRITE, ["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                             "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"]),
        _r(WRITE, ["batch"], ["cronjobs", "jobs"]),
        _r(WRITE, ["policy"], ["poddisruptionbudgets"]),
        _r(WRITE, ["coordination.k8s.io"], ["leases"]),
        _r(WRITE, ["discovery.k8s.io"], ["endpointslices"]),
        _r(WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
    ]
    admin = [
        _r(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
        _r(RW, [GROUP], ["rolebindings", "roles"]),
    ]
    discovery_urls = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                      "/readyz", "/version", "/version/"]
    return [
        _role("cluster-admin", [_r(["*"], ["*"], ["*"]), _nr(["*"], ["*"])]),
        _role("admin", [], aggregate_from="admin"),
        _role("edit", [], {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}, aggregate_from="edit"),
        _role("view", [], {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}, aggregate_from="view"),
        _role("system:aggregate-to-admin", admin, {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        _role("system:aggregate-to-edit", edit, {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        _role("system:aggregate-to-view", view, {"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
        _role("system:discovery", [_nr(["get"], discovery_urls)]),
        _role("system:public-info-viewer", [_nr(["get"], ["/healthz", "/livez", "/readyz", "/version",
                                                          "/version/"])]),
        _role("system:basic-user", [
            _r(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            _r(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"])]),
        _role("system:monitoring", [_nr(["get"], ["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics",
                                                  "/metrics/slis", "/readyz", "/readyz/*"])]),
        _role("system:auth-delegator", [_r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
                                        _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"])]),
        _role("system:node", NODE_RULES),
        _role("system:node-proxier", [
            _r(["list", "watch"], [""], ["services", "endpoints"]),
            _r(READ, [""], ["nodes"]),
            _r(["create", "patch", "update"], ["", "events.k8s.io"], ["events"]),
            _r(["list", "watch"], ["discovery.k8s.io"], ["endpointslices"])]),
        _role("system:node-bootstrapper", [
            _r(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"])]),
        _role("system:certificates.k8s.io:certificatesigningrequests:nodeclient", [
            _r(["create"], ["certificates.k8s.io"], ["certificatesigningrequests/nodeclient"])]),
        _role("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", [
            _r(["create"], ["certificates.k8s.io"], ["certificatesigningrequests/selfnodeclient"])]),
        _role("system:certificates.k8s.io:kube-apiserver-client-kubelet-approver", [
            _r(["approve"], ["certificates.k8s.io"], ["signers"], ["kubernetes.io/kube-apiserver-client-kubelet"])]),
        _role("system:certificates.k8s.io:kubelet-serving-approver", [
            _r(["approve"], ["certificates.k8s.io"], ["signers"], ["kubernetes.io/kubelet-serving"])]),
        _role("system:service-account-issuer-discovery", [
            _nr(["get"], ["/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                          "/openid/v1/jwks", "/openid/v1/jwks/"])]),
        _role("system:kube-scheduler", [
            _r(["create", "patch", "update"], ["", "events.k8s.io"], ["events"]),
            _r(["create"], ["coordination.k8s.io"], ["leases"]),
            _r(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-scheduler"]),
            _r(READ, [""], ["nodes", "namespaces", "pods", "persistentvolumeclaims", "persistentvolumes",
                            "services", "replicationcontrollers"]),
            _r(["delete"], [""], ["pods"]),
            _r(["create"], [""], ["pods/binding", "bindings"]),
            _r(["patch", "update"], [""], ["pods/status"]),
            _r(READ, ["policy"], ["poddisruptionbudgets"]),
            _r(READ, ["storage.k8s.io"], ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities"]),
            _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"])]),
        _role("system:volume-scheduler", [
            _r(["get", "list", "patch", "update", "watch"], [""], ["persistentvolumes"]),
            _r(READ, ["storage.k8s.io"], ["storageclasses"]),
            _r(["get", "list", "patch", "update", "watch"], [""], ["persistentvolumeclaims"])]),
        _role("system:kube-controller-manager", [
            _r(["create", "patch", "update"], ["", "events.k8s.io"], ["events"]),
            _r(["create"], ["coordination.k8s.io"], ["leases"]),
            _r(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-controller-manager"]),
            _r(["create"], [""], ["secrets", "serviceaccounts"]),
            _r(["delete"], [""], ["secrets"]),
            _r(["get"], [""], ["configmaps", "namespaces", "secrets", "serviceaccounts"]),
            _r(["update"], [""], ["secrets", "serviceaccounts"]),
            _r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            _r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            _r(["list", "watch"], ["*"], ["*"]),
            _r(["create"], [""], ["serviceaccounts/token"])]),
    ]


def default_cluster_role_bindings() -> list[Obj]:
    return [
        _binding("cluster-admin", "cluster-admin", [("Group", "system:masters")]),
        _binding("system:monitoring", "system:monitoring", [("Group", "system:monitoring")]),
        _binding("system:discovery", "system:discovery", [("Group", "system:authenticated")]),
        _binding("system:basic-user", "system:basic-user", [("Group", "system:authenticated")]),
        _binding("system:public-info-viewer", "system:public-info-viewer",
                 [("Group", "system:authenticated"), ("Group", "system:unauthenticated")]),
        _binding("system:node-proxier", "system:node-proxier", [("User", "system:kube-proxy")]),
        # pykubelet's agent is its node's kube-proxy too (agent/proxy), with the node's credentials
        _binding("pykubelet:node-proxier", "system:node-proxier", [("Group", "system:nodes")]),
        _binding("system:kube-controller-manager", "system:kube-controller-manager",
                 [("User", "system:kube-controller-manager")]),
        _binding("system:kube-scheduler", "system:kube-scheduler", [("User", "system:kube-scheduler")]),
        _binding("system:volume-scheduler", "system:volume-scheduler", [("User", "system:kube-scheduler")]),
        {**_binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", []),
         "subjects": [{"kind": "Group", "apiGroup": GROUP, "name": "system:serviceaccounts"}]},
        # kubeadm's TLS-bootstrap bindings (kubeadm init phase bootstrap-token): bootstrap tokens
        # may create node CSRs that the approver signs off, nodes may renew their own.
        _binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", [("Group", "system:bootstrappers")]),
        _binding("kubeadm:node-autoapprove-bootstrap",
                 "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                 [("Group", "system:bootstrappers")]),
        _binding("kubeadm:node-autoapprove-certificate-rotation",
                 "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                 [("Group", "system:nodes")]),
    ]


def ensure_defaults(peek: Callable[[str, str], Obj | None], create: Callable[[str, Obj], object]) -> None:
    """Create the default roles and bindings that are missing (upstream's ``ensure-rbac`` post-start
    hook reconciles them on every start)."""
    roles = default_cluster_roles()
    filled = aggregate(roles)
    for role in roles:
        name = role["metadata"]["name"]
        if name in filled:
            role["rules"] = filled[name]
        if peek(CLUSTER_ROLES, name) is None:
            create(CLUSTER_ROLES, role)
    for b in default_cluster_role_bindings():
        if peek(CLUSTER_ROLE_BINDINGS, b["metadata"]["name"]) is None:
            create(CLUSTER_ROLE_BINDINGS, b)


# ------------------------------------------------------------------ kubectl get columns
def role_cells(o: Obj) -> list[Any]:
    """Role/ClusterRole: NAME, CREATED AT (upstream's printer shows the timestamp, not an age)."""
    return [(o.get("metadata") or {}).get("name", ""), (o.get("metadata") or {}).get("creationTimestamp", "")]


def binding_cells(o: Obj) -> tuple[str, list[str], list[str], list[str]]:
    """RoleBinding/ClusterRoleBinding: ROLE, and the USERS, GROUPS, SERVICEACCOUNTS (wide) columns."""
    ref = o.get("roleRef") or {}
    ns = (o.get("metadata") or {}).get("namespace", "")
    users, groups, sas = [], [], []
    for s in o.get("subjects") or []:
        if not isinstance(s, dict):
            continue
        if s.get("kind") == "User":
            users.append(str(s.get("name", "")))
        elif s.get("kind") == "Group":
            groups.append(str(s.get("name", "")))
        elif s.get("kind") == "ServiceAccount":
            sas.append(f"{s.get('namespace') or ns}/{s.get('name', '')}")
    return f"{ref.get('kind', '')}/{ref.get('name', '')}", users, groups, sas
