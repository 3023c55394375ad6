"""The dev control plane's controllers (kube-controller-manager's, one module each).

Each controller is an API client built on :mod:`pykubelet.server.controllers.kit` (informers +
rate-limited work queue, level-triggered reconcile); none touches the API server's storage or code,
so the API server stays free of controller logic, as upstream keeps kube-controller-manager apart
from kube-apiserver.

Adding a controller is one line in :data:`REGISTRY`: ``"name": "module:Class"``.  The class is a
:class:`~pykubelet.server.controllers.kit.Controller` (built with ``Class.from_options(api, kw)``
where ``kw`` is the server's ``controller_kwargs``) or any callable ``(api, kw)`` returning an object
with an ``async run()``.  Modules are imported lazily, when the server starts that controller, so a
broken controller module cannot stop the API server from importing.  ``server/main.py`` starts every
entry (in order) and restarts one that crashes.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from pykubelet.server.controllers.kit import Api, Controller


class Runnable(Protocol):
    async def run(self) -> None: ...


REGISTRY: dict[str, str] = {
    "garbagecollector": "pykubelet.server.controllers.garbagecollector:GarbageCollector",
    "job": "pykubelet.server.controllers.job:JobController",
    "cronjob": "pykubelet.server.controllers.cronjob:CronJobController",
    "disruption": "pykubelet.server.controllers.disruption:DisruptionController",
    "podgc": "pykubelet.server.controllers.podgc:PodGCController",
    "replicaset": "pykubelet.server.controllers.replicaset:ReplicaSetController",
    "deployment": "pykubelet.server.controllers.deployment:DeploymentController",
    "daemonset": "pykubelet.server.controllers.daemonset:DaemonSetController",
    "statefulset": "pykubelet.server.controllers.statefulset:StatefulSetController",
    "endpointslice": "pykubelet.server.controllers.endpointslice:EndpointSliceController",
    "endpoints": "pykubelet.server.controllers.endpoints:EndpointsController",
    "csrapproving": "pykubelet.server.controllers.csrapprover:CSRApprover",
}


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def make(name: str, api: Api, options: dict[str, Any]) -> Runnable:
    """Build the controller registered as ``name``."""
    module, _, attr = REGISTRY[name].partition(":")
    factory = getattr(importlib.import_module(module), attr)
    if isinstance(factory, type) and issubclass(factory, Controller):
        return factory.from_options(api, options)
    result: Runnable = factory(api, options)
    return result
