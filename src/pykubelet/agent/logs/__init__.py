"""Container log lifecycle on the node (upstream pkg/kubelet/logs): rotation and legacy symlinks.

- ``manager.ContainerLogManager`` rotates the CRI log files of running containers by size;
- ``symlinks`` names, creates and cleans the ``/var/log/containers/*.log`` links that log shippers
  (fluentd, fluent-bit, promtail) expect.
"""

from pykubelet.agent.logs.manager import ContainerLogManager, RotationPlan, plan_rotation
from pykubelet.agent.logs.symlinks import (
    cleanup_symlinks,
    containers_log_dir,
    create_symlink,
    legacy_log_symlink,
    parse_symlink_container_id,
)

__all__ = [
    "ContainerLogManager",
    "RotationPlan",
    "cleanup_symlinks",
    "containers_log_dir",
    "create_symlink",
    "legacy_log_symlink",
    "parse_symlink_container_id",
    "plan_rotation",
]
