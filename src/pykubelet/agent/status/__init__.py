"""Pod status: generation (pure) and the manager that writes it to the API (upstream pkg/kubelet/status)."""
