"""Image pulling policy and credentials (upstream pkg/kubelet/images)."""
