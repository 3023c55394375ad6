import copy
import functools
from typing import Any

import pytest

from pykubelet.common.podspec import (
    POD_UPDATE_FORBIDDEN,
    default_image_pull_policy,
    default_pod,
    format_invalid,
    validate,
    validate_metadata,
    validate_pod,
)
from tests.builders import container, pod

# A pod manifest as a user submits it (no uid, no status).
manifest = functools.partial(pod, "web", uid="", containers=[container(image="nginx")])


def defaulted(**spec: Any) -> dict[str, Any]:
    p = manifest(**spec)
    default_pod(p)
    return p


def test_defaults() -> None:
    p = defaulted()
    s = p["spec"]
    assert s["restartPolicy"] == "Always"
    assert s["dnsPolicy"] == "ClusterFirst"
    assert s["terminationGracePeriodSeconds"] == 30
    assert s["schedulerName"] == "default-scheduler"
    assert s["enableServiceLinks"] is True
    assert s["priority"] == 0
    assert s["securityContext"] == {}
    assert s["serviceAccountName"] == "default"
    c = s["containers"][0]
    assert c["imagePullPolicy"] == "Always"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "File"
    keys = {(t["key"], t["effect"], t["tolerationSeconds"]) for t in s["tolerations"]}
    assert keys == {
        ("node.kubernetes.io/not-ready", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "NoExecute", 300),
    }
    assert p["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert validate_pod(p) == []


def test_defaulting_is_idempotent_and_respects_existing_tolerations() -> None:
    p = defaulted(tolerations=[{"operator": "Exists"}])
    assert p["spec"]["tolerations"] == [{"operator": "Exists"}]
    q = copy.deepcopy(p)
    default_pod(q)
    assert q == p


def test_image_pull_policy_and_container_defaults() -> None:
    assert default_image_pull_policy("nginx") == "Always"
    assert default_image_pull_policy("nginx:latest") == "Always"
    assert default_image_pull_policy("nginx:1.25") == "IfNotPresent"
    assert default_image_pull_policy("localhost:5000/app") == "Always"
    assert default_image_pull_policy("busybox@sha256:abcd") == "IfNotPresent"
    p = manifest(hostNetwork=True)
    c = p["spec"]["containers"][0]
    c["ports"] = [{"containerPort": 80}]
    c["readinessProbe"] = {"httpGet": {"port": 80}}
    c["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    default_pod(p)
    assert c["ports"] == [{"containerPort": 80, "protocol": "TCP", "hostPort": 80}]
    assert c["readinessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert p["status"]["qosClass"] == "Guaranteed"


def test_invalid_name_and_missing_image() -> None:
    p = defaulted()
    p["metadata"]["name"] = "Foo"
    p["spec"]["containers"][0]["image"] = ""
    errs = validate_pod(p)
    assert errs[0][0] == "metadata.name"
    assert errs[0][1].startswith('Invalid value: "Foo": a lowercase RFC 1123 subdomain must consist of')
    assert ("spec.containers[0].image", "Required value") in errs


def test_duplicate_container_names_and_bad_restart_policy() -> None:
    p = manifest(restartPolicy="Sometimes")
    p["spec"]["containers"].append({"name": "c", "image": "busybox"})
    default_pod(p)
    errs = validate_pod(p)
    assert ("spec.containers[1].name", 'Duplicate value: "c"') in errs
    assert (
        "spec.restartPolicy",
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
    ) in errs


def test_no_containers_ports_volumes() -> None:
    p = defaulted()
    p["spec"]["containers"] = []
    assert ("spec.containers", "Required value") in validate_pod(p)
    p = defaulted()
    c = p["spec"]["containers"][0]
    c["ports"] = [{"containerPort": 70000, "protocol": "TCP"}]
    c["volumeMounts"] = [{"name": "data", "mountPath": "/d"}]
    c["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    errs = validate_pod(p)
    assert ("spec.containers[0].ports[0].containerPort", "Invalid value: 70000: must be between 1 and 65535, inclusive") in errs
    assert ("spec.containers[0].volumeMounts[0].name", 'Not found: "data"') in errs
    assert ("spec.containers[0].resources.requests", 'Invalid value: "2": must be less than or equal to cpu limit of 1') in errs


def test_update_allows_image_and_toleration_additions_only() -> None:
    old = defaulted()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "nginx:1.27"
    new["spec"]["tolerations"].append({"key": "a", "operator": "Exists", "effect": "NoSchedule"})
    new["spec"]["activeDeadlineSeconds"] = 60
    assert validate_pod(new, old) == []
    bad = copy.deepcopy(old)
    bad["spec"]["restartPolicy"] = "Never"
    errs = validate_pod(bad, old)
    assert errs == [("spec", "Forbidden: " + POD_UPDATE_FORBIDDEN)]
    removed = copy.deepcopy(old)
    removed["spec"]["tolerations"] = []
    assert ("spec", "Forbidden: " + POD_UPDATE_FORBIDDEN) in validate_pod(removed, old)


def test_metadata_for_other_kinds() -> None:
    assert validate_metadata("namespaces", {"metadata": {"name": "a.b"}})[0][1].startswith(
        'Invalid value: "a.b": a lowercase RFC 1123 label'
    )
    assert validate_metadata("nodes", {"metadata": {"name": "node-1.example"}}) == []
    assert validate("configmaps", {"metadata": {}}) == [
        ("metadata.name", "Required value: name or generateName is required")
    ]
    errs = validate_metadata("nodes", {"metadata": {"name": "n", "labels": {"bad key!": "x", "ok": "bad value!"}}})
    assert [p for p, _ in errs] == ["metadata.labels", "metadata.labels"]


def test_format_invalid() -> None:
    assert format_invalid("Pod", "x", [("a", "Required value")]) == 'Pod "x" is invalid: a: Required value'
    assert format_invalid("Pod", "x", [("a", "m"), ("b", "n")]) == 'Pod "x" is invalid: [a: m, b: n]'


# --- malformed input never raises; updates are defaulted without admission -----------------

_BAD_SHAPES: list[Any] = [
    {"spec": None},
    {"spec": "x"},
    {"spec": []},
    {"metadata": "x", "spec": {"containers": [{"name": "c", "image": "i"}]}},
    {"metadata": {"name": 5}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
    {"spec": {"containers": "c"}},
    {"spec": {"containers": {"name": "c"}}},
    {"spec": {"containers": [1, None, "x"]}},
    {"spec": {"containers": [{"name": "c", "image": "i", "ports": "80", "env": {"a": 1}}]}},
    {"spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "valueFrom": "x"}]}]}},
    {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": []}}}]}},
    {"spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": "all", "volumes": {"v": 1}}},
    {"spec": {"containers": [{"name": "c", "image": "i"}], "activeDeadlineSeconds": "x"}},
    {"spec": {"containers": [{"name": "c", "image": "i"}]}, "status": "x"},
]


@pytest.mark.parametrize("pod", _BAD_SHAPES)
def test_wrong_shapes_give_field_errors_not_exceptions(pod: dict[str, Any]) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **copy.deepcopy(pod)}
    default_pod(obj)
    errs = validate_pod(obj)
    old = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}],
                                               "activeDeadlineSeconds": 5}}
    upd = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **copy.deepcopy(pod)}
    default_pod(upd, admission=False, old=old)
    errs_upd = validate_pod(upd, old)
    if pod.get("status") != "x":
        assert errs and errs_upd, (errs, errs_upd)


def test_update_defaults_without_admission_keep_server_populated_fields() -> None:
    created = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "nodeName": "n1"}}
    default_pod(created, not_ready_toleration_seconds=7, unreachable_toleration_seconds=9)
    secs = {t["key"]: t["tolerationSeconds"] for t in created["spec"]["tolerations"]}
    assert secs == {"node.kubernetes.io/not-ready": 7, "node.kubernetes.io/unreachable": 9}
    put = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}
    default_pod(put, admission=False, old=created)
    assert validate_pod(put, created) == []
    assert put["spec"]["nodeName"] == "n1" and put["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_downward_api_volume_items_default_field_ref_api_version() -> None:
    p = pod("dapi")
    p["spec"]["volumes"] = [
        {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "p", "projected": {"sources": [
            {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
    ]
    default_pod(p)
    assert p["spec"]["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] == "v1"
    projected = p["spec"]["volumes"][1]["projected"]["sources"][0]["downwardAPI"]["items"][0]
    assert projected["fieldRef"]["apiVersion"] == "v1"
