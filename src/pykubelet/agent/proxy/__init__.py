"""The node's service proxy (kube-proxy's iptables mode inside the agent).

:mod:`.rules` turns Services + EndpointSlices into ``iptables-restore`` text (pure, unit-tested);
:mod:`.proxier` watches the API and applies it, and removes every rule of its own on stop.
"""
