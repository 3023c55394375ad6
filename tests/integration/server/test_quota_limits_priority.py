"""PriorityClass, LimitRange and ResourceQuota admission on the dev API server, with upstream's
messages, and the quota status the server keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pykubelet.server.main import ServerHandle

from .conftest import Http, Kubectl

PODS = "/api/v1/namespaces/default/pods"
PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"


def pod(name: str, *, resources: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox:1.36"}
    if resources is not None:
        c["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [c], **spec}}


async def test_system_priority_classes_exist_and_pods_get_their_priority(http33: Http) -> None:
    st, lst = await http33.req("GET", PCS)
    values = {p["metadata"]["name"]: p["value"] for p in lst["items"]}
    assert values == {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
    st, body = await http33.req("POST", PCS, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                              "metadata": {"name": "high"}, "value": 1000, "globalDefault": True})
    assert st == 201 and body["preemptionPolicy"] == "PreemptLowerPriority"
    st, body = await http33.req("POST", PCS, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                              "metadata": {"name": "other"}, "value": 5, "globalDefault": True})
    assert st == 403 and body["message"] == ('priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass '
                                             'high is marked as default. Only one default can exist')
    st, body = await http33.req("POST", PCS, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                              "metadata": {"name": "huge"}, "value": 2000000000})
    assert st == 422 and "maximum allowed value of a user defined priority is 1000000000" in body["message"]
    st, body = await http33.req("POST", PODS, pod("crit", priorityClassName="system-node-critical"))
    assert st == 201 and body["spec"]["priority"] == 2000001000
    assert body["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    st, body = await http33.req("POST", PODS, pod("dflt"))
    assert st == 201 and body["spec"]["priority"] == 1000 and body["spec"]["priorityClassName"] == "high"
    st, body = await http33.req("POST", PODS, pod("nope", priorityClassName="missing"))
    assert st == 403
    assert body["message"] == 'pods "nope" is forbidden: no PriorityClass with name missing was found'


async def test_limit_range_defaults_and_bounds(http33: Http) -> None:
    lr = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"},
          "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "128Mi"},
                               "defaultRequest": {"cpu": "100m"}, "min": {"cpu": "50m"}, "max": {"cpu": "1"},
                               "maxLimitRequestRatio": {"cpu": "10"}}]}}
    st, body = await http33.req("POST", "/api/v1/namespaces/default/limitranges", lr)
    assert st == 201, body
    st, body = await http33.req("POST", PODS, pod("defaulted"))
    assert st == 201
    assert body["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "500m", "memory": "128Mi"},
                                                          "requests": {"cpu": "100m", "memory": "128Mi"}}
    st, body = await http33.req("POST", PODS, pod("big", resources={"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}))
    assert st == 403
    assert body["message"] == 'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    st, body = await http33.req("POST", PODS, pod("tiny", resources={"requests": {"cpu": "10m"},
                                                                    "limits": {"cpu": "800m"}}))
    assert st == 403
    assert body["message"] == ('pods "tiny" is forbidden: [minimum cpu usage per Container is 50m, but request is '
                               '10m, cpu max limit to request ratio per Container is 10, but provided ratio is '
                               '80.000000]')


async def test_resource_quota_refuses_and_tracks_usage(http33: Http) -> None:
    q: dict[str, Any] = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
         "spec": {"hard": {"pods": "2", "configmaps": "10", "requests.cpu": "1"}}}
    st, body = await http33.req("POST", "/api/v1/namespaces/default/resourcequotas", q)
    assert st == 201
    st, body = await http33.req("POST", PODS, pod("nocpu"))
    assert st == 403
    assert body["message"] == 'pods "nocpu" is forbidden: failed quota: q: must specify requests.cpu for: c'
    for n in ("a", "b"):
        st, body = await http33.req("POST", PODS, pod(n, resources={"requests": {"cpu": "300m"}}))
        assert st == 201, body
    st, body = await http33.req("POST", PODS, pod("c", resources={"requests": {"cpu": "300m"}}))
    assert st == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('pods "c" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, '
                               'limited: pods=2')
    st, quota = await http33.req("GET", "/api/v1/namespaces/default/resourcequotas/q")
    assert quota["status"]["used"]["pods"] == "2" and quota["status"]["used"]["requests.cpu"] == "600m"
    assert quota["status"]["hard"] == q["spec"]["hard"]
    st, _ = await http33.req("DELETE", f"{PODS}/a")
    assert st == 200
    st, quota = await http33.req("GET", "/api/v1/namespaces/default/resourcequotas/q")
    assert quota["status"]["used"]["pods"] == "1"


async def test_created_objects_carry_upstream_default_status(http33: Http) -> None:
    st, ns = await http33.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": "n1"}})
    assert ns["status"] == {"phase": "Active"}
    st, svc = await http33.req("POST", "/api/v1/namespaces/default/services",
                               {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                                "spec": {"ports": [{"port": 80}]}})
    assert st == 201 and svc["status"] == {"loadBalancer": {}}
    st, pvc = await http33.req("POST", "/api/v1/namespaces/default/persistentvolumeclaims",
                               {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
                                "spec": {"accessModes": ["ReadWriteOnce"],
                                         "resources": {"requests": {"storage": "1Gi"}}}})
    assert st == 201 and pvc["status"] == {"phase": "Pending"}


async def test_kubectl_get_prints_upstream_columns(http33: Http, server33: ServerHandle, tmp_path: Path) -> None:
    kubectl = Kubectl(server33, tmp_path)
    out = await kubectl.ok("get", "pc")
    assert out.split("\n")[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert "system-node-critical" in out and "2000001000" in out
    q: dict[str, Any] = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
         "spec": {"hard": {"pods": "5", "limits.cpu": "2"}}}
    st, _ = await http33.req("POST", "/api/v1/namespaces/default/resourcequotas", q)
    assert st == 201
    out = await kubectl.ok("get", "quota")
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert "pods: 0/5" in row and "limits.cpu: 0/2" in row


async def test_created_workloads_carry_the_zero_status_fields_upstream_prints(http33: Http) -> None:
    template = {"selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}},
                             "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    want = {"replicasets": {"replicas": 0}, "statefulsets": {"replicas": 0, "availableReplicas": 0},
            "daemonsets": {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                           "numberReady": 0}}
    kinds = {"replicasets": "ReplicaSet", "statefulsets": "StatefulSet", "daemonsets": "DaemonSet"}
    for res, status in want.items():
        st, obj = await http33.req("POST", f"/apis/apps/v1/namespaces/default/{res}",
                                   {"apiVersion": "apps/v1", "kind": kinds[res], "metadata": {"name": "w"},
                                    "spec": template, "status": {"replicas": 7}})
        assert st == 201 and obj["status"] == status, (res, obj.get("status"))
