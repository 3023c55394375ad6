"""End to end: apps/v1 workloads on `pykubelet up` with real containerd, driven by the real kubectl.

Lean on purpose (the rolling-update bounds, adoption, Recreate, pause and partitions are covered on
the dev control plane in tests/integration/server/test_workloads_apps.py): here the pods really run.
"""

from __future__ import annotations

import json
import textwrap

# Same image as busybox:1.36 under another name: a template change that needs no pull.
OTHER_IMAGE = "docker.io/library/busybox:1.36"


def _pods(cluster, selector: str) -> list[dict]:  # type: ignore[no-untyped-def]
    out = cluster.kubectl("get", "pods", "-l", selector, "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def _running(cluster, selector: str, n: int, image: str | None = None) -> bool:  # type: ignore[no-untyped-def]
    pods = _pods(cluster, selector)
    return len(pods) == n and all(
        p["status"].get("phase") == "Running" and (image is None or p["spec"]["containers"][0]["image"] == image)
        for p in pods)


def test_deployment_create_scale_set_image_undo_and_cascading_delete(cluster) -> None:  # type: ignore[no-untyped-def]
    k = cluster.kubectl
    k("create", "deployment", "web", "--image=busybox:1.36", "--", "httpd", "-f", "-p", "80")
    try:
        assert "successfully rolled out" in k("rollout", "status", "deployment/web", "--timeout=60s", timeout=90).stdout
        cluster.wait_for("1 web pod Running", lambda: _running(cluster, "app=web", 1))
        k("scale", "deployment/web", "--replicas=3")
        k("rollout", "status", "deployment/web", "--timeout=60s", timeout=90)
        cluster.wait_for("3 web pods Running", lambda: _running(cluster, "app=web", 3))

        k("set", "image", "deployment/web", f"busybox={OTHER_IMAGE}")
        k("rollout", "status", "deployment/web", "--timeout=90s", timeout=120)
        cluster.wait_for("3 pods of the new image", lambda: _running(cluster, "app=web", 3, OTHER_IMAGE))
        k("rollout", "undo", "deployment/web")
        k("rollout", "status", "deployment/web", "--timeout=90s", timeout=120)
        cluster.wait_for("3 pods of the old image", lambda: _running(cluster, "app=web", 3, "busybox:1.36"))
        assert cluster.jsonpath("get", "deployment", "web", "-o",
                                "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision}") == "3"
    finally:
        k("delete", "deployment", "web", "--ignore-not-found", "--wait=true", timeout=90)
    cluster.wait_for("the deployment's ReplicaSets and pods to be gone",
                     lambda: not _pods(cluster, "app=web") and not json.loads(
                         k("get", "rs", "-l", "app=web", "-o", "json").stdout)["items"], 90)


def test_daemonset_runs_on_the_node_and_statefulset_pods_start_in_order(cluster) -> None:  # type: ignore[no-untyped-def]
    k = cluster.kubectl
    manifest = textwrap.dedent("""\
        apiVersion: apps/v1
        kind: DaemonSet
        metadata: {name: node-agent}
        spec:
          selector: {matchLabels: {app: node-agent}}
          template:
            metadata: {labels: {app: node-agent}}
            spec:
              terminationGracePeriodSeconds: 1
              containers: [{name: main, image: "busybox:1.36", command: [sleep, "3600"]}]
        ---
        apiVersion: apps/v1
        kind: StatefulSet
        metadata: {name: ordered}
        spec:
          serviceName: ordered
          replicas: 2
          selector: {matchLabels: {app: ordered}}
          template:
            metadata: {labels: {app: ordered}}
            spec:
              terminationGracePeriodSeconds: 1
              containers:
              - name: main
                image: "busybox:1.36"
                command: [sh, -c, "hostname > /data/who && exec sleep 3600"]
                volumeMounts: [{name: data, mountPath: /data}]
          volumeClaimTemplates:
          - metadata: {name: data}
            spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Mi}}}
        """)
    k("apply", "-f", "-", input=manifest)
    try:
        cluster.wait_for("the daemon pod Running on the node", lambda: _running(cluster, "app=node-agent", 1), 90)
        assert _pods(cluster, "app=node-agent")[0]["spec"]["nodeName"] == cluster.node_name
        cluster.wait_for("ordered-0 and ordered-1 Running", lambda: _running(cluster, "app=ordered", 2), 90)
        pods = {p["metadata"]["name"]: p for p in _pods(cluster, "app=ordered")}
        assert set(pods) == {"ordered-0", "ordered-1"}
        # OrderedReady: ordered-1 was created only once ordered-0 was Running and Ready
        ready0 = next(c["lastTransitionTime"] for c in pods["ordered-0"]["status"]["conditions"]
                      if c["type"] == "Ready")
        assert pods["ordered-1"]["metadata"]["creationTimestamp"] >= ready0
        # each pod got its own claim from the local-path provisioner, mounted at /data
        phases = k("get", "pvc", "data-ordered-0", "data-ordered-1", "-o", "jsonpath={.items[*].status.phase}")
        assert phases.stdout.split() == ["Bound", "Bound"]
        assert k("exec", "ordered-1", "--", "cat", "/data/who").stdout.strip() == "ordered-1"
    finally:
        k("delete", "-f", "-", "--ignore-not-found", "--wait=true", input=manifest, timeout=90)
        # claims outlive their StatefulSet (Retain, as upstream): remove them ourselves
        k("delete", "pvc", "data-ordered-0", "data-ordered-1", "--ignore-not-found", "--wait=true", timeout=90)
