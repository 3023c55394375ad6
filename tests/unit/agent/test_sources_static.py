"""Static pods: naming, uid hashing, defaults, malformed manifests, edits → REMOVE + ADD."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from pykubelet.agent.sources.file import FileSource, manifest_pods, static_pod_uid
from pykubelet.agent.sources.podconfig import PodConfig
from pykubelet.agent.types import PodOp, PodUpdate

MANIFEST = """
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox
    ports: [{containerPort: 80}]
"""


def test_static_pod_identity_and_defaults() -> None:
    [pod] = manifest_pods(MANIFEST, "/etc/manifests/web.yaml", "node-a")  # node names are lower-cased
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "web-node-a"
    assert meta["namespace"] == "default"
    assert len(meta["uid"]) == 32
    assert meta["annotations"]["kubernetes.io/config.hash"] == meta["uid"]
    assert meta["annotations"]["kubernetes.io/config.source"] == "file"
    assert spec["nodeName"] == "node-a"
    assert spec["restartPolicy"] == "Always" and spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    c = spec["containers"][0]
    assert c["imagePullPolicy"] == "Always"  # untagged
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["ports"][0]["protocol"] == "TCP"
    assert {"operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
    assert pod["status"]["phase"] == "Pending"


def test_uid_is_stable_and_depends_on_content_node_and_path() -> None:
    a = manifest_pods(MANIFEST, "/m/web.yaml", "n1")[0]["metadata"]["uid"]
    assert manifest_pods(MANIFEST, "/m/web.yaml", "n1")[0]["metadata"]["uid"] == a
    assert manifest_pods(MANIFEST, "/m/web.yaml", "n2")[0]["metadata"]["uid"] != a
    assert manifest_pods(MANIFEST, "/m/other.yaml", "n1")[0]["metadata"]["uid"] != a
    assert manifest_pods(MANIFEST.replace("busybox", "busybox:1.36"), "/m/web.yaml", "n1")[0]["metadata"]["uid"] != a
    assert static_pod_uid({"a": 1}, "n", "p") == static_pod_uid({"a": 1}, "n", "p")


def test_explicit_uid_and_namespace_kept() -> None:
    text = MANIFEST.replace("  name: web\n", "  name: web\n  namespace: kube-system\n  uid: my-uid\n")
    [pod] = manifest_pods(text, "/m/web.yaml", "n1")
    assert pod["metadata"]["uid"] == "my-uid" and pod["metadata"]["namespace"] == "kube-system"


def test_multi_doc_skips_non_pods_and_json_works() -> None:
    text = MANIFEST + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n" + MANIFEST.replace(
        "name: web", "name: web2"
    )
    pods = manifest_pods(text, "/m/all.yaml", "n1")
    assert [p["metadata"]["name"] for p in pods] == ["web-n1", "web2-n1"]
    js = '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"i:1"}]}}'
    [p] = manifest_pods(js, "/m/j.json", "n1")
    assert p["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize(
    "text",
    [
        "{ not yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: c, image: i}]}\n",
        "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c}]}\n",
        "- just\n- a list\n",
    ],
)
def test_malformed_manifests_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        pods = manifest_pods(text, "/m/bad.yaml", "n1")
        if not pods:  # a lone non-mapping document is skipped rather than raised
            raise ValueError("no pods")


def _drain(q: asyncio.Queue[PodUpdate]) -> list[tuple[PodOp, list[str]]]:
    out = []
    while not q.empty():
        u = q.get_nowait()
        out.append((u.op, [p["metadata"]["name"] for p in u.pods]))
    return out


async def test_file_source_scan_edit_remove(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    q: asyncio.Queue[PodUpdate] = asyncio.Queue()
    ready: list[str] = []
    cfg = PodConfig(q, on_source_ready=ready.append)
    src = FileSource(tmp_path / "manifests", "n1", cfg)

    await src.sync_once()  # missing folder: empty list, source still marked seen
    assert ready == ["file"] and _drain(q) == []

    d = tmp_path / "manifests"
    d.mkdir()
    (d / "web.yaml").write_text(MANIFEST)
    (d / ".hidden.yaml").write_text(MANIFEST.replace("name: web", "name: hidden"))
    (d / "broken.yaml").write_text("{ nope")
    with caplog.at_level(logging.ERROR):
        await src.sync_once()
    assert _drain(q) == [(PodOp.ADD, ["web-n1"])]
    assert "broken.yaml" in caplog.text
    first_uid = cfg.pods("file")[0]["metadata"]["uid"]
    assert "kubernetes.io/config.seen" in cfg.pods("file")[0]["metadata"]["annotations"]

    await src.sync_once()  # nothing changed: nothing emitted
    assert _drain(q) == []

    (d / "web.yaml").write_text(MANIFEST.replace("busybox", "busybox:1.36"))
    os.utime(d / "web.yaml", ns=(1, 10**18))  # make sure the mtime differs even on coarse clocks
    await src.sync_once()
    assert _drain(q) == [(PodOp.REMOVE, ["web-n1"]), (PodOp.ADD, ["web-n1"])]
    assert cfg.pods("file")[0]["metadata"]["uid"] != first_uid

    (d / "web.yaml").unlink()
    await src.sync_once()
    assert _drain(q) == [(PodOp.REMOVE, ["web-n1"])]
    assert ready == ["file"]
