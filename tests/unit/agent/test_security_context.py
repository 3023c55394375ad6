"""Pod and container securityContext → the CRI security contexts the runtime receives."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.agent.kuberuntime import criconfig, security
from pykubelet.agent.kuberuntime.security import SecurityContextError, SecurityOptions
from pykubelet.cri import pb
from tests.builders import container, pod

OPTS = SecurityOptions(seccomp_root="/var/lib/pk/seccomp")


def sec_pod(*containers: dict[str, Any], pod_sc: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return pod("p", namespace="ns", uid="u1", containers=list(containers), securityContext=pod_sc or {}, **spec)


def sc_container(name: str = "c", **sc: Any) -> dict[str, Any]:
    return container(name, "busybox", securityContext=sc)


def test_container_fields_override_pod_fields() -> None:
    c = sc_container(runAsUser=1000)
    p = sec_pod(c, pod_sc={"runAsUser": 2000, "runAsGroup": 3000, "supplementalGroups": [5], "fsGroup": 7})
    sc = security.container_security(p, c, OPTS)
    assert sc.run_as_user.value == 1000
    assert sc.run_as_group.value == 3000
    assert list(sc.supplemental_groups) == [7, 5]


def test_image_user_applies_without_run_as_user() -> None:
    c = sc_container()
    p = sec_pod(c)
    assert security.container_security(p, c, OPTS, image_uid=1234).run_as_user.value == 1234
    named = security.container_security(p, c, OPTS, image_uid=None, image_username="nobody")
    assert named.run_as_username == "nobody" and not named.HasField("run_as_user")


def test_image_user_from_image_status() -> None:
    img = pb.Image(id="sha256:x")
    assert security.image_user(img) == (0, "")
    img.username = "app"
    assert security.image_user(img) == (None, "app")
    img.uid.value = 1001
    assert security.image_user(img) == (1001, "")


def test_run_as_non_root_refuses_root_image_with_upstream_message() -> None:
    c = sc_container(runAsNonRoot=True)
    p = sec_pod(c)
    with pytest.raises(SecurityContextError) as e:
        security.verify_run_as_non_root(p, c, 0, "", "p_ns(u1)")
    assert str(e.value) == 'container has runAsNonRoot and image will run as root (pod: "p_ns(u1)", container: c)'


def test_run_as_non_root_refuses_named_image_user() -> None:
    c = sc_container()
    p = sec_pod(c, pod_sc={"runAsNonRoot": True})
    with pytest.raises(SecurityContextError, match=r"image has non-numeric user \(app\), cannot verify user is non-root"):
        security.verify_run_as_non_root(p, c, None, "app", "p_ns(u1)")


def test_run_as_non_root_accepts_non_root_users() -> None:
    c = sc_container(runAsNonRoot=True)
    security.verify_run_as_non_root(sec_pod(c), c, 1000, "", "p")
    c2 = sc_container(runAsNonRoot=True, runAsUser=1000)
    security.verify_run_as_non_root(sec_pod(c2), c2, 0, "", "p")  # runAsUser wins over the image
    c3 = sc_container(runAsNonRoot=True, runAsUser=0)
    with pytest.raises(SecurityContextError, match="runAsUser breaks non-root policy"):
        security.verify_run_as_non_root(sec_pod(c3), c3, 1000, "", "p")


async def test_run_as_non_root_is_a_container_config_error() -> None:
    c = sc_container(runAsNonRoot=True)
    with pytest.raises(criconfig.ConfigError, match="image will run as root"):
        await criconfig.container_config(
            sec_pod(c), c, image_ref="sha256:x", restart_count=0, pod_ips=[], host_ips=[], node_name="n",
            memory_capacity=1 << 30, node_allocatable={}, image_user=(0, ""))


def test_privileged_capabilities_readonly_and_no_new_privs() -> None:
    c = sc_container(privileged=True, readOnlyRootFilesystem=True, allowPrivilegeEscalation=False,
                     capabilities={"add": ["NET_ADMIN"], "drop": ["ALL"]})
    sc = security.container_security(sec_pod(c), c, OPTS)
    assert sc.privileged and sc.readonly_rootfs and sc.no_new_privs
    assert list(sc.capabilities.add_capabilities) == ["NET_ADMIN"]
    assert list(sc.capabilities.drop_capabilities) == ["ALL"]
    plain = sc_container(allowPrivilegeEscalation=True)
    assert not security.container_security(sec_pod(plain), plain, OPTS).no_new_privs


def test_sandbox_is_privileged_when_any_container_is() -> None:
    init = sc_container("init", privileged=True)
    p = sec_pod(sc_container(), init_containers=[init])
    assert security.sandbox_security(p, OPTS).privileged
    assert not security.sandbox_security(sec_pod(sc_container()), OPTS).privileged


def test_proc_mount_default_masks_paths_unmasked_does_not() -> None:
    c = sc_container()
    sc = security.container_security(sec_pod(c), c, OPTS)
    assert "/proc/kcore" in sc.masked_paths and "/proc/sys" in sc.readonly_paths
    u = sc_container(procMount="Unmasked")
    sc = security.container_security(sec_pod(u), u, OPTS)
    assert not sc.masked_paths and not sc.readonly_paths


def test_seccomp_precedence_and_default() -> None:
    c = sc_container()
    p = sec_pod(c)
    assert security.container_security(p, c, OPTS).seccomp.profile_type == pb.SecurityProfile.Unconfined
    on = SecurityOptions(seccomp_default=True)
    assert security.container_security(p, c, on).seccomp.profile_type == pb.SecurityProfile.RuntimeDefault
    p = sec_pod(c, pod_sc={"seccompProfile": {"type": "RuntimeDefault"}})
    assert security.container_security(p, c, OPTS).seccomp.profile_type == pb.SecurityProfile.RuntimeDefault
    assert security.sandbox_security(p, OPTS).seccomp.profile_type == pb.SecurityProfile.RuntimeDefault
    local = sc_container(seccompProfile={"type": "Localhost", "localhostProfile": "profiles/audit.json"})
    sc = security.container_security(p, local, OPTS)
    assert sc.seccomp.profile_type == pb.SecurityProfile.Localhost
    assert sc.seccomp.localhost_ref == "/var/lib/pk/seccomp/profiles/audit.json"
    bad = sc_container(seccompProfile={"type": "Localhost"})
    with pytest.raises(SecurityContextError, match="localhostProfile must be set"):
        security.container_security(p, bad, OPTS)


def test_apparmor_from_field_or_annotation_when_enabled() -> None:
    on = SecurityOptions(apparmor_enabled=True)
    c = sc_container(appArmorProfile={"type": "Localhost", "localhostProfile": "k8s-deny"})
    sc = security.container_security(sec_pod(c), c, on)
    assert sc.apparmor.profile_type == pb.SecurityProfile.Localhost and sc.apparmor.localhost_ref == "k8s-deny"
    assert sc.apparmor_profile == "localhost/k8s-deny"
    a = sc_container("a")
    p = sec_pod(a, annotations={"container.apparmor.security.beta.kubernetes.io/a": "runtime/default"})
    assert security.container_security(p, a, on).apparmor.profile_type == pb.SecurityProfile.RuntimeDefault
    assert security.apparmor_required(p)
    assert not security.container_security(p, a, OPTS).HasField("apparmor")  # kernel without AppArmor
    assert not security.apparmor_required(sec_pod(sc_container(appArmorProfile={"type": "Unconfined"})))


def test_namespace_options_for_host_namespaces_and_shared_pid() -> None:
    ns = security.namespace_options(sec_pod(sc_container(), hostNetwork=True, hostPID=True, hostIPC=True))
    assert (ns.network, ns.pid, ns.ipc) == (pb.NODE, pb.NODE, pb.NODE)
    ns = security.namespace_options(sec_pod(sc_container(), shareProcessNamespace=True))
    assert (ns.network, ns.pid, ns.ipc) == (pb.POD, pb.POD, pb.POD)
    assert security.namespace_options(sec_pod(sc_container())).pid == pb.CONTAINER


def test_host_users_false_maps_the_pod_to_its_own_id_range() -> None:
    ns = security.namespace_options(sec_pod(sc_container(), hostUsers=False))
    assert ns.userns_options.mode == pb.POD
    (uid,) = ns.userns_options.uids
    assert uid.container_id == 0 and uid.length == 65536 and uid.host_id >= 65536
    assert uid.host_id % 65536 == 0
    assert not security.namespace_options(sec_pod(sc_container())).HasField("userns_options")


def test_supplemental_groups_policy_is_passed_on() -> None:
    c = sc_container()
    p = sec_pod(c, pod_sc={"supplementalGroupsPolicy": "Strict"})
    assert security.container_security(p, c, OPTS).supplemental_groups_policy == pb.Strict
    assert security.sandbox_security(p, OPTS).supplemental_groups_policy == pb.Strict


def test_sandbox_config_sysctls_overhead_and_fqdn_hostname() -> None:
    p = sec_pod(sc_container(), pod_sc={"sysctls": [{"name": "net/ipv4/tcp_syncookies", "value": "1"}]},
                hostname="web", subdomain="svc1", setHostnameAsFQDN=True, overhead={"cpu": "250m", "memory": "64Mi"})
    cfg = criconfig.sandbox_config(p, 0, pod_logs_dir="/l", cluster_domain="cluster.local")
    assert dict(cfg.linux.sysctls) == {"net.ipv4.tcp_syncookies": "1"}
    assert cfg.hostname == "web.svc1.ns.svc.cluster.local"
    assert cfg.linux.overhead.memory_limit_in_bytes == 64 * 1024 * 1024
    assert cfg.linux.overhead.cpu_quota == 25000
    long = sec_pod(sc_container(), hostname="h" * 40, subdomain="s" * 20, setHostnameAsFQDN=True)
    with pytest.raises(criconfig.ConfigError, match="is too long"):
        criconfig.sandbox_config(long, 0, pod_logs_dir="/l")


def test_sandbox_group_only_with_a_user() -> None:
    # containerd refuses a sandbox whose group is set without a user
    only_group = security.sandbox_security(sec_pod(sc_container(), pod_sc={"runAsGroup": 2000}), OPTS)
    assert not only_group.HasField("run_as_group") and not only_group.HasField("run_as_user")
    both = security.sandbox_security(sec_pod(sc_container(), pod_sc={"runAsUser": 1, "runAsGroup": 2}), OPTS)
    assert (both.run_as_user.value, both.run_as_group.value) == (1, 2)


def test_badly_typed_security_context_is_a_config_error() -> None:
    with pytest.raises(criconfig.ConfigError, match=r"capabilities.drop: Invalid value: 'ALL'"):
        criconfig.check_container_types(sc_container(capabilities={"drop": "ALL"}), "spec.containers[c]")
    with pytest.raises(criconfig.ConfigError, match="seccompProfile"):
        criconfig.check_container_types(sc_container(seccompProfile="RuntimeDefault"), "spec.containers[c]")
