"""The pod manager: the pods this node should run, as the sources last described them (upstream
``pkg/kubelet/pod/pod_manager.go``).

Upstream's pod manager is the kubelet's single answer to "which pods are desired here?": it holds the
latest object of every pod from every source, maps static pods to their mirror pods, and is what the
HTTP API, housekeeping and the resync read. pykubelet's version adds the pods that admission refused:
they stay known (so ``kubectl get`` shows them ``Failed`` and housekeeping does not treat their uid as
unknown) but never get a pod worker.

It owns no task and does no I/O: the sync loop writes it, everything else reads it. The statuses it
returns come from the status manager (``PodStatusProvider``), so a reader sees what the API will see.
"""

from __future__ import annotations

import copy
import time

from pykubelet.agent.interfaces import PodStatusProvider
from pykubelet.agent.types import Pod


def pod_uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class PodManager:
    def __init__(self, statuses: PodStatusProvider) -> None:
        self._statuses = statuses
        self._pods: dict[str, Pod] = {}
        self._rejected: set[str] = set()
        self._first_seen: dict[str, float] = {}

    # -- writes (sync loop only) ------------------------------------------------------------
    def add_pod(self, pod: Pod) -> None:
        """A pod admission accepted (its start latency is measured from now)."""
        uid = pod_uid(pod)
        self._pods[uid] = pod
        self._first_seen.setdefault(uid, time.monotonic())

    def update_pod(self, pod: Pod) -> None:
        self._pods[pod_uid(pod)] = pod

    def reject(self, pod: Pod) -> None:
        """Remember a pod admission refused: known, shown as Failed, never run."""
        uid = pod_uid(pod)
        self._pods[uid] = pod
        self._rejected.add(uid)

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._rejected.discard(uid)
        self._first_seen.pop(uid, None)

    # -- reads ------------------------------------------------------------------------------
    def get(self, uid: str) -> Pod | None:
        return self._pods.get(uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def uids(self) -> set[str]:
        return set(self._pods)

    def is_rejected(self, uid: str) -> bool:
        return uid in self._rejected

    def active(self) -> list[tuple[str, Pod]]:
        """The admitted pods (uid, pod): what the pod workers run."""
        return [(uid, pod) for uid, pod in self._pods.items() if uid not in self._rejected]

    def take_first_seen(self, uid: str) -> float | None:
        """When the pod was first seen, once (for the pod start latency metric)."""
        return self._first_seen.pop(uid, None)

    def pods(self) -> list[Pod]:
        """Copies of all known pods with the status the agent computed for them."""
        out = []
        for uid, pod in self._pods.items():
            p = copy.deepcopy(pod)
            status = self._statuses.get_pod_status(uid)
            if status is not None:
                p["status"] = status
            out.append(p)
        return out

    def get_pod_by_name(self, namespace: str, name: str) -> Pod | None:
        for uid, pod in self._pods.items():
            md = pod.get("metadata") or {}
            if md.get("namespace") == namespace and md.get("name") == name:
                p = copy.deepcopy(pod)
                status = self._statuses.get_pod_status(uid)
                if status is not None:
                    p["status"] = status
                return p
        return None
