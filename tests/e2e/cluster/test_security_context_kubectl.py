"""End to end with kubectl on `pykubelet up`: a privileged pod runs and mounts, its user is the one
asked for, and a pod with an unsafe sysctl is refused by the node (SysctlForbidden)."""

from __future__ import annotations

import json
import textwrap


def test_privileged_pod_and_forbidden_sysctl(cluster) -> None:  # type: ignore[no-untyped-def]
    manifest = textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata: {name: sec-priv}
        spec:
          terminationGracePeriodSeconds: 1
          securityContext:
            sysctls: [{name: net.ipv4.tcp_syncookies, value: "0"}]
          containers:
          - name: c
            image: docker.io/library/busybox:latest
            imagePullPolicy: IfNotPresent
            command: [sleep, "3600"]
            securityContext: {privileged: true, runAsUser: 0}
          - name: u
            image: docker.io/library/busybox:latest
            imagePullPolicy: IfNotPresent
            command: [sleep, "3600"]
            securityContext: {runAsUser: 1000, allowPrivilegeEscalation: false}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: sec-unsafe}
        spec:
          terminationGracePeriodSeconds: 1
          securityContext:
            sysctls: [{name: kernel.msgmax, value: "65536"}]
          containers:
          - name: c
            image: docker.io/library/busybox:latest
            imagePullPolicy: IfNotPresent
            command: [sleep, "3600"]
        """)
    cluster.kubectl("apply", "-f", "-", input=manifest)
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "pod/sec-priv", "--timeout=60s", timeout=90)
        out = cluster.kubectl("exec", "sec-priv", "-c", "c", "--", "sh", "-c",
                              "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && cat /proc/sys/net/ipv4/tcp_syncookies")
        assert out.stdout.strip() == "0"
        assert cluster.kubectl("exec", "sec-priv", "-c", "u", "--", "id", "-u").stdout.strip() == "1000"

        def refused() -> bool:
            res = cluster.kubectl("get", "pod", "sec-unsafe", "-o", "json", check=False)
            st = json.loads(res.stdout).get("status", {}) if res.returncode == 0 else {}
            return st.get("phase") == "Failed" and st.get("reason") == "SysctlForbidden"

        cluster.wait_for("sec-unsafe refused", refused, timeout=60)
        st = json.loads(cluster.kubectl("get", "pod", "sec-unsafe", "-o", "json").stdout)["status"]
        assert st["message"] == 'forbidden sysctl: "kernel.msgmax" not allowlisted'
    finally:
        cluster.kubectl("delete", "pod", "sec-priv", "sec-unsafe", "--ignore-not-found", "--wait=true", timeout=90)
