"""Admission for the authorization objects and for nodes: NodeRestriction, RBAC validation and
escalation prevention, and the ClusterRole aggregation controller.

The registry calls :meth:`AuthAdmission.admit` on every create, update and delete (and on the
eviction and TokenRequest subresources) with the object in hand, after its own defaulting and
before it validates and stores, which is where upstream's validating admission runs.  Refusals
are 403 Forbidden with upstream's ``<resource> "<name>" is forbidden: <why>`` message; invalid
RBAC objects are 422 with upstream's field errors.

ClusterRole aggregation is upstream's ``clusterrole-aggregation`` controller, run in the API
server's loop: it watches ClusterRoles in storage and rewrites the ``rules`` of every role with an
``aggregationRule`` whenever the union of the matching roles' rules changes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from typing import Any

from pykubelet.server import rbac
from pykubelet.server.errors import StatusError, invalid
from pykubelet.server.nodeauthorizer import NodeRestriction, NodeRestrictionError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
RBAC_KINDS = {"roles": "Role", "clusterroles": "ClusterRole", "rolebindings": "RoleBinding",
              "clusterrolebindings": "ClusterRoleBinding"}


def _qualified(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


class AuthAdmission:
    def __init__(self, store: Any, authorizer: Any) -> None:
        self.store = store
        self.authorizer = authorizer
        self.node_restriction = NodeRestriction(store)

    def admit(self, operation: str, group: str, resource: str, sub: str, ns: str, name: str,
              obj: Obj | None, old: Obj | None, user: Any) -> None:
        """Raise a StatusError to refuse the write.  ``user`` is an ``auth.UserInfo``."""
        obj_name = name or ((obj or {}).get("metadata") or {}).get("name", "")
        try:
            self.node_restriction.admit(user.name, list(user.groups), operation, group, resource, sub, ns, name,
                                        obj, old)
        except NodeRestrictionError as e:
            raise StatusError(403, "Forbidden", f'{_qualified(group, resource)} "{obj_name}" is forbidden: {e}',
                              name=obj_name, kind=resource, group=group) from e
        if group == rbac.GROUP and resource in RBAC_KINDS and operation in ("CREATE", "UPDATE") and obj is not None \
                and not sub:
            kind = RBAC_KINDS[resource]
            errs = rbac.validate(kind, obj)
            if errs:
                raise invalid(kind, obj_name, errs, group)
            self._no_escalation(kind, resource, ns, obj_name, obj, old, user)

    # -------------------------------------------------------------- escalation prevention
    def _can(self, user: Any, verb: str, resource: str, ns: str, name: str) -> bool:
        rbac_authz = getattr(self.authorizer, "rbac", None)
        if rbac_authz is None:
            return True
        req = rbac.Request(user.name, list(user.groups), verb, ns, rbac.GROUP, resource, "", name)
        return bool(rbac_authz.authorize(req)[0])

    def _no_escalation(self, kind: str, resource: str, ns: str, name: str, obj: Obj, old: Obj | None,
                       user: Any) -> None:
        groups = list(user.groups)
        if "system:masters" in groups:
            return
        rbac_authz = getattr(self.authorizer, "rbac", None)
        if rbac_authz is None:
            return
        if kind in ("Role", "ClusterRole"):
            if self._can(user, "escalate", resource, ns, name):
                return
            if old is not None and old.get("rules") == obj.get("rules"):
                return
            wanted = list(obj.get("rules") or [])
            scope_ns = ns if kind == "Role" else ""
        else:
            ref = obj.get("roleRef") or {}
            if old is not None and old.get("roleRef") == ref:
                return  # roleRef is immutable upstream; subjects-only edits need no new rights
            ref_kind, ref_name = str(ref.get("kind", "")), str(ref.get("name", ""))
            ref_res = "clusterroles" if ref_kind == "ClusterRole" else "roles"
            if self._can(user, "bind", ref_res, ns, ref_name):
                return
            wanted = rbac_authz.role_rules(ref_kind, ref_name, ns)
            scope_ns = ns if kind == "RoleBinding" else ""
        held = rbac_authz.rules_for(user.name, groups, scope_ns)
        missing = rbac.uncovered(held, wanted)
        if missing:
            msg = (f'{resource}.{rbac.GROUP} "{name}" is forbidden: user "{user.name}" '
                   f"(groups={_go_quoted(groups)}) is attempting to grant RBAC permissions not currently held:\n"
                   + rbac.format_rules(missing))
            raise StatusError(403, "Forbidden", msg, name=name, kind=resource, group=rbac.GROUP)

    # -------------------------------------------------------------- aggregation controller
    def reconcile_aggregation(self) -> None:
        roles = [o for _k, o in self.store.iter_raw(rbac.CLUSTER_ROLES, "")]
        for name, rules in rbac.aggregate(roles).items():
            cur = self.store.get(rbac.CLUSTER_ROLES, "", name)
            if cur is None:
                continue
            cur["rules"] = copy.deepcopy(rules)
            self.store.update(rbac.CLUSTER_ROLES, "", name, cur, kind_name="clusterroles", group=rbac.GROUP)

    async def aggregation_loop(self) -> None:
        watcher = self.store.watch(rbac.CLUSTER_ROLES, None, self.store.revision)
        try:
            self.reconcile_aggregation()
            while True:
                ev = await watcher.queue.get()
                if ev is None:
                    return
                while not watcher.queue.empty():  # coalesce a burst
                    if watcher.queue.get_nowait() is None:
                        return
                try:
                    self.reconcile_aggregation()
                except StatusError as e:  # a concurrent write; the next event retries
                    log.info("clusterrole aggregation: %s", e)
                await asyncio.sleep(0)
        finally:
            self.store.unwatch(watcher)


def _go_quoted(values: list[str]) -> str:
    """Go's ``%q`` of a []string: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"
