"""RuntimeClass admission on the dev API server: an unknown class refuses the pod, a known one gives
it the class's overhead."""

from __future__ import annotations

from .conftest import Http

PODS = "/api/v1/namespaces/default/pods"
RCS = "/apis/node.k8s.io/v1/runtimeclasses"


async def test_pods_with_runtime_classes(http33: Http) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sandboxed"},
           "spec": {"runtimeClassName": "gvisor", "containers": [{"name": "c", "image": "busybox:1.36"}]}}
    st, body = await http33.req("POST", PODS, pod)
    assert st == 403
    assert body["message"] == 'pods "sandboxed" is forbidden: pod rejected: RuntimeClass "gvisor" not found'
    st, _ = await http33.req("POST", RCS, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                           "metadata": {"name": "gvisor"}, "handler": "runsc",
                                           "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}}})
    assert st == 201
    st, body = await http33.req("POST", PODS, pod)
    assert st == 201 and body["spec"]["overhead"] == {"cpu": "250m", "memory": "64Mi"}
