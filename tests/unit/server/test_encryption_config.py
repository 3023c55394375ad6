"""Encryption at rest: the EncryptionConfiguration file (upstream format and validation messages),
the aesgcm / secretbox / identity providers, key rotation, and the storage that applies them."""

from __future__ import annotations

import base64
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubelet.server import encryption as enc
from pykubelet.server.storage import Storage, StorageError, secure_dir

PLAIN = b'{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}'


def _key(n: int = 32, fill: int | None = None) -> str:
    raw = bytes([fill]) * n if fill is not None else os.urandom(n)
    return base64.b64encode(raw).decode()


def aesgcm(*keys: tuple[str, str]) -> dict[str, Any]:
    return {"aesgcm": {"keys": [{"name": n, "secret": s} for n, s in keys]}}


def secretbox(*keys: tuple[str, str]) -> dict[str, Any]:
    return {"secretbox": {"keys": [{"name": n, "secret": s} for n, s in keys]}}


IDENTITY: dict[str, Any] = {"identity": {}}


def config(*providers: dict[str, Any], resources: list[str] | None = None) -> dict[str, Any]:
    return {"apiVersion": enc.API_VERSION, "kind": enc.KIND,
            "resources": [{"resources": resources or ["secrets"], "providers": list(providers)}]}


def build(*providers: dict[str, Any], resources: list[str] | None = None) -> enc.ResourceTransformers:
    return enc.parse_config(config(*providers, resources=resources), "enc.yaml")


def invalid(data: Any) -> str:
    with pytest.raises(enc.EncryptionConfigError) as e:
        enc.parse_config(data, "enc.yaml")
    return str(e.value)


# ------------------------------------------------------------------ providers
@pytest.mark.parametrize(("provider", "prefix"), [
    (aesgcm(("key1", _key(32))), b"k8s:enc:aesgcm:v1:key1:"),
    (aesgcm(("k16", _key(16))), b"k8s:enc:aesgcm:v1:k16:"),
    (secretbox(("key1", _key(32))), b"k8s:enc:secretbox:v1:key1:"),
], ids=["aesgcm-256", "aesgcm-128", "secretbox"])
def test_encrypting_provider_writes_upstream_prefix_and_reads_back(provider: dict[str, Any], prefix: bytes) -> None:
    t = build(provider)
    stored = t.to_storage("secrets", "default", "s", PLAIN)
    assert stored.startswith(prefix)
    assert b"password" not in stored and b"aHVudGVyMg" not in stored
    assert t.from_storage("secrets", "default", "s", stored) == (PLAIN, False)


def test_each_write_uses_a_fresh_nonce() -> None:
    t = build(aesgcm(("key1", _key())))
    assert t.to_storage("secrets", "ns", "s", PLAIN) != t.to_storage("secrets", "ns", "s", PLAIN)


def test_ciphertext_is_bound_to_the_object_it_was_written_for() -> None:
    t = build(aesgcm(("key1", _key())))
    stored = t.to_storage("secrets", "ns", "a", PLAIN)
    with pytest.raises(enc.TransformError, match="authentication failed"):
        t.from_storage("secrets", "ns", "b", stored)


def test_tampered_value_is_refused() -> None:
    t = build(secretbox(("key1", _key())))
    stored = bytearray(t.to_storage("secrets", "ns", "a", PLAIN))
    stored[-1] ^= 1
    with pytest.raises(enc.TransformError, match="authentication failed"):
        t.from_storage("secrets", "ns", "a", bytes(stored))


def test_identity_first_writes_plain_text_and_still_reads_encrypted_data() -> None:
    k = _key()
    stored = build(aesgcm(("key1", k))).to_storage("secrets", "ns", "s", PLAIN)
    decrypting = build(IDENTITY, aesgcm(("key1", k)))
    assert decrypting.to_storage("secrets", "ns", "s", PLAIN) == PLAIN
    assert decrypting.from_storage("secrets", "ns", "s", stored) == (PLAIN, True)


def test_identity_alone_refuses_encrypted_data() -> None:
    stored = build(aesgcm(("key1", _key()))).to_storage("secrets", "ns", "s", PLAIN)
    with pytest.raises(enc.TransformError, match="identity transformer tried to read encrypted data"):
        build(IDENTITY).from_storage("secrets", "ns", "s", stored)


def test_plain_text_written_before_encryption_reads_as_stale_through_identity() -> None:
    t = build(aesgcm(("key1", _key())), IDENTITY)
    assert t.from_storage("secrets", "ns", "s", PLAIN) == (PLAIN, True)


def test_plain_text_is_refused_without_identity_provider() -> None:
    with pytest.raises(enc.TransformError, match="no matching prefix found"):
        build(aesgcm(("key1", _key()))).from_storage("secrets", "ns", "s", PLAIN)


def test_key_rotation_reads_data_of_the_old_key_after_the_new_key_goes_first() -> None:
    k1, k2 = _key(), _key()
    written_with_k1 = build(aesgcm(("key1", k1))).to_storage("secrets", "ns", "s", PLAIN)
    # Step 1: add key2 second (every server can read it), step 2: move it first.
    step1 = build(aesgcm(("key1", k1), ("key2", k2)))
    assert step1.from_storage("secrets", "ns", "s", written_with_k1) == (PLAIN, False)
    step2 = build(aesgcm(("key2", k2), ("key1", k1)))
    assert step2.from_storage("secrets", "ns", "s", written_with_k1) == (PLAIN, True)
    rewritten = step2.to_storage("secrets", "ns", "s", PLAIN)
    assert rewritten.startswith(b"k8s:enc:aesgcm:v1:key2:")
    # Step 3: after everything is rewritten, key1 can go.
    assert build(aesgcm(("key2", k2))).from_storage("secrets", "ns", "s", rewritten) == (PLAIN, False)
    with pytest.raises(enc.TransformError, match="no matching key was found for the provided AES transformer"):
        build(aesgcm(("key2", k2))).from_storage("secrets", "ns", "s", written_with_k1)


def test_moving_from_aesgcm_to_secretbox_reads_both() -> None:
    ka, kb = _key(), _key()
    old = build(aesgcm(("a", ka))).to_storage("secrets", "ns", "s", PLAIN)
    t = build(secretbox(("b", kb)), aesgcm(("a", ka)))
    assert t.from_storage("secrets", "ns", "s", old) == (PLAIN, True)
    assert t.to_storage("secrets", "ns", "s", PLAIN).startswith(b"k8s:enc:secretbox:v1:b:")


def test_same_key_name_with_a_different_secret_falls_through_to_the_next_provider() -> None:
    k_old = _key()
    old = build(aesgcm(("key1", k_old))).to_storage("secrets", "ns", "s", PLAIN)
    t = build(aesgcm(("key1", _key())), aesgcm(("key1", k_old)))
    assert t.from_storage("secrets", "ns", "s", old) == (PLAIN, True)


def test_resources_without_a_rule_stay_plain_and_group_wildcards_match() -> None:
    t = build(aesgcm(("k", _key())), resources=["secrets", "*.coordination.k8s.io"])
    assert t.to_storage("configmaps", "ns", "c", PLAIN) == PLAIN
    assert t.to_storage("leases.coordination.k8s.io", "ns", "l", PLAIN).startswith(b"k8s:enc:")
    everything = build(secretbox(("k", _key())), resources=["*.*"])
    assert everything.to_storage("pods", "ns", "p", PLAIN).startswith(b"k8s:enc:secretbox:")
    core = build(secretbox(("k", _key())), resources=["*."])
    assert core.to_storage("configmaps", "ns", "c", PLAIN).startswith(b"k8s:enc:")
    assert core.to_storage("leases.coordination.k8s.io", "ns", "l", PLAIN) == PLAIN


# ------------------------------------------------------------------ the file
def test_file_in_upstream_yaml_format_loads(tmp_path: Path) -> None:
    p = tmp_path / "enc.yaml"
    p.write_text(f"""
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - secrets
    providers:
      - aesgcm:
          keys:
            - name: key1
              secret: {_key()}
      - identity: {{}}
""")
    t = enc.load_config(p)
    assert t.to_storage("secrets", "ns", "s", PLAIN).startswith(b"k8s:enc:aesgcm:v1:key1:")


@pytest.mark.parametrize(("content", "message"), [
    ("", "is empty"),
    ("resources: [", "error decoding encryption provider configuration file"),
    ("apiVersion: v1\nkind: ConfigMap\n", "expected apiVersion 'apiserver.config.k8s.io/v1'"),
])
def test_unreadable_file_is_named_in_the_error(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "enc.yaml"
    p.write_text(content)
    with pytest.raises(enc.EncryptionConfigError, match=message) as e:
        enc.load_config(p)
    assert str(p) in str(e.value)


def test_missing_file_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(enc.EncryptionConfigError, match="error reading encryption provider configuration file"):
        enc.load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("data", "message"), [
    ({"apiVersion": enc.API_VERSION, "kind": enc.KIND}, "resources: Required value: at least one resources is required"),
    (config(), "resources[0].providers: Required value: at least one resources[0].providers is required"),
    (config(aesgcm(("k", "not base64!"))), 'resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: '
                                           '"REDACTED": secrets must be base64 encoded'),
    (config(aesgcm(("k", _key(20)))), "secret is not of the expected length, got 20, expected one of [16 24 32]"),
    (config(secretbox(("k", _key(16)))), "secret is not of the expected length, got 16, expected one of [32]"),
    (config(aesgcm(("", _key()))), "keys[0].name: Required value: name is a mandatory field for a key"),
    (config(aesgcm()), "aesgcm.keys: Required value: at least one keys is required"),
    (config({"aesgcm": {"keys": [{"name": "k", "secret": _key()}]}, "identity": {}}),
     "more than one provider specified in a single element"),
    (config({}), "provider does not contain any of the expected providers"),
    (config({"aescbc": {"keys": [{"name": "k", "secret": _key()}]}}),
     "the aescbc provider is not supported by pykubelet (supported: aesgcm, secretbox, identity)"),
    (config({"kms": {"name": "x"}}), "the kms provider is not supported by pykubelet"),
    (config({"identity": {"extra": 1}}), 'strict decoding error: unknown field "resources[0].providers[0].identity.extra"'),
    ({**config(IDENTITY), "spec": {}}, 'strict decoding error: unknown field "spec"'),
    (config(IDENTITY, resources=["Secrets"]), "resource name should not contain capital letters"),
    (config(IDENTITY, resources=["*"]), "use '*.' to encrypt all the resources from core API group"),
    (config(IDENTITY, resources=["secrets", "secrets"]), "the same resource cannot be specified multiple times"),
    (config(IDENTITY, resources=["secrets", "*."]), "using overlapping resources such as 'secrets' and '*.'"),
    (config(IDENTITY, resources=["pods.*"]), "encrypting the same resource across groups is not supported"),
    (config(IDENTITY, resources=["events.events.k8s.io"]), "Use 'events' instead in the config file"),
])
def test_invalid_configuration_names_the_field_and_the_problem(data: dict[str, Any], message: str) -> None:
    err = invalid(data)
    assert message in err
    assert "enc.yaml" in err


def test_key_material_never_appears_in_errors() -> None:
    secret = _key(20)
    assert secret not in invalid(config(aesgcm(("k", secret))))


def test_rule_masked_by_an_earlier_wildcard_rule_is_an_error() -> None:
    data = {"apiVersion": enc.API_VERSION, "kind": enc.KIND, "resources": [
        {"resources": ["*.*"], "providers": [IDENTITY]},
        {"resources": ["secrets"], "providers": [IDENTITY]},
    ]}
    assert "resource 'secrets' is masked by earlier rule '*.*'" in invalid(data)


def test_default_config_is_written_once_owner_only_and_valid(tmp_path: Path) -> None:
    p = tmp_path / "pki" / "encryption-config.yaml"
    enc.ensure_default_config(p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert stat.S_IMODE(p.parent.stat().st_mode) == 0o700
    data = yaml.safe_load(p.read_text())
    providers = data["resources"][0]["providers"]
    assert list(providers[0]) == ["aesgcm"] and providers[1] == {"identity": {}}
    assert len(base64.b64decode(providers[0]["aesgcm"]["keys"][0]["secret"])) == 32
    before = p.read_bytes()
    enc.ensure_default_config(p)  # an existing file holds the key the data needs: never replaced
    assert p.read_bytes() == before
    t = enc.load_config(p)
    assert t.from_storage("secrets", "ns", "s", PLAIN) == (PLAIN, True)


# ------------------------------------------------------------------ storage applies it
def _secret(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "data": {"password": "aHVudGVyMg=="}}


def _raw_rows(db: Path) -> list[tuple[str, Any]]:
    with sqlite3.connect(db) as c:
        return list(c.execute("SELECT resource, data FROM objects"))


def test_storage_encrypts_configured_resources_and_reads_them_back(tmp_path: Path) -> None:
    t = build(aesgcm(("key1", _key())), IDENTITY)
    s = Storage(tmp_path / "s.db", transformer=t)
    s.open()
    s.create("secrets", "default", "s", _secret("s"))
    s.create("configmaps", "default", "c", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    s.close()
    rows = dict(_raw_rows(tmp_path / "s.db"))
    assert isinstance(rows["secrets"], bytes) and rows["secrets"].startswith(b"k8s:enc:aesgcm:v1:key1:")
    assert isinstance(rows["configmaps"], str) and '"k":"v"' in rows["configmaps"]
    s2 = Storage(tmp_path / "s.db", transformer=t)
    s2.open()
    assert s2.get("secrets", "default", "s")["data"] == {"password": "aHVudGVyMg=="}
    assert s2.stale == {}
    s2.close()


def test_plain_secrets_of_an_existing_database_read_and_are_encrypted_on_next_write(tmp_path: Path) -> None:
    s = Storage(tmp_path / "s.db")
    s.open()
    s.create("secrets", "default", "s", _secret("s"))
    s.close()
    s2 = Storage(tmp_path / "s.db", transformer=build(aesgcm(("key1", _key())), IDENTITY))
    s2.open()
    assert s2.stale == {"secrets": 1}
    s2.update("secrets", "default", "s", s2.get("secrets", "default", "s") or {})
    s2.close()
    raw = (tmp_path / "s.db").read_bytes()
    assert b"aHVudGVyMg==" not in raw and b"password" not in raw
    assert dict(_raw_rows(tmp_path / "s.db"))["secrets"].startswith(b"k8s:enc:aesgcm:v1:key1:")


@pytest.mark.parametrize("later", [None, "wrong-key"], ids=["no-config", "wrong-key"])
def test_encrypted_data_without_its_key_stops_the_open_naming_the_object(tmp_path: Path, later: str | None) -> None:
    s = Storage(tmp_path / "s.db", transformer=build(aesgcm(("key1", _key()))))
    s.open()
    s.create("secrets", "default", "s", _secret("s"))
    s.close()
    t = build(aesgcm(("key1", _key())), IDENTITY) if later else None
    with pytest.raises(StorageError, match=r"cannot read secrets default/s from .*s\.db: .*"
                                           r"--encryption-provider-config must list the key"):
        Storage(tmp_path / "s.db", transformer=t).open()


def test_corrupt_row_stops_the_open_naming_the_object(tmp_path: Path) -> None:
    s = Storage(tmp_path / "s.db")
    s.open()
    s.create("configmaps", "default", "c", {"metadata": {"name": "c"}})
    s.close()
    with sqlite3.connect(tmp_path / "s.db") as c:
        c.execute("UPDATE objects SET data='{not json'")
    with pytest.raises(StorageError, match="cannot read configmaps default/c"):
        Storage(tmp_path / "s.db").open()


def test_a_file_that_is_not_a_database_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "s.db").write_bytes(b"x" * 4096)
    with pytest.raises(StorageError, match="not a database"):
        Storage(tmp_path / "s.db").open()


def test_database_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        s = Storage(tmp_path / "s.db")
        s.open()
        s.create("secrets", "default", "s", _secret("s"))
        files = [tmp_path / n for n in ("s.db", "s.db-wal", "s.db-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
        s.close()
    finally:
        os.umask(old)


def test_existing_world_readable_database_files_are_tightened(tmp_path: Path) -> None:
    s = Storage(tmp_path / "s.db")
    s.open()
    s.close()
    for name in ("s.db", "s.db-wal"):
        (tmp_path / name).touch()
        (tmp_path / name).chmod(0o644)
    (tmp_path / "data").mkdir(mode=0o755)
    (tmp_path / "data").chmod(0o755)
    s2 = Storage(tmp_path / "s.db")
    s2.open()
    assert stat.S_IMODE((tmp_path / "s.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "s.db-wal").stat().st_mode) == 0o600
    s2.close()
    secure_dir(tmp_path / "data")
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
