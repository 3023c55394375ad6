"""Encryption of stored objects at rest, configured with upstream's ``EncryptionConfiguration``.

Why.  The dev control plane keeps every object, Secrets included, in ``state.db``; file modes keep
other local users out, and encryption keeps the plain text out of the file itself (backups, copies,
a disk image).  We follow kube-apiserver's ``--encryption-provider-config`` exactly, so the same
file works here and on a real cluster, and the upstream key-rotation procedure applies unchanged.

The file (``apiserver.config.k8s.io/v1``, ``kind: EncryptionConfiguration``; decoded strictly, so an
unknown field is an error, as upstream's strict decoder makes it)::

    resources:
      - resources: [secrets]          # "resource.group"; "*.group", "*." (core) and "*.*" too
        providers:                     # the first encrypts every write; all are tried on reads
          - aesgcm:    {keys: [{name: key1, secret: <base64 of 16, 24 or 32 bytes>}]}
          - secretbox: {keys: [{name: key2, secret: <base64 of 32 bytes>}]}
          - identity: {}               # plain text: reads data stored before encryption was on

Providers (upstream ``k8s.io/apiserver/pkg/storage/value/encrypt``):

- ``aesgcm``: AES-GCM, stored as ``k8s:enc:aesgcm:v1:<key name>:`` + 12-byte random nonce +
  ciphertext and tag; the object's storage key is the authenticated data (upstream uses the etcd
  key), so a value copied onto another object does not decrypt.  Upstream advises rotating an
  aesgcm key every 200,000 writes (random 96-bit nonces); secretbox has no such limit.
- ``secretbox``: NaCl XSalsa20-Poly1305 (PyNaCl; ``cryptography`` has no XSalsa20), stored as
  ``k8s:enc:secretbox:v1:<key name>:`` + 24-byte nonce + tag and ciphertext.
- ``identity``: no transformation; on reads it refuses data that starts with ``k8s:enc:``
  (upstream's encrypt-check identity transformer), so encrypted data is never served as text.
- ``aescbc`` and ``kms`` are upstream providers we do not implement: rejected with an error
  naming them, never ignored.

Reads follow upstream's prefix transformers: every provider (and, inside one, every key) whose
prefix matches is tried in order, a failure moves on to the next, and the value is *stale* when it
was not read by the first provider's first key.  Stale values are rewritten with the first provider
on their next write, as upstream; rotation is therefore upstream's: add the new key second and
restart, move it first and restart, rewrite everything (``kubectl get secrets -A -o json |
kubectl replace -f -``), then drop the old key.  A resource without a rule is stored in plain text
and read through the encrypt-check identity transformer.

This module is pure (bytes in, bytes out); :class:`pykubelet.server.storage.Storage` applies it
to each row, so the rest of the server never sees ciphertext.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets as _secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import nacl.exceptions
import nacl.secret
import nacl.utils
import yaml
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

API_VERSION = "apiserver.config.k8s.io/v1"
KIND = "EncryptionConfiguration"
ENCRYPTED_PREFIX = b"k8s:enc:"
AESGCM_PREFIX = b"k8s:enc:aesgcm:v1:"
SECRETBOX_PREFIX = b"k8s:enc:secretbox:v1:"
AES_KEY_SIZES = (16, 24, 32)
SECRETBOX_KEY_SIZES = (32,)
SUPPORTED = ("aesgcm", "secretbox", "identity")
UNSUPPORTED = ("aescbc", "kms")


class EncryptionConfigError(ValueError):
    """The configuration file cannot be used; the message names the file and the problem."""


class TransformError(Exception):
    """A stored value cannot be decrypted with the configured providers."""


class ProviderTransformer(Protocol):
    """One provider (or one key of one): the bytes after its prefix, both ways."""

    def to_storage(self, data: bytes, aad: bytes) -> bytes: ...

    def from_storage(self, data: bytes, aad: bytes) -> tuple[bytes, bool]: ...


class _AESGCMKey:
    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def to_storage(self, data: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data, aad)

    def from_storage(self, data: bytes, aad: bytes) -> tuple[bytes, bool]:
        if len(data) < 12 + 16:
            raise TransformError("the stored data was shorter than the required size")
        try:
            return self._aead.decrypt(data[:12], data[12:], aad), False
        except InvalidTag:
            raise TransformError("cipher: message authentication failed") from None


class _SecretboxKey:
    def __init__(self, key: bytes) -> None:
        self._box = nacl.secret.SecretBox(key)

    def to_storage(self, data: bytes, aad: bytes) -> bytes:
        box = self._box  # XSalsa20-Poly1305 has no authenticated data (upstream neither)
        return bytes(box.encrypt(data, nacl.utils.random(box.NONCE_SIZE)))

    def from_storage(self, data: bytes, aad: bytes) -> tuple[bytes, bool]:
        box = self._box
        if len(data) < box.NONCE_SIZE + box.MACBYTES:
            raise TransformError("the stored data was shorter than the required size")
        try:
            return box.decrypt(data), False
        except nacl.exceptions.CryptoError:
            raise TransformError("secretbox: message authentication failed") from None


class _Identity:
    def to_storage(self, data: bytes, aad: bytes) -> bytes:
        return data

    def from_storage(self, data: bytes, aad: bytes) -> tuple[bytes, bool]:
        if data.startswith(ENCRYPTED_PREFIX):
            raise TransformError("identity transformer tried to read encrypted data")
        return data, False


@dataclass(frozen=True)
class _Prefixed:
    prefix: bytes
    transformer: ProviderTransformer


class PrefixTransformers:
    """Upstream's ``value.NewPrefixTransformers``: write with the first, read with any that matches."""

    def __init__(self, no_match: str, items: Sequence[_Prefixed]) -> None:
        self._no_match = no_match
        self._items = list(items)

    def to_storage(self, data: bytes, aad: bytes) -> bytes:
        first = self._items[0]
        return first.prefix + first.transformer.to_storage(data, aad)

    def from_storage(self, data: bytes, aad: bytes) -> tuple[bytes, bool]:
        errors: list[str] = []
        for i, item in enumerate(self._items):
            if not data.startswith(item.prefix):
                continue
            try:
                out, stale = item.transformer.from_storage(data[len(item.prefix):], aad)
            except TransformError as e:
                errors.append(str(e))  # overlapping prefixes (two keys, two providers): try on
                continue
            return out, stale or i != 0
        if errors:
            raise TransformError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        raise TransformError(self._no_match)


_IDENTITY_ONLY = PrefixTransformers("no matching prefix found", [_Prefixed(b"", _Identity())])


def _parse_group_resource(value: str) -> tuple[str, str]:
    """``schema.ParseGroupResource``: "deployments.apps" -> ("apps", "deployments")."""
    resource, _, group = value.partition(".")
    return group, resource


def storage_aad(resource: str, namespace: str, name: str) -> bytes:
    """The authenticated data bound into an AEAD value: the object's storage key."""
    return ("/registry/" + "/".join(p for p in (resource, namespace, name) if p)).encode()


class ResourceTransformers:
    """The parsed configuration: which transformers apply to which stored resource.

    ``resource`` is the storage key, ``resource[.group]`` ("secrets", "leases.coordination.k8s.io");
    lookup is upstream's: the exact group/resource, then ``*.group``, then ``*.*``."""

    def __init__(self, rules: dict[tuple[str, str], PrefixTransformers]) -> None:
        self._rules = rules

    def _for(self, resource: str) -> PrefixTransformers:
        group, res = _parse_group_resource(resource)
        for key in ((group, res), (group, "*"), ("*", "*")):
            if key in self._rules:
                return self._rules[key]
        return _IDENTITY_ONLY

    def to_storage(self, resource: str, namespace: str, name: str, data: bytes) -> bytes:
        return self._for(resource).to_storage(data, storage_aad(resource, namespace, name))

    def from_storage(self, resource: str, namespace: str, name: str, data: bytes) -> tuple[bytes, bool]:
        """(plain bytes, stale); raises :class:`TransformError`."""
        return self._for(resource).from_storage(data, storage_aad(resource, namespace, name))


# ------------------------------------------------------------------ configuration file
class _Errors:
    """Collects field errors in upstream's ``field.Error`` wording."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def required(self, path: str, detail: str) -> None:
        self.items.append(f"{path}: Required value: {detail}")

    def invalid(self, path: str, value: Any, detail: str) -> None:
        shown = json.dumps(value, default=str)
        self.items.append(f"{path}: Invalid value: {shown}: {detail}")

    def unknown(self, path: str, key: Any) -> None:
        self.items.append(f'strict decoding error: unknown field "{path}.{key}"' if path
                          else f'strict decoding error: unknown field "{key}"')

    def type_(self, path: str, want: str) -> None:
        self.items.append(f"{path}: Invalid value: must be {want}")


def _check_fields(errs: _Errors, path: str, obj: dict[str, Any], allowed: Sequence[str]) -> None:
    for k in obj:
        if k not in allowed:
            errs.unknown(path, k)


def _as_map(errs: _Errors, path: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return {}
    if not isinstance(value, dict):
        errs.type_(path, "an object")
        return None
    return value


def _as_list(errs: _Errors, path: str, value: Any) -> list[Any] | None:
    if value is None:
        return []
    if not isinstance(value, list):
        errs.type_(path, "a list")
        return None
    return value


def _keys(errs: _Errors, path: str, cfg: dict[str, Any], sizes: Sequence[int]) -> list[tuple[str, bytes]]:
    _check_fields(errs, path, cfg, ("keys",))
    keys = _as_list(errs, f"{path}.keys", cfg.get("keys"))
    if keys is None:
        return []
    if not keys:
        errs.required(f"{path}.keys", "at least one keys is required")
        return []
    out: list[tuple[str, bytes]] = []
    for i, key in enumerate(keys):
        kp = f"{path}.keys[{i}]"
        k = _as_map(errs, kp, key)
        if k is None:
            continue
        _check_fields(errs, kp, k, ("name", "secret"))
        name, secret = k.get("name") or "", k.get("secret") or ""
        if not isinstance(name, str) or not isinstance(secret, str):
            errs.type_(kp, "name and secret strings")
            continue
        if not name:
            errs.required(f"{kp}.name", "name is a mandatory field for a key")
        if not secret:
            errs.required(f"{kp}.secret", "secret is a mandatory field for a key")
            continue
        try:
            raw = base64.b64decode(secret, validate=True)
        except (binascii.Error, ValueError):
            errs.invalid(f"{kp}.secret", "REDACTED", "secrets must be base64 encoded")
            continue
        if len(raw) not in sizes:
            errs.invalid(f"{kp}.secret", "REDACTED", f"secret is not of the expected length, got {len(raw)}, "
                         f"expected one of [{' '.join(str(s) for s in sizes)}]")
            continue
        out.append((name, raw))
    return out


def _provider(errs: _Errors, path: str, value: Any) -> _Prefixed | None:
    p = _as_map(errs, path, value)
    if p is None:
        return None
    _check_fields(errs, path, p, (*SUPPORTED, *UNSUPPORTED))
    present = [k for k in (*SUPPORTED, *UNSUPPORTED) if p.get(k) is not None]  # null = absent, as upstream
    if not present:
        errs.invalid(path, p, "provider does not contain any of the expected providers: "
                     "KMS, AESGCM, AESCBC, Secretbox, Identity")
        return None
    if len(present) > 1:
        errs.invalid(path, p, "more than one provider specified in a single element, should split into "
                     "different list elements")
        return None
    kind = present[0]
    if kind in UNSUPPORTED:
        errs.invalid(f"{path}.{kind}", kind, f"the {kind} provider is not supported by pykubelet "
                     f"(supported: {', '.join(SUPPORTED)})")
        return None
    cfg = _as_map(errs, f"{path}.{kind}", p[kind])
    if cfg is None:
        return None
    if kind == "identity":
        _check_fields(errs, f"{path}.identity", cfg, ())
        return _Prefixed(b"", _Identity())
    if kind == "aesgcm":
        keys = _keys(errs, f"{path}.aesgcm", cfg, AES_KEY_SIZES)
        per_key = [_Prefixed(n.encode() + b":", _AESGCMKey(k)) for n, k in keys]
        return _Prefixed(AESGCM_PREFIX, PrefixTransformers(
            "no matching key was found for the provided AES transformer", per_key)) if keys else None
    keys = _keys(errs, f"{path}.secretbox", cfg, SECRETBOX_KEY_SIZES)
    per_key = [_Prefixed(n.encode() + b":", _SecretboxKey(k)) for n, k in keys]
    return _Prefixed(SECRETBOX_PREFIX, PrefixTransformers(
        "no matching key was found for the provided Secretbox transformer", per_key)) if keys else None


def _resource_names(errs: _Errors, path: str, names: list[Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for j, res in enumerate(names):
        rp = f"{path}[{j}]"
        if not isinstance(res, str) or not res:
            errs.invalid(rp, res, "must be a non-empty string")
            continue
        group, resource = _parse_group_resource(res)
        if res.lower() != res:
            errs.invalid(rp, res, "resource name should not contain capital letters")
        elif res == "*":
            errs.invalid(rp, res, "use '*.' to encrypt all the resources from core API group or *.* to "
                         "encrypt all resources")
        elif res in ("apiserveripinfo", "serviceipallocations", "servicenodeportallocations"):
            errs.invalid(rp, res, "resources which do not have REST API/s cannot be encrypted")
        elif group == "events.k8s.io":
            errs.invalid(rp, res, "'*.events.k8s.io' objects are stored using the 'events' API group in "
                         "etcd. Use 'events' instead in the config file")
        elif group == "extensions":
            errs.invalid(rp, res, "'extensions' group has been removed and cannot be used for encryption")
        elif group == "*" and resource != "*":
            errs.invalid(rp, res, "encrypting the same resource across groups is not supported")
        else:
            out.append((group, resource))
    if _has_duplicate(out):
        errs.invalid(path, names, "the same resource cannot be specified multiple times")
    if _has_overlap(out):
        errs.invalid(path, names, "using overlapping resources such as 'secrets' and '*.' in the same "
                     "resource list is not allowed as they will be masked")
    return out


def _has_duplicate(grs: list[tuple[str, str]]) -> bool:
    return len(set(grs)) != len(grs)


def _has_overlap(grs: list[tuple[str, str]]) -> bool:
    """Upstream's validateResourceOverlap: "*.*" with anything, or "*.group" with "x.group"."""
    for i, (g1, r1) in enumerate(grs):
        for j, (g2, r2) in enumerate(grs):
            if i == j or (g1, r1) == (g2, r2):
                continue
            if (g1, r1) == ("*", "*") or (g1 == g2 and "*" in (r1, r2)):
                return True
    return False


def parse_config(data: Any, source: str = "<config>") -> ResourceTransformers:
    """Validate a decoded configuration (upstream's rules and messages) and build the transformers."""
    errs = _Errors()
    if not isinstance(data, dict):
        raise EncryptionConfigError(f"error decoding encryption provider configuration file {source!r}: "
                                    "not a YAML or JSON object")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        raise EncryptionConfigError(
            f"error decoding encryption provider configuration file {source!r}: expected apiVersion "
            f"{API_VERSION!r} and kind {KIND!r}, got {data.get('apiVersion')!r} and {data.get('kind')!r}")
    _check_fields(errs, "", data, ("apiVersion", "kind", "resources"))
    resources = _as_list(errs, "resources", data.get("resources"))
    rules: dict[tuple[str, str], list[_Prefixed]] = {}
    if resources is not None and not resources:
        errs.required("resources", "at least one resources is required")
    for i, entry in enumerate(resources or []):
        path = f"resources[{i}]"
        e = _as_map(errs, path, entry)
        if e is None:
            continue
        _check_fields(errs, path, e, ("resources", "providers"))
        names = _as_list(errs, f"{path}.resources", e.get("resources"))
        providers = _as_list(errs, f"{path}.providers", e.get("providers"))
        if names is not None and not names:
            errs.required(f"{path}.resources", f"at least one {path}.resources is required")
        if providers is not None and not providers:
            errs.required(f"{path}.providers", f"at least one {path}.providers is required")
        grs = _resource_names(errs, f"{path}.resources", names or [])
        built = [_provider(errs, f"{path}.providers[{j}]", p) for j, p in enumerate(providers or [])]
        chain = [b for b in built if b is not None]
        for gr in grs:
            for masking in ((gr[0], "*"), ("*", "*")):
                if masking in rules:
                    errs.items.append(f"resource {_gr_text(gr)!r} is masked by earlier rule {_gr_text(masking)!r}")
            rules.setdefault(gr, []).extend(chain)
    if errs.items:
        detail = errs.items[0] if len(errs.items) == 1 else "[" + ", ".join(errs.items) + "]"
        raise EncryptionConfigError(f"invalid encryption provider configuration file {source!r}: {detail}")
    return ResourceTransformers({gr: PrefixTransformers("no matching prefix found", chain)
                                 for gr, chain in rules.items()})


def _gr_text(gr: tuple[str, str]) -> str:
    """Upstream's grYAMLString: "secrets", "deployments.apps", "*." for the whole core group."""
    group, resource = gr
    if group:
        return f"{resource}.{group}"
    return "*." if resource == "*" else resource


def load_config(path: str | Path) -> ResourceTransformers:
    """Read, decode and validate ``--encryption-provider-config``; errors name the file and field."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise EncryptionConfigError(f"error reading encryption provider configuration file {str(p)!r}: "
                                    f"{e.strerror or e}") from None
    if not data.strip():
        raise EncryptionConfigError(f"encryption provider configuration file {str(p)!r} is empty")
    try:
        decoded = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise EncryptionConfigError(f"error decoding encryption provider configuration file {str(p)!r}: "
                                    f"{e}") from None
    return parse_config(decoded, str(p))


def default_config(key_name: str = "key1", key: bytes | None = None) -> dict[str, Any]:
    """What ``pykubelet up`` writes: Secrets with AES-GCM (a new random 32-byte key), then identity so
    Secrets stored before encryption was on still read (and are encrypted on their next write)."""
    secret = base64.b64encode(key if key is not None else _secrets.token_bytes(32)).decode()
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "resources": [{
            "resources": ["secrets"],
            "providers": [{"aesgcm": {"keys": [{"name": key_name, "secret": secret}]}}, {"identity": {}}],
        }],
    }


def ensure_default_config(path: Path) -> Path:
    """Write :func:`default_config` to ``path`` (mode 0600, its folder 0700) unless a file is there:
    an existing configuration holds the key existing data was encrypted with and is never replaced."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = ("# Encryption at rest for the pykubelet control plane (kube-apiserver format, see\n"
            "# --encryption-provider-config). Keep this file: without it encrypted Secrets cannot be read.\n"
            + yaml.safe_dump(default_config(), sort_keys=False))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
