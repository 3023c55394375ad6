"""configMap volumes (upstream ``pkg/volume/configmap``).

The ConfigMap's keys become files in ``volumes/kubernetes.io~configmap/<name>`` (a disk emptyDir),
written by the atomic writer, so a running pod sees an edit of the ConfigMap as one switch of
``..data`` within a refresh period. Following upstream's ``MakePayload``:

- without ``items`` every key of ``data`` (text) and ``binaryData`` (base64 in the API, raw bytes in
  the file) becomes a file named like the key, with ``defaultMode`` (0644 when unset);
- with ``items`` only the listed keys, at their ``path``, with their own ``mode`` or ``defaultMode``;
  a key the ConfigMap lacks fails the mount with ``configmap references non-existent config key:
  <key>`` unless the volume is ``optional``, when it is skipped;
- a missing ConfigMap fails with ``configmap "<name>" not found``, unless ``optional``: then the
  volume is empty (and fills in once the ConfigMap appears).

Containers always mount it read-only. fsGroup ownership is applied after each write.
"""

from __future__ import annotations

import base64
import binascii

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.atomic_writer import FileProjection
from pykubelet.agent.volumemanager.objects import not_found
from pykubelet.agent.volumemanager.plugins.base import PodContext, parse_mode, project, source_of
from pykubelet.agent.volumemanager.types import Medium, MountedVolume, MountError, PluginName

DEFAULT_MODE = 0o644


def items_of(src: JSONObj) -> list[JSONObj]:
    items = src.get("items") or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise MountError("items: must be a list of {key, path, mode} objects")
    return items


def _decode(value: object, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as e:
        raise MountError(f"{what}: invalid base64 data: {e}") from e


def make_payload(items: list[JSONObj], cm: JSONObj, default_mode: int, optional: bool) -> dict[str, FileProjection]:
    data = cm.get("data") or {}
    binary = cm.get("binaryData") or {}
    if not isinstance(data, dict) or not isinstance(binary, dict):
        raise MountError("the ConfigMap's data/binaryData is not a map")

    def content(key: str) -> bytes | None:
        if key in data:
            return str(data[key]).encode()
        if key in binary:
            return _decode(binary[key], f"binaryData[{key}]")
        return None

    payload: dict[str, FileProjection] = {}
    if not items:
        for key in [*data, *binary]:
            c = content(str(key))
            if c is not None:
                payload[str(key)] = FileProjection(c, default_mode)
        return payload
    for i, item in enumerate(items):
        key = str(item.get("key", ""))
        c = content(key)
        if c is None:
            if optional:
                continue
            raise MountError(f"configmap references non-existent config key: {key}")
        mode = parse_mode(item["mode"], f"items[{i}].mode") if item.get("mode") is not None else default_mode
        payload[str(item.get("path", ""))] = FileProjection(c, mode)
    return payload


class ConfigMapPlugin:
    name = PluginName.CONFIGMAP
    source_key = "configMap"
    requires_remount = True

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        vol_name = str(volume.get("name", ""))
        cm_name = str(src.get("name", ""))
        optional = bool(src.get("optional"))
        default_mode = parse_mode(src.get("defaultMode", DEFAULT_MODE), "defaultMode")
        items = items_of(src)
        cm = await ctx.objects.configmap(ctx.namespace, cm_name)
        if cm is None:
            if not optional:
                raise MountError(not_found("configmap", cm_name))
            cm = {}
        payload = make_payload(items, cm, default_mode, optional)
        path = ctx.volume_dir(self.name, vol_name)
        content = await project(ctx, path, Medium.DISK, payload, current=current)
        return MountedVolume(name=vol_name, plugin=self.name, host_path=str(path), dir=path, read_only=True,
                             content=content, spec=volume)
