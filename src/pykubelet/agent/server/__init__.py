"""The kubelet HTTP API (ports 10250/10248/10255); see app.py for the design."""

from pykubelet.agent.server.app import KubeletServer

__all__ = ["KubeletServer"]
