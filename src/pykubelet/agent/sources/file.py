"""Static pods from ``--pod-manifest-path`` / ``staticPodPath`` (upstream ``config/file.go``).

Design: the folder is re-scanned every ``fileCheckFrequency`` (20 s) instead of using inotify — it is
portable (macOS dev machines) and a static pod appearing 20 s late is what upstream documents anyway
(the first scan at once, then on multiples of the period on the loop clock, ``common.ticks``, so an idle
agent wakes for it with its other loops). A scan reads only files whose (mtime, size, inode) changed
since the last scan (a cache keeps the parsed pods of the others), converts every manifest to a pod
(pure: ``manifest_pods``), and hands the complete list to ``PodConfig.set("file", ...)``, which turns it
into ADD/REMOVE/UPDATE. Because the pod UID is a hash of the manifest, editing a manifest yields a new
UID: the old pod is REMOVEd and the new one ADDed, exactly like upstream.

Upstream behaviour followed (``config/common.go`` applyDefaults, ``file.go``/``file_linux.go``):
- UID = md5("host:<node>" + "file:<path>" + the defaulted pod) as hex, unless the manifest sets one;
- name = "<name>-<lower(nodeName)>", namespace "default" when empty, spec.nodeName = node;
- annotations kubernetes.io/config.hash = UID, kubernetes.io/config.source = file (config.seen is
  added by PodConfig); a NoExecute "Exists" toleration; status.phase Pending;
- files whose name starts with "." are ignored; the path may be a single file; a missing path is
  an empty list (the source is still marked seen); a manifest that does not parse or validate is
  logged (naming the file) and skipped, the other pods still run.
Beyond upstream: a file may hold several YAML documents; documents that are not Pods are skipped.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pykubelet.common.aio import cancel_and_wait
from pykubelet.common.labels import CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE
from pykubelet.common.podspec import default_pod, validate_pod
from pykubelet.common.ticks import run_on_ticks

from .podconfig import PodConfig

log = logging.getLogger(__name__)

Pod = dict[str, Any]
SOURCE = FILE_SOURCE


def static_pod_name(name: str, node_name: str) -> str:
    return f"{name}-{node_name.lower()}"


def static_pod_uid(pod: Pod, node_name: str, source: str) -> str:
    """md5 over host, source path and the canonical JSON of the defaulted pod."""
    h = hashlib.md5(usedforsecurity=False)
    h.update(f"host:{node_name}".encode())
    h.update(f"file:{source}".encode())
    h.update(json.dumps(pod, sort_keys=True, separators=(",", ":"), default=str).encode())
    return h.hexdigest()


def apply_static_defaults(pod: Pod, node_name: str, source: str) -> Pod:
    """Turn one decoded manifest into the kubelet's static pod (in place; returns it)."""
    default_pod(pod, admission=False)  # static pods get type defaults, not the API server's admission
    if not isinstance(pod.get("metadata"), dict) or not isinstance(pod.get("spec"), dict):
        raise ValueError("invalid pod: metadata and spec must be mappings")
    meta = pod["metadata"]
    if not meta.get("uid"):
        meta["uid"] = static_pod_uid(pod, node_name, source)
    meta["name"] = static_pod_name(str(meta.get("name", "")), node_name)
    if not meta.get("namespace"):
        meta["namespace"] = "default"
    spec = pod["spec"]
    spec["nodeName"] = node_name
    ann = meta.get("annotations")
    if not isinstance(ann, dict):
        ann = meta["annotations"] = {}
    ann[CONFIG_HASH_ANNOTATION] = meta["uid"]
    ann[CONFIG_SOURCE_ANNOTATION] = SOURCE
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = spec["tolerations"] = []
    if not any(
        isinstance(t, dict) and t.get("operator") == "Exists" and not t.get("key") and t.get("effect") == "NoExecute"
        for t in tolerations
    ):
        tolerations.append({"operator": "Exists", "effect": "NoExecute"})
    pod["status"] = {"phase": "Pending"}
    return pod


def manifest_pods(text: str, path: str, node_name: str) -> list[Pod]:
    """Decode a manifest file into static pods; raises ValueError when the file is unusable."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ValueError(f"cannot parse: {e}") from None
    pods: list[Pod] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            log.warning("static pod manifest %s: document %d is not a mapping, skipped", path, i)
            continue
        kind = doc.get("kind")
        if kind is not None and kind != "Pod":
            log.info("static pod manifest %s: document %d is a %s, not a Pod; skipped", path, i, kind)
            continue
        api_version = doc.get("apiVersion")
        if api_version is not None and api_version != "v1":
            log.warning("static pod manifest %s: document %d has apiVersion %r, want v1; skipped",
                        path, i, api_version)
            continue
        try:
            pod = apply_static_defaults(copy.deepcopy(doc), node_name, path)
            errs = validate_pod(pod)
            if errs:
                raise ValueError("invalid pod: " + "; ".join(f"{f}: {m}" for f, m in errs))
        except (ValueError, TypeError, AttributeError) as e:
            if len(docs) == 1:
                raise ValueError(str(e)) from None
            log.warning("static pod manifest %s: document %d skipped: %s", path, i, e)
            continue
        pods.append(pod)
    return pods


@dataclass
class _Cached:
    key: tuple[int, int, int]
    pods: list[Pod]


class FileSource:
    """Polls the static pod path and feeds PodConfig."""

    def __init__(self, path: str | os.PathLike[str], node_name: str, config: PodConfig,
                 *, interval: float = 20.0) -> None:
        self.path = Path(path)
        self.node_name = node_name
        self.config = config
        self.interval = interval
        self._cache: dict[str, _Cached] = {}
        self._task: asyncio.Task[None] | None = None
        self._missing_logged = False

    def _files(self) -> list[Path]:
        p = self.path
        if p.is_file():
            return [p]
        try:
            names = sorted(os.listdir(p))
        except FileNotFoundError:
            if not self._missing_logged:
                log.info("static pod path %s does not exist; no static pods", p)
                self._missing_logged = True
            return []
        except OSError as e:
            log.warning("cannot read static pod path %s: %s", p, e)
            return []
        self._missing_logged = False
        out = []
        for n in names:
            if n.startswith("."):
                continue
            fp = p / n
            if fp.is_file():
                out.append(fp)
        return out

    def scan(self) -> list[Pod]:
        """Read the folder (blocking I/O; call from a thread) and return all static pods."""
        pods: list[Pod] = []
        live: set[str] = set()
        for fp in self._files():
            key_path = str(fp)
            live.add(key_path)
            try:
                st = fp.stat()
            except OSError:
                continue
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            cached = self._cache.get(key_path)
            if cached is None or cached.key != key:
                try:
                    text = fp.read_text()
                    parsed = manifest_pods(text, key_path, self.node_name)
                except (OSError, UnicodeDecodeError, ValueError) as e:
                    log.error("skipping static pod manifest %s: %s", key_path, e)
                    parsed = []
                cached = _Cached(key, parsed)
                self._cache[key_path] = cached
            pods.extend(copy.deepcopy(cached.pods))
        for gone in set(self._cache) - live:
            del self._cache[gone]
        return pods

    async def sync_once(self) -> None:
        pods = await asyncio.to_thread(self.scan)
        self.config.set(SOURCE, pods)

    def start(self) -> None:
        if self._task is None:
            self._task = run_on_ticks(self.sync_once, self.interval, name="static-pod-source", log=log, first_delay=0)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
