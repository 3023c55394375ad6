"""The whole kubelet against the fake CRI runtime over gRPC, with the shared in-memory API (tests.fakes).

Behaviour only: pods reach Running, restart policies decide Succeeded/Failed, crash loops back off,
deletion terminates and confirms with grace 0, a restarted agent restarts nothing, orphans go away.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.events import EventRecorder
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient, pb
from pykubelet.fakecri.runtime import RUNTIME_NAME
from pykubelet.fakecri.server import serve
from tests import builders
from tests.builders import container, pod_path
from tests.fakes import FakeApi, FakeMirrorClient, eventually

JSON = dict[str, Any]


def node_pod(name: str, containers: list[JSON], **fields: Any) -> JSON:
    """A pending pod (uid ``uid-<name>``) bound to node1 from the API source, stopping within a second
    when deleted; ``fields`` go to ``tests.builders.pod`` (restart_policy, init_containers...)."""
    return builders.pod(name, containers=containers, node_name="node1",
                        annotations={"kubernetes.io/config.source": "api"}, status={"phase": "Pending"},
                        terminationGracePeriodSeconds=1, **fields)


def busybox(name: str, *cmd: str) -> JSON:
    """A busybox container running ``cmd`` (the fake runtime runs sleep, sh -c "echo ...; exit N")."""
    return container(name, "busybox:latest", imagePullPolicy="IfNotPresent",
                     command=list(cmd) if cmd else ["sleep", "infinity"])


class Harness:
    def __init__(self, tmp: Path, runtime: CRIClient, api: FakeApi) -> None:
        self.tmp, self.runtime, self.api = tmp, runtime, api
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self.kubelet: Kubelet | None = None
        self.sync_frequency = 5.0
        self.mirror: FakeMirrorClient | None = None

    def options(self) -> AgentOptions:
        cfg = KubeletConfiguration()
        cfg.cgroups_per_qos = False
        cfg.pod_logs_dir = str(self.tmp / "logs")
        cfg.sync_frequency = self.sync_frequency
        return AgentOptions(config=cfg, node_name="node1", node_ip="127.0.0.1", root_dir=self.tmp / "root")

    async def start(self) -> Kubelet:
        self.updates = asyncio.Queue()
        k = Kubelet(options=self.options(), api=self.api, runtime=self.runtime,  # type: ignore[arg-type]
                    recorder=EventRecorder(None, host="node1"), updates=self.updates,
                    mirror=self.mirror, pleg_period=0.2, housekeeping_period=0.3, status_reconcile_period=1.0)
        await k.start()
        self.kubelet = k
        return k

    async def add(self, *pods: JSON) -> None:
        for p in pods:
            self.api.put(pod_path(p), p)
        await self.updates.put(PodUpdate(PodOp.ADD, "api", [copy.deepcopy(p) for p in pods]))
        assert self.kubelet is not None
        self.kubelet.mark_source_ready("api")

    def api_status(self, pod: JSON) -> JSON:
        return (self.api.objects.get(pod_path(pod)) or {}).get("status") or {}


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    sock = str(tmp_path / "cri.sock")
    server, _rt = await serve(sock)
    client = CRIClient(f"unix://{sock}", timeout=10)
    await client.connect(wait=5)
    h = Harness(tmp_path, client, FakeApi())
    try:
        yield h
    finally:
        if h.kubelet is not None:
            await h.kubelet.stop()
        await client.close()
        await server.stop(0)


async def test_pod_reaches_running_and_reports_status(harness: Harness) -> None:
    await harness.start()
    pod = node_pod("web", [busybox("a"), busybox("b")])
    await harness.add(pod)
    st = await eventually(lambda: harness.api_status(pod).get("phase") == "Running" and harness.api_status(pod))
    assert st["podIP"].startswith("198.1")
    assert st["hostIP"] == "127.0.0.1"
    assert st["qosClass"] == "BestEffort"
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    assert conds["Ready"] == "True" and conds["ContainersReady"] == "True"
    assert conds["PodReadyToStartContainers"] == "True" and conds["Initialized"] == "True"
    names = {c["name"]: c for c in st["containerStatuses"]}
    assert set(names) == {"a", "b"}
    # the container id carries the runtime's own name as its scheme (containerd://, cri-o://, fakecri://)
    assert all("running" in c["state"] and c["ready"] and c["containerID"].startswith(f"{RUNTIME_NAME}://")
               for c in names.values())
    # log directory follows the contract layout
    uid = pod["metadata"]["uid"]
    assert (harness.tmp / "logs" / f"default_web_{uid}").is_dir()


@pytest.mark.parametrize(("cmd", "phase", "code"), [("exit 0", "Succeeded", 0), ("exit 1", "Failed", 1)])
async def test_restart_never_terminal_phase(harness: Harness, cmd: str, phase: str, code: int) -> None:
    await harness.start()
    pod = node_pod("job", [busybox("main", "sh", "-c", cmd)], restart_policy="Never")
    await harness.add(pod)
    st = await eventually(lambda: harness.api_status(pod).get("phase") == phase and harness.api_status(pod))
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == code
    assert term["reason"] == ("Completed" if code == 0 else "Error")
    assert st["containerStatuses"][0]["restartCount"] == 0
    # the completed pod's sandbox is stopped, its container kept for logs
    async with asyncio.timeout(20):
        while any(s.state == pb.SANDBOX_READY for s in await harness.runtime.list_pod_sandbox()):  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(0.1)
    assert len(await harness.runtime.list_containers()) == 1
    # terminal: nothing restarts it
    assert harness.api_status(pod)["phase"] == phase


async def test_crash_loop_backs_off(harness: Harness) -> None:
    await harness.start()
    pod = node_pod("crash", [busybox("c", "sh", "-c", "exit 2")])
    await harness.add(pod)

    def waiting_crashloop() -> JSON | None:
        st = harness.api_status(pod)
        cs = (st.get("containerStatuses") or [{}])[0]
        w = (cs.get("state") or {}).get("waiting") or {}
        return cs if w.get("reason") == "CrashLoopBackOff" else None

    cs = await eventually(waiting_crashloop)
    assert cs["restartCount"] >= 1
    assert cs["lastState"]["terminated"]["exitCode"] == 2
    assert "back-off 10s restarting failed container=c" in cs["state"]["waiting"]["message"]
    assert harness.api_status(pod)["phase"] == "Running"
    recorder = harness.kubelet.recorder  # type: ignore[union-attr]
    assert "BackOff" in recorder.reasons_for("crash")


async def test_delete_terminates_and_confirms(harness: Harness) -> None:
    k = await harness.start()
    pod = node_pod("victim", [busybox("a")])
    await harness.add(pod)
    await eventually(lambda: harness.api_status(pod).get("phase") == "Running")
    deleted = copy.deepcopy(pod)
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleted["metadata"]["deletionGracePeriodSeconds"] = 1
    harness.api.objects[pod_path(pod)]["metadata"].update(
        deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=1)
    await harness.updates.put(PodUpdate(PodOp.DELETE, "api", [deleted]))
    await eventually(lambda: harness.api.deleted)
    path, body = harness.api.deleted[0]
    assert path == pod_path(pod)
    assert body["gracePeriodSeconds"] == 0
    assert body["preconditions"]["uid"] == pod["metadata"]["uid"]
    containers = await harness.runtime.list_containers()
    assert all(c.state != pb.CONTAINER_RUNNING for c in containers)
    await harness.updates.put(PodUpdate(PodOp.REMOVE, "api", [deleted]))

    async def gone() -> bool:
        return not await harness.runtime.list_containers() and not await harness.runtime.list_pod_sandbox()

    async with asyncio.timeout(20):
        while not await gone():  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(0.1)
    assert k.get_pod_by_name("default", "victim") is None


async def test_restarting_agent_restarts_nothing(harness: Harness) -> None:
    await harness.start()
    pod = node_pod("steady", [busybox("a"), busybox("b")])
    await harness.add(pod)
    await eventually(lambda: harness.api_status(pod).get("phase") == "Running")
    before = {c.id for c in await harness.runtime.list_containers()}
    sandboxes = {s.id for s in await harness.runtime.list_pod_sandbox()}
    assert harness.kubelet is not None
    await harness.kubelet.stop()
    k2 = await harness.start()
    await harness.add(copy.deepcopy(harness.api.objects[pod_path(pod)]))
    # let several relists, syncs and housekeeping rounds pass
    runs = k2.housekeeping.runs
    await eventually(lambda: k2.housekeeping.runs >= runs + 3 and k2.pleg.relist_count >= 3)
    after = await harness.runtime.list_containers()
    assert {c.id for c in after} == before
    assert all(c.state == pb.CONTAINER_RUNNING for c in after)
    assert {s.id for s in await harness.runtime.list_pod_sandbox()} == sandboxes
    assert harness.api_status(pod)["phase"] == "Running"


async def test_orphans_removed_at_startup(harness: Harness) -> None:
    k = await harness.start()
    keep = node_pod("keep", [busybox("a")])
    orphan = node_pod("orphan", [busybox("a")])
    await harness.add(keep, orphan)
    await eventually(lambda: harness.api_status(orphan).get("phase") == "Running"
                     and harness.api_status(keep).get("phase") == "Running")
    await k.stop()
    # the orphan disappeared from the API while the agent was down
    harness.api.objects.pop(pod_path(orphan))
    k2 = await harness.start()
    await harness.add(copy.deepcopy(harness.api.objects[pod_path(keep)]))

    async def orphan_gone() -> bool:
        uids = {s.labels["io.kubernetes.pod.uid"] for s in await harness.runtime.list_pod_sandbox()}
        return uids == {keep["metadata"]["uid"]}

    async with asyncio.timeout(20):
        while not await orphan_gone():  # noqa: ASYNC110 - polling the runtime/API under test
            await asyncio.sleep(0.1)
    running = [c for c in await harness.runtime.list_containers() if c.state == pb.CONTAINER_RUNNING]
    assert len(running) == 1
    assert k2.running_pod_count() >= 1


async def test_invalid_pod_is_rejected_not_crashing(harness: Harness) -> None:
    k = await harness.start()
    bad = node_pod("bad", [busybox("x"), busybox("x")])
    good = node_pod("good", [busybox("a")])
    await harness.add(bad, good)
    await eventually(lambda: harness.api_status(good).get("phase") == "Running")
    st = await eventually(lambda: harness.api_status(bad).get("phase") == "Failed" and harness.api_status(bad))
    assert "Duplicate" in st["message"]
    assert k.sync_loop_healthy() and k.pleg_healthy()


async def test_init_containers_run_in_order(harness: Harness) -> None:
    await harness.start()
    pod = node_pod("init", [busybox("app")],
                   init_containers=[busybox("i1", "sh", "-c", "exit 0"), busybox("i2", "sh", "-c", "exit 0")])
    await harness.add(pod)
    st = await eventually(lambda: harness.api_status(pod).get("phase") == "Running" and harness.api_status(pod))
    inits = {c["name"]: c for c in st["initContainerStatuses"]}
    assert inits["i1"]["state"]["terminated"]["exitCode"] == 0
    assert inits["i2"]["state"]["terminated"]["exitCode"] == 0
    assert {c["type"]: c["status"] for c in st["conditions"]}["Initialized"] == "True"


async def test_termination_message_fallback_to_logs(harness: Harness) -> None:
    await harness.start()
    c = busybox("m", "sh", "-c", "echo something went wrong; exit 3")
    c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    pod = node_pod("msg", [c], restart_policy="Never")
    await harness.add(pod)
    st = await eventually(lambda: harness.api_status(pod).get("phase") == "Failed" and harness.api_status(pod))
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3
    assert "something went wrong" in term.get("message", "")
    # the termination-message file is created under the pod dir
    uid = pod["metadata"]["uid"]
    assert any((harness.tmp / "root" / "pods" / uid / "containers" / "m").iterdir())


@pytest.mark.parametrize("field,value,needle", [
    ("image", 5, "image: Invalid value: 5"),
    ("command", [1, 2], "command: Invalid value: [1, 2]"),
    ("env", [{"name": "N", "value": 3}], "env[0].value: Invalid value: 3"),
    ("securityContext", {"runAsUser": -1}, "runAsUser: Invalid value: -1"),
    ("securityContext", {"privileged": "yes"}, "privileged: Invalid value: 'yes'"),
])
async def test_badly_typed_container_gets_config_error_and_event(
        harness: Harness, field: str, value: Any, needle: str) -> None:
    k = await harness.start()
    c = busybox("c")
    c[field] = value
    pod = node_pod("typed", [c])
    await harness.add(pod)

    def waiting() -> JSON | None:
        for cs in harness.api_status(pod).get("containerStatuses") or []:
            w = (cs.get("state") or {}).get("waiting") or {}
            if w.get("reason") == "CreateContainerConfigError":
                return w
        return None

    w = await eventually(waiting)
    assert needle in w["message"]
    assert any(reason == "Failed" and needle in msg for _, _, reason, msg in k.recorder.recorded)
    assert not await harness.runtime.list_containers()  # nothing was created


async def test_each_started_container_gets_an_empty_world_writable_termination_message_file(
        harness: Harness) -> None:
    # upstream: pods/<uid>/containers/<name>/<8 hex>, created empty and chmod 0666 (whatever the umask)
    await harness.start()
    pod = node_pod("tm", [busybox("a"), busybox("b")])
    await harness.add(pod)
    await eventually(lambda: harness.api_status(pod).get("phase") == "Running")
    uid = pod["metadata"]["uid"]
    seen = set()
    for c in await harness.runtime.list_containers():
        st = (await harness.runtime.container_status(c.id)).status
        (m,) = [m for m in st.mounts if m.container_path == "/dev/termination-log"]
        path = Path(m.host_path)
        assert path.parent == harness.tmp / "root" / "pods" / uid / "containers" / st.metadata.name
        assert len(path.name) == 8 and int(path.name, 16) >= 0
        info = os.stat(m.host_path)
        assert (info.st_size, info.st_mode & 0o777) == (0, 0o666)
        seen.add(path)
    assert len(seen) == 2


async def test_a_static_pod_whose_mirror_was_refused_gets_it_soon_not_at_the_next_resync(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # the API refuses mirrors until the node is registered; the pod runs meanwhile, and its mirror
    # is tried again within the sync error retry, not only at the next resync (here an hour away)
    monkeypatch.setattr("pykubelet.agent.podsyncer.ERROR_RETRY", 0.3)
    harness.sync_frequency = 3600.0
    harness.mirror = mirror = FakeMirrorClient(refusals=2)
    await harness.start()
    pod = builders.pod("etcd", containers=[busybox("c")], node_name="node1",
                       annotations={"kubernetes.io/config.source": "file"})
    await harness.updates.put(PodUpdate(PodOp.ADD, "file", [pod]))
    assert harness.kubelet is not None
    harness.kubelet.mark_source_ready("file")
    assert await eventually(lambda: mirror.mirrors.get(("default", "etcd")), timeout=20)
    assert mirror.calls == 3


async def test_a_pod_added_while_housekeeping_runs_starts_after_the_pass_and_keeps_its_probes(
        harness: Harness) -> None:
    # A pass removes what belongs to no pod it knows of: a pod added in the middle of one would lose
    # its probe workers (and directories, cgroup) to it. The sync loop waits for the pass instead.
    k = await harness.start()
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_step(ctx: object) -> None:
        if not release.is_set():
            entered.set()
            await release.wait()

    k.housekeeping.add_step("slow", slow_step)
    await harness.add(node_pod("first", [busybox("a")]))  # the sources are ready: passes run
    await asyncio.wait_for(entered.wait(), 10)
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    late = node_pod("late", [{**busybox("app"), "readinessProbe": probe, "livenessProbe": probe}])
    await harness.add(late)
    await asyncio.sleep(0.5)
    uid = late["metadata"]["uid"]
    assert uid not in k.pod_manager and harness.api_status(late).get("phase") == "Pending"
    release.set()
    await eventually(lambda: harness.api_status(late).get("phase") == "Running"
                     and {c["type"]: c["status"] for c in harness.api_status(late)["conditions"]}["Ready"] == "True")
    runs = k.housekeeping.runs
    await eventually(lambda: k.housekeeping.runs >= runs + 2)
    assert sorted(w.probe_type.value for w in k.probes.workers() if w.uid == uid) == ["Liveness", "Readiness"]


async def test_a_housekeeping_step_that_hangs_holds_new_pods_back_only_briefly(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr("pykubelet.agent.housekeeping.PASS_WAIT_LIMIT", 0.3)
    k = await harness.start()
    hung = asyncio.Event()

    async def stuck_step(ctx: object) -> None:
        hung.set()
        await asyncio.Event().wait()  # an unmount stuck in the kernel

    k.housekeeping.add_step("stuck", stuck_step)
    await harness.add(node_pod("first", [busybox("a")]))
    await asyncio.wait_for(hung.wait(), 10)
    pods = [node_pod(f"next-{i}", [busybox("a")]) for i in range(2)]
    for pod in pods:
        await harness.add(pod)
    await eventually(lambda: all(harness.api_status(p).get("phase") == "Running" for p in pods))
    assert "housekeeping step 'stuck' has run for over 0 s" in caplog.text
