"""Each volume type is set up as upstream's plugin does it, and bad input fails with upstream's words."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pykubelet.agent.volumemanager.mounter import MountPoint, mounts_under
from pykubelet.agent.volumemanager.objects import ObjectSource, TokenManager, parse_rfc3339
from pykubelet.agent.volumemanager.plugins import find_plugin
from pykubelet.agent.volumemanager.plugins.base import PodContext, side_by_side
from pykubelet.agent.volumemanager.types import Medium, MountedVolume, MountError, PluginName
from pykubelet.common.apiclient import ApiError
from tests.builders import container, pod
from tests.fakes import FakeApi, FakeClock

JSON = dict[str, Any]
GI = 1024**3


class RecordingMounter:
    """Records tmpfs mounts instead of making them."""

    def __init__(self) -> None:
        self.mounted: dict[str, int | None] = {}

    def mount_tmpfs(self, target: str, size: int | None) -> None:
        self.mounted[os.path.realpath(target)] = size

    def unmount(self, target: str) -> None:
        self.mounted.pop(os.path.realpath(target), None)

    def is_mount_point(self, path: str) -> bool:
        return os.path.realpath(path) in self.mounted

    def mount_points(self) -> list[MountPoint]:
        return [MountPoint(p, "tmpfs") for p in self.mounted]

    def mount_points_under(self, base: str) -> list[MountPoint]:
        return mounts_under(self.mount_points(), base)


def ctx_for(tmp_path: Path, p: JSON, api: FakeApi | None = None, clock: FakeClock | None = None,
            mounter: RecordingMounter | None = None) -> PodContext:
    api = api or FakeApi()
    return PodContext(pod=p, pods_dir=tmp_path / "pods", objects=ObjectSource(api),
                      tokens=TokenManager(api, clock=clock or FakeClock()), mounter=mounter or RecordingMounter(),
                      node_allocatable={"cpu": Decimal(2), "memory": Decimal(8 * GI)})


async def setup(ctx: PodContext, volume: JSON) -> MountedVolume:
    return await find_plugin(volume).setup(ctx, volume, None)


def visible(d: Path) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if not n.startswith("..")}


def real(path: str) -> str:
    return os.path.realpath(path)


def st_mode(path: str | Path) -> int:
    return os.stat(path).st_mode


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


# ------------------------------------------------------------------------------------- emptyDir


async def test_disk_empty_dir_is_a_world_writable_directory_that_survives_a_second_setup(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, pod())
    mv = await setup(ctx, {"name": "scratch", "emptyDir": {}})
    assert mv.host_path == str(tmp_path / "pods/uid-p/volumes/kubernetes.io~empty-dir/scratch")
    assert os.stat(mv.host_path).st_mode & 0o777 == 0o777
    (Path(mv.host_path) / "data").write_bytes(b"kept")
    await setup(ctx, {"name": "scratch", "emptyDir": {}})
    assert visible(Path(mv.host_path)) == {"data": b"kept"}


@pytest.mark.parametrize(("size_limit", "limits", "size"), [
    ("64Mi", {"memory": "1Gi"}, 64 * 1024**2),  # sizeLimit below the pod limit wins
    ("4Gi", {"memory": "1Gi"}, GI),  # the pod's memory limit caps it
    (None, None, 8 * GI),  # node allocatable memory by default
])
async def test_memory_empty_dir_is_a_tmpfs_sized_like_upstream(tmp_path: Path, size_limit: str | None,
                                                               limits: JSON | None, size: int) -> None:
    c = container(resources={"limits": limits}) if limits else container()
    mounter = RecordingMounter()
    src: JSON = {"medium": "Memory"}
    if size_limit:
        src["sizeLimit"] = size_limit
    mv = await setup(ctx_for(tmp_path, pod(containers=[c]), mounter=mounter), {"name": "m", "emptyDir": src})
    assert mv.medium is Medium.MEMORY
    assert mounter.mounted == {real(mv.host_path): size}


@pytest.mark.parametrize(("medium", "message"), [
    ("Tape", 'unknown storage medium "Tape"'),
    ("HugePages-2Mi", 'emptyDir medium "HugePages-2Mi" (hugepages) is not supported by this kubelet'),
])
async def test_unsupported_media_are_named(tmp_path: Path, medium: str, message: str) -> None:
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod()), {"name": "m", "emptyDir": {"medium": medium}})
    assert e.value.message == message


# ------------------------------------------------------------------------------------- hostPath


async def test_directory_or_create_creates_the_directory(tmp_path: Path) -> None:
    target = tmp_path / "host" / "made"
    mv = await setup(ctx_for(tmp_path, pod()), {"name": "h", "hostPath": {"path": str(target),
                                                                          "type": "DirectoryOrCreate"}})
    assert target.is_dir() and target.stat().st_mode & 0o777 == 0o755
    assert mv.host_path == str(target) and mv.plugin is PluginName.HOST_PATH


async def test_file_or_create_creates_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "f.log"
    await setup(ctx_for(tmp_path, pod()), {"name": "h", "hostPath": {"path": str(target), "type": "FileOrCreate"}})
    assert target.is_file() and target.read_bytes() == b""


async def test_socket_char_device_and_unset_types_accept_what_they_name(tmp_path: Path) -> None:
    sock_path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(sock_path)
        ctx = ctx_for(tmp_path, pod())
        mounted = [await setup(ctx, {"name": "s", "hostPath": {"path": sock_path, "type": "Socket"}}),
                   await setup(ctx, {"name": "c", "hostPath": {"path": "/dev/null", "type": "CharDevice"}}),
                   await setup(ctx, {"name": "u", "hostPath": {"path": str(tmp_path / "missing"), "type": ""}})]
    assert [m.host_path for m in mounted] == [sock_path, "/dev/null", str(tmp_path / "missing")]


@pytest.mark.parametrize(("kind", "path", "message"), [
    ("Directory", "{tmp}/nope", "hostPath {tmp}/nope doesn't exist"),
    ("File", "{tmp}", "hostPath type check failed: {tmp} is not a file, it's a Directory"),
    ("Directory", "/dev/null", "hostPath type check failed: /dev/null is not a directory, it's a CharDevice"),
    ("BlockDevice", "/dev/null", "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"),
    ("Socket", "{tmp}", "hostPath type check failed: {tmp} is not a socket file, it's a Directory"),
    ("Sideways", "{tmp}", "Sideways is an invalid volume type"),
])
async def test_host_path_type_mismatches_fail_with_upstream_messages(tmp_path: Path, kind: str, path: str,
                                                                     message: str) -> None:
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod()), {"name": "h", "hostPath": {"path": path.format(tmp=tmp_path),
                                                                          "type": kind}})
    assert e.value.message == message.format(tmp=tmp_path)


async def test_host_paths_with_backsteps_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MountError, match=r"invalid HostPath `/var/\.\./etc`: must not contain '\.\.'"):
        await setup(ctx_for(tmp_path, pod()), {"name": "h", "hostPath": {"path": "/var/../etc"}})


# ------------------------------------------------------------------------------ configMap, secret

CM_PATH = "/api/v1/namespaces/default/configmaps/cfg"
SECRET_PATH = "/api/v1/namespaces/default/secrets/sec"


def api_with(cm: JSON | None = None, secret: JSON | None = None) -> FakeApi:
    api = FakeApi()
    if cm is not None:
        api.put(CM_PATH, {"metadata": {"name": "cfg"}, **cm})
    if secret is not None:
        api.put(SECRET_PATH, {"metadata": {"name": "sec"}, **secret})
    return api


async def test_config_map_keys_and_binary_data_become_read_only_files(tmp_path: Path) -> None:
    api = api_with({"data": {"app.conf": "x=1"}, "binaryData": {"blob": base64.b64encode(b"\x00\xff").decode()}})
    mv = await setup(ctx_for(tmp_path, pod(), api), {"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o440}})
    assert visible(Path(mv.host_path)) == {"app.conf": b"x=1", "blob": b"\x00\xff"}
    assert os.stat(Path(mv.host_path) / "app.conf").st_mode & 0o777 == 0o440
    assert mv.read_only and mv.host_path.endswith("volumes/kubernetes.io~configmap/c")


async def test_config_map_items_choose_keys_paths_and_modes(tmp_path: Path) -> None:
    api = api_with({"data": {"a": "1", "b": "2"}})
    vol = {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "a", "path": "sub/a.txt", "mode": 0o600}]}}
    mv = await setup(ctx_for(tmp_path, pod(), api), vol)
    d = Path(mv.host_path)
    assert (d / "sub" / "a.txt").read_text() == "1" and not (d / "b").exists()
    assert os.stat(d / "sub" / "a.txt").st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("volume", "message"), [
    ({"name": "c", "configMap": {"name": "cfg", "items": [{"key": "nope", "path": "x"}]}},
     "configmap references non-existent config key: nope"),
    ({"name": "c", "configMap": {"name": "absent"}}, 'configmap "absent" not found'),
    ({"name": "s", "secret": {"secretName": "sec", "items": [{"key": "nope", "path": "x"}]}},
     "references non-existent secret key: nope"),
    ({"name": "s", "secret": {"secretName": "absent"}}, 'secret "absent" not found'),
])
async def test_missing_objects_and_keys_fail_with_upstream_messages(tmp_path: Path, volume: JSON, message: str) -> None:
    api = api_with({"data": {"a": "1"}}, {"data": {"k": b64("v")}})
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod(), api), volume)
    assert e.value.message == message


async def test_optional_sources_may_be_missing(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, pod(), api_with({"data": {"a": "1"}}))
    mv = await setup(ctx, {"name": "c", "configMap": {"name": "absent", "optional": True}})
    assert visible(Path(mv.host_path)) == {}
    mv = await setup(ctx, {"name": "d", "configMap": {"name": "cfg", "optional": True,
                                                      "items": [{"key": "a", "path": "a"}, {"key": "zz", "path": "z"}]}})
    assert visible(Path(mv.host_path)) == {"a": b"1"}


async def test_secret_values_are_decoded_onto_a_tmpfs(tmp_path: Path) -> None:
    mounter = RecordingMounter()
    mv = await setup(ctx_for(tmp_path, pod(), api_with(secret={"data": {"password": b64("s3cr3t")}}), mounter=mounter),
                     {"name": "s", "secret": {"secretName": "sec"}})
    assert visible(Path(mv.host_path)) == {"password": b"s3cr3t"}
    assert real(mv.host_path) in mounter.mounted and mv.medium is Medium.MEMORY
    assert mv.host_path.endswith("volumes/kubernetes.io~secret/s") and mv.read_only


async def test_fs_group_owns_projected_files_with_group_read_and_setgid_dirs(tmp_path: Path) -> None:
    gid = os.getgid()
    p = pod(securityContext={"fsGroup": gid})
    mv = await setup(ctx_for(tmp_path, p, api_with({"data": {"a": "1"}})),
                     {"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o400}})
    f = Path(mv.host_path) / "a"
    assert f.stat().st_gid == gid and f.stat().st_mode & 0o777 == 0o440
    assert st_mode(mv.host_path) & 0o2000


# ----------------------------------------------------------------------------------- downwardAPI


async def test_downward_api_files_format_labels_like_upstream(tmp_path: Path) -> None:
    p = pod(labels={"b": "2", "a": 'say "hi"\n'}, annotations={"note": "x"},
            containers=[container("app", resources={"limits": {"memory": "64Mi"}})])
    items = [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "one", "fieldRef": {"fieldPath": "metadata.labels['b']"}},
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}},
        {"path": "cpu", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu", "divisor": "1m"}},
    ]
    mv = await setup(ctx_for(tmp_path, p), {"name": "d", "downwardAPI": {"items": items}})
    assert visible(Path(mv.host_path)) == {"cpu": b"2000", "labels": b'a="say \\"hi\\"\\n"\nb="2"', "mem": b"64",
                                           "name": b"p", "one": b"2"}


async def test_downward_api_errors_are_aggregated(tmp_path: Path) -> None:
    items = [{"path": "a", "fieldRef": {"fieldPath": "status.podIP"}},
             {"path": "b", "resourceFieldRef": {"containerName": "ghost", "resource": "limits.cpu"}}]
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod()), {"name": "d", "downwardAPI": {"items": items}})
    assert e.value.message == "[unsupported fieldPath: status.podIP, container ghost not found]"


# ------------------------------------------------------------------------------------- projected


def token_api(expiration_ts: str = "2030-01-01T00:00:00Z") -> tuple[FakeApi, list[JSON]]:
    api = api_with({"data": {"a": "1"}}, {"data": {"k": b64("v")}})
    requests: list[JSON] = []

    def answer(verb: str, path: str, body: Any) -> JSON:
        requests.append({"path": path, **body})
        return {**body, "status": {"token": f"token-{len(requests)}", "expirationTimestamp": expiration_ts}}

    api.react("create", "/token", answer)
    return api, requests


async def test_projected_volume_combines_sources_and_a_bound_service_account_token(tmp_path: Path) -> None:
    api, requests = token_api()
    p = pod(labels={"app": "web"}, serviceAccountName="builder")
    vol = {"name": "all", "projected": {"sources": [
        {"configMap": {"name": "cfg"}},
        {"secret": {"name": "sec", "items": [{"key": "k", "path": "secret-k"}]}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 7200}},
    ]}}
    mounter = RecordingMounter()
    mv = await setup(ctx_for(tmp_path, p, api, mounter=mounter), vol)
    assert visible(Path(mv.host_path)) == {"a": b"1", "labels": b'app="web"', "secret-k": b"v", "token": b"token-1"}
    assert real(mv.host_path) in mounter.mounted  # tokens and secrets stay off the disk
    assert requests == [{
        "path": "/api/v1/namespaces/default/serviceaccounts/builder/token",
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["vault"], "expirationSeconds": 7200,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p"}},
    }]


async def test_a_projected_volumes_source_errors_are_reported_together_in_the_sources_order(tmp_path: Path) -> None:
    api = FakeApi()

    def refuse(verb: str, path: str, body: Any) -> JSON:
        raise ApiError(403, "Forbidden", "no token today")

    api.react("create", "/token", refuse)
    vol = {"name": "all", "projected": {"sources": [
        {"configMap": {"name": "absent"}},
        {"downwardAPI": {"items": [{"path": "a", "fieldRef": {"fieldPath": "status.podIP"}}]}},
        {"serviceAccountToken": {"path": "token"}},
        {"secret": {"name": "gone"}},
        {"clusterTrustBundle": {"name": "x", "path": "ca"}},
    ]}}
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod(), api), vol)
    parts = e.value.message.strip("[]").split(", ")
    assert parts[0] == 'configmap "absent" not found'
    assert parts[1] == "unsupported fieldPath: status.podIP"
    assert parts[2] == "failed to fetch token: no token today"
    assert parts[3] == 'secret "gone" not found'
    assert "clusterTrustBundle" in parts[4] and "not supported" in parts[4]


async def test_side_by_side_runs_coroutines_concurrently_and_keeps_their_order() -> None:
    first, second = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def waits_for(ev: asyncio.Event, name: str, then: asyncio.Event | None) -> str:
        if then is not None:
            then.set()
        await ev.wait()
        seen.append(name)
        if name == "b":
            first.set()
        return name

    # "a" can only finish after "b" (which runs in this task) released it: they ran side by side
    assert await side_by_side([waits_for(first, "a", None), waits_for(second, "b", second)]) == ["a", "b"]
    assert seen == ["b", "a"]


async def test_side_by_side_runs_a_single_coroutine_in_the_callers_task() -> None:
    async def whose() -> asyncio.Task[object] | None:
        return asyncio.current_task()

    assert await side_by_side([whose()]) == [asyncio.current_task()]
    assert await side_by_side([]) == []


async def _wait_until_cancelled(cancelled: asyncio.Event) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.set()
        raise


async def test_side_by_side_cancels_the_others_when_one_fails() -> None:
    cancelled = asyncio.Event()

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await side_by_side([_wait_until_cancelled(cancelled), fails()])
    assert cancelled.is_set()


async def test_side_by_side_cancelled_cancels_its_tasks() -> None:
    cancelled = asyncio.Event()
    outer = asyncio.create_task(side_by_side([_wait_until_cancelled(cancelled), _wait_until_cancelled(cancelled)]))
    await asyncio.sleep(0.01)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert cancelled.is_set()


async def test_the_token_is_requested_again_after_80_percent_of_its_lifetime(tmp_path: Path) -> None:
    clock = FakeClock(now=1_900_000_000.0)
    api, requests = token_api(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_900_000_000 + 3600)))
    vol = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    ctx = ctx_for(tmp_path, pod(), api, clock)
    plugin = find_plugin(vol)
    mv = await plugin.setup(ctx, vol, None)
    clock.advance(0.79 * 3600)
    await plugin.setup(ctx, vol, mv)
    assert len(requests) == 1 and (Path(mv.host_path) / "token").read_text() == "token-1"
    clock.advance(0.02 * 3600)
    await plugin.setup(ctx, vol, mv)
    assert len(requests) == 2 and (Path(mv.host_path) / "token").read_text() == "token-2"


async def test_a_refresh_round_renews_the_token_if_80_percent_would_pass_before_the_next(tmp_path: Path) -> None:
    clock = FakeClock(now=1_900_000_000.0)
    api, requests = token_api(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_900_000_000 + 3600)))
    vol = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    ctx = ctx_for(tmp_path, pod(), api, clock)
    ctx.tokens.lookahead = lambda: 60.0  # the volume manager's refresh period
    plugin = find_plugin(vol)
    mv = await plugin.setup(ctx, vol, None)
    clock.advance(0.8 * 3600 - 61)
    await plugin.setup(ctx, vol, mv)
    assert len(requests) == 1
    clock.advance(30)  # the next round would come after 80 %: renew now
    await plugin.setup(ctx, vol, mv)
    assert len(requests) == 2


async def test_token_file_is_private_when_the_pod_has_an_fs_group(tmp_path: Path) -> None:
    api, _ = token_api()
    mv = await setup(ctx_for(tmp_path, pod(securityContext={"fsGroup": os.getgid()}), api),
                     {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}})
    # 0600 from the writer, opened to the group by fsGroup ownership (upstream: 0640)
    assert (Path(mv.host_path) / "token").stat().st_mode & 0o777 == 0o640


async def test_a_failed_token_request_names_the_cause(tmp_path: Path) -> None:
    api = FakeApi()

    def refuse(verb: str, path: str, body: Any) -> JSON:
        raise ApiError(404, "NotFound", 'serviceaccounts "default" not found')

    api.react("create", "/token", refuse)
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod(), api),
                    {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}})
    assert e.value.message == 'failed to fetch token: serviceaccounts "default" not found'


# ----------------------------------------------------------------------------- persistent volumes

PVC_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/data"
PV_PATH = "/api/v1/persistentvolumes/pv1"


def claim_api(pv_source: JSON, *, bound: bool = True) -> FakeApi:
    api = FakeApi()
    api.put(PVC_PATH, {"metadata": {"name": "data", "uid": "claim-uid"},
                       "spec": {"volumeName": "pv1" if bound else ""}, "status": {"phase": "Bound" if bound else "Pending"}})
    api.put(PV_PATH, {"metadata": {"name": "pv1"}, "spec": {"claimRef": {"uid": "claim-uid"}, **pv_source}})
    return api


async def test_a_claim_bound_to_a_host_path_volume_mounts_that_path(tmp_path: Path) -> None:
    target = tmp_path / "pv-data"
    api = claim_api({"hostPath": {"path": str(target), "type": "DirectoryOrCreate"}})
    mv = await setup(ctx_for(tmp_path, pod(), api), {"name": "d", "persistentVolumeClaim": {"claimName": "data",
                                                                                           "readOnly": True}})
    assert mv.host_path == str(target) and target.is_dir() and mv.read_only and mv.pvc == ("default", "data")


async def test_a_claim_bound_to_a_local_volume_gets_fs_group_ownership(tmp_path: Path) -> None:
    target = tmp_path / "local"
    target.mkdir()
    api = claim_api({"local": {"path": str(target)}})
    mv = await setup(ctx_for(tmp_path, pod(securityContext={"fsGroup": os.getgid()}), api),
                     {"name": "d", "persistentVolumeClaim": {"claimName": "data"}})
    assert mv.host_path == str(target) and target.stat().st_mode & 0o2000


@pytest.mark.parametrize(("api", "message"), [
    (FakeApi(), 'error processing PVC default/data: failed to fetch PVC from API server: '
                'persistentvolumeclaims "data" not found'),
    (claim_api({"hostPath": {"path": "/x"}}, bound=False), "error processing PVC default/data: PVC is not bound"),
    (claim_api({"nfs": {"server": "n", "path": "/"}}),
     'PersistentVolume "pv1": volume type nfs is not supported by this kubelet (only hostPath and local)'),
])
async def test_claims_that_cannot_be_used_are_explained(tmp_path: Path, api: FakeApi, message: str) -> None:
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod(), api), {"name": "d", "persistentVolumeClaim": {"claimName": "data"}})
    assert e.value.message == message and e.value.phase == MountError.PROCESSING


async def test_an_api_server_without_claims_is_named_as_the_problem(tmp_path: Path) -> None:
    api = FakeApi()

    def not_served(verb: str, path: str, body: Any) -> JSON:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    api.react("get", "/persistentvolumeclaims/data", not_served)
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod(), api), {"name": "d", "persistentVolumeClaim": {"claimName": "data"}})
    assert "does not serve PersistentVolumeClaims" in e.value.message
    assert "the server could not find the requested resource" in e.value.message


# ---------------------------------------------------------------------------------- plugin choice


@pytest.mark.parametrize(("volume", "message"), [
    ({"name": "n", "nfs": {"server": "s", "path": "/"}},
     'failed to get Plugin from volumeSpec for volume "n" err=no volume plugin matched: volume type "nfs" is not '
     "supported by this kubelet"),
    ({"name": "two", "emptyDir": {}, "hostPath": {"path": "/"}},
     'volume "two": may not specify more than 1 volume type (found emptyDir, hostPath)'),
])
def test_unsupported_or_ambiguous_volume_types_are_never_ignored(volume: JSON, message: str) -> None:
    with pytest.raises(MountError) as e:
        find_plugin(volume)
    assert e.value.message.startswith(message)


def test_a_volume_without_a_source_is_an_empty_dir() -> None:
    assert find_plugin({"name": "x"}).name is PluginName.EMPTY_DIR


@pytest.mark.parametrize(("ts", "epoch"), [
    ("2030-01-01T00:00:00Z", 1_893_456_000.0),  # the API server's form
    ("2030-01-01T01:00:00+01:00", 1_893_456_000.0),
    ("2030-01-01T00:00:00.25Z", 1_893_456_000.25),
    (" 2030-01-01T00:00:00Z ", 1_893_456_000.0),
    ("2016-12-31T23:59:60Z", 1_483_228_800.0),  # a leap second: strptime's reading (the next minute)
])
def test_token_expiration_timestamps_are_read_in_every_rfc3339_form(ts: str, epoch: float) -> None:
    assert parse_rfc3339(ts) == epoch


@pytest.mark.parametrize("ts", ["2030-13-01T00:00:00Z", "2030-02-30T00:00:00Z", "soon"])
def test_an_impossible_token_expiration_timestamp_is_refused(ts: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(ts)


class CountingMounter(RecordingMounter):
    def __init__(self) -> None:
        super().__init__()
        self.mounts = 0

    def mount_tmpfs(self, target: str, size: int | None) -> None:
        self.mounts += 1
        super().mount_tmpfs(target, size)


async def test_a_projected_volume_is_a_world_writable_tmpfs_mounted_once(tmp_path: Path) -> None:
    api, _ = token_api()
    mounter = CountingMounter()
    vol = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    old = os.umask(0o022)
    try:
        mv = await setup(ctx_for(tmp_path, pod(), api, mounter=mounter), vol)
        assert mounter.mounts == 1 and os.stat(mv.host_path).st_mode & 0o7777 == 0o777
        # set up from scratch again (an agent restart): the directory is there and mounted
        mv = await setup(ctx_for(tmp_path, pod(), api, mounter=mounter), vol)
        assert mounter.mounts == 1 and visible(Path(mv.host_path)) == {"token": b"token-2"}
        # its tmpfs gone meanwhile: mounted again on the directory that is still there
        mounter.unmount(mv.host_path)
        mv = await setup(ctx_for(tmp_path, pod(), api, mounter=mounter), vol)
        assert mounter.mounts == 2 and real(mv.host_path) in mounter.mounted
    finally:
        os.umask(old)


async def test_a_file_in_place_of_a_projected_volume_directory_fails_its_setup(tmp_path: Path) -> None:
    api, _ = token_api()
    vdir = tmp_path / "pods/uid-p/volumes/kubernetes.io~projected"
    vdir.mkdir(parents=True)
    (vdir / "t").write_text("")
    vol = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    with pytest.raises(MountError) as e:
        await setup(ctx_for(tmp_path, pod(), api), vol)
    assert e.value.message == f"writing volume content: [Errno 17] File exists: '{vdir / 't'}'"
