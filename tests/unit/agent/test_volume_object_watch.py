"""ConfigMaps and Secrets read through watches (configMapAndSecretChangeDetectionStrategy: Watch): one
read of the CA bundle for many pods, changes followed, watches released with the pods; a refresh pass
rewrites nothing unchanged."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pykubelet.agent.volumemanager import SystemMounter, TmpfsMode, VolumeManager
from pykubelet.agent.volumemanager.objects import ChangeDetectionStrategy
from tests.builders import container, pod
from tests.fakes import FakeApi, FakeClock, FakeEventRecorder

JSON = dict[str, Any]
CA_PATH = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
TOKEN_VOLUME = {"name": "kube-api-access", "projected": {"sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
]}}


def token_pod(i: int) -> JSON:
    return pod(f"p{i}", containers=[container(volumeMounts=[{"name": "kube-api-access", "mountPath": "/var/run/sa"}])],
               volumes=[TOKEN_VOLUME])


class Api(FakeApi):
    """FakeApi answering TokenRequests and counting GETs."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        """Tokens expire in 2099, or one hour after issue by ``clock``."""
        super().__init__()
        self.gets: list[str] = []
        self.put(CA_PATH, {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA-1"}})

        def token(verb: str, path: str, body: Any) -> JSON:
            if clock is None:
                return {**body, "status": {"token": "tok", "expirationTimestamp": "2099-01-01T00:00:00Z"}}
            expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.now + 3600))
            return {**body, "status": {"token": f"tok-{clock.now:.0f}", "expirationTimestamp": expiry}}

        self.react("create", "/token", token)

    async def get(self, path: str, params: Any = None) -> JSON:
        self.gets.append(path)
        return await super().get(path, params)


def manager(tmp_path: Path, api: FakeApi, strategy: ChangeDetectionStrategy) -> VolumeManager:
    return VolumeManager(root_dir=tmp_path / "root", api=api, recorder=FakeEventRecorder(),
                         mounter=SystemMounter(TmpfsMode.PLAIN_DIRS), refresh_period=3600, change_detection=strategy)


def ca_file(tmp_path: Path, i: int) -> Path:
    return tmp_path / "root" / "pods" / f"uid-p{i}" / "volumes" / "kubernetes.io~projected" / "kube-api-access" / "ca.crt"


async def test_one_ca_config_map_read_serves_many_pods_and_follows_its_changes(tmp_path: Path) -> None:
    api = Api()
    vm = manager(tmp_path, api, ChangeDetectionStrategy.WATCH)
    try:
        await asyncio.gather(*(vm.prepare_pod(token_pod(i)) for i in range(40)))
        assert all(ca_file(tmp_path, i).read_text() == "CA-1" for i in range(40))
        assert [p for p, _ in api.lists] == ["/api/v1/namespaces/default/configmaps"]
        assert api.lists[0][1] == {"fieldSelector": "metadata.name=kube-root-ca.crt"}
        assert not [p for p in api.gets if "/configmaps/" in p]
        assert len(api.created) == 40  # a token per pod

        api.put(CA_PATH, {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA-2"}}, notify="MODIFIED")
        for _ in range(100):  # the watch event reaches the store; the next refresh pass writes it
            await vm.refresh()
            if all(ca_file(tmp_path, i).read_text() == "CA-2" for i in range(40)):
                break
            await asyncio.sleep(0.02)
        assert all(ca_file(tmp_path, i).read_text() == "CA-2" for i in range(40))
        assert len(api.lists) == 1 and len(api.created) == 40  # no new read, tokens still young
    finally:
        await vm.stop()


async def test_the_watch_stops_with_the_last_pod_that_uses_the_object(tmp_path: Path) -> None:
    api = Api()
    vm = manager(tmp_path, api, ChangeDetectionStrategy.WATCH)
    try:
        await vm.prepare_pod(token_pod(0))
        await vm.prepare_pod(token_pod(1))
        assert vm.watched is not None and len(vm.watched.watched()) == 1
        await vm.release_pod("uid-p0")
        assert len(vm.watched.watched()) == 1
        await vm.release_pod("uid-p1")
        assert vm.watched.watched() == []
    finally:
        await vm.stop()


async def test_with_the_get_strategy_every_pod_setup_reads_the_object(tmp_path: Path) -> None:
    api = Api()
    vm = manager(tmp_path, api, ChangeDetectionStrategy.GET)
    await asyncio.gather(*(vm.prepare_pod(token_pod(i)) for i in range(3)))
    assert [p for p in api.gets if "/configmaps/" in p] == [CA_PATH] * 3
    assert api.lists == []


async def test_a_refresh_pass_rewrites_nothing_whose_content_did_not_change(tmp_path: Path) -> None:
    api = Api()
    vm = manager(tmp_path, api, ChangeDetectionStrategy.WATCH)
    try:
        await vm.prepare_pod(token_pod(0))
        ca = ca_file(tmp_path, 0)
        data_dir = ca.parent / "..data"
        before = (ca.resolve(), data_dir.lstat().st_mtime_ns)
        await vm.refresh()
        await vm.refresh()
        assert (ca.resolve(), data_dir.lstat().st_mtime_ns) == before
        assert len(api.created) == 1  # the token is far from 80 % of its lifetime
    finally:
        await vm.stop()


async def test_a_refresh_pass_over_unchanged_pods_computes_nothing_until_a_source_changes(tmp_path: Path) -> None:
    api = Api()
    vm = manager(tmp_path, api, ChangeDetectionStrategy.WATCH)
    try:
        await asyncio.gather(*(vm.prepare_pod(token_pod(i)) for i in range(40)))
        await vm.refresh()
        await vm.refresh()
        assert vm.refresh_counts == {"recomputed": 0, "unchanged": 80}
        assert len(api.created) == 40 and len(api.lists) == 1

        api.put(CA_PATH, {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA-2"}}, notify="MODIFIED")
        for _ in range(100):
            await vm.refresh()
            if all(ca_file(tmp_path, i).read_text() == "CA-2" for i in range(40)):
                break
            await asyncio.sleep(0.02)
        assert all(ca_file(tmp_path, i).read_text() == "CA-2" for i in range(40))
        await vm.refresh()
        assert vm.refresh_counts["recomputed"] == 40  # each volume once, for the one change
    finally:
        await vm.stop()


async def test_an_unchanged_pod_gets_its_token_renewed_in_the_last_refresh_before_80_percent(tmp_path: Path) -> None:
    clock = FakeClock(now=1_900_000_000.0)
    api = Api(clock)
    vm = VolumeManager(root_dir=tmp_path / "root", api=api, recorder=FakeEventRecorder(),
                       mounter=SystemMounter(TmpfsMode.PLAIN_DIRS), refresh_period=60, clock=clock,
                       change_detection=ChangeDetectionStrategy.WATCH)
    token = ca_file(tmp_path, 0).parent / "token"
    try:
        await vm.prepare_pod(token_pod(0))
        first = token.read_text()
        clock.advance(0.8 * 3600 - 61)  # the next round still comes before 80 % of the lifetime
        await vm.refresh()
        assert token.read_text() == first and len(api.created) == 1
        assert vm.refresh_counts["recomputed"] == 0
        clock.advance(30)  # the next round would come after 80 %: renewed in this one
        await vm.refresh()
        assert len(api.created) == 2 and token.read_text() != first
    finally:
        await vm.stop()
