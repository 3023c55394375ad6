"""Pure decisions of the workload controllers and the apps/v1 strategies, as upstream makes them."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.server import apps
from pykubelet.server.controllers import daemonset, deployment, podcontrol
from tests.builders import node

Obj = dict[str, Any]


def _pod(name: str, *, node_name: str = "", phase: str = "Running", ready: bool = True,
         created: str = "2024-01-01T00:00:00Z", ready_since: str = "2024-01-01T00:00:10Z", restarts: int = 0,
         cost: int | None = None) -> Obj:
    ann = {podcontrol.POD_DELETION_COST: str(cost)} if cost is not None else {}
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": ann},
            "spec": {"nodeName": node_name},
            "status": {"phase": phase, "containerStatuses": [{"restartCount": restarts}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": ready_since}]}}


def _names(pods: list[Obj]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_scale_down_deletes_unscheduled_then_pending_then_not_ready_pods_first() -> None:
    pods = [_pod("running", node_name="n1"), _pod("not-ready", node_name="n1", ready=False),
            _pod("pending", node_name="n1", phase="Pending", ready=False), _pod("unscheduled", phase="Pending")]
    assert _names(podcontrol.deletion_order(pods)) == ["unscheduled", "pending", "not-ready", "running"]


def test_among_ready_pods_low_deletion_cost_then_crowded_nodes_then_recent_then_restarts_then_newest_go_first() -> None:
    base = _pod("base", node_name="a")
    assert _names(podcontrol.deletion_order([_pod("cheap", node_name="a", cost=-1), base]))[0] == "cheap"
    crowded = [_pod("b1", node_name="b"), _pod("b2", node_name="b"), _pod("lonely", node_name="c")]
    assert _names(podcontrol.deletion_order(crowded))[-1] == "lonely"
    recent = _pod("recent", node_name="a", ready_since="2024-01-02T00:00:00Z")
    assert _names(podcontrol.deletion_order([base, recent]))[0] == "recent"
    restarted = _pod("restarted", node_name="a", restarts=3)
    assert _names(podcontrol.deletion_order([base, restarted]))[0] == "restarted"
    newer = _pod("newer", node_name="a", created="2024-01-01T00:00:05Z")
    assert _names(podcontrol.deletion_order([base, newer]))[0] == "newer"


def test_claim_adopts_orphans_keeps_own_releases_unselected_and_ignores_others() -> None:
    owner = {"metadata": {"uid": "u1"}}
    sel = {"matchLabels": {"app": "x"}}
    mine = {"metadata": {"labels": {"app": "x"}, "ownerReferences": [{"uid": "u1", "controller": True}]}}
    assert podcontrol.claim(owner, mine, sel) is podcontrol.Claim.KEEP
    assert podcontrol.claim(owner, {"metadata": {"labels": {"app": "x"}}}, sel) is podcontrol.Claim.ADOPT
    relabelled = {"metadata": {"labels": {"app": "y"}, "ownerReferences": [{"uid": "u1", "controller": True}]}}
    assert podcontrol.claim(owner, relabelled, sel) is podcontrol.Claim.RELEASE
    other = {"metadata": {"labels": {"app": "x"}, "ownerReferences": [{"uid": "u2", "controller": True}]}}
    assert podcontrol.claim(owner, other, sel) is podcontrol.Claim.IGNORE


def test_template_hash_is_stable_and_changes_with_template_or_collision_count() -> None:
    t = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    h = podcontrol.template_hash(t)
    assert h == podcontrol.template_hash({**t}) and set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert podcontrol.template_hash(t, 1) != h
    assert podcontrol.template_hash({**t, "spec": {"containers": [{"name": "c", "image": "j"}]}}) != h


def _dep(replicas: int, surge: Any = "25%", unavailable: Any = "25%") -> Obj:
    return {"spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate",
                                                         "rollingUpdate": {"maxSurge": surge,
                                                                           "maxUnavailable": unavailable}}}}


def test_fenceposts_round_surge_up_and_unavailable_down_and_never_both_zero() -> None:
    assert deployment.fenceposts(_dep(10)) == (3, 2)
    assert deployment.fenceposts(_dep(1)) == (1, 0)
    assert deployment.fenceposts(_dep(3, 0, 0)) == (0, 1)


def test_new_replicaset_grows_only_within_max_surge() -> None:
    d = _dep(4, 1, 1)
    old = {"spec": {"replicas": 4}}
    new = {"spec": {"replicas": 0}}
    assert deployment.new_rs_replicas(d, [old, new], new) == 1
    assert deployment.new_rs_replicas(d, [{"spec": {"replicas": 2}}, {"spec": {"replicas": 3}}],
                                      {"spec": {"replicas": 3}}) == 3


def test_daemon_pods_tolerate_unschedulable_and_pin_to_their_node() -> None:
    ds = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    spec = daemonset.daemon_pod_spec(ds, "n1")
    keys = {(t["key"], t["effect"]) for t in spec["tolerations"]}
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
    assert daemonset.node_of({"spec": spec}) == "n1"
    cordoned = node("n1", unschedulable=True, taints=[{"key": "node.kubernetes.io/unschedulable",
                                                        "effect": "NoSchedule"}])
    assert daemonset.should_run(ds, cordoned)
    assert not daemonset.should_run(ds, node("n2", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    selective = {"spec": {"template": {"spec": {"nodeSelector": {"role": "edge"}, "containers": []}}}}
    assert not daemonset.should_run(selective, node("n1"))
    assert daemonset.should_run(selective, node("n1", labels={"role": "edge"}))


def _deployment(**spec: Any) -> Obj:
    labels = {"app": "x"}
    return {"metadata": {"name": "x"}, "spec": {"selector": {"matchLabels": labels}, "template": {
        "metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, **spec}}


def test_deployment_defaults_follow_apps_v1() -> None:
    d = _deployment()
    apps.prepare_create("deployments", d)
    assert d["spec"]["replicas"] == 1 and d["spec"]["revisionHistoryLimit"] == 10
    assert d["spec"]["progressDeadlineSeconds"] == 600
    assert d["spec"]["strategy"] == {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert d["spec"]["template"]["spec"]["restartPolicy"] == "Always" and d["status"] == {}


@pytest.mark.parametrize(("spec", "field", "text"), [
    ({"selector": {"matchLabels": {"app": "y"}}}, "spec.template.metadata.labels",
     "`selector` does not match template `labels`"),
    ({"selector": {}}, "spec.selector", "empty selector is invalid for deployment"),
    ({"replicas": -1}, "spec.replicas", "must be greater than or equal to 0"),
    ({"strategy": {"type": "Recreate", "rollingUpdate": {}}}, "spec.strategy.rollingUpdate",
     "may not be specified when strategy `type` is 'Recreate'"),
    ({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}},
     "spec.strategy.rollingUpdate.maxUnavailable", "may not be 0 when `maxSurge` is 0"),
])
def test_invalid_deployments_are_reported_per_field(spec: Obj, field: str, text: str) -> None:
    d = _deployment(**spec)
    apps.default_workload("deployments", d)
    d["spec"].update(spec)
    errs = apps.validate_workload("deployments", d, None)
    assert any(f == field and text in m for f, m in errs), errs


def test_selector_is_immutable_and_scale_reports_it_as_a_string() -> None:
    old = _deployment()
    new = _deployment()
    new["spec"]["selector"] = {"matchLabels": {"app": "x", "tier": "web"}}
    new["spec"]["template"]["metadata"]["labels"]["tier"] = "web"
    assert any(f == "spec.selector" and "field is immutable" in m
               for f, m in apps.validate_workload("deployments", new, old))
    sel = {"matchLabels": {"b": "1"}, "matchExpressions": [{"key": "a", "operator": "In", "values": ["y", "x"]}]}
    assert apps.selector_string(sel) == "a in (x,y),b=1"


def _dpod(name: str, h: str, *, ready: bool = True, phase: str = "Running") -> Obj:
    p = _pod(name, node_name="n", phase=phase, ready=ready)
    p["metadata"]["labels"] = {"controller-revision-hash": h}
    return p


def _ds(**rolling: Any) -> Obj:
    return {"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}}


def test_daemonset_rolling_update_replaces_at_most_max_unavailable_nodes_at_a_time() -> None:
    now = podcontrol.parse_time("2024-01-02T00:00:00Z")
    assert now is not None
    by_node = {f"n{i}": [_dpod(f"old{i}", "old")] for i in range(4)}
    creates, deletes = daemonset.plan(_ds(maxUnavailable=1), by_node, set(by_node), "new", now)
    assert creates == [] and len(deletes) == 1
    # an unavailable old pod is replaced first; it already uses the budget of one
    by_node["n3"] = [_dpod("old3", "old", ready=False)]
    creates, deletes = daemonset.plan(_ds(maxUnavailable=1), by_node, set(by_node), "new", now)
    assert _names(deletes) == ["old3"]


def test_daemonset_surge_starts_the_new_pod_beside_the_old_one_then_removes_the_old() -> None:
    now = podcontrol.parse_time("2024-01-02T00:00:00Z")
    assert now is not None
    by_node = {"n0": [_dpod("old0", "old")], "n1": [_dpod("old1", "old")]}
    creates, deletes = daemonset.plan(_ds(maxSurge=1, maxUnavailable=0), by_node, set(by_node), "new", now)
    assert len(creates) == 1 and deletes == []
    by_node["n0"].append(_dpod("new0", "new", ready=False))
    assert daemonset.plan(_ds(maxSurge=1, maxUnavailable=0), by_node, set(by_node), "new", now) == ([], [])
    by_node["n0"][1] = _dpod("new0", "new")
    creates, deletes = daemonset.plan(_ds(maxSurge=1, maxUnavailable=0), by_node, set(by_node), "new", now)
    assert _names(deletes) == ["old0"] and creates == []  # n1 waits until n0 is done


def test_daemonset_failed_pods_and_pods_on_ineligible_nodes_are_deleted() -> None:
    now = podcontrol.parse_time("2024-01-02T00:00:00Z")
    assert now is not None
    by_node = {"n0": [_dpod("failed", "h", phase="Failed")], "gone": [_dpod("stray", "h")]}
    creates, deletes = daemonset.plan({"spec": {}}, by_node, {"n0", "n1"}, "h", now)
    assert creates == ["n1"] and sorted(_names(deletes)) == ["failed", "stray"]


def test_statefulset_mounts_may_name_claim_templates_but_not_unknown_volumes() -> None:
    sts = _deployment(serviceName="x", volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}])
    sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    apps.default_workload("statefulsets", sts)
    assert apps.validate_workload("statefulsets", sts, None) == []
    sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "other", "mountPath": "/o"}]
    errs = apps.validate_workload("statefulsets", sts, None)
    assert any("volumeMounts[0].name" in f and "Not found" in m for f, m in errs), errs
