"""projected volumes (upstream ``pkg/volume/projected``).

Several sources projected into one directory, ``volumes/kubernetes.io~projected/<name>``, which is a
tmpfs (upstream wraps a memory emptyDir: tokens and secrets stay off the disk), with the volume's
``defaultMode`` (0644 when unset) for every file without its own ``mode``:

- ``configMap`` and ``secret``: exactly the configMap and secret volume payloads (``items``,
  ``optional``, the same messages);
- ``downwardAPI``: the downwardAPI volume payload;
- ``serviceAccountToken``: a token for the pod's service account (``spec.serviceAccountName``,
  ``default`` when unset) from the TokenRequest API — ``audience`` (the API server's default audiences
  when empty), ``expirationSeconds`` (3600 when unset), bound to the pod — written at ``path`` and
  requested again before 80 % of its lifetime (``objects.TokenManager``). When the pod has an fsGroup
  or all its containers share a runAsUser the file is mode 0600, owned by that user (upstream's
  token-file ownership), and fsGroup ownership then opens it to the group;
- ``clusterTrustBundle`` and ``podCertificate`` are not supported and say so.

Sources are read side by side (a token's TokenRequest and the CA ConfigMap are two API round trips;
``side_by_side``: the last of them and the downwardAPI sources run in the caller's task);
errors of several sources are reported together, in the sources' order (upstream aggregates them). Containers mount it
read-only; it follows its sources on every refresh.
"""

from __future__ import annotations

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.atomic_writer import FileProjection
from pykubelet.agent.volumemanager.objects import not_found
from pykubelet.agent.volumemanager.plugins import configmap, downwardapi, secret
from pykubelet.agent.volumemanager.plugins.base import (
    PodContext,
    parse_mode,
    project,
    side_by_side,
    source_of,
    tmpfs_size,
)
from pykubelet.agent.volumemanager.types import Medium, MountedVolume, MountError, PluginName

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_EXPIRATION = 3600
TOKEN_FILE_MODE = 0o600
_REMOTE_SOURCES = ("configMap", "secret", "serviceAccountToken")  # the sources that read from the API


class ProjectedPlugin:
    name = PluginName.PROJECTED
    source_key = "projected"
    requires_remount = True

    async def _source(self, ctx: PodContext, source: JSONObj, default_mode: int) -> dict[str, FileProjection]:
        if isinstance(source.get("configMap"), dict):
            src = source["configMap"]
            optional = bool(src.get("optional"))
            cm = await ctx.objects.configmap(ctx.namespace, str(src.get("name", "")))
            if cm is None:
                if not optional:
                    raise MountError(not_found("configmap", str(src.get("name", ""))))
                cm = {}
            return configmap.make_payload(configmap.items_of(src), cm, default_mode, optional)
        if isinstance(source.get("secret"), dict):
            src = source["secret"]
            optional = bool(src.get("optional"))
            sec = await ctx.objects.secret(ctx.namespace, str(src.get("name", "")))
            if sec is None:
                if not optional:
                    raise MountError(not_found("secret", str(src.get("name", ""))))
                sec = {}
            return secret.make_payload(configmap.items_of(src), sec, default_mode, optional)
        if isinstance(source.get("downwardAPI"), dict):
            items = source["downwardAPI"].get("items") or []
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise MountError("downwardAPI.items: must be a list of objects")
            return downwardapi.collect_data(items, ctx.pod, ctx.node_allocatable, default_mode)
        if isinstance(source.get("serviceAccountToken"), dict):
            return await self._token(ctx, source["serviceAccountToken"], default_mode)
        kinds = [k for k in source if source.get(k) is not None]
        raise MountError(f"projected volume source {', '.join(kinds) or '(empty)'} is not supported by this kubelet")

    async def _token(self, ctx: PodContext, src: JSONObj, default_mode: int) -> dict[str, FileProjection]:
        path = src.get("path")
        if not isinstance(path, str) or not path:
            raise MountError("serviceAccountToken.path: Required value")
        exp = src.get("expirationSeconds", DEFAULT_TOKEN_EXPIRATION)
        if isinstance(exp, bool) or not isinstance(exp, int):
            raise MountError(f"serviceAccountToken.expirationSeconds: Invalid value: {exp!r}")
        audience = src.get("audience") or ""
        sa = str((ctx.pod.get("spec") or {}).get("serviceAccountName") or "default")
        token = await ctx.tokens.get(ctx.namespace, sa, audiences=[str(audience)] if audience else [],
                                     expiration=exp, pod_name=ctx.name, pod_uid=ctx.uid, reads=ctx.reads)
        fs_user = ctx.fs_user
        mode = TOKEN_FILE_MODE if (fs_user is not None or ctx.fs_group is not None) else default_mode
        return {path: FileProjection(token.encode(), mode, fs_user)}

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        vol_name = str(volume.get("name", ""))
        default_mode = parse_mode(src.get("defaultMode", DEFAULT_MODE), "defaultMode")
        sources = src.get("sources") or []
        if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
            raise MountError("sources: must be a list of objects")
        async def one(source: JSONObj) -> dict[str, FileProjection] | MountError:
            try:
                return await self._source(ctx, source, default_mode)
            except MountError as e:
                return e

        # the sources side by side: the TokenRequest and the CA ConfigMap are two API round trips;
        # one that reads nothing from the API (downwardAPI) runs at once, with no task
        got: list[dict[str, FileProjection] | MountError | None] = [None] * len(sources)
        remote: list[int] = []
        for i, s in enumerate(sources):
            if any(isinstance(s.get(k), dict) for k in _REMOTE_SOURCES):
                remote.append(i)
            else:
                got[i] = await one(s)
        for i, r in zip(remote, await side_by_side([one(sources[i]) for i in remote]), strict=True):
            got[i] = r
        payload: dict[str, FileProjection] = {}
        errors: list[str] = []
        for got_one in got:
            if isinstance(got_one, MountError):
                errors.append(got_one.message)
            elif got_one is not None:
                payload.update(got_one)
        if errors:
            raise MountError(downwardapi.aggregate(errors))
        path = ctx.volume_dir(self.name, vol_name)
        content = await project(ctx, path, Medium.MEMORY, payload, size=tmpfs_size(ctx, None), current=current)
        return MountedVolume(name=vol_name, plugin=self.name, host_path=str(path), dir=path, read_only=True,
                             medium=Medium.MEMORY, content=content, spec=volume,
                             metadata_seen=downwardapi.metadata_fingerprint(ctx.pod))
