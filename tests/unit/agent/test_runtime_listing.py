"""The runtime listing an idle node re-reads every second: always the runtime's current state, and
housekeeping reading the PLEG's recent listing instead of listing again.

On the fake CRI runtime through the real CRI client (in process): a listing right after an unchanged
one must still show every later change (a container that exits, a new pod, a removed sandbox), and
what a caller does to a listing never leaks into the next one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pykubelet.agent.container.runtime import ContainerState
from pykubelet.agent.housekeeping import Housekeeping
from pykubelet.agent.images.manager import ImageManager
from pykubelet.agent.kuberuntime.manager import RuntimeManager
from pykubelet.agent.pleg import PodStatusCache
from pykubelet.common import labels as names
from pykubelet.cri import pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient
from tests.fakes import FakeEventRecorder, eventually


class Node:
    """A runtime manager over a fake runtime; pods are made with plain CRI calls."""

    def __init__(self, tmp: Path) -> None:
        self.client = InProcessCRIClient(FakeRuntime())
        recorder = FakeEventRecorder()
        self.manager = RuntimeManager(self.client, images=ImageManager(self.client, recorder), recorder=recorder,
                                      pod_logs_dir=str(tmp / "logs"))
        self.list_calls = 0
        listing = self.manager.list_runtime

        async def counted() -> Any:
            self.list_calls += 1
            return await listing()
        self.manager.list_runtime = counted  # type: ignore[method-assign]

    async def pod(self, uid: str) -> tuple[str, str]:
        cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p" + uid, namespace="default", uid=uid),
                                  labels={names.POD_UID_LABEL: uid})
        sid = await self.client.run_pod_sandbox(cfg)
        ccfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image="busybox"),
            command=["sleep", "infinity"], log_path="c/0.log",
            labels={names.POD_UID_LABEL: uid, names.POD_NAME_LABEL: "p" + uid,
                    names.POD_NAMESPACE_LABEL: "default", names.CONTAINER_NAME_LABEL: "c"})
        cid = await self.client.create_container(sid, ccfg, cfg)
        await self.client.start_container(cid)
        return sid, cid


async def test_a_listing_after_an_unchanged_one_shows_every_later_change(tmp_path: Path) -> None:
    node = Node(tmp_path)
    sid, cid = await node.pod("a")
    first = await node.manager.list_runtime()
    again = await node.manager.list_runtime()
    assert again.pods == first.pods == {"a": {sid: ContainerState.RUNNING, cid: ContainerState.RUNNING}}
    assert again.meta["a"] == ("default", "pa")

    await node.client.stop_container(cid, 0)
    sid_b, cid_b = await node.pod("b")
    changed = await node.manager.list_runtime()
    assert changed.pods["a"] == {sid: ContainerState.RUNNING, cid: ContainerState.EXITED}
    assert changed.pods["b"] == {sid_b: ContainerState.RUNNING, cid_b: ContainerState.RUNNING}
    assert changed.meta["b"] == ("default", "pb")
    assert changed.container_ids == {cid, cid_b}

    await node.client.remove_container(cid)
    await node.client.stop_pod_sandbox(sid)
    await node.client.remove_pod_sandbox(sid)
    gone = await node.manager.list_runtime()
    assert "a" not in gone.pods
    assert gone.container_ids == {cid_b}


async def test_what_a_caller_does_to_a_listing_never_reaches_the_next_one(tmp_path: Path) -> None:
    node = Node(tmp_path)
    sid, cid = await node.pod("a")
    listing = await node.manager.list_runtime()
    listing.pods["a"] = {}  # the PLEG marks a pod whose status it could not read this way
    del listing.pods["a"]
    assert (await node.manager.list_runtime()).pods == {"a": {sid: ContainerState.RUNNING,
                                                              cid: ContainerState.RUNNING}}


class NoPods:
    """Pod sources that want nothing and pod workers that run nothing."""

    def uids(self) -> set[str]:
        return set()

    def known_uids(self) -> list[str]:
        return []

    def get(self, uid: str) -> None:
        return None


async def test_housekeeping_reads_a_recent_listing_and_lists_again_after_removing_an_orphan(
        tmp_path: Path) -> None:
    node = Node(tmp_path)
    await node.manager.list_runtime()  # the PLEG's relist
    node.list_calls = 0
    removed: list[str] = []
    housekeeping = Housekeeping(pods=NoPods(), workers=NoPods(), runtime=node.manager,  # type: ignore[arg-type]
                                cache=PodStatusCache(), on_pod_forgotten=[removed.append])
    await housekeeping.run()
    assert node.list_calls == 0  # nothing on the node, nothing removed: the relist's listing is enough

    await node.pod("orphan")  # containers no pod source asked for (e.g. created before a restart)
    await node.manager.list_runtime()  # the next relist sees them
    node.list_calls = 0
    await housekeeping.run()
    await eventually(lambda: removed == ["orphan"])  # removed in its own task
    assert node.list_calls == 0
    assert (await node.client.list_containers()) == []

    # the last listing was taken before the removal: the next pass lists the runtime itself
    node.list_calls = 0
    await housekeeping.run()
    assert node.list_calls == 1
    assert removed == ["orphan"]
    await housekeeping.stop()


async def test_housekeeping_lists_itself_when_the_relist_is_late(tmp_path: Path) -> None:
    node = Node(tmp_path)
    old = await node.manager.list_runtime()
    old.listed_at = time.time() - 60  # the PLEG has not relisted for a minute
    node.list_calls = 0
    await Housekeeping(pods=NoPods(), workers=NoPods(), runtime=node.manager,  # type: ignore[arg-type]
                       cache=PodStatusCache()).run()
    assert node.list_calls == 1
