"""Garbage collection, Jobs, CronJobs and disruption budgets on the dev control plane (HTTP + kubectl).

The garbage collector is checked generically, with ConfigMaps owning ConfigMaps, so these tests
do not depend on the workload controllers; Jobs run against pods whose status the test posts (a
"fake kubelet" made of API calls), so no container runtime is needed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.main import ServerHandle, build_parser, run_server, server_options

from .conftest import Http, Kubectl

DEADLINE = 30.0
CM = "/api/v1/namespaces/default/configmaps"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
CRONJOBS = "/apis/batch/v1/namespaces/default/cronjobs"
PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"


async def eventually(check: Callable[[], Awaitable[Any]], what: str, deadline: float = DEADLINE) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    last: Any = None
    while loop.time() < end:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture
async def gsrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args(["--secure-port", "0", "--scheduler-retry-interval", "1s"])
    async with run_server(tmp_path / "data", **server_options(args)) as srv:
        yield srv


@pytest.fixture
async def ghttp(gsrv: ServerHandle) -> AsyncIterator[Http]:
    h = Http(gsrv)
    yield h
    await h.close()


@pytest.fixture
def gkubectl(gsrv: ServerHandle, tmp_path: Path) -> Kubectl:
    d = tmp_path / "kcache"
    d.mkdir()
    return Kubectl(gsrv, d)


async def _cm(http: Http, name: str, owner: dict[str, Any] | None = None, *, block: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}]
    code, obj = await http.req("POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    assert code == 201, obj
    return dict(obj)


async def _gone(http: Http, path: str) -> bool:
    code, _ = await http.req("GET", path)
    return code == 404


# ------------------------------------------------------------------ garbage collection
async def test_background_deletion_removes_dependents_after_the_owner(ghttp: Http) -> None:
    owner = await _cm(ghttp, "owner")
    await _cm(ghttp, "child", owner)
    code, _ = await ghttp.req("DELETE", f"{CM}/owner", {"propagationPolicy": "Background"})
    assert code == 200
    assert await _gone(ghttp, f"{CM}/owner")
    await eventually(lambda: _gone(ghttp, f"{CM}/child"), "the dependent to be collected")


async def test_a_dependent_whose_owner_never_existed_is_collected(ghttp: Http) -> None:
    fake = {"metadata": {"name": "nobody", "uid": "00000000-0000-0000-0000-000000000001"}}
    await _cm(ghttp, "stray", fake)
    await eventually(lambda: _gone(ghttp, f"{CM}/stray"), "the dangling dependent to be collected")


async def test_kubectl_cascade_foreground_deletes_dependents_before_the_owner(ghttp: Http,
                                                                              gkubectl: Kubectl) -> None:
    owner = await _cm(ghttp, "fg")
    child = await _cm(ghttp, "fg-child", owner)
    await _cm(ghttp, "fg-grandchild", child)
    code, obj = await ghttp.req("DELETE", f"{CM}/fg", {"propagationPolicy": "Foreground"})
    assert code == 200
    # the owner is kept, marked, until its blocking dependents are gone
    assert obj["metadata"].get("deletionTimestamp") and "foregroundDeletion" in obj["metadata"]["finalizers"]
    await eventually(lambda: _gone(ghttp, f"{CM}/fg"), "the foreground owner to go")
    assert await _gone(ghttp, f"{CM}/fg-child")
    await eventually(lambda: _gone(ghttp, f"{CM}/fg-grandchild"), "the grandchild to go")
    # and through kubectl, which waits for the owner to disappear
    owner = await _cm(ghttp, "fg2")
    await _cm(ghttp, "fg2-child", owner)
    await gkubectl.ok("delete", "configmap", "fg2", "--cascade=foreground")
    assert await _gone(ghttp, f"{CM}/fg2")
    assert await _gone(ghttp, f"{CM}/fg2-child")


async def test_kubectl_cascade_orphan_keeps_dependents_and_drops_their_owner_reference(
        ghttp: Http, gkubectl: Kubectl) -> None:
    owner = await _cm(ghttp, "or")
    await _cm(ghttp, "or-child", owner)
    await gkubectl.ok("delete", "configmap", "or", "--cascade=orphan")
    await eventually(lambda: _gone(ghttp, f"{CM}/or"), "the orphaning owner to go")
    code, child = await ghttp.req("GET", f"{CM}/or-child")
    assert code == 200 and not child["metadata"].get("ownerReferences")
    # the legacy orphanDependents option means the same
    owner = await _cm(ghttp, "or2")
    await _cm(ghttp, "or2-child", owner)
    code, _ = await ghttp.req("DELETE", f"{CM}/or2", {"orphanDependents": True})
    assert code == 200
    await eventually(lambda: _gone(ghttp, f"{CM}/or2"), "the orphaning owner to go")
    code, child = await ghttp.req("GET", f"{CM}/or2-child")
    assert code == 200 and not child["metadata"].get("ownerReferences")


async def test_a_dependent_with_a_remaining_owner_only_loses_the_deleted_owner(ghttp: Http) -> None:
    a, b = await _cm(ghttp, "a"), await _cm(ghttp, "b")
    code, shared = await ghttp.req("POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "shared", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": a["metadata"]["uid"]},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": b["metadata"]["uid"]}]}})
    assert code == 201, shared
    await ghttp.req("DELETE", f"{CM}/a")

    async def one_owner() -> bool:
        _c, o = await ghttp.req("GET", f"{CM}/shared")
        return [r["name"] for r in o["metadata"].get("ownerReferences") or []] == ["b"]

    await eventually(one_owner, "the dangling reference to be removed")
