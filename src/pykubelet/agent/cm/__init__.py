"""Container manager: pod cgroups (upstream pkg/kubelet/cm)."""
