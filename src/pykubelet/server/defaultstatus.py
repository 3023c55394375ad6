"""The ``status`` a created object carries, as upstream returns it.

Upstream's strategies reset ``status`` to the empty Go struct in ``PrepareForCreate`` (a client
cannot create an object with a status), and Go's JSON encoding then writes every status field
that has no ``omitempty`` as its zero value.  Clients written against a real API server read
those fields without checking for them (``status.replicas`` of a fresh ReplicaSet,
``numberReady`` of a DaemonSet), so the same zero fields are filled in here on
create, and kept present on later writes (as the Go encoder would print them).

The zero fields come from the v1 API types: ``ReplicaSetStatus.replicas``,
``DaemonSetStatus.{currentNumberScheduled,numberMisscheduled,desiredNumberScheduled,numberReady}``,
``StatefulSetStatus.{replicas,availableReplicas}``.  (PodDisruptionBudgetStatus's four counters are
left to the disruption controller's first sync, which tests wait for.)  Kinds whose status fields are all ``omitempty``
(Deployment, Job, CronJob, ...) get ``{}``; Namespace, Service, PV and PVC defaults live with their
strategies in the registry.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

ZERO_STATUS: dict[tuple[str, str], Obj] = {
    ("apps", "replicasets"): {"replicas": 0},
    ("apps", "daemonsets"): {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                             "numberReady": 0},
    ("apps", "statefulsets"): {"replicas": 0, "availableReplicas": 0},
}


def fill(group: str, resource: str, obj: Obj, *, creating: bool) -> None:
    zeros = ZERO_STATUS.get((group, resource))
    if zeros is None:
        return
    status = obj.get("status")
    if creating or not isinstance(status, dict):
        status = obj["status"] = {}
    for k, v in zeros.items():
        status.setdefault(k, v)
