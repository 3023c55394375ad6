import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubelet.server.tables import PodRowCache, human_duration, to_table
from tests.builders import container, node, pod

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("secs", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (5, "5s"),
        (119, "119s"),
        (190, "3m10s"),
        (180, "3m"),
        (700, "11m"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (10 * 3600, "10h"),
        (2 * 86400 + 3 * 3600, "2d3h"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
        (3000 * 86400, "8y"),
    ],
)
def test_human_duration(secs: int, text: str) -> None:
    assert human_duration(secs) == text


def table_pod(status: dict[str, Any], *, init_containers: list[Any] | None = None, **metadata: Any) -> dict[str, Any]:
    """Pod "web" on n1, 65 s old, with this status (and these init containers before container "c")."""
    return pod("web", uid="", labels={"a": "b"}, node_name="n1", init_containers=init_containers or [],
               metadata={"creationTimestamp": ts(65), **metadata}, status=status)


def cells(p: dict[str, Any]) -> list[Any]:
    t = to_table("pods", [p], now=NOW)
    return t["rows"][0]["cells"]


def running(ready: bool = True, restarts: int = 0, finished: str | None = None) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "c", "ready": ready, "restartCount": restarts, "state": {"running": {}}}
    if finished:
        cs["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": finished}}
    return cs


def test_pod_table_shape_and_running() -> None:
    p = table_pod({"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}], "containerStatuses": [running(True, 3, ts(20))]})
    t = to_table("pods", [p], now=NOW, resource_version="7")
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "7"}
    names = [c["name"] for c in t["columnDefinitions"]]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    assert [c["priority"] for c in t["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    row = t["rows"][0]
    assert row["cells"] == ["web", "1/1", "Running", "3 (20s ago)", "65s", "10.0.0.5", "n1", "<none>", "<none>"]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["namespace"] == "default"
    assert row["object"]["metadata"]["labels"] == {"a": "b"}


def test_pod_waiting_reasons_and_pending() -> None:
    assert cells(table_pod({"phase": "Pending"}))[2] == "Pending"
    cs = {"name": "c", "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}
    assert cells(table_pod({"phase": "Pending", "containerStatuses": [cs]}))[1:3] == ["0/1", "ImagePullBackOff"]
    cs = {"name": "c", "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    assert cells(table_pod({"phase": "Running", "containerStatuses": [cs]}))[2:4] == ["CrashLoopBackOff", "4"]


def test_pod_completed_and_exit_code() -> None:
    cs = {"name": "c", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    t = to_table("pods", [table_pod({"phase": "Succeeded", "containerStatuses": [cs]})], now=NOW)
    assert t["rows"][0]["cells"][2] == "Completed"
    assert t["rows"][0]["conditions"][0]["type"] == "Completed"
    cs = {"name": "c", "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}
    assert cells(table_pod({"phase": "Failed", "containerStatuses": [cs]}))[2] == "ExitCode:3"


def test_pod_init_states() -> None:
    inits = ["i1", "i2"]
    done = {"name": "i1", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    run = {"name": "i2", "state": {"running": {}}}
    assert cells(table_pod({"phase": "Pending", "initContainerStatuses": [done, run]}, init_containers=inits))[2] == "Init:1/2"
    err = {"name": "i2", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    assert cells(table_pod({"phase": "Pending", "initContainerStatuses": [done, err]}, init_containers=inits))[2] == "Init:Error"
    crash = {"name": "i1", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    assert cells(table_pod({"phase": "Pending", "initContainerStatuses": [crash]}, init_containers=inits))[2:4] == ["Init:CrashLoopBackOff", "2"]
    done2 = {"name": "i2", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    waiting = {"name": "c", "state": {"waiting": {"reason": "PodInitializing"}}}
    st = {"phase": "Pending", "initContainerStatuses": [done, done2], "containerStatuses": [waiting]}
    assert cells(table_pod(st, init_containers=inits))[2] == "PodInitializing"


def test_pod_sidecar_counts_in_ready_total() -> None:
    inits = [container("side", restartPolicy="Always")]
    side = {"name": "side", "started": True, "ready": True, "state": {"running": {}}}
    st = {"phase": "Running", "initContainerStatuses": [side], "containerStatuses": [running()],
          "conditions": [{"type": "Initialized", "status": "True"}]}
    assert cells(table_pod(st, init_containers=inits))[1:3] == ["2/2", "Running"]


def test_pod_terminating_and_nodelost() -> None:
    p = table_pod({"phase": "Running", "containerStatuses": [running()]}, deletionTimestamp=ts(1))
    assert cells(p)[2] == "Terminating"
    p = table_pod({"phase": "Running", "reason": "NodeLost"})
    assert cells(p)[2] == "NodeLost"
    p = table_pod({"phase": "Running", "reason": "NodeLost"}, deletionTimestamp=ts(1))
    assert cells(p)[2] == "Unknown"


def table_node(ready: str | None, unschedulable: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return node(ready=ready, unschedulable=unschedulable, labels=labels or {},
                metadata={"creationTimestamp": ts(2 * 86400 + 3 * 3600)},
                node_info={"kubeletVersion": "v1.32.0", "osImage": "Debian", "kernelVersion": "6.1",
                           "containerRuntimeVersion": "containerd://1.7"})


def test_node_table() -> None:
    t = to_table("nodes", [table_node("True", labels={"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": ""})], now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]][:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert t["rows"][0]["cells"] == [
        "n1", "Ready", "control-plane,worker", "2d3h", "v1.32.0", "127.0.0.1", "<none>", "Debian", "6.1", "containerd://1.7",
    ]
    assert to_table("nodes", [table_node("Unknown", True)], now=NOW)["rows"][0]["cells"][1:3] == ["NotReady,SchedulingDisabled", "<none>"]
    assert to_table("nodes", [table_node(None)], now=NOW)["rows"][0]["cells"][1] == "Unknown"


def test_event_table() -> None:
    ev = {
        "metadata": {"name": "web.123", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
        "reason": "Scheduled", "type": "Normal", "message": "Successfully assigned default/web to n1\n",
        "source": {"component": "default-scheduler"}, "firstTimestamp": ts(100), "lastTimestamp": ts(5),
    }
    t = to_table("events", [ev], now=NOW)
    visible = [c for c, d in zip(t["rows"][0]["cells"], t["columnDefinitions"], strict=True) if d["priority"] == 0]
    assert visible == ["5s", "Normal", "Scheduled", "pod/web", "Successfully assigned default/web to n1"]
    assert t["rows"][0]["cells"][5] == "default-scheduler"
    assert t["rows"][0]["cells"][8] == 1


def test_other_kinds_and_generic() -> None:
    lease = {"metadata": {"name": "n1", "creationTimestamp": ts(10)}, "spec": {"holderIdentity": "n1"}}
    assert to_table("leases", [lease], now=NOW)["rows"][0]["cells"] == ["n1", "n1", "10s"]
    cm = {"metadata": {"name": "x", "creationTimestamp": ts(10)}, "data": {"a": "1", "b": "2"}}
    assert to_table("configmaps", [cm], now=NOW)["rows"][0]["cells"] == ["x", 2, "10s"]
    sec = {"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "MQ=="}}
    assert to_table("secrets", [sec], now=NOW)["rows"][0]["cells"] == ["s", "Opaque", 1, "<unknown>"]
    csr = {"metadata": {"name": "c", "creationTimestamp": ts(10)}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "username": "system:node:n1"},
           "status": {"conditions": [{"type": "Approved"}], "certificate": "abc"}}
    assert to_table("certificatesigningrequests", [csr], now=NOW)["rows"][0]["cells"] == [
        "c", "10s", "kubernetes.io/kube-apiserver-client-kubelet", "system:node:n1", "<none>", "Approved,Issued",
    ]
    svc = {"metadata": {"name": "kubernetes"}, "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "ports": [{"port": 443, "protocol": "TCP"}]}}
    assert to_table("services", [svc], now=NOW)["rows"][0]["cells"][:5] == ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    t = to_table("widgets", [{"metadata": {"name": "w", "creationTimestamp": ts(3)}}], now=NOW, include_columns=False)
    assert t["columnDefinitions"] is None
    assert t["rows"][0]["cells"] == ["w", "3s"]
    assert [c["name"] for c in to_table("widgets", [], now=NOW)["columnDefinitions"]] == ["Name", "Age"]


def test_pod_tables_served_from_cached_rows_follow_changes_and_the_clock() -> None:
    restarted = {"name": "c", "ready": True, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"finishedAt": ts(600)}}}
    pods = [pod("a", status={"phase": "Running", "containerStatuses": [restarted]}),
            pod("b", status={"phase": "Succeeded"}),
            {"metadata": {"name": "odd", "resourceVersion": "3"}, "status": {"containerStatuses": 5}}]
    for i, p in enumerate(pods[:2]):
        p["metadata"].update(creationTimestamp=ts(7200), resourceVersion=str(i + 1))
    cache = PodRowCache()

    def table(at: datetime) -> dict[str, Any]:
        return json.loads(cache.table(pods, {"resourceVersion": "9"}, now=at))

    assert table(NOW) == to_table("pods", pods, now=NOW, resource_version="9")
    later = table(NOW + timedelta(hours=1))
    assert later["rows"][0]["cells"][3:5] == ["2 (70m ago)", "3h"]
    pods[1] = {**pods[1], "metadata": {**pods[1]["metadata"], "resourceVersion": "4", "deletionTimestamp": ts(0)},
               "status": {"phase": "Running"}}
    assert table(NOW)["rows"][1]["cells"][2] == "Terminating"
