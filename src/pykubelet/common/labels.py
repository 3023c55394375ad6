"""Well-known label and annotation names the kubelet reads and writes, defined once.

Two families, both with upstream's exact spelling because other tools read them:

- CRI labels/annotations on sandboxes and containers (pkg/kubelet/types/labels.go and
  pkg/kubelet/kuberuntime/labels.go). The kubelet keeps no database: after a restart it rebuilds
  what it knows about a pod from these (which pod a container belongs to, its restart count, the
  spec hash it was created from, where its termination message is); crictl and containerd's CRI
  plugin show them as they are. Pod name/namespace/uid and container name are labels (filterable
  through ``LabelSelector``); the rest are annotations.
- ``kubernetes.io/config.*`` pod annotations (pkg/kubelet/types/pod_update.go): which source a pod
  came from (``api``, ``file``, ``http``), when the kubelet first saw it, the hash of a static
  pod's manifest, and, on the mirror pod posted to the API server, the hash of its static pod.

Only names live here; the code that interprets them stays with its subsystem.
"""

from __future__ import annotations

# CRI labels (pkg/kubelet/types/labels.go).
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

# CRI annotations (pkg/kubelet/kuberuntime/labels.go).
CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"
CONTAINER_RESTART_COUNT_ANNOTATION = "io.kubernetes.container.restartCount"
TERMINATION_MESSAGE_PATH_ANNOTATION = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY_ANNOTATION = "io.kubernetes.container.terminationMessagePolicy"
POD_TERMINATION_GRACE_ANNOTATION = "io.kubernetes.pod.terminationGracePeriod"

# Pod annotations set by the kubelet's pod config (pkg/kubelet/types/pod_update.go).
CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"
CONFIG_SEEN_ANNOTATION = "kubernetes.io/config.seen"
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# Values of kubernetes.io/config.source.
API_SOURCE = "api"
FILE_SOURCE = "file"
