"""The API objects volumes are made from: ConfigMaps, Secrets, claims, PersistentVolumes, tokens.

Upstream's kubelet reads ConfigMaps and Secrets as ``configMapAndSecretChangeDetectionStrategy``
says, with the same messages each way: a missing object is ``configmap "x" not found`` / ``secret
"x" not found`` (the cache's group-resource is the singular name).

- ``Watch`` (the default): through ``watchcache.WatchedObjects``, one watch per referenced object, so
  the CA ConfigMap of 1,000 service-account token volumes costs one LIST, not 1,000 GETs; each pod's
  view (``for_pod(uid)``) records its references, released with the pod's volumes.
- ``Get`` and ``Cache``: a GET per read, except that one refresh round of the volume manager shares
  one snapshot (``snapshot()``), so a ConfigMap used by a hundred pods is read once per round, while
  a pod that waits for a missing object always reads afresh. (Upstream's ``Cache`` keeps answers for
  the node's TTL and refetches when a pod registers; here it reads like ``Get``, which is never
  staler.)

Persistent volumes: the claim (``persistentvolumeclaims``) and then its PersistentVolume are read
through the API. A 404 without an object name in its Status means the API server does not serve the
resource at all (``the server could not find the requested resource``): that is reported as such
rather than as a missing claim.

Service-account tokens (``TokenManager``, upstream ``pkg/kubelet/token``): a projected
``serviceAccountToken`` is obtained with the TokenRequest API, ``POST
/api/v1/namespaces/<ns>/serviceaccounts/<sa>/token`` with the audience, ``expirationSeconds`` and a
``boundObjectRef`` to the pod (so the token dies with the pod), cached per (service account,
audiences, lifetime, pod), and requested again before 80 % of its lifetime passed (or 24 h, upstream's
``requiresRefresh``): a refresh round renews it when 80 % would be reached before the next round
(``lookahead``). Until a renewal succeeds the still-valid token keeps being used.

``SourceReads`` records what one volume's content was made from, so a refresh round can tell, without
reading or computing anything, that it would come out the same: the watched ConfigMaps/Secrets with
their watch generation, whether anything was read without a watch (a GET: always recomputed), and
when the earliest token it holds must be requested again.
"""

from __future__ import annotations

import calendar
import datetime as dt
import enum
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.types import MountError
from pykubelet.agent.volumemanager.watchcache import Key, WatchedObjects

log = logging.getLogger(__name__)

NOT_SERVED = "the server could not find the requested resource"
MAX_TOKEN_TTL = 24 * 3600.0
REFRESH_AT = 0.8  # fraction of a token's lifetime after which it is requested again


class ObjectApi(Protocol):
    """The two API verbs volumes need (``common.apiclient.ApiClient`` has them)."""

    async def get(self, path: str) -> JSONObj: ...
    async def create(self, path: str, body: JSONObj) -> JSONObj: ...


def _status(e: Exception) -> int | None:
    s = getattr(e, "status", None)
    return s if isinstance(s, int) else None


def _api_message(e: Exception) -> str:
    msg = getattr(e, "message", None)
    return msg if isinstance(msg, str) and msg else str(e)


def _is_not_served(e: Exception, name: str) -> bool:
    """A 404 about the resource type, not about the object named ``name``."""
    body = getattr(e, "body", None)
    details = body.get("details") if isinstance(body, dict) else None
    if isinstance(details, dict) and details.get("name") == name:
        return False
    return _api_message(e).startswith(NOT_SERVED)


class ResourceNotServed(Exception):
    """The API server does not serve a resource type the volume needs."""


@dataclass(frozen=True)
class _Kind:
    singular: str  # in messages: configmap "x" not found
    plural: str  # in paths


CONFIGMAP = _Kind("configmap", "configmaps")
SECRET = _Kind("secret", "secrets")
PVC = _Kind("persistentvolumeclaim", "persistentvolumeclaims")
PV = _Kind("persistentvolume", "persistentvolumes")


@dataclass
class SourceReads:
    """What one volume's content was made from (see the module docstring)."""

    objects: dict[Key, int | None] = field(default_factory=dict)  # watched object → its watch generation
    volatile: bool = False  # something was read without a watch: recompute it every round
    token_due: float = math.inf  # when the earliest of its tokens must be requested again

    def current(self, watched: WatchedObjects | None, now: float) -> bool:
        """The content would come out the same: no watched object changed and no token is due."""
        if self.volatile or now >= self.token_due:
            return False
        if not self.objects:
            return True
        return watched is not None and all(g is not None and watched.generation(k) == g
                                           for k, g in self.objects.items())


class ChangeDetectionStrategy(enum.StrEnum):
    """Upstream ``ResourceChangeDetectionStrategy`` (``configMapAndSecretChangeDetectionStrategy``)."""

    WATCH = "Watch"
    CACHE = "Cache"
    GET = "Get"


class ObjectSource:
    """Reads with upstream's not-found semantics; ConfigMaps and Secrets through ``watched`` when the
    strategy is Watch; a snapshot shares GET answers within one round."""

    def __init__(self, api: ObjectApi | None, *, shared: bool = False, watched: WatchedObjects | None = None,
                 ref: str = "", reads: SourceReads | None = None) -> None:
        self.api = api
        self.watched = watched
        self.ref = ref
        self.reads = reads
        self._shared = shared
        self._cache: dict[tuple[str, str, str], JSONObj | None] = {}

    def snapshot(self) -> ObjectSource:
        """A view whose answers are cached for its lifetime (one refresh round)."""
        return ObjectSource(self.api, shared=True, watched=self.watched)

    def for_pod(self, uid: str, reads: SourceReads | None = None) -> ObjectSource:
        """The same source, reading (and referencing watched objects) on behalf of pod ``uid``,
        recording what it read in ``reads``."""
        out = ObjectSource(self.api, shared=self._shared, watched=self.watched, ref=uid, reads=reads)
        out._cache = self._cache
        return out

    async def _get(self, kind: _Kind, namespace: str, name: str) -> JSONObj | None:
        key = (kind.plural, namespace, name)
        by_watch = self.watched is not None and kind in (CONFIGMAP, SECRET) and bool(namespace)
        if self.reads is not None and not by_watch:
            self.reads.volatile = True
        if self._shared and not by_watch and key in self._cache:
            return self._cache[key]
        if self.api is None:
            raise MountError(f'cannot get {kind.singular} "{name}": the agent runs without an API server')
        path = (f"/api/v1/namespaces/{namespace}/{kind.plural}/{name}" if namespace
                else f"/api/v1/{kind.plural}/{name}")
        try:
            obj: JSONObj | None
            if by_watch:
                assert self.watched is not None
                obj = await self.watched.get(kind.plural, namespace, name, self.ref)
                if self.reads is not None:  # no await since the read: the generation of that object
                    self.reads.objects[key] = self.watched.generation(key)
            else:
                obj = await self.api.get(path)
        except Exception as e:
            if _status(e) != 404:
                raise MountError(f'cannot get {kind.singular} "{name}": {_api_message(e)}') from e
            if _is_not_served(e, name):
                raise ResourceNotServed(f"{kind.plural}: {NOT_SERVED}") from e
            obj = None
        if obj is not None and not isinstance(obj, dict):
            raise MountError(f'cannot get {kind.singular} "{name}": the API answered {type(obj).__name__}')
        if self._shared and not by_watch:  # the watch's store is the cache (and never staler)
            self._cache[key] = obj
        return obj

    async def configmap(self, namespace: str, name: str) -> JSONObj | None:
        try:
            return await self._get(CONFIGMAP, namespace, name)
        except ResourceNotServed as e:
            raise MountError(str(e)) from e

    async def secret(self, namespace: str, name: str) -> JSONObj | None:
        try:
            return await self._get(SECRET, namespace, name)
        except ResourceNotServed as e:
            raise MountError(str(e)) from e

    async def claim(self, namespace: str, name: str) -> JSONObj | None:
        """Raises ``ResourceNotServed`` when the API server has no PersistentVolumeClaims."""
        return await self._get(PVC, namespace, name)

    async def persistent_volume(self, name: str) -> JSONObj | None:
        return await self._get(PV, "", name)


def not_found(kind: str, name: str) -> str:
    return f'{kind} "{name}" not found'


# ------------------------------------------------------------------------------------- tokens


_CANONICAL_UTC = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z")


def parse_rfc3339(ts: str) -> float:
    """``2024-05-01T12:00:00Z`` (fractions and offsets tolerated) → epoch seconds.

    The API server's own form (whole seconds, ``Z``: every TokenRequest answer) without
    ``time.strptime`` (~10 µs per call); anything else, or a value ``datetime`` refuses (a leap
    second, which ``strptime`` takes), goes the general way."""
    m = _CANONICAL_UTC.fullmatch(ts)
    if m is not None:
        try:
            y, mo, d, h, mi, sec = (int(g) for g in m.groups())
            return dt.datetime(y, mo, d, h, mi, sec, tzinfo=dt.UTC).timestamp()
        except ValueError:
            pass
    base = ts.strip()
    offset = 0
    if base.endswith("Z"):
        base = base[:-1]
    elif len(base) > 6 and base[-6] in "+-" and base[-3] == ":":
        sign = 1 if base[-6] == "+" else -1
        offset = sign * (int(base[-5:-3]) * 3600 + int(base[-2:]) * 60)
        base = base[:-6]
    frac = 0.0
    if "." in base:
        base, f = base.split(".", 1)
        frac = float("0." + f) if f.isdigit() else 0.0
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + frac - offset


@dataclass
class Token:
    token: str
    issued_at: float
    expires_at: float

    def requires_refresh(self, now: float) -> bool:
        """Upstream ``requiresRefresh``: older than 24 h, or 80 % of its lifetime gone."""
        return now >= self.refresh_at

    @property
    def refresh_at(self) -> float:
        return min(self.issued_at + MAX_TOKEN_TTL, self.issued_at + REFRESH_AT * (self.expires_at - self.issued_at))


TokenKey = tuple[str, str, tuple[str, ...], int, str]  # namespace, service account, audiences, ttl, pod uid


class TokenManager:
    """Service-account tokens bound to pods, cached and refreshed (upstream ``token.Manager``)."""

    def __init__(self, api: ObjectApi | None, *, clock: Callable[[], float] = time.time,
                 lookahead: Callable[[], float] = lambda: 0.0) -> None:
        self.api = api
        self.clock = clock
        self.lookahead = lookahead  # the refresh period: renew in the last round before 80 %
        self._tokens: dict[TokenKey, Token] = {}

    async def get(self, namespace: str, service_account: str, *, audiences: list[str], expiration: int,
                  pod_name: str, pod_uid: str, reads: SourceReads | None = None) -> str:
        """The token; ``reads`` learns when the next round must request it again (at once when only
        a renewal failed and the still-valid token is returned)."""
        key: TokenKey = (namespace, service_account, tuple(audiences), expiration, pod_uid)
        now = self.clock()
        cached = self._tokens.get(key)
        if cached is not None and not cached.requires_refresh(now + self.lookahead()):
            if reads is not None:
                reads.token_due = min(reads.token_due, cached.refresh_at)
            return cached.token
        try:
            fresh = await self._request(namespace, service_account, audiences, expiration, pod_name, pod_uid)
        except MountError as e:
            if cached is not None and now < cached.expires_at:
                log.warning("refreshing the token of %s/%s for pod %s failed, keeping the valid one: %s",
                            namespace, service_account, pod_name, e.message)
                if reads is not None:
                    reads.token_due = -math.inf  # retried by the next round
                return cached.token
            raise
        self._tokens[key] = fresh
        if reads is not None:
            reads.token_due = min(reads.token_due, fresh.refresh_at)
        return fresh.token

    async def _request(self, namespace: str, service_account: str, audiences: list[str], expiration: int,
                       pod_name: str, pod_uid: str) -> Token:
        if self.api is None:
            raise MountError("failed to fetch token: the agent runs without an API server")
        body: JSONObj = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": audiences,
                "expirationSeconds": expiration,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid},
            },
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        try:
            out = await self.api.create(path, body)
        except Exception as e:
            raise MountError(f"failed to fetch token: {_api_message(e)}") from e
        status = out.get("status") if isinstance(out, dict) else None
        if not isinstance(status, dict) or not isinstance(status.get("token"), str) or not status["token"]:
            raise MountError("failed to fetch token: the TokenRequest answer has no status.token")
        now = self.clock()
        try:
            expires = parse_rfc3339(str(status.get("expirationTimestamp") or ""))
        except (ValueError, OverflowError):
            expires = now + expiration
        spec = out.get("spec")
        ttl = spec.get("expirationSeconds") if isinstance(spec, dict) else None
        if not isinstance(ttl, int) or isinstance(ttl, bool):
            ttl = expiration
        return Token(token=status["token"], issued_at=min(now, expires - ttl), expires_at=expires)

    def forget_pod(self, uid: str) -> None:
        for key in [k for k in self._tokens if k[4] == uid]:
            del self._tokens[key]
