"""Secrets at rest: with --encryption-provider-config, no Secret value (plain or base64) is anywhere
in the data dir's files, the API still serves it, the files are owner-only, and a server without
the key refuses to start rather than serving nothing."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pykubelet.server.encryption import ensure_default_config
from pykubelet.server.main import run_server
from pykubelet.server.storage import StorageError

from .conftest import Http

VALUE = "correct-horse-battery-staple-4711"
TOKEN = "stringdata-token-0815-unique"
SECRETS = "/api/v1/namespaces/default/secrets"


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def secret_body(name: str = "db") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {"password": b64(VALUE)}, "stringData": {"token": TOKEN}}


def files_containing(data_dir: Path, *needles: str) -> list[str]:
    """What `grep -r` finds in the data dir's bytes (database, WAL, shared memory and the rest)."""
    found: list[str] = []
    for needle in needles:
        r = subprocess.run(["grep", "-rlaF", "--", needle, str(data_dir)], capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stderr
        found += [f"{needle} in {line}" for line in r.stdout.splitlines()]
    return found


NEEDLES = (VALUE, b64(VALUE), TOKEN, b64(TOKEN))


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def enc_config(tmp_path: Path) -> Path:
    return ensure_default_config(tmp_path / "keys" / "encryption-config.yaml")


async def test_secret_values_are_nowhere_in_the_data_dir_and_read_back(tmp_path: Path, enc_config: Path) -> None:
    data = tmp_path / "data"
    async with run_server(data, controllers=False, encryption_provider_config=enc_config) as srv:
        http = Http(srv)
        try:
            status, created = await http.req("POST", SECRETS, secret_body())
            assert status == 201, created
            status, got = await http.req("GET", f"{SECRETS}/db")
            assert status == 200
            assert got["data"] == {"password": b64(VALUE), "token": b64(TOKEN)}
            got["metadata"]["labels"] = {"rev": "2"}
            status, _ = await http.req("PUT", f"{SECRETS}/db", got)
            assert status == 200
            db, wal, shm = (data / n for n in ("state.db", "state.db-wal", "state.db-shm"))
            assert wal.exists() and shm.exists()
            assert (mode(data), mode(db), mode(wal), mode(shm)) == (0o700, 0o600, 0o600, 0o600)
            assert await asyncio.to_thread(files_containing, data, *NEEDLES) == []
        finally:
            await http.close()
    assert files_containing(data, *NEEDLES) == []
    async with run_server(data, controllers=False, encryption_provider_config=enc_config) as srv:
        http = Http(srv)
        try:
            status, got = await http.req("GET", f"{SECRETS}/db")
            assert status == 200 and got["data"]["password"] == b64(VALUE)
            assert got["metadata"]["labels"] == {"rev": "2"}
        finally:
            await http.close()


async def test_plaintext_secrets_of_an_existing_cluster_read_and_get_encrypted_on_write(
        tmp_path: Path, enc_config: Path) -> None:
    data = tmp_path / "data"
    async with run_server(data, controllers=False) as srv:
        http = Http(srv)
        try:
            assert (await http.req("POST", SECRETS, secret_body()))[0] == 201
        finally:
            await http.close()
    assert files_containing(data, b64(VALUE)), "without encryption the value is stored as is"
    async with run_server(data, controllers=False, encryption_provider_config=enc_config) as srv:
        http = Http(srv)
        try:
            status, got = await http.req("GET", f"{SECRETS}/db")
            assert status == 200 and got["data"]["password"] == b64(VALUE)
            assert (await http.req("PUT", f"{SECRETS}/db", got))[0] == 200
        finally:
            await http.close()
    assert files_containing(data, *NEEDLES) == []


async def test_server_without_the_key_refuses_to_start(tmp_path: Path, enc_config: Path) -> None:
    data = tmp_path / "data"
    async with run_server(data, controllers=False, encryption_provider_config=enc_config) as srv:
        http = Http(srv)
        try:
            assert (await http.req("POST", SECRETS, secret_body()))[0] == 201
        finally:
            await http.close()
    with pytest.raises(StorageError, match="cannot read secrets default/db"):
        async with run_server(data, controllers=False):
            pass


async def test_existing_data_dir_is_tightened_to_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    async with run_server(data, controllers=False):
        assert mode(data) == 0o700
        assert mode(data / "state.db") == 0o600


@pytest.mark.parametrize(("content", "message"), [
    ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
     "- resources: [secrets]\n  providers:\n  - aesgcm: {keys: [{name: k, secret: c2hvcnQ=}]}\n",
     "secret is not of the expected length, got 5, expected one of [16 24 32]"),
    ("", "is empty"),
])
def test_bad_encryption_config_stops_the_server_with_exit_1(tmp_path: Path, content: str, message: str) -> None:
    cfg = tmp_path / "enc.yaml"
    cfg.write_text(content)
    r = subprocess.run(
        [sys.executable, "-m", "pykubelet", "server", "--data-dir", str(tmp_path / "data"), "--secure-port", "0",
         "--no-controllers", "--encryption-provider-config", str(cfg)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 1
    assert message in r.stderr and str(cfg) in r.stderr
    assert "Traceback" not in r.stderr
