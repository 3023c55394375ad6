"""Runtime manager: turns pod specs into CRI calls (upstream pkg/kubelet/kuberuntime)."""
