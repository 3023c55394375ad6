"""The engine never changes a pod it is handed: the whole kubelet, on the fake CRI runtime, is run over
frozen pods (every dict and list refuses to be changed and records the attempt).

Why: PodConfig hands the engine the API source's own objects (no per-pod copy), and the source shares
the parts of a pod that did not change with its previous version and with other pods. That is only
right while nothing in the engine writes into a pod; a write would change what the source holds and
what other pods read. These tests cover what the engine does with pods: start (volumes, init
containers, probes), status updates, an update from the API, a RECONCILE, deletion, rejection,
crash loops and terminal pods, and what ``/pods`` shows.
"""

from __future__ import annotations

import asyncio
import copy
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.agent.volumemanager import SystemMounter, TmpfsMode
from pykubelet.cri import CRIClient
from tests.builders import container, pod, pod_path
from tests.fakes import FakeApi, FakeEventRecorder, eventually, fake_cri

JSON = dict[str, Any]
CM_PATH = "/api/v1/namespaces/default/configmaps/app-config"

WRITES: list[str] = []  # where each attempt to change a frozen pod came from


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    WRITES.append("".join(traceback.format_stack(limit=6)[:-1]))
    raise TypeError(f"a frozen {type(self).__name__} was changed")


class FrozenDict(dict[str, Any]):
    __slots__ = ()
    __setitem__ = __delitem__ = setdefault = pop = popitem = clear = update = __ior__ = _refuse  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:  # a reader's copy is its own to change
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __copy__(self) -> dict[str, Any]:
        return dict(self)


class FrozenList(list[Any]):
    __slots__ = ()
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse  # type: ignore[assignment]
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __copy__(self) -> list[Any]:
        return list(self)


def frozen(obj: Any) -> Any:
    if isinstance(obj, dict):
        return FrozenDict({k: frozen(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return FrozenList([frozen(v) for v in obj])
    return obj


def sleeper(name: str, **fields: Any) -> JSON:
    return container(name, "busybox:latest", imagePullPolicy="IfNotPresent", command=["sleep", "infinity"], **fields)


def node_pod(name: str, containers: list[JSON], **fields: Any) -> JSON:
    return pod(name, containers=containers, node_name="node1", labels={"app": name},
               annotations={"kubernetes.io/config.source": "api"}, status={"phase": "Pending"},
               terminationGracePeriodSeconds=1, metadata={"resourceVersion": "1"}, **fields)


class Harness:
    def __init__(self, tmp: Path, runtime: CRIClient) -> None:
        self.tmp, self.runtime = tmp, runtime
        self.api = FakeApi()
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self.kubelet: Kubelet | None = None
        self.handed: list[tuple[JSON, JSON]] = []  # (frozen pod handed over, a copy made before)

    async def start(self) -> Kubelet:
        cfg = KubeletConfiguration()
        cfg.cgroups_per_qos = False
        cfg.pod_logs_dir = str(self.tmp / "logs")
        cfg.sync_frequency = 2.0
        options = AgentOptions(config=cfg, node_name="node1", node_ip="127.0.0.1", root_dir=self.tmp / "root")
        k = Kubelet(options=options, api=self.api, runtime=self.runtime,  # type: ignore[arg-type]
                    recorder=FakeEventRecorder(), updates=self.updates,  # type: ignore[arg-type]
                    mirror=None, pleg_period=0.2, housekeeping_period=0.3, status_reconcile_period=1.0,
                    volume_mounter=SystemMounter(TmpfsMode.FALLBACK_WITHOUT_ROOT), volume_refresh_period=0.3)
        await k.start()
        k.mark_source_ready("api")
        self.kubelet = k
        return k

    async def hand(self, op: PodOp, *pods: JSON) -> None:
        """Hand the engine frozen copies of ``pods`` (added ones are stored in the API first)."""
        out = []
        for p in pods:
            if op is PodOp.ADD:
                self.api.put(pod_path(p), copy.deepcopy(p))
            f = frozen(p)
            self.handed.append((f, copy.deepcopy(p)))
            out.append(f)
        await self.updates.put(PodUpdate(op, "api", out))

    def api_status(self, p: JSON) -> JSON:
        return (self.api.objects.get(pod_path(p)) or {}).get("status") or {}

    def phase(self, p: JSON) -> str:
        return str(self.api_status(p).get("phase", ""))

    def assert_nothing_changed(self) -> None:
        assert WRITES == [], "\n----\n".join(WRITES)
        assert all(f == before for f, before in self.handed)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    WRITES.clear()
    async with fake_cri(str(tmp_path / "cri.sock")) as (client, _rt):
        h = Harness(tmp_path, client)
        try:
            yield h
        finally:
            if h.kubelet is not None:
                await h.kubelet.stop()


async def test_a_pod_runs_is_updated_shown_and_deleted_without_the_engine_changing_it(harness: Harness) -> None:
    harness.api.put(CM_PATH, {"metadata": {"name": "app-config"}, "data": {"app.conf": "level=info"}},
                    notify="ADDED")
    k = await harness.start()
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    web = node_pod(
        "web",
        [sleeper("app", readinessProbe=probe, livenessProbe=probe, env=[{"name": "MODE", "value": "x"}],
                 ports=[{"containerPort": 8080}],
                 volumeMounts=[{"name": "cfg", "mountPath": "/etc/app"}, {"name": "scratch", "mountPath": "/s"}])],
        init_containers=[container("init", "busybox:latest", command=["sh", "-c", "exit 0"])],
        volumes=[{"name": "cfg", "configMap": {"name": "app-config"}}, {"name": "scratch", "emptyDir": {}}],
    )
    await harness.hand(PodOp.ADD, web)
    await eventually(lambda: harness.phase(web) == "Running" and {
        c["type"]: c["status"] for c in harness.api_status(web)["conditions"]}.get("Ready") == "True")

    updated = copy.deepcopy(web)
    updated["metadata"]["labels"]["tier"] = "front"
    updated["metadata"]["resourceVersion"] = "2"
    await harness.hand(PodOp.UPDATE, updated)
    await eventually(lambda: (k.get_pod_by_name("default", "web") or {}).get("metadata", {}).get("labels")
                     == {"app": "web", "tier": "front"})

    reconciled = copy.deepcopy(updated)  # someone else's condition on the API status
    api_status = copy.deepcopy(harness.api_status(web))
    reconciled["status"] = {**api_status, "conditions": [*api_status["conditions"],
                                                         {"type": "example.com/Gate", "status": "True"}]}
    reconciled["metadata"]["resourceVersion"] = "3"
    await harness.hand(PodOp.RECONCILE, reconciled)

    shown = k.get_pod_by_name("default", "web")  # what /pods shows: the pod, with the agent's status
    assert shown is not None and shown["spec"] == web["spec"] and shown["status"]["phase"] == "Running"
    shown["spec"]["containers"].append({"name": "mine"})  # a reader's copy is its own
    assert len((k.get_pod_by_name("default", "web") or {})["spec"]["containers"]) == 1

    deleted = copy.deepcopy(reconciled)
    deleted["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=1,
                               resourceVersion="4")
    harness.api.objects[pod_path(web)]["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z",
                                                         deletionGracePeriodSeconds=1)
    await harness.hand(PodOp.DELETE, deleted)
    await eventually(lambda: harness.api.deleted)
    await harness.hand(PodOp.REMOVE, deleted)
    await eventually(lambda: k.get_pod_by_name("default", "web") is None)
    harness.assert_nothing_changed()


async def test_failing_rejected_and_finished_pods_leave_their_pods_unchanged(harness: Harness) -> None:
    await harness.start()
    crash = node_pod("crash", [container("c", "busybox:latest", imagePullPolicy="IfNotPresent",
                                         command=["sh", "-c", "exit 2"])])
    done = node_pod("done", [container("c", "busybox:latest", imagePullPolicy="IfNotPresent",
                                       command=["sh", "-c", "exit 1"])], restart_policy="Never")
    dup = node_pod("dup", [sleeper("x"), sleeper("x")])
    typed = node_pod("typed", [sleeper("c", securityContext={"privileged": "yes"})])
    await harness.hand(PodOp.ADD, crash, done, dup, typed)

    def crash_looping() -> bool:
        css = harness.api_status(crash).get("containerStatuses") or [{}]
        return ((css[0].get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"

    await eventually(crash_looping)
    await eventually(lambda: harness.phase(done) == "Failed" and harness.phase(dup) == "Failed")
    await eventually(lambda: any(((cs.get("state") or {}).get("waiting") or {}).get("reason")
                                 == "CreateContainerConfigError"
                                 for cs in harness.api_status(typed).get("containerStatuses") or []))
    assert "Duplicate" in harness.api_status(dup)["message"]
    harness.assert_nothing_changed()
