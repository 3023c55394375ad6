"""The volume plugins, one module each (upstream ``pkg/volume/<plugin>``), and how a pod volume finds
its plugin (upstream ``VolumePluginMgr.FindPluginBySpec``).

A pod volume names exactly one source (``emptyDir``, ``configMap``, ...); no source at all is an
emptyDir, as the API server's defaulting makes it. A source no plugin handles (``nfs``, ``csi``,
``ephemeral``, ``image``, ...) is never ignored: the pod waits with a FailedMount event naming the
type, because running it without the volume would be wrong.
"""

from __future__ import annotations

from pykubelet.agent.types import JSONObj
from pykubelet.agent.volumemanager.plugins.base import VolumePlugin
from pykubelet.agent.volumemanager.plugins.configmap import ConfigMapPlugin
from pykubelet.agent.volumemanager.plugins.downwardapi import DownwardAPIPlugin
from pykubelet.agent.volumemanager.plugins.emptydir import EmptyDirPlugin
from pykubelet.agent.volumemanager.plugins.hostpath import HostPathPlugin
from pykubelet.agent.volumemanager.plugins.projected import ProjectedPlugin
from pykubelet.agent.volumemanager.plugins.pvc import PersistentVolumeClaimPlugin
from pykubelet.agent.volumemanager.plugins.secret import SecretPlugin
from pykubelet.agent.volumemanager.types import MountError

PLUGINS: tuple[VolumePlugin, ...] = (
    EmptyDirPlugin(),
    HostPathPlugin(),
    ConfigMapPlugin(),
    SecretPlugin(),
    DownwardAPIPlugin(),
    ProjectedPlugin(),
    PersistentVolumeClaimPlugin(),
)
_BY_KEY = {p.source_key: p for p in PLUGINS}
SUPPORTED = ", ".join(p.source_key for p in PLUGINS)


def find_plugin(volume: JSONObj) -> VolumePlugin:
    name = volume.get("name", "")
    sources = [k for k, v in volume.items() if k != "name" and v is not None]
    if not sources:
        return _BY_KEY["emptyDir"]
    if len(sources) > 1:
        raise MountError(f'volume "{name}": may not specify more than 1 volume type (found {", ".join(sources)})',
                         phase=MountError.PROCESSING)
    plugin = _BY_KEY.get(sources[0])
    if plugin is None:
        raise MountError(f'failed to get Plugin from volumeSpec for volume "{name}" err=no volume plugin matched: '
                         f'volume type "{sources[0]}" is not supported by this kubelet (supported: {SUPPORTED})',
                         phase=MountError.PROCESSING)
    return plugin


__all__ = ["PLUGINS", "VolumePlugin", "find_plugin"]
