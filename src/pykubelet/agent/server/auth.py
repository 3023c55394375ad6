"""Authentication and authorization of the kubelet API (port 10250).

Follows upstream pkg/kubelet/server/auth.go and the kubelet's authenticator/authorizer setup:

* Authentication, in order: a verified x509 client certificate (user = CN, groups = O, verified by
  the TLS layer against ``authentication.x509.clientCAFile``); a bearer token checked with a
  TokenReview (``authentication.webhook.enabled``); otherwise anonymous (``system:anonymous`` in
  ``system:unauthenticated``) if ``authentication.anonymous.enabled``, else 401.
* Authorization: ``AlwaysAllow`` or ``Webhook`` (a SubjectAccessReview). The attributes are what
  upstream's ``GetRequestAttributes`` builds: resource ``nodes``, name = node name, API group "",
  verb from the HTTP method, subresource from the path (``/stats`` → stats, ``/metrics`` →
  metrics, ``/logs`` → log, ``/spec`` → spec, ``/checkpoint`` → checkpoint, anything else → proxy).
  Denials are 403 with upstream's message ``Forbidden (user=…, verb=…, resource=…, subresource=…)``.
* Decisions are cached like upstream's webhook caches: token reviews 2 minutes, allowed SARs
  5 minutes, denied SARs 30 seconds, so a chatty scraper doesn't turn into API traffic.

The decision functions are pure; the network calls go through the agent's ApiClient.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TOKEN_CACHE_TTL = 120.0
TOKEN_FAILURE_TTL = 10.0
AUTHORIZED_TTL = 300.0
UNAUTHORIZED_TTL = 30.0


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",))

_METHOD_VERBS = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


def _is_subpath(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def subresource_for_path(path: str) -> str:
    """Upstream's path → nodes subresource mapping (auth.go GetRequestAttributes)."""
    for prefix, sub in (
        ("/stats", "stats"),
        ("/metrics", "metrics"),
        ("/logs", "log"),
        ("/spec", "spec"),
        ("/checkpoint", "checkpoint"),
    ):
        if _is_subpath(path, prefix):
            return sub
    return "proxy"


def verb_for_method(method: str) -> str:
    return _METHOD_VERBS.get(method.upper(), "*")


@dataclass(frozen=True)
class Attributes:
    user: UserInfo
    verb: str
    node_name: str
    subresource: str
    path: str

    def forbidden_message(self) -> str:
        return (f"Forbidden (user={self.user.name}, verb={self.verb}, resource=nodes, "
                f"subresource={self.subresource})")


def request_attributes(user: UserInfo, method: str, path: str, node_name: str) -> Attributes:
    return Attributes(user, verb_for_method(method), node_name, subresource_for_path(path), path)


def subject_access_review(attrs: Attributes) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": attrs.user.name,
        "groups": list(attrs.user.groups),
        "resourceAttributes": {
            "verb": attrs.verb,
            "group": "",
            "version": "v1",
            "resource": "nodes",
            "subresource": attrs.subresource,
            "name": attrs.node_name,
        },
    }
    if attrs.user.uid:
        spec["uid"] = attrs.user.uid
    if attrs.user.extra:
        spec["extra"] = attrs.user.extra
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def user_from_cert(peercert: dict[str, Any] | None) -> UserInfo | None:
    """User from an ssl ``getpeercert()`` dict of a *verified* client certificate."""
    if not peercert:
        return None
    cn = ""
    groups: list[str] = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = value
            elif key == "organizationName":
                groups.append(value)
    if not cn:
        return None
    return UserInfo(cn, groups=tuple(groups))


class _TTLCache:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._data: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any | None:
        hit = self._data.get(key)
        if hit is None:
            return None
        if hit[0] < self._clock():
            self._data.pop(key, None)
            return None
        return hit[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if len(self._data) > 4096:
            now = self._clock()
            for k in [k for k, (exp, _) in self._data.items() if exp < now]:
                del self._data[k]
            if len(self._data) > 4096:
                self._data.clear()
        self._data[key] = (self._clock() + ttl, value)


class AuthError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class KubeletAuth:
    """Authenticates and authorizes one request; see module docstring for the rules."""

    def __init__(self, *, config: Any, api: Any, node_name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        authn = getattr(config, "authentication", None)
        authz = getattr(config, "authorization", None)
        anon = getattr(authn, "anonymous", None)
        webhook = getattr(authn, "webhook", None)
        self.anonymous_enabled = bool(getattr(anon, "enabled", False))
        self.webhook_enabled = bool(getattr(webhook, "enabled", False))
        self.authz_mode = str(getattr(authz, "mode", "AlwaysAllow") or "AlwaysAllow")
        self.api = api
        self.node_name = node_name
        self._tokens = _TTLCache(clock)
        self._decisions = _TTLCache(clock)

    async def authenticate(self, *, peercert: dict[str, Any] | None, authorization: str | None) -> UserInfo:
        user = user_from_cert(peercert)
        if user is not None:
            return user
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                if self.webhook_enabled and self.api is not None:
                    u = await self._review_token(token)
                    if u is not None:
                        return u
                raise AuthError(401, "Unauthorized")
        if self.anonymous_enabled:
            return ANONYMOUS
        raise AuthError(401, "Unauthorized")

    async def _review_token(self, token: str) -> UserInfo | None:
        cached = self._tokens.get(token)
        if cached is not None:
            return cached if isinstance(cached, UserInfo) else None
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            resp = await self.api.create("/apis/authentication.k8s.io/v1/tokenreviews", body)
        except Exception:
            return None  # API unreachable: not cached, the next request retries
        status = resp.get("status") or {}
        if not status.get("authenticated"):
            self._tokens.put(token, False, TOKEN_FAILURE_TTL)
            return None
        u = status.get("user") or {}
        user = UserInfo(u.get("username", ""), u.get("uid", ""), tuple(u.get("groups") or ()),
                        dict(u.get("extra") or {}))
        self._tokens.put(token, user, TOKEN_CACHE_TTL)
        return user

    async def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        if self.authz_mode == "AlwaysAllow":
            return True, ""
        if self.api is None:
            return False, "no API client for authorization webhook"
        key = (attrs.user.name, attrs.user.groups, attrs.verb, attrs.subresource, attrs.node_name)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        try:
            resp = await self.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                         subject_access_review(attrs))
        except Exception as e:
            return False, f"authorization error: {e}"
        status = resp.get("status") or {}
        decision = (bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason", "")))
        self._decisions.put(key, decision, AUTHORIZED_TTL if decision[0] else UNAUTHORIZED_TTL)
        return decision
