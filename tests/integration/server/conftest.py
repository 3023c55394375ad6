"""Fixtures for API-server integration tests: an in-process server (port 0) and the real kubectl."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pykubelet.server.main import ServerHandle, run_server

KUBECTL = shutil.which("kubectl")


@dataclass
class Kubectl:
    srv: ServerHandle
    cache_dir: Path

    async def run(self, *args: str, stdin: str | None = None, limit_s: float = 60) -> tuple[int, str, str]:
        if KUBECTL is None:
            pytest.skip("kubectl not installed")
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, f"--kubeconfig={self.srv.kubeconfig}", f"--cache-dir={self.cache_dir}", *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(self.cache_dir)},
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), limit_s)
        except TimeoutError:
            proc.kill()
            await proc.communicate()
            raise
        return proc.returncode or 0, out.decode(), err.decode()

    async def ok(self, *args: str, stdin: str | None = None) -> str:
        rc, out, err = await self.run(*args, stdin=stdin)
        assert rc == 0, f"kubectl {' '.join(args)} failed ({rc}): {err}\n{out}"
        return out

    async def spawn(self, *args: str) -> asyncio.subprocess.Process:
        assert KUBECTL is not None
        return await asyncio.create_subprocess_exec(
            KUBECTL, f"--kubeconfig={self.srv.kubeconfig}", f"--cache-dir={self.cache_dir}", *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(self.cache_dir)},
        )


class Http:
    """Raw HTTP access with the admin token (or another), for asserting exact wire behaviour."""

    def __init__(self, srv: ServerHandle, token: str | None = None) -> None:
        self.srv = srv
        ctx = ssl.create_default_context(cafile=str(srv.ca_file))
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
        self.token = srv.admin_token if token is None else token

    async def close(self) -> None:
        await self.session.close()

    async def req(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                  content_type: str = "application/json", params: dict[str, str] | None = None,
                  headers: dict[str, str] | None = None, token: str | None = None) -> tuple[int, Any]:
        h = {"Content-Type": content_type, **(headers or {})}
        tok = self.token if token is None else token
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        async with self.session.request(method, self.srv.url + path, data=data, headers=h, params=params) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text


@pytest.fixture(params=["33", "32"], ids=["minor33", "minor32"])
def version_minor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server(tmp_path: Path, version_minor: str) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, version_minor=version_minor, controllers=False) as srv:
        yield srv


@pytest.fixture
async def server33(tmp_path: Path) -> AsyncIterator[ServerHandle]:
    async with run_server(tmp_path / "data", port=0, version_minor="33", controllers=False) as srv:
        yield srv


@pytest.fixture
def kubectl(server: ServerHandle, tmp_path: Path) -> Kubectl:
    d = tmp_path / "kcache"
    d.mkdir()
    return Kubectl(server, d)


@pytest.fixture
async def http(server: ServerHandle) -> AsyncIterator[Http]:
    h = Http(server)
    yield h
    await h.close()


@pytest.fixture
async def http33(server33: ServerHandle) -> AsyncIterator[Http]:
    h = Http(server33)
    yield h
    await h.close()


async def eventually(check: Callable[[], Awaitable[Any]], what: str = "the condition", deadline: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy (a deadline, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    last: Any = None
    while loop.time() < end:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
