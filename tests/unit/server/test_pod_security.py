"""Pod Security Standards as upstream's pod-security-admission words them (pure evaluation)."""

from __future__ import annotations

import pytest

from pykubelet.server import podsecurity
from tests.builders import container, pod

RESTRICTED_OK = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_OK = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def ns(**labels: str) -> dict[str, object]:
    return {"metadata": {"name": "team", "labels": {podsecurity.LABEL + k.replace("_", "-"): v
                                                     for k, v in labels.items()}}}


def test_a_plain_pod_violates_restricted_with_upstreams_four_reasons() -> None:
    assert podsecurity.violations(pod("web", containers=["app"]), "restricted") == [
        'allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false)',
        'unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"])',
        'runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true)',
        'seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")',
    ]
    assert podsecurity.violations(pod("web", containers=["app"]), "baseline") == []


def test_a_pod_written_for_restricted_passes_it() -> None:
    p = pod("web", containers=[container("app", securityContext=CONTAINER_OK)], securityContext=RESTRICTED_OK)
    assert podsecurity.violations(p, "restricted") == []


def test_baseline_refuses_host_access_and_privilege() -> None:
    p = pod("x", containers=[container("a", securityContext={"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
                                       ports=[{"containerPort": 80, "hostPort": 8080}])],
            hostNetwork=True, volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    assert podsecurity.violations(p, "baseline") == [
        'non-default capabilities (container "a" must not include "NET_ADMIN" in securityContext.capabilities.add)',
        "host namespaces (hostNetwork=true)",
        'hostPath volumes (volume "root")',
        'hostPort (container "a" uses hostPort 8080)',
        'privileged (container "a" must not set securityContext.privileged=true)',
    ]


def test_an_enforcing_namespace_refuses_and_a_warning_one_warns() -> None:
    privileged = pod("p", containers=[container("c", securityContext={"privileged": True})])
    with pytest.raises(podsecurity.PodSecurityViolation, match=r'^violates PodSecurity "baseline:latest": privileged '
                       r'\(container "c" must not set securityContext.privileged=true\)$'):
        podsecurity.admit(privileged, ns(enforce="baseline"))
    warnings = podsecurity.admit(privileged, ns(warn="baseline", warn_version="v1.33"))
    assert warnings == ['would violate PodSecurity "baseline:v1.33": privileged '
                        '(container "c" must not set securityContext.privileged=true)']
    assert podsecurity.admit(privileged, ns()) == []  # no labels: privileged
    with pytest.raises(podsecurity.PodSecurityViolation, match='"restricted:latest"'):
        podsecurity.admit(privileged, ns(enforce="bogus"))  # an unknown level fails closed
