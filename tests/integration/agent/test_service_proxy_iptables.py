"""The service proxy programs real iptables rules from watched Services and removes all on stop."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pykubelet.agent.proxy.proxier import ServiceProxy

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables-restore") is None,
                                reason="needs root and iptables")

SERVICES = [{"metadata": {"name": "web", "namespace": "default", "resourceVersion": "1"},
             "spec": {"type": "NodePort", "clusterIP": "198.18.251.10",
                      "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 31999}]}}]
SLICES = [{"metadata": {"name": "web-a", "namespace": "default", "resourceVersion": "2",
                        "labels": {"kubernetes.io/service-name": "web"}},
           "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
           "endpoints": [{"addresses": ["198.18.251.20"], "conditions": {"ready": True}}]}]


class FakeApi:
    """Lists once; the watch then stays open with no events until cancelled."""

    async def list(self, path: str, params: Any = None) -> dict[str, Any]:
        items = SERVICES if path.endswith("/services") else SLICES
        return {"metadata": {"resourceVersion": "3"}, "items": items}

    async def watch(self, path: str, **kw: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await asyncio.Event().wait()
        yield "ADDED", {}


def saved() -> str:
    return "".join(subprocess.run(["iptables-save", "-t", t], capture_output=True, text=True, check=True).stdout
                   for t in ("nat", "filter"))


def rules_only(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if not line.startswith(("#", ":")) or "PYKI" in line)


async def test_rules_appear_while_running_and_nothing_of_ours_remains_after_stop() -> None:
    before = saved()
    proxy = ServiceProxy(FakeApi(), prefix=f"PYKI{os.getpid() % 1000}")
    await proxy.start()
    try:
        for _ in range(100):
            if proxy.syncs:
                break
            await asyncio.sleep(0.05)
        now = saved()
        assert "-d 198.18.251.10/32" in now and "--to-destination 198.18.251.20:8080" in now
        assert "--dport 31999" in now
    finally:
        await proxy.stop()
    after = saved()
    assert proxy.prefix not in after
    assert [line for line in rules_only(after) if line not in rules_only(before)] == []
