"""persistentVolumeClaim volumes bound to a hostPath or local PersistentVolume.

Upstream's desired-state populator resolves a claim before any plugin runs: it reads the
PersistentVolumeClaim, requires it to be bound (``spec.volumeName``), reads that PersistentVolume,
checks that its ``claimRef`` points back at the claim's uid, and then hands the PV's source to the
plugin for it. Errors at this stage read ``error processing PVC <ns>/<claim>: ...`` (and, as for any
volume the pod waits for, ``Unable to attach or mount volumes: unmounted volumes=[...]``). Here:

- ``hostPath`` PVs: the hostPath plugin's checks (``type``), then containers bind-mount the path;
- ``local`` PVs: the path must exist; with an fsGroup (and the claim not read-only) its ownership is
  changed as upstream's local plugin does, honouring ``fsGroupChangePolicy``. Upstream bind-mounts the
  path into ``volumes/kubernetes.io~local-volume/<pv>``; here containers bind-mount it directly (same
  content, nothing to clean up); node affinity is not checked (one node);
- any other PV source, and ``volumeMode: Block``, fail naming what is not supported.

``readOnly: true`` on the pod's volume mounts it read-only in every container. If the API server does
not serve PersistentVolumeClaims or PersistentVolumes (pykubelet's dev control plane does not, yet),
the FailedMount event says exactly that.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.objects import ResourceNotServed
from pykubelet.agent.volumemanager.ownership import set_volume_ownership
from pykubelet.agent.volumemanager.plugins.base import PodContext, source_of
from pykubelet.agent.volumemanager.plugins.hostpath import check_type, validate_host_path
from pykubelet.agent.volumemanager.types import MountedVolume, MountError, PluginName

PROCESSING = MountError.PROCESSING


class PersistentVolumeClaimPlugin:
    name = PluginName.LOCAL_VOLUME  # hostPath PVs report as host-path below
    source_key = "persistentVolumeClaim"
    requires_remount = False

    async def _resolve(self, ctx: PodContext, claim: str) -> JSONObj:
        where = f"error processing PVC {ctx.namespace}/{claim}"
        try:
            pvc = await ctx.objects.claim(ctx.namespace, claim)
        except ResourceNotServed as e:
            raise MountError(f"{where}: failed to fetch PVC from API server: {e} (this API server does not "
                             "serve PersistentVolumeClaims)", phase=PROCESSING) from e
        except MountError as e:
            raise MountError(f"{where}: failed to fetch PVC from API server: {e.message}", phase=PROCESSING) from e
        if pvc is None:
            raise MountError(f'{where}: failed to fetch PVC from API server: persistentvolumeclaims "{claim}" '
                             "not found", phase=PROCESSING)
        pv_name = (pvc.get("spec") or {}).get("volumeName") or ""
        phase = (pvc.get("status") or {}).get("phase") or ""
        if not pv_name or phase not in ("", "Bound"):
            raise MountError(f"{where}: PVC is not bound", phase=PROCESSING)
        try:
            pv = await ctx.objects.persistent_volume(str(pv_name))
        except ResourceNotServed as e:
            raise MountError(f"{where}: failed to fetch PV {pv_name} from API server: {e} (this API server does "
                             "not serve PersistentVolumes)", phase=PROCESSING) from e
        except MountError as e:
            raise MountError(f"{where}: failed to fetch PV {pv_name} from API server: {e.message}",
                             phase=PROCESSING) from e
        if pv is None:
            raise MountError(f'{where}: failed to fetch PV {pv_name} from API server: persistentvolumes '
                             f'"{pv_name}" not found', phase=PROCESSING)
        ref = (pv.get("spec") or {}).get("claimRef")
        claim_uid = (pvc.get("metadata") or {}).get("uid", "")
        if not isinstance(ref, dict):
            raise MountError(f'{where}: found PV object "{pv_name}" but it has a nil pv.Spec.ClaimRef indicating '
                             "it is not yet bound to the claim", phase=PROCESSING)
        if ref.get("uid") and claim_uid and ref.get("uid") != claim_uid:
            raise MountError(f'{where}: found PV object "{pv_name}" but its pv.Spec.ClaimRef.UID '
                             f'("{ref.get("uid")}") does not point to claim.UID ("{claim_uid}")', phase=PROCESSING)
        return pv

    async def setup(self, ctx: PodContext, volume: JSONObj, current: MountedVolume | None) -> MountedVolume:
        src = source_of(volume, self.source_key)
        vol_name = str(volume.get("name", ""))
        claim = str(src.get("claimName", ""))
        read_only = bool(src.get("readOnly"))
        pv = await self._resolve(ctx, claim)
        spec = pv.get("spec") or {}
        pv_name = str((pv.get("metadata") or {}).get("name", ""))
        if spec.get("volumeMode") == "Block":
            raise MountError(f'PersistentVolume "{pv_name}": volumeMode Block is not supported by this kubelet',
                             phase=PROCESSING)
        if isinstance(spec.get("hostPath"), dict):
            path = validate_host_path(spec["hostPath"].get("path"))
            path_type = spec["hostPath"].get("type") or ""
            if path_type:
                await asyncio.to_thread(check_type, path, str(path_type))
            return MountedVolume(name=vol_name, plugin=PluginName.HOST_PATH, host_path=path, read_only=read_only,
                                 spec=volume, pvc=(ctx.namespace, claim))
        if isinstance(spec.get("local"), dict):
            path = validate_host_path(spec["local"].get("path"))
            if not await asyncio.to_thread(os.path.exists, path):
                raise MountError(f'local PersistentVolume "{pv_name}": path {path} does not exist')
            fs_group = ctx.fs_group
            if fs_group is not None and not read_only:
                try:
                    await asyncio.to_thread(set_volume_ownership, Path(path), fs_group,
                                            read_only=False, policy=ctx.fs_group_change_policy)
                except OSError as e:
                    raise MountError(f"applying fsGroup {fs_group} to {path}: {e}") from e
            return MountedVolume(name=vol_name, plugin=PluginName.LOCAL_VOLUME, host_path=path,
                                 read_only=read_only, spec=volume, pvc=(ctx.namespace, claim))
        kinds = sorted(k for k, v in spec.items() if isinstance(v, dict) and k not in (
            "capacity", "claimRef", "nodeAffinity"))
        raise MountError(f'PersistentVolume "{pv_name}": volume type {", ".join(kinds) or "(none)"} is not '
                         "supported by this kubelet (only hostPath and local)", phase=PROCESSING)
