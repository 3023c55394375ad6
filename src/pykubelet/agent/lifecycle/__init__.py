"""Container lifecycle hooks (postStart/preStop), like upstream pkg/kubelet/lifecycle."""

from pykubelet.agent.lifecycle.handlers import MIN_GRACE_SECONDS, HandlerRunner, format_pod

__all__ = ["MIN_GRACE_SECONDS", "HandlerRunner", "format_pod"]
