"""A node that disappears with many pods: eviction and pod GC as upstream, while everything else serves.

Two "fake kubelets" (API calls only: a Node, a Lease renewed, see ``test_controllers``) each hold
pods; one stops renewing.  As upstream's node lifecycle and taint-eviction controllers: its Node
goes Ready=Unknown and gets the ``node.kubernetes.io/unreachable`` NoExecute taint, and its pods --
which carry the DefaultTolerationSeconds toleration (300 s upstream, 1 s here) -- get
DisruptionTarget=True (DeletionByTaintManager) and are deleted when that runs out (graceful: they
stay Terminating, there is no kubelet to finish them).  When the Node is deleted, pod GC
force-deletes them and the Lease goes.  The other node, its pods and the API's answers to GETs are
untouched throughout.  The grace period stays 2 s (the fake kubelets renew every 0.3 s and a loaded
machine must not take the kept node for lost); the other periods are as short as stays meaningful.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.main import ServerHandle, build_parser, run_server, server_options

from .conftest import Http, eventually
from .test_controllers import LEASES, FakeKubelet, manifest

LOST_PODS = 30
KEPT_PODS = 5
PODS = "/api/v1/namespaces/default/pods"
UNREACHABLE = ("node.kubernetes.io/unreachable", "NoExecute")


@pytest.fixture
async def nsrv(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    args = build_parser().parse_args([
        "--secure-port", "0", "--node-monitor-grace-period", "2s", "--node-monitor-period", "100ms",
        "--default-unreachable-toleration-seconds", "1", "--default-not-ready-toleration-seconds", "1",
    ])
    opts = server_options(args)
    opts["controller_kwargs"] = {**opts["controller_kwargs"], "podgc_period": 0.2, "podgc_quarantine": 0.2}
    async with run_server(tmp_path / "data", **opts) as srv:
        yield srv


async def _create(http: Http, names: list[str], node: str) -> None:
    sem = asyncio.Semaphore(8)

    async def one(name: str) -> None:
        async with sem:
            st, body = await http.req("POST", PODS, manifest(name, nodeName=node))
            assert st == 201, body

    await asyncio.gather(*(one(n) for n in names))


async def _pods(http: Http) -> dict[str, dict[str, Any]]:
    st, body = await http.req("GET", PODS)
    assert st == 200, body
    return {p["metadata"]["name"]: p for p in body["items"]}


async def test_a_lost_node_s_pods_are_evicted_then_collected_while_the_other_node_keeps_its_pods(
        nsrv: ServerHandle) -> None:
    http = Http(nsrv)
    gets = 0
    stop = asyncio.Event()

    async def keep_getting() -> None:  # the API keeps answering while it all happens
        nonlocal gets
        while not stop.is_set():
            st, _ = await http.req("GET", "/api/v1/nodes/kept")
            assert st == 200
            gets += 1
            await asyncio.sleep(0.05)

    try:
        async with FakeKubelet(http, "lost") as lost, FakeKubelet(http, "kept"):
            lost_names = [f"lost-{i:03d}" for i in range(LOST_PODS)]
            kept_names = [f"kept-{i:03d}" for i in range(KEPT_PODS)]
            await _create(http, lost_names, "lost")
            await _create(http, kept_names, "kept")
            getter = asyncio.create_task(keep_getting())
            lost.renewing = False  # the agent is gone

            async def tainted() -> bool:
                _st, n = await http.req("GET", "/api/v1/nodes/lost")
                taints = {(t["key"], t["effect"]) for t in (n.get("spec") or {}).get("taints") or []}
                return UNREACHABLE in taints

            await eventually(tainted, "the lost node to get the unreachable NoExecute taint")

            async def all_evicted() -> bool:
                pods = await _pods(http)
                return all(pods[n]["metadata"].get("deletionTimestamp") for n in lost_names)

            def cond(p: dict[str, Any], ctype: str) -> dict[str, Any]:
                return next((c for c in p["status"].get("conditions") or [] if c["type"] == ctype), {})

            await eventually(all_evicted, "every pod of the lost node to be evicted (Terminating)")
            for p in (await _pods(http)).values():
                if p["metadata"]["name"].startswith("lost-"):
                    assert cond(p, "DisruptionTarget").get("reason") == "DeletionByTaintManager"
            st, body = await http.req("DELETE", "/api/v1/nodes/lost")
            assert st == 200, body

            async def collected() -> bool:
                return not any(n.startswith("lost-") for n in await _pods(http))

            await eventually(collected, "pod GC to delete the deleted node's pods")
            assert await eventually(lambda: _gone(http, f"{LEASES}/lost"), "the lost node's Lease to go")
            pods = await _pods(http)
            assert sorted(pods) == kept_names
            assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
            st, kept = await http.req("GET", "/api/v1/nodes/kept")
            assert not (kept.get("spec") or {}).get("taints")
            stop.set()
            await getter
            assert gets > 0
    finally:
        stop.set()
        await http.close()


async def _gone(http: Http, path: str) -> bool:
    st, _ = await http.req("GET", path)
    return st == 404
