"""The volume manager's vocabulary: plugin names, media, mounted volumes, where they live on disk.

Upstream names every in-tree plugin ``kubernetes.io/<plugin>`` and keeps a pod's volumes under
``<root-dir>/pods/<uid>/volumes/<escaped plugin name>/<volume name>``, the plugin name escaped by
``utilstrings.EscapeQualifiedName`` (``/`` becomes ``~``): ``kubernetes.io~empty-dir``,
``kubernetes.io~configmap``, ... The layout is the agent's only record of what is mounted: after a
restart the volume manager reads it back (plus ``/proc/self/mountinfo`` for tmpfs mounts), exactly as
upstream's reconstruction does, so it must stay upstream's. hostPath volumes (and PersistentVolumes
backed by a host path) are not materialized there: containers bind-mount the host path itself.

``MountedVolume`` is one entry of the *actual state* (upstream ``actualStateOfWorld``): what a pod's
volume is mounted as, what containers bind-mount (``host_path``) and whether the plugin forces
read-only mounts (configMap, secret, downwardAPI and projected always do, since upstream's fix of
CVE-2017-1002102).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pykubelet.agent.types import JSONObj

if TYPE_CHECKING:
    from pykubelet.agent.volumemanager.objects import SourceReads


class PluginName(enum.Enum):
    EMPTY_DIR = "kubernetes.io/empty-dir"
    HOST_PATH = "kubernetes.io/host-path"
    CONFIGMAP = "kubernetes.io/configmap"
    SECRET = "kubernetes.io/secret"
    DOWNWARD_API = "kubernetes.io/downward-api"
    PROJECTED = "kubernetes.io/projected"
    LOCAL_VOLUME = "kubernetes.io/local-volume"

    @property
    def escaped(self) -> str:
        """The directory name under ``volumes/`` (upstream ``EscapeQualifiedName``)."""
        return self.value.replace("/", "~")

    @classmethod
    def from_escaped(cls, name: str) -> PluginName | None:
        for p in cls:
            if p.escaped == name:
                return p
        return None


class Medium(enum.Enum):
    """Where a materialized volume's bytes live (upstream ``v1.StorageMedium``)."""

    DISK = ""
    MEMORY = "Memory"


class VolumeState(enum.Enum):
    MOUNTED = "Mounted"  # set up by this agent from the pod's spec
    RECONSTRUCTED = "Reconstructed"  # found on disk after a restart; set up again on the pod's next sync


# Plugins whose content follows its source: set up again on every refresh (upstream RequiresRemount).
REMOUNTED_PLUGINS = frozenset({PluginName.CONFIGMAP, PluginName.SECRET, PluginName.DOWNWARD_API,
                               PluginName.PROJECTED})


class MountError(Exception):
    """A volume cannot be set up. ``message`` is what the user sees after the volume's name.

    ``phase`` tells which upstream message wraps it: ``SETUP`` errors read
    ``MountVolume.SetUp failed for volume "v" : <message>`` (the plugin's SetUp failed);
    ``PROCESSING`` errors happen before any plugin runs (an unsupported volume type, a claim that
    cannot be resolved) and read ``Unable to attach or mount volumes: ... : <message>``.
    """

    SETUP = "setup"
    PROCESSING = "processing"

    def __init__(self, message: str, *, phase: str = SETUP) -> None:
        super().__init__(message)
        self.message = message
        self.phase = phase


@dataclass
class MountedVolume:
    """One volume of one pod in the actual state."""

    name: str  # the pod's volume name (upstream's outer volume spec name)
    plugin: PluginName
    host_path: str  # what containers bind-mount
    dir: Path | None = None  # materialized under pods/<uid>/volumes, None for host paths
    read_only: bool = False  # the plugin forces read-only container mounts
    medium: Medium = Medium.DISK
    size_limit: int | None = None  # bytes: the emptyDir sizeLimit
    state: VolumeState = VolumeState.MOUNTED
    spec: JSONObj = field(default_factory=dict)  # the pod volume it was set up from
    pvc: tuple[str, str] | None = None  # (namespace, claim) of a persistentVolumeClaim volume
    metadata_seen: str = ""  # pod labels/annotations the downward API content was made from
    limit_reported: bool = False  # an over-sizeLimit warning was already recorded
    content: str = ""  # fingerprint of the projected files (plugins.base.project): unchanged → not rewritten
    # what its content was made from (set by the manager): the pod object and the reads of its sources
    pod_seen: JSONObj | None = field(default=None, repr=False, compare=False)
    reads: SourceReads | None = field(default=None, repr=False, compare=False)


def pod_dir(pods_dir: Path, uid: str) -> Path:
    return pods_dir / uid


def volume_dir(pods_dir: Path, uid: str, plugin: PluginName, name: str) -> Path:
    """``<root-dir>/pods/<uid>/volumes/<escaped plugin>/<name>`` (upstream ``GetPodVolumeDir``)."""
    return pods_dir / uid / "volumes" / plugin.escaped / name


def plugin_dir(pods_dir: Path, uid: str, plugin: PluginName, name: str) -> Path:
    """``<root-dir>/pods/<uid>/plugins/<escaped plugin>/<name>``: the emptyDir ``ready`` marker."""
    return pods_dir / uid / "plugins" / plugin.escaped / name
