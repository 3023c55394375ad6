"""End to end: pods with volumes on real containerd, driven with the real kubectl.

One module fixture creates every pod at once (they start in parallel) and the tests then look at them
the way a user does: files read with ``kubectl exec``, the mount table inside the pod, events, and the
host's mount table after a deletion. The agent refreshes ConfigMap content every syncFrequency (60 s,
as upstream), so the ConfigMap is edited as soon as the pods run and its test comes last.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LABEL = "suite=volumes"


def apply(cluster, manifest: str) -> None:  # type: ignore[no-untyped-def]
    cluster.kubectl("apply", "-f", "-", input=textwrap.dedent(manifest))


def pod_json(cluster, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    res = cluster.kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def phase(cluster, name: str) -> str:  # type: ignore[no-untyped-def]
    return str((pod_json(cluster, name).get("status") or {}).get("phase", ""))


def sh(cluster, pod: str, script: str, container: str | None = None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    args = ["exec", pod] + (["-c", container] if container else []) + ["--", "sh", "-c", script]
    return cluster.kubectl(*args, check=False)  # type: ignore[no-any-return]


def events(cluster, name: str, reason: str) -> list[str]:  # type: ignore[no-untyped-def]
    items = json.loads(cluster.kubectl("get", "events", "-o", "json").stdout).get("items") or []
    return [e.get("message", "") for e in items
            if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason]


def waiting_reason(cluster, name: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    for cs in (pod_json(cluster, name).get("status") or {}).get("containerStatuses") or []:
        w = (cs.get("state") or {}).get("waiting") or {}
        if w:
            return str(w.get("reason", "")), str(w.get("message", ""))
    return "", ""


class Pods:
    def __init__(self, cluster, host_dir: Path) -> None:  # type: ignore[no-untyped-def]
        self.cluster = cluster
        self.host_dir = host_dir
        self.edited_at = 0.0


def manifests(node: str, host_dir: Path) -> str:
    return f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: vol-cfg}}
data: {{app.conf: "level=info", other: "x"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: vol-secret}}
stringData: {{token: s3cr3t}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-files, labels: {{suite: volumes, tier: web}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - {{name: cfg, mountPath: /etc/cfg}}
    - {{name: secret, mountPath: /etc/secret}}
    - {{name: cfg, mountPath: /etc/app.conf, subPath: app.conf}}
    - {{name: info, mountPath: /etc/info}}
  volumes:
  - {{name: cfg, configMap: {{name: vol-cfg}}}}
  - {{name: secret, secret: {{secretName: vol-secret}}}}
  - name: info
    downwardAPI:
      items: [{{path: labels, fieldRef: {{apiVersion: v1, fieldPath: metadata.labels}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-shared, labels: {{suite: volumes}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: writer
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo hello-from-writer > /data/hello; sleep 3600"]
    volumeMounts:
    - {{name: data, mountPath: /data}}
    - {{name: mem, mountPath: /mem}}
    - {{name: host, mountPath: /host}}
  - name: reader
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - {{name: data, mountPath: /data, readOnly: true}}
  volumes:
  - {{name: data, emptyDir: {{}}}}
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 8Mi}}}}
  - {{name: host, hostPath: {{path: {host_dir}/created-by-pod, type: DirectoryOrCreate}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-late, labels: {{suite: volumes}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: main, image: "busybox:latest", imagePullPolicy: IfNotPresent, command: ["sleep", "3600"],
     volumeMounts: [{{name: cfg, mountPath: /cfg}}]}}
  volumes:
  - {{name: cfg, configMap: {{name: vol-late-cfg}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-bad-key, labels: {{suite: volumes}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: main, image: "busybox:latest", imagePullPolicy: IfNotPresent, command: ["sleep", "3600"],
     volumeMounts: [{{name: cfg, mountPath: /cfg}}]}}
  volumes:
  - {{name: cfg, configMap: {{name: vol-cfg, items: [{{key: nope, path: nope}}]}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-bad-host, labels: {{suite: volumes}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: main, image: "busybox:latest", imagePullPolicy: IfNotPresent, command: ["sleep", "3600"],
     volumeMounts: [{{name: h, mountPath: /h}}]}}
  volumes:
  - {{name: h, hostPath: {{path: {host_dir}, type: File}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-escape, labels: {{suite: volumes}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: main, image: "busybox:latest", imagePullPolicy: IfNotPresent, command: ["sleep", "3600"],
     volumeMounts: [{{name: d, mountPath: /d, subPath: ../../../etc}}]}}
  volumes:
  - {{name: d, emptyDir: {{}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vol-full, labels: {{suite: volumes}}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "dd if=/dev/zero of=/m/fill bs=1024 count=4096; echo dd-exit=$?; sleep 3600"]
    volumeMounts: [{{name: m, mountPath: /m}}]
  volumes:
  - {{name: m, emptyDir: {{medium: Memory, sizeLimit: 1Mi}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: vol-claim}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 16Mi}}}}
---
{pvc_pod("vol-pvc-a", "cat /proc/sys/kernel/random/uuid > /data/stamp; sleep 3600")}
"""


def pvc_pod(name: str, script: str) -> str:
    """A pod that the scheduler places (the default class binds on first consumer) using vol-claim."""
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{suite: volumes}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: main, image: "busybox:latest", imagePullPolicy: IfNotPresent, command: ["sh", "-c", "{script}"],
     volumeMounts: [{{name: data, mountPath: /data}}]}}
  volumes:
  - {{name: data, persistentVolumeClaim: {{claimName: vol-claim}}}}
"""


@pytest.fixture(scope="module")
def pods(cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pods]:  # type: ignore[no-untyped-def]
    host_dir = tmp_path_factory.mktemp("volumes-host")
    p = Pods(cluster, host_dir)
    try:
        apply(cluster, manifests(cluster.node_name, host_dir))
        for name in ("vol-files", "vol-shared", "vol-full", "vol-pvc-a"):
            cluster.wait_for(f"{name} Running", lambda n=name: phase(cluster, n) == "Running", 120)  # type: ignore[misc]
        cluster.wait_for("the ConfigMap file in vol-files",
                         lambda: sh(cluster, "vol-files", "cat /etc/cfg/app.conf").stdout == "level=info", 30)
        # edit now: the agent picks it up within its refresh period (syncFrequency, 60 s); checked last
        cluster.kubectl("patch", "configmap", "vol-cfg", "--type=merge", "-p", '{"data":{"app.conf":"level=debug"}}')
        p.edited_at = time.monotonic()
        yield p
    finally:
        cluster.kubectl("delete", "pod", "-l", LABEL, "--ignore-not-found", "--wait=true", "--timeout=120s",
                        timeout=150, check=False)
        cluster.kubectl("delete", "configmap", "vol-cfg", "vol-late-cfg", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "secret", "vol-secret", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "pvc", "vol-claim", "--ignore-not-found", "--wait=true", timeout=120, check=False)


def test_config_map_and_secret_files_are_readable_and_the_secret_is_on_tmpfs(pods: Pods) -> None:
    c = pods.cluster
    assert sh(c, "vol-files", "cat /etc/secret/token").stdout == "s3cr3t"
    assert sh(c, "vol-files", "cat /etc/cfg/other").stdout == "x"
    mounts = sh(c, "vol-files", "cat /proc/mounts").stdout.splitlines()
    secret = [ln for ln in mounts if ln.split()[1] == "/etc/secret"]
    assert secret and secret[0].split()[2] == "tmpfs", mounts
    assert " ro," in f" {secret[0].split()[3]},"  # configMap/secret volumes are always read-only


def test_a_missing_config_map_holds_the_pod_until_it_is_created(pods: Pods) -> None:
    c = pods.cluster
    c.wait_for("FailedMount for vol-late", lambda: any(
        'MountVolume.SetUp failed for volume "cfg" : configmap "vol-late-cfg" not found' in m
        for m in events(c, "vol-late", "FailedMount")), 60)
    assert phase(c, "vol-late") == "Pending"
    # a new pod's first status is written once it has waited a second for its containers to start
    c.wait_for("vol-late ContainerCreating", lambda: waiting_reason(c, "vol-late")[0] == "ContainerCreating", 30)
    c.kubectl("create", "configmap", "vol-late-cfg", "--from-literal=k=v")
    c.wait_for("vol-late Running", lambda: phase(c, "vol-late") == "Running", 60)
    assert sh(c, "vol-late", "cat /cfg/k").stdout == "v"


def test_two_containers_share_an_empty_dir_and_a_memory_empty_dir_is_tmpfs(pods: Pods) -> None:
    c = pods.cluster
    c.wait_for("the reader sees the writer's file",
               lambda: sh(c, "vol-shared", "cat /data/hello", "reader").stdout == "hello-from-writer\n", 30)
    mem = [ln for ln in sh(c, "vol-shared", "cat /proc/mounts", "writer").stdout.splitlines()
           if ln.split()[1] == "/mem"]
    assert mem and mem[0].split()[2] == "tmpfs" and "size=8192k" in mem[0], mem


def test_a_read_only_mount_refuses_writes(pods: Pods) -> None:
    res = sh(pods.cluster, "vol-shared", "touch /data/nope", "reader")
    assert res.returncode != 0 and "Read-only file system" in res.stdout + res.stderr
    assert sh(pods.cluster, "vol-shared", "touch /data/yes && echo ok", "writer").stdout == "ok\n"


def test_sub_path_mounts_one_file(pods: Pods) -> None:
    assert sh(pods.cluster, "vol-files", "cat /etc/app.conf").stdout == "level=info"
    res = sh(pods.cluster, "vol-files", "test -f /etc/app.conf && echo file")
    assert res.stdout == "file\n"


def test_host_path_directory_or_create_creates_the_directory(pods: Pods) -> None:
    assert (pods.host_dir / "created-by-pod").is_dir()
    sh(pods.cluster, "vol-shared", "echo from-pod > /host/f", "writer")
    assert (pods.host_dir / "created-by-pod" / "f").read_text() == "from-pod\n"


def test_downward_api_labels_follow_kubectl_label(pods: Pods) -> None:
    c = pods.cluster
    assert sh(c, "vol-files", "cat /etc/info/labels").stdout == 'suite="volumes"\ntier="web"'
    c.kubectl("label", "pod", "vol-files", "tier=backend", "--overwrite")
    c.wait_for("the labels file follows", lambda: 'tier="backend"' in sh(c, "vol-files", "cat /etc/info/labels").stdout,
               60)


def test_bad_volumes_are_explained(pods: Pods) -> None:
    c = pods.cluster
    c.wait_for("FailedMount for the missing key", lambda: any(
        m.endswith("configmap references non-existent config key: nope") for m in events(c, "vol-bad-key", "FailedMount")),
        60)
    c.wait_for("FailedMount for the hostPath type", lambda: any(
        f"hostPath type check failed: {pods.host_dir} is not a file, it's a Directory" in m
        for m in events(c, "vol-bad-host", "FailedMount")), 60)
    c.wait_for("CreateContainerConfigError for the escaping subPath",
               lambda: waiting_reason(c, "vol-escape") == (
                   "CreateContainerConfigError", "unable to provision SubPath `../../../etc`: must not contain '..'"),
               60)
    for name in ("vol-bad-key", "vol-bad-host", "vol-escape"):
        assert phase(c, name) == "Pending"
    logs = c.kubectl("logs", "vol-full").stdout
    assert "No space left on device" in logs and "dd-exit=1" in logs


def test_deleting_a_pod_leaves_no_mount(pods: Pods) -> None:
    c = pods.cluster
    uid = pod_json(c, "vol-shared")["metadata"]["uid"]
    pod_dir = c.data_dir / "agent" / "pods" / uid
    assert uid in Path("/proc/mounts").read_text()  # the Memory emptyDir is a tmpfs on the host
    c.kubectl("delete", "pod", "vol-shared", "--wait=true", timeout=120)
    c.wait_for("vol-shared's tmpfs unmounted", lambda: uid not in Path("/proc/mounts").read_text(), 60)
    c.wait_for("vol-shared's directory removed", lambda: not pod_dir.exists(), 60)
    assert (pods.host_dir / "created-by-pod" / "f").exists()  # a hostPath is never cleaned up


def test_data_on_a_claim_survives_the_pod(pods: Pods) -> None:
    c = pods.cluster
    stamp = sh(c, "vol-pvc-a", "cat /data/stamp").stdout.strip()
    assert len(stamp) == 36
    pv = c.kubectl("get", "pvc", "vol-claim", "-o", "jsonpath={.spec.volumeName}").stdout
    assert pv and c.kubectl("get", "pvc", "vol-claim", "-o", "jsonpath={.status.phase}").stdout == "Bound"
    c.kubectl("delete", "pod", "vol-pvc-a", "--wait=true", timeout=120)
    apply(c, pvc_pod("vol-pvc-b", "sleep 3600"))
    c.wait_for("vol-pvc-b Running", lambda: phase(c, "vol-pvc-b") == "Running", 120)
    assert sh(c, "vol-pvc-b", "cat /data/stamp").stdout.strip() == stamp
    c.kubectl("delete", "pod", "vol-pvc-b", "--wait=true", timeout=120)
    c.kubectl("delete", "pvc", "vol-claim", "--wait=true", timeout=120)
    # reclaimPolicy Delete (the default class): the volume goes with its claim
    c.wait_for(f"{pv} deleted", lambda: c.kubectl("get", "pv", pv, check=False).returncode != 0, 60)


def test_a_full_memory_empty_dir_is_reported(pods: Pods) -> None:
    c = pods.cluster
    wanted = 'Memory-backed EmptyDir volume "m" is full: its sizeLimit "1Mi"'
    c.wait_for("EmptyDirSizeLimitExceeded for vol-full", lambda: any(
        wanted in m for m in events(c, "vol-full", "EmptyDirSizeLimitExceeded")), 120)
    assert phase(c, "vol-full") == "Running"  # reported, not evicted: a full tmpfs is at, not over, its limit


def test_an_edited_config_map_reaches_the_running_pod(pods: Pods) -> None:
    c = pods.cluster
    c.wait_for("the edited ConfigMap in vol-files",
               lambda: sh(c, "vol-files", "cat /etc/cfg/app.conf").stdout == "level=debug", 120)
    assert time.monotonic() - pods.edited_at < 120
    # a subPath mount does not follow edits (upstream)
    assert sh(c, "vol-files", "cat /etc/app.conf").stdout == "level=info"
