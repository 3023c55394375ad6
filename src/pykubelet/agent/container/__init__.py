"""The runtime's view of pods, independent of any runtime (upstream ``pkg/kubelet/container``).

``runtime.py`` holds the plain dataclasses every agent subsystem reads (the PLEG, the status
generator, the decision logic in ``kuberuntime.actions``); only ``kuberuntime`` builds them from CRI.
"""
