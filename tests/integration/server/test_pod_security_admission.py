"""Pod Security admission on the dev API server, driven with the real kubectl: namespace labels
decide, an enforced level refuses with upstream's message, a warned one admits with a warning."""

from __future__ import annotations

from .conftest import Kubectl

PRIVILEGED_POD = """apiVersion: v1
kind: Pod
metadata: {name: root-shell}
spec:
  containers:
  - name: sh
    image: busybox:1.36
    securityContext: {privileged: true}
"""


async def test_a_restricted_namespace_refuses_a_privileged_pod_and_a_warned_one_admits_it(kubectl: Kubectl) -> None:
    await kubectl.ok("create", "namespace", "locked")
    await kubectl.ok("label", "namespace", "locked", "pod-security.kubernetes.io/enforce=restricted")
    rc, _out, err = await kubectl.run("apply", "-n", "locked", "-f", "-", stdin=PRIVILEGED_POD)
    assert rc != 0
    assert 'pods "root-shell" is forbidden: violates PodSecurity "restricted:latest": ' in err
    assert 'privileged (container "sh" must not set securityContext.privileged=true)' in err
    assert 'runAsNonRoot != true (pod or container "sh" must set securityContext.runAsNonRoot=true)' in err
    rc, _out, _err = await kubectl.run("get", "pod", "root-shell", "-n", "locked")
    assert rc != 0  # nothing stored

    await kubectl.ok("create", "namespace", "watched")
    await kubectl.ok("label", "namespace", "watched", "pod-security.kubernetes.io/warn=baseline")
    rc, _out, err = await kubectl.run("apply", "-n", "watched", "-f", "-", stdin=PRIVILEGED_POD)
    assert rc == 0, err
    assert ('Warning: would violate PodSecurity "baseline:latest": privileged '
            '(container "sh" must not set securityContext.privileged=true)') in err
