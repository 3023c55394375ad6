"""ServiceAccount and DefaultStorageClass admission, as pure functions over pods and claims."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.server import admission
from tests.builders import container, pod

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SA: dict[str, Any] = {"metadata": {"name": "default", "namespace": "default"}}


def test_the_token_volume_goes_into_init_app_and_ephemeral_containers() -> None:
    p = pod(containers=["a", "b"], init_containers=["i"])
    p["spec"]["ephemeralContainers"] = [container("dbg")]
    admission.admit_service_account(p, SA, suffix="xyz12")
    spec = p["spec"]
    assert spec["volumes"] == [{"name": "kube-api-access-xyz12", "projected": admission.token_volume_source()}]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec[key]:
            assert c["volumeMounts"] == [{"name": "kube-api-access-xyz12", "readOnly": True, "mountPath": SA_MOUNT}]


def test_the_random_suffix_uses_upstreams_alphabet() -> None:
    for _ in range(50):
        s = admission.random_suffix()
        assert len(s) == 5 and set(s) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_the_account_name_defaults_to_default() -> None:
    p = pod()
    admission.admit_service_account(p, SA)
    assert p["spec"]["serviceAccountName"] == "default" and p["spec"]["serviceAccount"] == "default"


@pytest.mark.parametrize(("pod_says", "sa_says", "mounted"), [
    (None, None, True), (False, None, False), (None, False, False), (True, False, True), (False, True, False)])
def test_the_pods_automount_preference_wins_over_the_accounts(pod_says: bool | None, sa_says: bool | None,
                                                               mounted: bool) -> None:
    p = pod() if pod_says is None else pod(automountServiceAccountToken=pod_says)
    sa = dict(SA) if sa_says is None else {**SA, "automountServiceAccountToken": sa_says}
    admission.admit_service_account(p, sa)
    assert ("volumes" in p["spec"]) is mounted


def test_a_missing_account_is_refused_with_upstreams_message() -> None:
    with pytest.raises(admission.AdmissionError, match='error looking up service account default/builder: '
                                                       'serviceaccount "builder" not found'):
        admission.admit_service_account(pod(serviceAccountName="builder"), None)


def test_an_existing_mount_at_the_token_path_is_left_alone() -> None:
    own = container("own", volumeMounts=[{"name": "mine", "mountPath": SA_MOUNT}])
    p = pod(containers=[own], volumes=[{"name": "mine", "emptyDir": {}}])
    admission.admit_service_account(p, SA)
    assert p["spec"]["volumes"] == [{"name": "mine", "emptyDir": {}}]
    assert p["spec"]["containers"][0]["volumeMounts"] == [{"name": "mine", "mountPath": SA_MOUNT}]


def test_a_pod_that_already_has_an_api_access_volume_reuses_it() -> None:
    vol = {"name": "kube-api-access-abcde", "projected": admission.token_volume_source()}
    p = pod(volumes=[vol])
    admission.admit_service_account(p, SA)
    assert p["spec"]["volumes"] == [vol]
    assert p["spec"]["containers"][0]["volumeMounts"][0]["name"] == "kube-api-access-abcde"


def test_mirror_pods_are_not_changed() -> None:
    p = pod(annotations={"kubernetes.io/config.mirror": "h"})
    admission.admit_service_account(p, None)
    assert "volumes" not in p["spec"] and "serviceAccountName" not in p["spec"]


def test_an_update_that_omits_the_token_volume_gets_it_back() -> None:
    old = pod()
    admission.admit_service_account(old, SA, suffix="abcde")
    new = pod()
    admission.carry_over_token_volume(new, old)
    assert new["spec"]["volumes"] == old["spec"]["volumes"]
    assert new["spec"]["containers"] == old["spec"]["containers"]


def _sc(name: str, default: bool, created: str = "2024-01-01T00:00:00Z") -> dict[str, Any]:
    ann = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": ann, "creationTimestamp": created}}


def _pvc(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], **spec}}


def test_a_claim_without_a_class_gets_the_newest_default_class() -> None:
    claim = _pvc()
    admission.admit_default_storage_class(claim, [_sc("fast", False), _sc("old", True),
                                                  _sc("new", True, "2025-01-01T00:00:00Z")])
    assert claim["spec"]["storageClassName"] == "new"


def test_an_explicit_class_or_empty_class_is_kept() -> None:
    classes = [_sc("standard", True)]
    named, empty = _pvc(storageClassName="fast"), _pvc(storageClassName="")
    admission.admit_default_storage_class(named, classes)
    admission.admit_default_storage_class(empty, classes)
    assert named["spec"]["storageClassName"] == "fast" and empty["spec"]["storageClassName"] == ""


def test_no_default_class_leaves_the_claim_classless() -> None:
    claim = _pvc()
    admission.admit_default_storage_class(claim, [_sc("fast", False)])
    assert "storageClassName" not in claim["spec"]
