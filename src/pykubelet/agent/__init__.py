"""The pykubelet node agent: a Kubernetes kubelet in Python, driving a CRI v1 runtime.

Architecture (mirrors upstream ``pkg/kubelet``; see docs/architecture.md "Agent internals"):

- ``config``     KubeletConfiguration (kubelet.config.k8s.io/v1beta1) + upstream flags → AgentOptions.
- ``main``       wiring and lifecycle of everything below; SIGTERM stops loops, never containers.
- ``sources``    where desired pods come from: the API server (list+watch of pods bound to this
                 node) and the static pod folder.  Each hands its full list to ``PodConfig``, which
                 diffs it into ``PodUpdate`` ops (ADD/UPDATE/DELETE/REMOVE/RECONCILE) on one queue;
                 ``mirror`` publishes static pods to the API as mirror pods.
- ``kubelet``    the engine: the sync loop consumes the queue, pod workers drive each pod to its
                 desired state through ``kuberuntime`` (CRI), ``pleg`` relists the runtime to notice
                 changes, ``status`` writes pod status back, ``images``/``cm`` handle images and
                 cgroups.
- ``nodestatus`` the Node: registration, capacity/allocatable/conditions/images every 10 s (patched
                 on change or every 5 min), and the heartbeat Lease renewed every 10 s.
- ``server``     the kubelet HTTP API (10250: logs, exec, stats, pods; 10248: healthz).
- ``events``/``metrics`` events to the API server and Prometheus metrics.

Data flow: API/file → sources → PodConfig → queue → sync loop → pod workers → CRI runtime;
runtime → PLEG → pod workers → status manager → API; machine + runtime → nodestatus → API.
The agent never imports ``pykubelet.server``: it talks to the control plane only over HTTP.
"""
