"""Volumes of pods: the volume manager and its plugins (upstream ``pkg/kubelet/volumemanager`` and
``pkg/volume``). See ``manager`` for the design, ``plugins`` for one module per volume type, and
docs/volumes.md for what is supported.

- ``manager.VolumeManager``: the ``PodLifecycleHook`` that sets up a pod's volumes before its
  containers start and removes them after; ``mounts_for`` gives the runtime manager each
  container's CRI mounts; ``cleanup`` is a housekeeping step.
- ``mounter``: tmpfs mounts and ``/proc/self/mountinfo``; ``atomic_writer``: upstream's ``..data``
  layout; ``ownership``: fsGroup; ``objects``: ConfigMaps, Secrets, claims and tokens from the API;
  ``mounts``: subPath and mount propagation; ``stats``: volume usage for ``/stats/summary``.
"""

from pykubelet.agent.volumemanager.manager import VolumeManager
from pykubelet.agent.volumemanager.mounter import Mounter, SystemMounter, TmpfsMode

__all__ = ["Mounter", "SystemMounter", "TmpfsMode", "VolumeManager"]
