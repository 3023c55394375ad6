"""Node-wide container GC: dead containers per container name and node-wide, sandboxes, gone pods, logs.

The policy decisions run on the fake CRI runtime through the real CRI client; a node "restarted"
with 30 dead containers is one whose runtime already holds them when the GC first runs.
"""

from __future__ import annotations

from pathlib import Path

from pykubelet.agent.interfaces import HousekeepingContext
from pykubelet.agent.kuberuntime.gc import ContainerGC, ContainerGCPolicy, DeadContainer, SandboxInfo, plan
from pykubelet.common import labels as names
from pykubelet.cri import pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient
from tests.fakes import FakeClock


class Node:
    def __init__(self, policy: ContainerGCPolicy, log_dir: Path, live: set[str] | None = None) -> None:
        self.ns = 1_000_000_000_000
        self.fake = FakeRuntime(clock=self.tick)
        self.client = InProcessCRIClient(self.fake)
        self.clock = FakeClock(2_000.0)
        self.log_dir = log_dir
        self.live = live if live is not None else set()
        self.gc = ContainerGC(self.client, policy, pod_exists=lambda uid: uid in self.live,
                              containers_log_dir=str(log_dir / "containers"), period=60, clock=self.clock)
        self.sandboxes: dict[str, tuple[str, pb.PodSandboxConfig]] = {}

    def tick(self) -> int:
        self.ns += 1_000_000_000
        return self.ns

    async def sandbox(self, uid: str, attempt: int = 0, *, stop: bool = False) -> str:
        (self.log_dir / f"default_p{uid}_{uid}").mkdir(exist_ok=True)
        cfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="p" + uid, namespace="default", uid=uid, attempt=attempt),
            labels={names.POD_UID_LABEL: uid}, log_directory=str(self.log_dir / f"default_p{uid}_{uid}"))
        sid = await self.client.run_pod_sandbox(cfg)
        self.sandboxes[uid] = (sid, cfg)
        if stop:
            await self.client.stop_pod_sandbox(sid)
        return sid

    async def dead(self, uid: str, name: str, count: int) -> list[str]:
        sid, cfg = self.sandboxes[uid]
        ids = []
        for attempt in range(count):
            ccfg = pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name=name, attempt=attempt), image=pb.ImageSpec(image="busybox"),
                command=["true"], log_path=f"{name}/{attempt}.log",
                labels={names.POD_UID_LABEL: uid, names.CONTAINER_NAME_LABEL: name})
            cid = await self.client.create_container(sid, ccfg, cfg)
            await self.client.start_container(cid)
            await self.client.stop_container(cid, 0)
            ids.append(cid)
        return ids  # oldest first

    async def containers(self) -> list[str]:
        return [c.id for c in await self.client.list_containers()]


def ctx(*desired: str) -> HousekeepingContext:
    return HousekeepingContext(desired=frozenset(desired), known=frozenset(desired))


async def test_each_container_name_keeps_its_newest_dead_container_and_its_log(tmp_path: Path) -> None:
    node = Node(ContainerGCPolicy(), tmp_path, live={"u1"})
    await node.sandbox("u1")
    app = await node.dead("u1", "app", 3)
    side = await node.dead("u1", "side", 2)
    logs = sorted(p.name for p in (tmp_path / "default_pu1_u1" / "app").iterdir())
    assert logs == ["0.log", "1.log", "2.log"]
    await node.gc.step(ctx("u1"))
    assert set(await node.containers()) == {app[-1], side[-1]}
    # the log kubectl logs --previous reads is still there, the removed containers' logs are not
    assert sorted(p.name for p in (tmp_path / "default_pu1_u1" / "app").iterdir()) == ["2.log"]


async def test_a_node_restarted_with_30_dead_containers_ends_with_the_configured_number(tmp_path: Path) -> None:
    node = Node(ContainerGCPolicy(max_per_pod_container=5, max_containers=8), tmp_path, live={"u1", "u2"})
    await node.sandbox("u1")
    await node.sandbox("u2")
    a = await node.dead("u1", "a", 15)
    b = await node.dead("u2", "b", 15)
    await node.gc.step(ctx("u1", "u2"))
    left = set(await node.containers())
    assert len(left) == 8
    assert left == {*a[-4:], *b[-4:]}  # newest first in each unit: max_containers // 2 units
    await node.gc.step(ctx("u1", "u2"))  # throttled: nothing more within the period
    assert len(await node.containers()) == 8


async def test_dead_containers_younger_than_the_minimum_age_are_kept(tmp_path: Path) -> None:
    node = Node(ContainerGCPolicy(min_age=3600), tmp_path, live={"u1"})
    node.clock.now = node.ns / 1e9 + 10
    await node.sandbox("u1")
    ids = await node.dead("u1", "app", 3)
    node.clock.now = node.ns / 1e9 + 10
    await node.gc.garbage_collect(frozenset({"u1"}))
    assert set(await node.containers()) == set(ids)


async def test_a_deleted_pod_loses_its_dead_containers_and_stopped_sandboxes(tmp_path: Path) -> None:
    node = Node(ContainerGCPolicy(), tmp_path, live={"u1"})
    await node.sandbox("gone")
    await node.dead("gone", "app", 2)
    await node.client.stop_pod_sandbox(node.sandboxes["gone"][0])
    await node.sandbox("u1", 0, stop=True)
    old = node.sandboxes["u1"][0]
    newest = await node.sandbox("u1", 1, stop=True)
    await node.gc.garbage_collect(frozenset({"u1"}))
    assert await node.containers() == []
    assert [s.id for s in await node.client.list_pod_sandbox()] == [newest]
    assert old != newest


def test_the_global_limit_never_removes_the_newest_dead_container_of_an_existing_pod() -> None:
    dead = [DeadContainer(f"c{i}", f"u{i}", "app", float(i)) for i in range(5)]
    p = plan(dead, [], ContainerGCPolicy(max_per_pod_container=1, max_containers=2), lambda uid: False, 100.0)
    assert p.containers == []
    gone = plan(dead, [SandboxInfo("s", "u0", 0.0, ready=False, containers=frozenset({"c0"}))], ContainerGCPolicy(max_containers=2),
                lambda uid: uid == "u0", 100.0)
    assert [c.id for c in gone.containers] == ["c0"] and gone.sandboxes == ["s"]


async def test_reclaim_under_disk_pressure_removes_every_dead_container(tmp_path: Path) -> None:
    node = Node(ContainerGCPolicy(), tmp_path, live={"u1"})
    await node.sandbox("u1")
    await node.dead("u1", "app", 2)
    assert await node.gc.reclaim("memory.available") == 0
    assert len(await node.containers()) == 2
    await node.gc.reclaim("nodefs.available")
    assert await node.containers() == []
