"""Ephemeral containers: started once after the app containers, in the target's PID namespace, reported
in ephemeralContainerStatuses."""

from __future__ import annotations

from pykubelet.agent.kuberuntime.actions import compute_pod_actions
from pykubelet.agent.kuberuntime.ephemeral import share_target_pid
from pykubelet.agent.status.generate import generate_api_status
from pykubelet.common.backoff import Backoff
from pykubelet.cri import pb
from tests.builders import NOW, container, exited, pod, running, runtime_status

DBG = {"name": "dbg", "image": "busybox", "targetContainerName": "main", "stdin": True}


def test_a_new_ephemeral_container_is_started_and_never_restarted() -> None:
    p = pod(containers=[container("main")], ephemeralContainers=[DBG])
    a = compute_pod_actions(p, runtime_status(running("main")), now=NOW, backoff=Backoff())
    assert a.ephemeral_containers_to_start == ["dbg"] and a.containers_to_start == []
    done = runtime_status(running("main"), exited(container("dbg"), 0))
    assert compute_pod_actions(p, done, now=NOW, backoff=Backoff()).ephemeral_containers_to_start == []


def test_target_container_pid_namespace_is_shared() -> None:
    cfg = pb.ContainerConfig()
    share_target_pid(cfg, "main", runtime_status(running("main")))
    ns = cfg.linux.security_context.namespace_options
    assert ns.pid == pb.TARGET and ns.target_id == "id-main"


def test_ephemeral_container_statuses_are_reported_never_ready() -> None:
    p = pod(containers=[container("main")], ephemeralContainers=[DBG])
    st = generate_api_status(p, runtime_status(running("main"), running(container("dbg"))), now=NOW)
    [ec] = st["ephemeralContainerStatuses"]
    assert ec["name"] == "dbg" and "running" in ec["state"] and ec["ready"] is False
    assert [c["name"] for c in st["containerStatuses"]] == ["main"]
