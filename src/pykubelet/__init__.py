"""pykubelet: a Kubernetes node agent in Python, plus the small control plane it needs on one machine.

Packages:
- ``pykubelet.common``  what the agent and the control plane share (API client, quantities, pod helpers)
- ``pykubelet.cri``     the CRI v1 gRPC client (containerd, CRI-O, or the fake runtime)
- ``pykubelet.fakecri`` an in-memory CRI runtime served over gRPC, for tests and hollow nodes
- ``pykubelet.server``  the dev control plane: API server, scheduler, node-lifecycle controller
- ``pykubelet.agent``   the kubelet
- ``pykubelet.up``      the all-in-one supervisor: private containerd + server + agent, offline images

The agent never imports the server and the server never imports the agent: they only talk over the
Kubernetes API, exactly as a real kubelet and kube-apiserver do.
"""

__version__ = "0.1.0"
# The Kubernetes version we present (kubelet version in NodeInfo, /version of the dev API server).
KUBERNETES_VERSION = "v1.33.0"
