"""The volume manager sets up a pod's volumes before its containers, keeps them current, removes them after."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.interfaces import HousekeepingContext, PodNotReadyError
from pykubelet.agent.volumemanager import SystemMounter, TmpfsMode, VolumeManager
from pykubelet.agent.volumemanager.types import VolumeState
from tests.builders import container, pod
from tests.fakes import FakeApi, FakeEventRecorder

JSON = dict[str, Any]
CM_PATH = "/api/v1/namespaces/default/configmaps/cfg"


def mounting(*names: str, **c: Any) -> JSON:
    return container(volumeMounts=[{"name": n, "mountPath": f"/v/{n}"} for n in names], **c)


def cfg_pod(name: str = "p", **kw: Any) -> JSON:
    return pod(name, containers=[mounting("cfg", "scratch")],
               volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "scratch", "emptyDir": {}}], **kw)


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "root"
        self.api = FakeApi()
        self.recorder = FakeEventRecorder()
        self.mounter = SystemMounter(TmpfsMode.PLAIN_DIRS)

    def manager(self) -> VolumeManager:
        return VolumeManager(root_dir=self.root, api=self.api, recorder=self.recorder, mounter=self.mounter,
                             refresh_period=3600)

    def vol(self, uid: str, plugin: str, name: str) -> Path:
        return self.root / "pods" / uid / "volumes" / plugin / name


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


async def test_a_pod_gets_every_volume_its_containers_use(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    vm = env.manager()
    p = cfg_pod()
    p["spec"]["volumes"].append({"name": "unused", "configMap": {"name": "does-not-exist"}})
    await vm.prepare_pod(p)
    assert (env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "k").read_text() == "v"
    assert env.vol("uid-p", "kubernetes.io~empty-dir", "scratch").is_dir()
    assert sorted(vm.mounted_volumes("uid-p")) == ["cfg", "scratch"]  # no container mounts "unused"


async def test_a_missing_config_map_keeps_the_pod_waiting_with_back_off_until_it_exists(env: Env) -> None:
    vm = env.manager()
    retries = []
    for _ in range(3):
        with pytest.raises(PodNotReadyError) as e:
            await vm.prepare_pod(cfg_pod())
        assert e.value.reason == "FailedMount"
        assert e.value.message == 'MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found'
        retries.append(e.value.retry_after)
    assert retries == [1.0, 2.0, 4.0]
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    await vm.prepare_pod(cfg_pod())
    assert (env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "k").read_text() == "v"


async def test_each_further_failing_volume_gets_its_own_event(env: Env) -> None:
    vm = env.manager()
    p = pod(containers=[mounting("a", "b")], volumes=[{"name": "a", "configMap": {"name": "x"}},
                                                      {"name": "b", "secret": {"secretName": "y"}}])
    with pytest.raises(PodNotReadyError, match='volume "a" : configmap "x" not found'):
        await vm.prepare_pod(p)
    assert env.recorder.events == [("Warning", "FailedMount",
                                    'MountVolume.SetUp failed for volume "b" : secret "y" not found')]


async def test_an_unsupported_volume_type_keeps_the_pod_waiting_and_names_the_type(env: Env) -> None:
    vm = env.manager()
    p = pod(containers=[mounting("n")], volumes=[{"name": "n", "nfs": {"server": "s", "path": "/"}}])
    with pytest.raises(PodNotReadyError) as e:
        await vm.prepare_pod(p)
    assert e.value.message.startswith("Unable to attach or mount volumes: unmounted volumes=[n], unattached "
                                      "volumes=[n]: failed to get Plugin from volumeSpec for volume \"n\"")
    assert 'volume type "nfs" is not supported' in e.value.message


async def test_refresh_follows_config_map_edits_and_pod_syncs_follow_label_changes(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v1"}})
    vm = env.manager()
    vols = [{"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
    p = pod(containers=[mounting("cfg", "info")], volumes=vols, labels={"v": "1"})
    await vm.prepare_pod(p)
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v2"}})
    await vm.prepare_pod(p)  # a sync with nothing new does not re-read the ConfigMap
    assert (env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "k").read_text() == "v1"
    await vm.refresh()
    assert (env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "k").read_text() == "v2"
    await vm.prepare_pod(pod(containers=[mounting("cfg", "info")], volumes=vols, labels={"v": "2"}))
    assert (env.vol("uid-p", "kubernetes.io~downward-api", "info") / "labels").read_text() == 'v="2"'


async def test_a_refresh_that_fails_keeps_the_content_and_records_an_event(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v1"}})
    vm = env.manager()
    await vm.prepare_pod(cfg_pod())
    del env.api.objects[CM_PATH]
    await vm.refresh()
    assert (env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "k").read_text() == "v1"
    assert ("Warning", "FailedMount", 'MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found') \
        in env.recorder.events


async def test_release_unmounts_and_removes_every_volume(env: Env) -> None:
    env.api.put("/api/v1/namespaces/default/secrets/s", {"metadata": {"name": "s"}, "data": {"k": "dg=="}})
    vm = env.manager()
    p = pod(containers=[mounting("sec", "mem")], volumes=[{"name": "sec", "secret": {"secretName": "s"}},
                                                          {"name": "mem", "emptyDir": {"medium": "Memory"}}])
    await vm.prepare_pod(p)
    assert len([m for m in env.mounter.mount_points() if str(env.root) in m.path or "uid-p" in m.path]) == 2
    await vm.release_pod("uid-p")
    assert list((env.root / "pods" / "uid-p" / "volumes").iterdir()) == []
    assert not [m for m in env.mounter.mount_points() if "uid-p" in m.path]
    assert vm.mounted_volumes("uid-p") == {}


async def test_a_restarted_agent_finds_the_volumes_and_leaves_their_content_alone(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    await env.manager().prepare_pod(cfg_pod())
    scratch = env.vol("uid-p", "kubernetes.io~empty-dir", "scratch")
    (scratch / "work").write_text("in progress")
    data_link = os.readlink(env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "..data")

    again = env.manager()
    await again.reconstruct()
    assert {n: v.state for n, v in again.mounted_volumes("uid-p").items()} == {
        "cfg": VolumeState.RECONSTRUCTED, "scratch": VolumeState.RECONSTRUCTED}
    await again.prepare_pod(cfg_pod())
    assert (scratch / "work").read_text() == "in progress"
    assert os.readlink(env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "..data") == data_link
    assert {v.state for v in again.mounted_volumes("uid-p").values()} == {VolumeState.MOUNTED}


async def test_housekeeping_removes_volumes_of_pods_the_node_no_longer_knows(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    await env.manager().prepare_pod(cfg_pod("gone"))
    vm = env.manager()
    await vm.reconstruct()
    await vm.prepare_pod(cfg_pod("live"))
    listed_at = time.time() + 1
    await vm.cleanup(HousekeepingContext(desired=frozenset({"uid-live"}), known=frozenset({"uid-live"}),
                                         listed_at=listed_at))
    assert list((env.root / "pods" / "uid-gone" / "volumes").iterdir()) == []
    assert env.vol("uid-live", "kubernetes.io~configmap", "cfg").is_dir()


async def test_housekeeping_spares_a_pod_set_up_after_its_listing(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    vm = env.manager()
    listed_at = time.time() - 10
    await vm.prepare_pod(cfg_pod("new"))
    await vm.cleanup(HousekeepingContext(desired=frozenset(), known=frozenset(), listed_at=listed_at))
    assert env.vol("uid-new", "kubernetes.io~configmap", "cfg").is_dir()


async def test_an_idle_housekeeping_pass_lists_no_pod_directories(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    await env.manager().prepare_pod(cfg_pod("left"))  # made by an earlier agent, not known to this one
    vm = env.manager()
    await vm.prepare_pod(cfg_pod("live"))
    live = frozenset({"uid-live", "uid-left"})
    for _ in range(3):
        await vm.cleanup(HousekeepingContext(desired=live, known=live, listed_at=time.time()))
    assert vm.disk_listings == 1  # the same known pods and nothing found: no listing again
    # the pod leaves the node: the next pass lists and removes its volumes
    gone = frozenset({"uid-live"})
    await vm.cleanup(HousekeepingContext(desired=gone, known=gone, listed_at=time.time() + 1))
    assert vm.disk_listings == 2
    assert list((env.root / "pods" / "uid-left" / "volumes").iterdir()) == []
    assert env.vol("uid-live", "kubernetes.io~configmap", "cfg").is_dir()


async def test_volumes_made_outside_the_agent_go_within_the_rescan_period(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    vm = env.manager()
    known = frozenset({"uid-live"})
    await vm.cleanup(HousekeepingContext(desired=known, known=known, listed_at=time.time()))
    await env.manager().prepare_pod(cfg_pod("outside"))
    await vm.cleanup(HousekeepingContext(desired=known, known=known, listed_at=time.time() + 1))
    assert env.vol("uid-outside", "kubernetes.io~configmap", "cfg").is_dir()  # not looked for yet
    vm.disk_rescan_period = 0.0
    await vm.cleanup(HousekeepingContext(desired=known, known=known, listed_at=time.time() + 1))
    assert list((env.root / "pods" / "uid-outside" / "volumes").iterdir()) == []


async def test_container_mounts_come_from_the_mounted_volumes(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v"}})
    vm = env.manager()
    p = cfg_pod()
    await vm.prepare_pod(p)
    out = await vm.mounts_for(p, p["spec"]["containers"][0], {})
    assert [(m.container_path, m.readonly) for m in out] == [("/v/cfg", True), ("/v/scratch", False)]
    assert out[0].host_path == str(env.vol("uid-p", "kubernetes.io~configmap", "cfg"))


async def test_an_empty_dir_over_its_size_limit_is_reported_once(env: Env) -> None:
    vm = env.manager()
    p = pod(containers=[mounting("s")], volumes=[{"name": "s", "emptyDir": {"sizeLimit": "1Ki"}}])
    await vm.prepare_pod(p)
    (env.vol("uid-p", "kubernetes.io~empty-dir", "s") / "big").write_bytes(os.urandom(64 * 1024))
    await vm.refresh()
    await vm.refresh()
    assert [e for e in env.recorder.events if e[1] == "EmptyDirSizeLimitExceeded"] == [
        ("Warning", "EmptyDirSizeLimitExceeded", 'Usage of EmptyDir volume "s" exceeds the limit "1Ki"')]


async def test_the_refresh_loop_runs_between_start_and_stop(env: Env) -> None:
    env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v1"}})
    vm = VolumeManager(root_dir=env.root, api=env.api, recorder=env.recorder, mounter=env.mounter,
                       refresh_period=0.05)
    await vm.start()
    try:
        await vm.prepare_pod(cfg_pod())
        env.api.put(CM_PATH, {"metadata": {"name": "cfg"}, "data": {"k": "v2"}})
        f = env.vol("uid-p", "kubernetes.io~configmap", "cfg") / "k"
        async with asyncio.timeout(10):
            while f.read_text() != "v2":  # noqa: ASYNC110 - polling the loop under test
                await asyncio.sleep(0.02)
    finally:
        await vm.stop()
    assert f.read_text() == "v2"
