"""Image manager: makes sure a container's image is present (upstream pkg/kubelet/images).

``ensure_image_exists`` follows upstream ``imageManager.EnsureImageExists``:

- the default pull policy is Always for ``:latest`` / untagged images, otherwise IfNotPresent;
- Never + absent → ErrImageNeverPull (event ``ErrImageNeverPull``);
- IfNotPresent + present → event Pulled "Container image ... already present on machine";
- a pod+image key in back-off → ImagePullBackOff (event BackOff "Back-off pulling image ...");
- otherwise Pulling, PullImage via CRI, then Pulled "Successfully pulled image ... in Xs" or
  Failed "Failed to pull image ...: err" + ErrImagePull and the back-off grows (10 s doubling to 300 s).

Pulls are serialized by default (``serializeImagePulls``), or limited by ``maxParallelImagePulls``.
Credentials come from the pod's ``imagePullSecrets`` (kubernetes.io/dockerconfigjson or dockercfg)
matched against the image's registry host, like upstream's credentialprovider keyring; every matching
credential is tried in turn, then an anonymous pull.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from pykubelet.agent import metrics
from pykubelet.common.backoff import Backoff
from pykubelet.cri import pb

log = logging.getLogger(__name__)

ERR_IMAGE_PULL = "ErrImagePull"
ERR_IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
ERR_INVALID_IMAGE_NAME = "InvalidImageName"


@dataclass
class ImageResult:
    image_ref: str = ""
    error: str = ""  # one of the ERR_* reasons, "" on success
    message: str = ""
    # the runtime's ImageStatus answer behind ``image_ref`` when this check read it (its user, for
    # runAsNonRoot): the container start needs no second ImageStatus of the same image
    image: pb.Image | None = None

    @property
    def ok(self) -> bool:
        return not self.error


def registry_host(image: str) -> str:
    """Registry host of an image reference (docker.io when none)."""
    first, sep, _rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def apply_default_tag(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in image or ":" in last:
        return image
    return image + ":latest"


def default_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _normalize_registry_key(key: str) -> str:
    k = key
    for prefix in ("https://", "http://"):
        if k.startswith(prefix):
            k = k[len(prefix):]
    k = k.split("/", 1)[0]
    if k in ("index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"):
        return "docker.io"
    return k


def auths_from_secrets(secrets: list[dict[str, Any]], image: str) -> list[pb.AuthConfig]:
    """AuthConfigs from dockerconfigjson/dockercfg secrets whose registry matches ``image``."""
    host = registry_host(image)
    out: list[pb.AuthConfig] = []
    for sec in secrets:
        data = sec.get("data") or {}
        raw = None
        try:
            if ".dockerconfigjson" in data:
                raw = (json.loads(base64.b64decode(data[".dockerconfigjson"])) or {}).get("auths") or {}
            elif ".dockercfg" in data:
                raw = json.loads(base64.b64decode(data[".dockercfg"])) or {}
        except (ValueError, TypeError) as e:
            log.warning("ignoring malformed pull secret %s: %s", (sec.get("metadata") or {}).get("name"), e)
            continue
        for key, entry in (raw or {}).items():
            if _normalize_registry_key(key) != host or not isinstance(entry, dict):
                continue
            user, password = entry.get("username", ""), entry.get("password", "")
            if entry.get("auth") and not user:
                try:
                    user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                except (ValueError, TypeError):
                    continue
            # no server_address: containerd 1.6 url.Parse()s it and compares the URL's host with
            # the endpoint it contacts, so a bare "host:port" (or docker.io vs registry-1.docker.io)
            # would silently drop the credentials; the registry was matched above already
            out.append(pb.AuthConfig(username=user, password=password,
                                     identity_token=entry.get("identitytoken", ""),
                                     registry_token=entry.get("registrytoken", "")))
    return out


class ImageManager:
    def __init__(
        self,
        runtime: Any,
        recorder: Any,
        *,
        api: Any | None = None,
        serialize: bool = True,
        max_parallel: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.api = api
        self.backoff = backoff or Backoff(10.0, 300.0)
        limit = 1 if serialize else (max_parallel or 1 << 16)
        self._sem = asyncio.Semaphore(limit)

    async def _present(self, image: str) -> pb.Image | None:
        """The image as the runtime knows it (ImageStatus), None when absent."""
        resp = await self.runtime.image_status(image)
        if resp.HasField("image") and resp.image.id:
            return resp.image  # type: ignore[no-any-return]
        return None

    async def _pull_secrets(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        names = [s.get("name") for s in (pod.get("spec") or {}).get("imagePullSecrets") or [] if s.get("name")]
        if not names or self.api is None:
            return []
        ns = (pod.get("metadata") or {}).get("namespace", "default")
        out = []
        for n in names:
            try:
                out.append(await self.api.get(f"/api/v1/namespaces/{ns}/secrets/{n}"))
            except Exception as e:
                log.warning("pull secret %s/%s unavailable: %s", ns, n, e)
        return out

    async def ensure_image_exists(
        self, pod: dict[str, Any], container: dict[str, Any], sandbox_config: pb.PodSandboxConfig | None = None
    ) -> ImageResult:
        raw = (container.get("image") or "").strip()
        if not raw:
            return ImageResult(error=ERR_INVALID_IMAGE_NAME, message="container image is empty")
        image = apply_default_tag(raw)
        policy = container.get("imagePullPolicy") or default_pull_policy(raw)
        try:
            present = await self._present(image)
        except Exception as e:
            return ImageResult(error=ERR_IMAGE_PULL, message=f"failed to inspect image {raw!r}: {e}")
        if policy == "Never" or (policy == "IfNotPresent" and present is not None):
            if present is not None:
                self.recorder.event(pod, "Normal", "Pulled", f'Container image "{raw}" already present on machine')
                return ImageResult(image_ref=str(present.id), image=present)
            msg = f'Container image "{raw}" is not present with pull policy of Never'
            self.recorder.event(pod, "Warning", ERR_IMAGE_NEVER_PULL, msg)
            return ImageResult(error=ERR_IMAGE_NEVER_PULL, message=msg)
        key = f"{(pod.get('metadata') or {}).get('uid', '')}_{image}"
        now = time.time()
        entry = self.backoff._entries.get(key)
        if entry is not None and self.backoff.is_in_backoff_since(key, entry.last_update, now):
            msg = f'Back-off pulling image "{raw}"'
            self.recorder.event(pod, "Normal", "BackOff", msg)
            return ImageResult(error=ERR_IMAGE_PULL_BACKOFF, message=msg)
        self.recorder.event(pod, "Normal", "Pulling", f'Pulling image "{raw}"')
        t0 = time.monotonic()
        secrets = await self._pull_secrets(pod)
        auths: list[pb.AuthConfig | None] = [*auths_from_secrets(secrets, raw), None]
        async with self._sem:
            t1 = time.monotonic()
            err: Exception | None = None
            ref = ""
            for auth in auths:
                try:
                    ref = await self.runtime.pull_image(image, auth=auth, sandbox_config=sandbox_config)
                    err = None
                    break
                except Exception as ex:
                    err = ex
        if err is not None:
            self.backoff.next(key, time.time())
            detail = getattr(err, "details", None) or str(err)
            msg = f'Failed to pull image "{raw}": {detail}'
            self.recorder.event(pod, "Warning", "Failed", msg)
            return ImageResult(error=ERR_IMAGE_PULL, message=msg)
        self.backoff.reset(key)
        done = time.monotonic()
        metrics.IMAGE_PULL_DURATION.observe(done - t1)
        size = ""
        pulled: pb.Image | None = None
        try:
            st = await self.runtime.image_status(image)
            if st.HasField("image"):
                size = f" Image size: {st.image.size} bytes."
                if st.image.id == ref:
                    pulled = st.image
        except Exception:
            pass
        self.recorder.event(
            pod, "Normal", "Pulled",
            f'Successfully pulled image "{raw}" in {done - t1:.3f}s ({done - t0:.3f}s including waiting).{size}',
        )
        return ImageResult(image_ref=ref, image=pulled)
