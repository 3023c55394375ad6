"""downwardAPI volumes (upstream ``pkg/volume/downwardapi``, ``pkg/fieldpath``).

Each item becomes a file in ``volumes/kubernetes.io~downward-api/<name>`` (a disk emptyDir, atomic
writer, read-only container mounts):

- ``fieldRef``: ``metadata.name``, ``metadata.namespace``, ``metadata.uid``, one label or
  annotation (``metadata.labels['k']``), or all of them: ``metadata.labels`` /
  ``metadata.annotations`` as upstream's ``FormatMap`` — ``key="value"`` lines sorted by key, the
  value quoted like Go's ``%q``, no trailing newline; any other path fails with
  ``unsupported fieldPath: <path>``;
- ``resourceFieldRef``: a container's request or limit (limits default to node allocatable),
  divided by ``divisor`` and rounded up, as for environment variables.

Labels and annotations change while the pod runs: the volume is set up again when the pod's metadata
changed (the pod's next sync) and on every refresh, so ``kubectl label`` shows in the file within
seconds. Errors of several items are reported together, like upstream's aggregate.
"""

from __future__ import annotations

import re
from decimal import Decimal

from pykubelet.agent.kuberuntime.criconfig import ConfigError, resource_field_value
from pykubelet.agent.types import JSONObj, Pod
from pykubelet.agent.volumemanager.atomic_writer import FileProjection
from pykubelet.agent.volumemanager.plugins.base import PodContext, go_quote, parse_mode, project, source_of
from pykubelet.agent.volumemanager.types import Medium, MountedVolume, MountError, PluginName
from pykubelet.common import podutil

DEFAULT_MODE = 0o644
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def format_map(m: dict[str, str]) -> str:
    """Upstream ``fieldpath.FormatMap``."""
    return "\n".join(f"{k}={go_quote(str(m[k]))}" for k in sorted(m))


def field_value(pod: Pod, path: str) -> str:
    """Upstream ``ExtractFieldPathAsString`` for the paths a volume may use."""
    md = pod.get("metadata") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        return format_map({str(k): str(v) for k, v in (md.get(path.split(".")[1]) or {}).items()})
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(md.get(path.split(".")[1], ""))
    raise MountError(f"unsupported fieldPath: {path}")


def aggregate(errors: list[str]) -> str:
    """Upstream ``utilerrors.NewAggregate(...).Error()``."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def collect_data(items: list[JSONObj], pod: Pod, node_allocatable: dict[str, Decimal],
                 default_mode: int) -> dict[str, FileProjection]:
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    for i, item in enumerate(items):
        try:
            mode = parse_mode(item["mode"], f"items[{i}].mode") if item.get("mode") is not None else default_mode
            if isinstance(item.get("fieldRef"), dict):
                value = field_value(pod, str(item["fieldRef"].get("fieldPath", "")))
            elif isinstance(item.get("resourceFieldRef"), dict):
                ref = item["resourceFieldRef"]
                container = podutil.find_container(pod, str(ref.get("containerName", "")))
                if container is None:
                    raise MountError(f"container {ref.get('containerName', '')} not found")
                try:
                    value = resource_field_value(ref, container, node_allocatable)
                except ConfigError as e:
                    raise MountError(str(e)) from e
            else:
                raise MountError(f"items[{i}]: one of fieldRef and resourceFieldRef is required")
        except MountError as e:
            errors.append(e.message)
            continue
        payload[str(item.get("path", ""))] = FileProjection(value.encode(), mode)
    if errors:
        raise MountError(aggregate(errors))
    return payload


def metadata_fingerprint(pod: Pod) -> str:
    md = pod.get("metadata") or {}
    return repr((sorted((md.get("labels") or {}).items()), sorted((md.get("annotations") or {}).items())))


class DownwardAPIPlugin:
    name = PluginName.DOWNWARD_API
    source_key = "downwardAPI"
    requires_remount = True

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        vol_name = str(volume.get("name", ""))
        default_mode = parse_mode(src.get("defaultMode", DEFAULT_MODE), "defaultMode")
        items = src.get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise MountError("items: must be a list of objects")
        payload = collect_data(items, ctx.pod, ctx.node_allocatable, default_mode)
        path = ctx.volume_dir(self.name, vol_name)
        content = await project(ctx, path, Medium.DISK, payload, current=current)
        return MountedVolume(name=vol_name, plugin=self.name, host_path=str(path), dir=path, read_only=True,
                             content=content, spec=volume, metadata_seen=metadata_fingerprint(ctx.pod))
