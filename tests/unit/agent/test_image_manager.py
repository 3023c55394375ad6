"""Image pulls (upstream pkg/kubelet/images): pull policies, pull errors and back-off, registry
credentials from imagePullSecrets, and the events a user sees for each."""

from __future__ import annotations

import base64
import json

from pykubelet.agent.events import EventRecorder
from pykubelet.agent.images.manager import (
    ImageManager,
    auths_from_secrets,
    default_pull_policy,
    registry_host,
)
from tests.builders import container, pod
from tests.fakes import FakeImageService


def test_registry_and_pull_policy_helpers() -> None:
    assert registry_host("busybox") == "docker.io"
    assert registry_host("127.0.0.1:5000/x/y:1") == "127.0.0.1:5000"
    assert default_pull_policy("busybox") == "Always"
    assert default_pull_policy("busybox:latest") == "Always"
    assert default_pull_policy("busybox:1.36") == "IfNotPresent"
    cfgjson = {"auths": {"https://127.0.0.1:5000": {"auth": base64.b64encode(b"u:p").decode()},
                         "other.io": {"username": "x", "password": "y"}}}
    secret = {"type": "kubernetes.io/dockerconfigjson",
              "data": {".dockerconfigjson": base64.b64encode(json.dumps(cfgjson).encode()).decode()}}
    auths = auths_from_secrets([secret], "127.0.0.1:5000/app:1")
    assert [(a.username, a.password) for a in auths] == [("u", "p")]


async def test_image_manager_policies_and_backoff() -> None:
    rec = EventRecorder(None)
    p = pod("web", containers=[])
    rt = FakeImageService({"busybox:1.36"})
    im = ImageManager(rt, rec)
    r = await im.ensure_image_exists(p, container("a", "busybox:1.36"))
    assert r.ok and not rt.pulls
    r = await im.ensure_image_exists(p, container("a", "busybox:1.36", imagePullPolicy="Always"))
    assert r.ok and rt.pulls == [("busybox:1.36", None)]
    r = await im.ensure_image_exists(p, container("a", "nothere:1", imagePullPolicy="Never"))
    assert r.error == "ErrImageNeverPull"
    r = await im.ensure_image_exists(p, container("a", "busybox"))  # :latest → Always
    assert r.ok and rt.pulls[-1][0] == "busybox:latest"
    failing = ImageManager(FakeImageService(set(), fail=True), rec)
    r = await failing.ensure_image_exists(p, container("a", "x:1"))
    assert r.error == "ErrImagePull" and "unreachable registry" in r.message
    r = await failing.ensure_image_exists(p, container("a", "x:1"))
    assert r.error == "ImagePullBackOff"
    reasons = [reason for _ref, _t, reason, _m in rec.recorded]
    assert {"Pulled", "Pulling", "ErrImageNeverPull", "Failed", "BackOff"} <= set(reasons)
