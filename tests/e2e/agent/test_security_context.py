"""Pod security on a real containerd: what a container can and cannot do is what its securityContext says.

Runs the agent's engine in-process (an in-memory API records the status), as test_pods_on_containerd
does. One multi-container pod carries most checks (one sandbox, a few seconds): privileged mount,
runAsUser, readOnlyRootFilesystem, dropped capabilities, seccomp RuntimeDefault, a safe sysctl and
hostAliases; beside it a runAsNonRoot pod on a root image, an unsafe-sysctl pod and a hostNetwork pod.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from pathlib import Path
from typing import Any

from pykubelet.agent.config import AgentOptions, KubeletConfiguration
from pykubelet.agent.kubelet import Kubelet
from pykubelet.agent.types import PodOp, PodUpdate
from pykubelet.cri import CRIClient
from tests.builders import container, fresh_uid, pod, pod_path
from tests.fakes import FakeApi, FakeEventRecorder, eventually

BUSYBOX = "docker.io/library/busybox:latest"
SLEEP = ["sleep", "3600"]


def busybox(name: str, command: list[str] = SLEEP, **sc: Any) -> dict[str, Any]:
    return container(name, BUSYBOX, imagePullPolicy="IfNotPresent", command=command, securityContext=sc)


def api_pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return pod(name, uid=fresh_uid(), containers=containers, annotations={"kubernetes.io/config.source": "api"},
               status={}, terminationGracePeriodSeconds=1, **spec)


def net_interfaces(proc_net_dev: str) -> set[str]:
    return {line.split(":", 1)[0].strip() for line in proc_net_dev.splitlines()[2:] if ":" in line}


def test_security_context_on_containerd(containerd: Any, tmp_path: Path) -> None:
    main = api_pod(
        "sec",
        busybox("priv", privileged=True),
        busybox("user", runAsUser=1000, seccompProfile={"type": "RuntimeDefault"}, allowPrivilegeEscalation=False),
        busybox("local", seccompProfile={"type": "Localhost", "localhostProfile": "deny-mkdir.json"}),
        busybox("ro", readOnlyRootFilesystem=True),
        busybox("nocaps", capabilities={"drop": ["ALL"]}),
        securityContext={"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}], "runAsGroup": 2000,
                         "supplementalGroups": [3000], "fsGroup": 4000},
        hostAliases=[{"ip": "198.18.0.77", "hostnames": ["alias.example", "other.example"]}],
    )
    nonroot = api_pod("nonroot", busybox("app", runAsNonRoot=True))
    unsafe = api_pod("unsafe", busybox("app"), securityContext={"sysctls": [{"name": "net.core.somaxconn",
                                                                               "value": "1024"}]})
    hostnet = api_pod("hostnet", busybox("app"), hostNetwork=True, hostPID=True, hostIPC=True)
    shared = api_pod("shared", busybox("a"), busybox("b", ["sh", "-c", "exec sleep 3601"]), shareProcessNamespace=True)
    no_userns = api_pod("userns", busybox("app"), hostUsers=False)
    no_class = api_pod("noclass", busybox("app"), runtimeClassName="missing")
    pods = [main, nonroot, unsafe, hostnet, shared, no_userns, no_class]
    seccomp_dir = tmp_path / "root" / "seccomp"
    seccomp_dir.mkdir(parents=True)
    (seccomp_dir / "deny-mkdir.json").write_text(json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}))
    host_ns = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "pid", "ipc")}

    async def run() -> None:
        cfg = KubeletConfiguration()
        cfg.cgroup_root = containerd.cgroup_parent
        cfg.pod_logs_dir = str(tmp_path / "logs")
        opts = AgentOptions(config=cfg, node_name="e2e-security", node_ip="127.0.0.1", root_dir=tmp_path / "root")
        api = FakeApi()
        runtime = CRIClient(containerd.endpoint, timeout=30)
        await runtime.connect(wait=10)
        k = Kubelet(options=opts, api=api, runtime=runtime, recorder=(recorder := FakeEventRecorder()),
                    updates=(updates := asyncio.Queue[PodUpdate]()), pleg_period=0.5)
        await k.start()

        def status(p: dict[str, Any]) -> dict[str, Any]:
            return (api.objects.get(pod_path(p)) or {}).get("status") or {}

        async def sh(st: dict[str, Any], name: str, script: str) -> tuple[int, str]:
            cid = next(c for c in st["containerStatuses"] if c["name"] == name)["containerID"].split("://", 1)[1]
            resp = await runtime.exec_sync(cid, ["sh", "-c", script], 10)
            return resp.exit_code, (resp.stdout + resp.stderr).decode()

        try:
            for p in pods:
                api.put(pod_path(p), p)
            await updates.put(PodUpdate(PodOp.ADD, "api", copy.deepcopy(pods)))
            k.mark_source_ready("api")

            st = await eventually(lambda: status(main).get("phase") == "Running" and status(main))
            assert await sh(st, "priv", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo mounted") == (0, "mounted\n")
            assert await sh(st, "user", "id -u; id -g") == (0, "1000\n2000\n")
            code, out = await sh(st, "user", "id -G")
            assert {"2000", "3000", "4000"} <= set(out.split())
            code, out = await sh(st, "user", "grep -E '^(Seccomp|NoNewPrivs):' /proc/1/status")
            assert out.split() == ["NoNewPrivs:", "1", "Seccomp:", "2"]
            code, out = await sh(st, "local", "mkdir /tmp/d")  # the Localhost profile under <root-dir>/seccomp
            assert code != 0 and "Operation not permitted" in out
            code, out = await sh(st, "ro", "touch /written")
            assert code != 0 and "Read-only file system" in out
            code, out = await sh(st, "nocaps", "chown 1 /tmp")
            assert code != 0 and "Operation not permitted" in out
            assert await sh(st, "ro", "cat /proc/sys/kernel/shm_rmid_forced") == (0, "1\n")
            code, hosts = await sh(st, "ro", "cat /etc/hosts")
            assert hosts.startswith("# Kubernetes-managed hosts file.")
            assert f"{st['podIP']}\tsec\n" in hosts
            assert "198.18.0.77\talias.example\tother.example\n" in hosts

            def waiting_config_error() -> dict[str, Any] | None:
                for c in status(nonroot).get("containerStatuses") or []:
                    w = c.get("state", {}).get("waiting") or {}
                    if w.get("reason") == "CreateContainerConfigError":
                        return dict(w)
                return None

            w = await eventually(waiting_config_error)
            fmt = f"nonroot_default({nonroot['metadata']['uid']})"
            assert w["message"] == f'container has runAsNonRoot and image will run as root (pod: "{fmt}", container: app)'

            st_unsafe = await eventually(lambda: status(unsafe).get("phase") == "Failed" and status(unsafe))
            assert st_unsafe["reason"] == "SysctlForbidden"
            assert st_unsafe["message"] == 'forbidden sysctl: "net.core.somaxconn" not allowlisted'

            def sandbox_errors() -> set[str]:
                return {m for _t, r, m in recorder.events if r == "FailedCreatePodSandBox"}

            await eventually(lambda: len(sandbox_errors()) >= 2)
            assert any("does not support user namespaces" in m for m in sandbox_errors())  # containerd 1.6
            assert any('runtimeclass.node.k8s.io "missing" not found' in m for m in sandbox_errors())

            st_host = await eventually(lambda: status(hostnet).get("phase") == "Running" and status(hostnet))
            assert st_host["podIP"] == "127.0.0.1"
            code, dev = await sh(st_host, "app", "cat /proc/net/dev")
            # the host's interfaces (veths of other pods come and go) and the pod bridge, not a pod's eth0 + lo
            host = await asyncio.to_thread(Path("/proc/net/dev").read_text)
            stable = {i for i in net_interfaces(host) if not i.startswith("veth")}
            assert containerd.bridge in stable and stable <= net_interfaces(dev)
            code, hosts = await sh(st_host, "app", "cat /etc/hosts")
            assert hosts.startswith("# Kubernetes-managed hosts file (host network).")
            for ns, link in host_ns.items():  # hostNetwork, hostPID, hostIPC: the node's namespaces
                assert await sh(st_host, "app", f"readlink /proc/self/ns/{ns}") == (0, f"{link}\n")
            assert (await sh(st, "ro", "readlink /proc/self/ns/net"))[1].strip() != host_ns["net"]

            # shareProcessNamespace: one PID namespace for the pod, the sandbox's pause process is PID 1
            st_shared = await eventually(lambda: status(shared).get("phase") == "Running" and status(shared))
            code, out = await sh(st_shared, "a", "cat /proc/1/cmdline; echo; ps -o args")
            assert out.startswith("/pause") and "sleep 3601" in out
        finally:
            await updates.put(PodUpdate(PodOp.REMOVE, "api", copy.deepcopy(pods)))
            uids = {p["metadata"]["uid"] for p in pods}
            async with asyncio.timeout(60):
                while {s.labels.get("io.kubernetes.pod.uid") for s in await runtime.list_pod_sandbox()} & uids:  # noqa: ASYNC110 - polling the runtime under test
                    await asyncio.sleep(0.2)
            await k.stop()
            await runtime.close()

    asyncio.run(run())
