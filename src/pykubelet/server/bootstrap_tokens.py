"""Bootstrap tokens: short-lived credentials that let a new node ask for its certificate.

Upstream format (``k8s.io/cluster-bootstrap``, kubeadm's ``kubeadm token create``): a token is
``<id>.<secret>`` with a 6-character id and a 16-character secret, both ``[a-z0-9]``.  It lives
in the Secret ``kube-system/bootstrap-token-<id>`` of type ``bootstrap.kubernetes.io/token`` with
the keys ``token-id``, ``token-secret``, ``expiration`` (RFC 3339), ``usage-bootstrap-authentication``
and ``usage-bootstrap-signing`` (``"true"``), ``auth-extra-groups`` (comma-separated, each starting
with ``system:bootstrappers:``) and ``description``.

Authentication (``plugin/pkg/auth/authenticator/token/bootstrap``): a bearer token of that shape
whose Secret exists, is of the right type, has ``usage-bootstrap-authentication: "true"``, the same
secret (compared in constant time) and is not expired (nor being deleted) authenticates as
``system:bootstrap:<id>`` in the groups ``system:bootstrappers`` (+ the extra groups) and
``system:authenticated``.  Anything else is simply not a bootstrap token (the next authenticator
gets its turn), as upstream.  The default RBAC policy lets ``system:bootstrappers`` create
certificate signing requests and have node client ones auto-approved, and nothing else.
"""

from __future__ import annotations

import base64
import datetime as dt
import hmac
import re
import secrets
import string
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
SECRET_TYPE = "bootstrap.kubernetes.io/token"
NAMESPACE = "kube-system"
PREFIX = "bootstrap-token-"
GROUP = "system:bootstrappers"
USER_PREFIX = "system:bootstrap:"
TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
_ALPHABET = string.ascii_lowercase + string.digits


def generate() -> tuple[str, str]:
    """A fresh (id, secret)."""
    return ("".join(secrets.choice(_ALPHABET) for _ in range(6)),
            "".join(secrets.choice(_ALPHABET) for _ in range(16)))


def token_secret(token_id: str, token_secret_value: str, *, ttl_seconds: float | None = 86400.0,
                 description: str = "", extra_groups: list[str] | None = None,
                 now: dt.datetime | None = None) -> Obj:
    """The Secret that makes ``<id>.<secret>`` a valid bootstrap token (kubeadm's encoding)."""
    data = {"token-id": token_id, "token-secret": token_secret_value,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true"}
    if ttl_seconds:
        exp = (now or dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=ttl_seconds)
        data["expiration"] = exp.strftime("%Y-%m-%dT%H:%M:%SZ")
    if extra_groups:
        data["auth-extra-groups"] = ",".join(extra_groups)
    if description:
        data["description"] = description
    return {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": PREFIX + token_id, "namespace": NAMESPACE},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _data(secret: Obj, key: str) -> str:
    raw = (secret.get("data") or {}).get(key)
    if not isinstance(raw, str):
        return ""
    try:
        return base64.b64decode(raw).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def authenticate(token: str, lookup: Callable[[str, str], Obj | None],
                 now: dt.datetime | None = None) -> tuple[str, list[str]] | None:
    """(user, groups) for a valid bootstrap token, else None.  ``lookup(ns, name)`` reads a Secret."""
    m = TOKEN_RE.match(token)
    if m is None:
        return None
    token_id, secret_value = m.group(1), m.group(2)
    secret = lookup(NAMESPACE, PREFIX + token_id)
    if secret is None or secret.get("type") != SECRET_TYPE:
        return None
    if (secret.get("metadata") or {}).get("deletionTimestamp"):
        return None
    if _data(secret, "token-id") != token_id:
        return None
    if not hmac.compare_digest(_data(secret, "token-secret").encode(), secret_value.encode()):
        return None
    if _data(secret, "usage-bootstrap-authentication") != "true":
        return None
    exp = _data(secret, "expiration")
    if exp:
        try:
            when = dt.datetime.strptime(exp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        except ValueError:
            return None
        if when < (now or dt.datetime.now(dt.UTC)):
            return None
    groups = [GROUP]
    for g in (x.strip() for x in _data(secret, "auth-extra-groups").split(",")):
        if g.startswith(GROUP + ":") and g not in groups:
            groups.append(g)
    return USER_PREFIX + token_id, [*groups, "system:authenticated"]
