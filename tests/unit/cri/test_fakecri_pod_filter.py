"""The fake runtime answers one pod's filtered listings (by the pod uid label) exactly, through removals."""

from __future__ import annotations

from pykubelet.common import labels as names
from pykubelet.cri import pb
from pykubelet.fakecri import FakeRuntime
from pykubelet.fakecri.inprocess import InProcessCRIClient


async def make_pod(client: InProcessCRIClient, uid: str, containers: int = 2) -> tuple[str, list[str]]:
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p" + uid, namespace="default", uid=uid),
                              labels={names.POD_UID_LABEL: uid})
    sid = await client.run_pod_sandbox(cfg)
    cids = []
    for i in range(containers):
        ccfg = pb.ContainerConfig(metadata=pb.ContainerMetadata(name=f"c{i}"), image=pb.ImageSpec(image="busybox"),
                                  command=["sleep", "infinity"],
                                  labels={names.POD_UID_LABEL: uid, names.CONTAINER_NAME_LABEL: f"c{i}"})
        cids.append(await client.create_container(sid, ccfg, cfg))
    return sid, cids


def by_uid(uid: str, **more: str) -> dict[str, str]:
    return {names.POD_UID_LABEL: uid, **more}


async def test_listing_one_pod_by_its_uid_label_gives_exactly_its_sandboxes_and_containers() -> None:
    client = InProcessCRIClient(FakeRuntime())
    pods = {uid: await make_pod(client, uid) for uid in ("a", "b", "c")}
    for uid, (sid, cids) in pods.items():
        sbs = await client.list_pod_sandbox(pb.PodSandboxFilter(label_selector=by_uid(uid)))
        assert [s.id for s in sbs] == [sid]
        cs = await client.list_containers(pb.ContainerFilter(label_selector=by_uid(uid)))
        assert [c.id for c in cs] == cids
    # every pair of the selector must still match
    cs = await client.list_containers(pb.ContainerFilter(label_selector=by_uid("a", **{names.CONTAINER_NAME_LABEL: "c1"})))
    assert [c.id for c in cs] == [pods["a"][1][1]]
    assert await client.list_containers(pb.ContainerFilter(label_selector=by_uid("nobody"))) == []

    await client.remove_container(pods["b"][1][0])
    cs = await client.list_containers(pb.ContainerFilter(label_selector=by_uid("b")))
    assert [c.id for c in cs] == [pods["b"][1][1]]
    await client.remove_pod_sandbox(pods["b"][0])
    assert await client.list_pod_sandbox(pb.PodSandboxFilter(label_selector=by_uid("b"))) == []
    assert await client.list_containers(pb.ContainerFilter(label_selector=by_uid("b"))) == []
    # a new sandbox of the same pod (a recreated sandbox) is found again
    sid, cids = await make_pod(client, "b", containers=1)
    assert [s.id for s in await client.list_pod_sandbox(pb.PodSandboxFilter(label_selector=by_uid("b")))] == [sid]
