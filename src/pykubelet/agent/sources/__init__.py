"""Pod sources: where the kubelet learns which pods should run (upstream ``pkg/kubelet/config``).

``apiserver.ApiServerSource`` (pods bound to this node) and ``file.FileSource`` (static pods) each
hand their full pod list to ``podconfig.PodConfig``, which diffs it into ``PodUpdate`` values on the
queue the engine's sync loop reads.  ``mirror.MirrorClient`` publishes static pods as mirror pods.
"""

from .apiserver import ApiServerSource
from .file import FileSource
from .mirror import MirrorClient
from .podconfig import PodConfig, diff_pods

__all__ = ["ApiServerSource", "FileSource", "MirrorClient", "PodConfig", "diff_pods"]
