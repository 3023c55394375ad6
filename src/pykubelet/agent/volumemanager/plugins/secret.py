"""secret volumes (upstream ``pkg/volume/secret``).

Like configMap volumes (atomic writer, ``items``, ``defaultMode``/``mode``, ``optional``, read-only
container mounts, updates within a refresh period) with two differences that matter:

- the directory ``volumes/kubernetes.io~secret/<name>`` is a **tmpfs** (upstream wraps a memory
  emptyDir), so secret contents never reach the node's disk; its size is the pod's memory limit or
  node allocatable memory (``calculateEmptyDirMemorySize`` without a sizeLimit);
- values come base64-encoded in ``data`` and are written decoded; the messages are
  ``secret "<name>" not found`` and ``references non-existent secret key: <key>``.
"""

from __future__ import annotations

import base64
import binascii

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.atomic_writer import FileProjection
from pykubelet.agent.volumemanager.objects import not_found
from pykubelet.agent.volumemanager.plugins.base import PodContext, parse_mode, project, source_of, tmpfs_size
from pykubelet.agent.volumemanager.plugins.configmap import items_of
from pykubelet.agent.volumemanager.types import Medium, MountedVolume, MountError, PluginName

DEFAULT_MODE = 0o644


def _data(secret: JSONObj) -> dict[str, bytes]:
    raw = secret.get("data") or {}
    if not isinstance(raw, dict):
        raise MountError("the Secret's data is not a map")
    out: dict[str, bytes] = {}
    for k, v in raw.items():
        try:
            out[str(k)] = base64.b64decode(str(v or ""), validate=True)
        except (binascii.Error, ValueError) as e:
            raise MountError(f"data[{k}]: invalid base64 data: {e}") from e
    # stringData is write-only (the API server folds it into data); honour it if a server did not
    for k, v in (secret.get("stringData") or {}).items():
        out.setdefault(str(k), str(v).encode())
    return out


def make_payload(items: list[JSONObj], secret: JSONObj, default_mode: int, optional: bool) -> dict[str, FileProjection]:
    data = _data(secret)
    if not items:
        return {k: FileProjection(v, default_mode) for k, v in data.items()}
    payload: dict[str, FileProjection] = {}
    for i, item in enumerate(items):
        key = str(item.get("key", ""))
        if key not in data:
            if optional:
                continue
            raise MountError(f"references non-existent secret key: {key}")
        mode = parse_mode(item["mode"], f"items[{i}].mode") if item.get("mode") is not None else default_mode
        payload[str(item.get("path", ""))] = FileProjection(data[key], mode)
    return payload


class SecretPlugin:
    name = PluginName.SECRET
    source_key = "secret"
    requires_remount = True

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        vol_name = str(volume.get("name", ""))
        secret_name = str(src.get("secretName", ""))
        optional = bool(src.get("optional"))
        default_mode = parse_mode(src.get("defaultMode", DEFAULT_MODE), "defaultMode")
        items = items_of(src)
        secret = await ctx.objects.secret(ctx.namespace, secret_name)
        if secret is None:
            if not optional:
                raise MountError(not_found("secret", secret_name))
            secret = {}
        payload = make_payload(items, secret, default_mode, optional)
        path = ctx.volume_dir(self.name, vol_name)
        content = await project(ctx, path, Medium.MEMORY, payload, size=tmpfs_size(ctx, None), current=current)
        return MountedVolume(name=vol_name, plugin=self.name, host_path=str(path), dir=path, read_only=True,
                             medium=Medium.MEMORY, content=content, spec=volume)
