"""The Node authorizer and the NodeRestriction admission plugin: what a kubelet's credential may do.

Upstream (``plugin/pkg/auth/authorizer/node``, ``plugin/pkg/admission/noderestriction``) splits
the job in two, and so do we:

* **Node authorizer** (authorization, before the request is read): a node is the user
  ``system:node:<name>`` in the group ``system:nodes`` (both needed, as ``NodeIdentity``).  Reads
  of Secrets, ConfigMaps, PVCs, PVs and VolumeAttachments, and TokenRequests for
  ServiceAccounts, are allowed only for objects related to the node through a pod bound to it
  (upstream's graph: node <- pod <- secret/configmap/serviceaccount, node <- pod <- pvc <- pv
  <- secret); Leases only in ``kube-node-lease`` under the node's own name.  Everything else is
  checked against the static ``NodeRules()`` (:data:`rbac.NODE_RULES`).  Upstream keeps the
  graph in memory from informers; here the registry's in-memory storage *is* the source, so the
  relationship is computed on demand from the pods of the namespace bound to the node.  Denials
  carry upstream's reasons (``no relationship found between node 'n1' and this object``).
* **NodeRestriction** (admission, with the object in hand): a node may create only mirror pods
  bound to itself with a controller owner reference to its Node and no references to secrets,
  configmaps, service accounts or claims; delete / evict / update the status of only pods bound
  to itself; modify only its own Node (and neither its taints nor ``node-restriction.kubernetes.io/``
  or other non-kubelet ``kubernetes.io`` labels); only its own Lease; and request only tokens bound
  to a pod on itself.  Messages are upstream's, after ``<resource> "<name>" is forbidden: ``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, Protocol

from pykubelet.server.rbac import NODE_RULES, Request, rule_allows

Obj = dict[str, Any]
NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
NODE_LEASE_NAMESPACE = "kube-node-lease"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NODE_RESTRICTION_LABEL_NS = "node-restriction.kubernetes.io"
# k8s.io/kubelet/pkg/apis: labels a kubelet may set on its own Node
KUBELET_LABELS = {
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os",
    "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
}
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


class Store(Protocol):
    def iter_unordered(self, kind: str, ns: str | None = None) -> Iterator[tuple[tuple[str, str], Obj]]: ...

    def peek(self, kind: str, ns: str, name: str) -> Obj | None: ...


class NodeRestrictionError(Exception):
    """A refusal; ``str()`` is upstream's reason (the caller prefixes ``<res> "<name>" is forbidden: ``)."""


def node_identity(user: str, groups: list[str]) -> tuple[str, bool]:
    """``NodeIdentity``: (node name, is a node)."""
    if not user.startswith(NODE_PREFIX) or NODES_GROUP not in groups:
        return "", False
    return user[len(NODE_PREFIX):], True


# ------------------------------------------------------------------ pod references
def _dicts(v: Any) -> list[Obj]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _containers(spec: Obj) -> list[Obj]:
    return [c for k in ("initContainers", "containers", "ephemeralContainers") for c in _dicts(spec.get(k))]


_SECRET_REF_VOLUMES = ("cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos")


def pod_secret_names(pod: Obj) -> set[str]:
    """``VisitPodSecretNames``: every Secret a pod refers to."""
    spec = pod.get("spec") or {}
    out = {str(s.get("name")) for s in _dicts(spec.get("imagePullSecrets")) if s.get("name")}
    for c in _containers(spec):
        for e in _dicts(c.get("envFrom")):
            if (e.get("secretRef") or {}).get("name"):
                out.add(str(e["secretRef"]["name"]))
        for e in _dicts(c.get("env")):
            ref = ((e.get("valueFrom") or {}).get("secretKeyRef") or {})
            if ref.get("name"):
                out.add(str(ref["name"]))
    for v in _dicts(spec.get("volumes")):
        if (v.get("secret") or {}).get("secretName"):
            out.add(str(v["secret"]["secretName"]))
        for src in _dicts((v.get("projected") or {}).get("sources")):
            if (src.get("secret") or {}).get("name"):
                out.add(str(src["secret"]["name"]))
        if (v.get("azureFile") or {}).get("secretName"):
            out.add(str(v["azureFile"]["secretName"]))
        if ((v.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name"):
            out.add(str(v["csi"]["nodePublishSecretRef"]["name"]))
        for k in _SECRET_REF_VOLUMES:
            if ((v.get(k) or {}).get("secretRef") or {}).get("name"):
                out.add(str(v[k]["secretRef"]["name"]))
    return out


def pod_configmap_names(pod: Obj) -> set[str]:
    """``VisitPodConfigmapNames``."""
    spec = pod.get("spec") or {}
    out: set[str] = set()
    for c in _containers(spec):
        for e in _dicts(c.get("envFrom")):
            if (e.get("configMapRef") or {}).get("name"):
                out.add(str(e["configMapRef"]["name"]))
        for e in _dicts(c.get("env")):
            ref = ((e.get("valueFrom") or {}).get("configMapKeyRef") or {})
            if ref.get("name"):
                out.add(str(ref["name"]))
    for v in _dicts(spec.get("volumes")):
        if (v.get("configMap") or {}).get("name"):
            out.add(str(v["configMap"]["name"]))
        for src in _dicts((v.get("projected") or {}).get("sources")):
            if (src.get("configMap") or {}).get("name"):
                out.add(str(src["configMap"]["name"]))
    return out


def pod_claim_names(pod: Obj) -> set[str]:
    """PVCs a pod uses: ``persistentVolumeClaim`` volumes and generic ephemeral ones (``<pod>-<vol>``)."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    out: set[str] = set()
    for v in _dicts(spec.get("volumes")):
        if (v.get("persistentVolumeClaim") or {}).get("claimName"):
            out.add(str(v["persistentVolumeClaim"]["claimName"]))
        if isinstance(v.get("ephemeral"), dict):
            out.add(f"{name}-{v.get('name', '')}")
    return out


def pv_secret_refs(pv: Obj) -> set[tuple[str, str]]:
    """(namespace, name) of the Secrets a PV refers to (CSI secret refs and the like)."""
    spec = pv.get("spec") or {}
    out: set[tuple[str, str]] = set()
    for src in spec.values():
        if not isinstance(src, dict):
            continue
        for k, ref in src.items():
            if k.endswith("SecretRef") or k == "secretRef":
                if isinstance(ref, dict) and ref.get("name"):
                    out.add((str(ref.get("namespace") or ""), str(ref["name"])))
    return out


# ------------------------------------------------------------------ the authorizer
class NodeAuthorizer:
    def __init__(self, store: Store) -> None:
        self.store = store

    def _pods_on(self, node: str, ns: str | None) -> Iterator[Obj]:
        # every caller only asks whether some pod relates (any, in), so the order does not matter
        for _k, pod in self.store.iter_unordered("pods", ns):
            if (pod.get("spec") or {}).get("nodeName") == node:
                yield pod

    def _claims_of_node(self, node: str, ns: str | None) -> Iterator[tuple[str, str]]:
        for pod in self._pods_on(node, ns):
            pns = (pod.get("metadata") or {}).get("namespace", "")
            for c in pod_claim_names(pod):
                yield pns, c

    def _pvs_of_node(self, node: str) -> Iterator[Obj]:
        for ns, claim in self._claims_of_node(node, None):
            pvc = self.store.peek("persistentvolumeclaims", ns, claim)
            vol = ((pvc or {}).get("spec") or {}).get("volumeName")
            if vol:
                pv = self.store.peek("persistentvolumes", "", vol)
                if pv is not None:
                    yield pv

    def related(self, node: str, kind: str, ns: str, name: str) -> bool:
        """Is there a path node <- pod <- ... <- object?"""
        if kind == "secrets":
            if any(name in pod_secret_names(p) for p in self._pods_on(node, ns)):
                return True
            return any((ref_ns or ns, ref) == (ns, name) for pv in self._pvs_of_node(node)
                       for ref_ns, ref in pv_secret_refs(pv))
        if kind == "configmaps":
            return any(name in pod_configmap_names(p) for p in self._pods_on(node, ns))
        if kind == "persistentvolumeclaims":
            return (ns, name) in set(self._claims_of_node(node, ns))
        if kind == "persistentvolumes":
            return any((pv.get("metadata") or {}).get("name") == name for pv in self._pvs_of_node(node))
        if kind == "serviceaccounts":
            return any(((p.get("spec") or {}).get("serviceAccountName") or "default") == name
                       for p in self._pods_on(node, ns))
        return False

    def _relationship(self, node: str, kind: str, ns: str, name: str) -> tuple[bool | None, str]:
        if not name:
            return None, "No Object name found"
        if self.related(node, kind, ns, name):
            return True, ""
        return None, f"no relationship found between node '{node}' and this object"

    def authorize(self, user: str, groups: list[str], req: Request) -> tuple[bool | None, str]:
        """(True, "") to allow, (None, reason) for no opinion (the next authorizer decides)."""
        node, is_node = node_identity(user, groups)
        if not is_node:
            return None, ""
        if not node:
            return None, f'unknown node for user "{user}"'
        if req.resource_request and req.api_group == "":
            res, sub, verb = req.resource, req.subresource, req.verb
            if res in ("secrets", "configmaps"):
                if verb not in ("get", "list", "watch"):
                    return None, "can only read resources of this type"
                if sub:
                    return None, "cannot read subresource"
                if not req.namespace:
                    return None, "can only read namespaced object of this type"
                return self._relationship(node, res, req.namespace, req.name)
            if res == "persistentvolumeclaims" and sub == "status":
                if verb not in ("update", "patch"):
                    return None, "can only get/update/patch this type"
                return self._relationship(node, res, req.namespace, req.name)
            if res in ("persistentvolumeclaims", "persistentvolumes"):
                if verb != "get":
                    return None, "can only get individual resources of this type"
                if sub:
                    return None, "cannot get subresource"
                return self._relationship(node, res, req.namespace, req.name)
            if res == "serviceaccounts":
                if verb != "create" or not req.name:
                    return None, "can only create tokens for individual service accounts"
                if sub != "token":
                    return None, "can only create token subresource of serviceaccount"
                return self._relationship(node, res, req.namespace, req.name)
        if req.resource_request and req.api_group == "coordination.k8s.io" and req.resource == "leases":
            if req.verb not in ("get", "create", "update", "patch", "delete"):
                return None, "can only get, create, update, patch, or delete a node lease"
            if req.namespace != NODE_LEASE_NAMESPACE:
                return None, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
            if req.verb != "create" and req.name != node:
                return None, "can only access node lease with the same name as the requesting node"
            return True, ""
        if _node_rules_allow(req.verb, req.resource_request, req.api_group, req.resource, req.subresource,
                             req.name if _NODE_RULES_NAME_RESOURCES else "",
                             "" if req.resource_request else req.path):
            return True, ""
        return None, ""


# NodeRules() name no resources (no resourceNames): the name is then no part of a rule's answer
_NODE_RULES_NAME_RESOURCES = any(r.get("resourceNames") for r in NODE_RULES)


@functools.lru_cache(maxsize=1024)
def _node_rules_allow(verb: str, resource_request: bool, api_group: str, resource: str, subresource: str,
                      name: str, path: str) -> bool:
    """Whether any of the static node rules covers the request, remembered per request shape
    (``rule_allows`` reads nothing else of the request; a kubelet asks the same few questions
    for every pod)."""
    req = Request("", [], verb, "", api_group, resource, subresource, name, path, resource_request)
    return any(rule_allows(r, req) for r in NODE_RULES)


# ------------------------------------------------------------------ NodeRestriction admission
def _label_ns(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def _is_kubernetes_label(key: str) -> bool:
    ns = _label_ns(key)
    return ns in ("kubernetes.io", "k8s.io") or ns.endswith((".kubernetes.io", ".k8s.io"))


def _is_kubelet_label(key: str) -> bool:
    if key in KUBELET_LABELS:
        return True
    ns = _label_ns(key)
    return any(ns == n or ns.endswith("." + n) for n in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(new: dict[str, str], old: dict[str, str]) -> list[str]:
    """Modified label keys a node may not set (``getForbiddenLabels``), sorted."""
    modified = {k for k in set(new) | set(old) if new.get(k) != old.get(k) or (k in new) != (k in old)}
    out = set()
    for k in modified:
        ns = _label_ns(k)
        if ns == NODE_RESTRICTION_LABEL_NS or ns.endswith("." + NODE_RESTRICTION_LABEL_NS):
            out.add(k)
        if _is_kubernetes_label(k) and not _is_kubelet_label(k):
            out.add(k)
    return sorted(out)


class NodeRestriction:
    """Admission: ``admit`` raises :class:`NodeRestrictionError` to refuse a node's write."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def admit(self, user: str, groups: list[str], operation: str, group: str, resource: str, sub: str,
              ns: str, name: str, obj: Obj | None, old: Obj | None) -> None:
        node, is_node = node_identity(user, groups)
        if not is_node:
            return
        if not node:
            raise NodeRestrictionError(f'could not determine node from user "{user}"')
        if group == "" and resource == "pods":
            self._pod(node, operation, sub, ns, name, obj, old)
        elif group == "" and resource == "nodes":
            self._node(node, operation, name, obj or {}, old or {})
        elif group == "" and resource == "persistentvolumeclaims":
            if sub != "status":
                raise NodeRestrictionError("may only update PVC status")
        elif group == "" and resource == "serviceaccounts" and operation == "CREATE" and sub == "token":
            self._token(node, ns, obj or {})
        elif group == "coordination.k8s.io" and resource == "leases":
            if ns != NODE_LEASE_NAMESPACE:
                raise NodeRestrictionError(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
            lease_name = ((obj or {}).get("metadata") or {}).get("name", "") if operation == "CREATE" else name
            if lease_name != node:
                raise NodeRestrictionError("can only access node lease with the same name as the requesting node")

    def _pod(self, node: str, op: str, sub: str, ns: str, name: str, obj: Obj | None, old: Obj | None) -> None:
        if sub == "":
            if op == "CREATE":
                self._mirror_pod(node, obj or {})
            elif op == "DELETE":
                if ((old or {}).get("spec") or {}).get("nodeName") != node:
                    raise NodeRestrictionError(f'node "{node}" can only delete pods with spec.nodeName set to itself')
            else:
                raise NodeRestrictionError(f'unexpected operation "{op}", node "{node}" can only create and delete '
                                           "mirror pods")
        elif sub == "status":
            if op != "UPDATE":
                raise NodeRestrictionError(f'unexpected operation "{op}"')
            if ((old or {}).get("spec") or {}).get("nodeName") != node:
                raise NodeRestrictionError(f'node "{node}" can only update pod status for pods with spec.nodeName '
                                           "set to itself")
            if ((obj or {}).get("metadata") or {}).get("labels") != ((old or {}).get("metadata") or {}).get("labels"):
                raise NodeRestrictionError(f'node "{node}" cannot update labels through pod status')
        elif sub == "eviction":
            pod = self.store.peek("pods", ns, name)
            if pod is not None and (pod.get("spec") or {}).get("nodeName") != node:
                raise NodeRestrictionError(f"node {node} can only evict pods with spec.nodeName set to itself")
        else:
            raise NodeRestrictionError(f"unexpected pod subresource \"{sub}\", only 'status' and 'eviction' are "
                                       "allowed")

    def _mirror_pod(self, node: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
            raise NodeRestrictionError(f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only '
                                       "create mirror pods")
        if spec.get("nodeName") != node:
            raise NodeRestrictionError(f'node "{node}" can only create pods with spec.nodeName set to itself')
        owners = _dicts(meta.get("ownerReferences"))
        if len(owners) > 1:
            raise NodeRestrictionError(f'node "{node}" can only create pods with a single owner reference set to '
                                       "itself")
        if not owners:
            raise NodeRestrictionError(f'node "{node}" can only create pods with an owner reference set to itself')
        o = owners[0]
        if o.get("apiVersion") != "v1" or o.get("kind") != "Node" or o.get("name") != node:
            raise NodeRestrictionError(f'node "{node}" can only create pods with an owner reference set to itself')
        if not o.get("controller"):
            raise NodeRestrictionError(f'node "{node}" can only create pods with a controller owner reference set '
                                       "to itself")
        if o.get("blockOwnerDeletion"):
            raise NodeRestrictionError(f'node "{node}" must not set blockOwnerDeletion on an owner reference')
        node_obj = self.store.peek("nodes", "", node)
        uid = (node_obj or {}).get("metadata", {}).get("uid")
        if uid != o.get("uid"):
            raise NodeRestrictionError(f"node {node} UID mismatch: expected {o.get('uid', '')} got {uid or ''}")
        # The dev server's pod defaulting fills serviceAccountName "default" in even for mirror pods
        # (upstream's ServiceAccount admission skips them); only another account is a reference.
        if spec.get("serviceAccountName") not in (None, "", "default"):
            raise NodeRestrictionError(f'node "{node}" can not create pods that reference a service account')
        if pod_secret_names(pod):
            raise NodeRestrictionError(f'node "{node}" can not create pods that reference secrets')
        if pod_configmap_names(pod):
            raise NodeRestrictionError(f'node "{node}" can not create pods that reference configmaps')
        if any("persistentVolumeClaim" in v for v in _dicts(spec.get("volumes"))):
            raise NodeRestrictionError(f'node "{node}" can not create pods that reference persistentvolumeclaims')

    def _node(self, node: str, op: str, name: str, obj: Obj, old: Obj) -> None:
        if op == "CREATE":
            name = (obj.get("metadata") or {}).get("name", "")
        if name != node:
            raise NodeRestrictionError(f'node "{node}" is not allowed to modify node "{name}"')
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if op == "CREATE":
            if (obj.get("spec") or {}).get("configSource"):
                raise NodeRestrictionError(f'node "{node}" is not allowed to create pods with a non-nil configSource')
            bad = forbidden_labels(labels, {})
            if bad:
                raise NodeRestrictionError(f'node "{node}" is not allowed to set the following labels: '
                                           + ", ".join(bad))
        elif op == "UPDATE":
            if (obj.get("spec") or {}).get("taints") != (old.get("spec") or {}).get("taints"):
                raise NodeRestrictionError(f'node "{node}" is not allowed to modify taints')
            bad = forbidden_labels(labels, (old.get("metadata") or {}).get("labels") or {})
            if bad:
                raise NodeRestrictionError("is not allowed to modify labels: " + ", ".join(bad))

    def _token(self, node: str, ns: str, tr: Obj) -> None:
        ref = (tr.get("spec") or {}).get("boundObjectRef")
        if not isinstance(ref, dict) or ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or \
                not ref.get("name"):
            raise NodeRestrictionError("node requested token not bound to a pod")
        if not ref.get("uid"):
            raise NodeRestrictionError("node requested token with a pod binding without a uid")
        pod = self.store.peek("pods", ns, str(ref["name"]))
        if pod is None:
            return  # the TokenRequest itself answers 404
        if ref["uid"] != (pod.get("metadata") or {}).get("uid"):
            raise NodeRestrictionError(f"the UID in the bound object reference ({ref['uid']}) does not match the UID "
                                       "in record. The object might have been deleted and then recreated")
        if (pod.get("spec") or {}).get("nodeName") != node:
            raise NodeRestrictionError("node requested token bound to a pod scheduled on a different node")
