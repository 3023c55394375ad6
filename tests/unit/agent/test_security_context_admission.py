"""Node admission of a pod's sysctls and AppArmor profile, and the config check of allowedUnsafeSysctls."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.agent.admission_security import AppArmorAdmitHandler, SysctlAdmitHandler
from pykubelet.agent.config import ConfigError, load_options
from pykubelet.agent.interfaces import PodAdmitAttributes, PodAdmitResult
from tests.builders import container, pod


def sysctl_pod(*names: str, **spec: Any) -> dict[str, Any]:
    return pod("p", securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


def admit(handler: SysctlAdmitHandler | AppArmorAdmitHandler, p: dict[str, Any]) -> PodAdmitResult:
    return handler.admit(PodAdmitAttributes(p, []))


def test_safe_sysctls_are_admitted() -> None:
    h = SysctlAdmitHandler([])
    assert admit(h, sysctl_pod("net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced",
                               "net/ipv4/tcp_syncookies")).admit
    assert admit(h, pod("plain")).admit


def test_unsafe_sysctl_is_forbidden_with_upstream_reason() -> None:
    r = admit(SysctlAdmitHandler([]), sysctl_pod("net.core.somaxconn"))
    assert not r.admit
    assert r.reason == "SysctlForbidden"
    assert r.message == 'forbidden sysctl: "net.core.somaxconn" not allowlisted'


def test_allowed_unsafe_sysctls_and_patterns() -> None:
    h = SysctlAdmitHandler(["net.core.somaxconn", "kernel.msg*"])
    assert admit(h, sysctl_pod("net.core.somaxconn", "kernel.msgmax")).admit
    assert not admit(h, sysctl_pod("kernel.sem")).admit


def test_namespaced_sysctls_refused_for_host_namespaces() -> None:
    h = SysctlAdmitHandler(["kernel.msg*"])
    r = admit(h, sysctl_pod("net.ipv4.tcp_syncookies", hostNetwork=True))
    assert not r.admit and r.message == 'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled'
    r = admit(h, sysctl_pod("kernel.msgmax", hostIPC=True))
    assert not r.admit and "host ipc enabled" in r.message


def test_node_wide_sysctls_cannot_be_allowed_in_the_config(tmp_path: Any) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                   "allowedUnsafeSysctls: [vm.swappiness]\n")
    with pytest.raises(ConfigError, match=r"vm\.swappiness.*not known to be namespaced"):
        load_options(["--config", str(cfg)])
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                   "allowedUnsafeSysctls: ['net.core.*']\n")
    assert load_options(["--config", str(cfg)]).config.allowed_unsafe_sysctls == ["net.core.*"]


def test_apparmor_profile_refused_on_a_node_without_apparmor() -> None:
    p = pod("aa", containers=[container("c", securityContext={"appArmorProfile": {"type": "RuntimeDefault"}})])
    r = admit(AppArmorAdmitHandler(False), p)
    assert not r.admit and r.reason == "AppArmor"
    assert r.message == "Cannot enforce AppArmor: AppArmor is not enabled on the host"
    assert admit(AppArmorAdmitHandler(True), p).admit
    ann = pod("an", annotations={"container.apparmor.security.beta.kubernetes.io/c": "localhost/x"})
    assert not admit(AppArmorAdmitHandler(False), ann).admit
    unconfined = pod("u", annotations={"container.apparmor.security.beta.kubernetes.io/c": "unconfined"})
    assert admit(AppArmorAdmitHandler(False), unconfined).admit
