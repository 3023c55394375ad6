"""Mutating admission the dev API server runs on create: ServiceAccount and DefaultStorageClass.

Pure functions over v1 JSON dicts; the registry looks up the objects they need (the pod's
ServiceAccount, the StorageClasses) and turns :class:`AdmissionError` into a 403 Forbidden, as
upstream's admission chain reports a plugin's refusal.

ServiceAccount (``plugin/pkg/admission/serviceaccount``):
- mirror pods (annotation ``kubernetes.io/config.mirror``) are left alone: changing their spec
  would make the kubelet see a different pod than its static manifest;
- ``serviceAccountName`` defaults to ``default`` and the account must exist
  (``error looking up service account NS/NAME: serviceaccount "NAME" not found``);
- unless the pod's ``automountServiceAccountToken`` (first) or the account's says ``false``,
  the projected volume ``kube-api-access-<5 random chars>`` (a bound service-account token,
  ``token``, valid 3607 s; ``ca.crt`` from the ``kube-root-ca.crt`` ConfigMap; ``namespace`` from
  the downward API; ``defaultMode`` 420) is mounted read-only at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` in every init, app (and, should a create
  carry any, ephemeral) container that does not already mount something there; a pod that already
  has a ``kube-api-access-*`` volume keeps it.

Updates never run admission upstream, so ``kubectl replace`` with the original manifest would be
refused for dropping the injected volume; :func:`carry_over_token_volume` restores it on updates
that omit it (the same leniency ``podspec.default_pod(old=...)`` gives the admission-populated
spec fields).

DefaultStorageClass (``plugin/pkg/admission/storage/storageclass/setdefault``): a claim created
without ``storageClassName`` gets the default class, the one annotated
``storageclass.kubernetes.io/is-default-class: "true"`` (the newest one when several are, as
upstream since 1.26); an explicit ``""`` means "no class" and stays.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

Obj = dict[str, Any]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# serviceaccount.WarnOnlyBoundTokenExpirationSeconds: 1 h + 7 s, the marker of an injected token
TOKEN_EXPIRATION_SECONDS = 3607
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DEFAULT_SA = "default"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_CLASS_ANNOTATION = "storageclass.beta.kubernetes.io/is-default-class"
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
# utilrand.String's alphabet: no vowels (no words), no confusable characters
_RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_CONTAINER_KEYS = ("initContainers", "containers", "ephemeralContainers")


class AdmissionError(Exception):
    """A plugin refused the object; the message is upstream's (after ``<kind> "<name>" is forbidden: ``)."""


def random_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_RAND_ALPHABET) for _ in range(n))


def token_volume_source() -> Obj:
    """The projected volume source of ``kube-api-access-*`` (``TokenVolumeSource`` upstream)."""
    return {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_SECONDS}},
            {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    }


def _dicts(v: Any) -> list[Obj]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def is_mirror_pod(pod: Obj) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations")
    return isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations


def service_account_name(pod: Obj) -> str:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return DEFAULT_SA
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SA)


def should_automount(sa: Obj, pod: Obj) -> bool:
    """The pod's preference wins, then the account's; true by default."""
    spec = pod.get("spec") or {}
    if isinstance(spec, dict) and isinstance(spec.get("automountServiceAccountToken"), bool):
        return bool(spec["automountServiceAccountToken"])
    if isinstance(sa.get("automountServiceAccountToken"), bool):
        return bool(sa["automountServiceAccountToken"])
    return True


def admit_service_account(pod: Obj, sa: Obj | None, *, suffix: str | None = None) -> None:
    """ServiceAccount admission of a pod being created, in place.  ``sa`` is the pod's account as
    stored (None when it does not exist).  Raises :class:`AdmissionError`."""
    if is_mirror_pod(pod):
        return
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return  # validation reports the shape
    name = service_account_name(pod)
    spec["serviceAccountName"] = name
    spec["serviceAccount"] = name
    if sa is None:
        ns = (pod.get("metadata") or {}).get("namespace", "")
        raise AdmissionError(f'error looking up service account {ns}/{name}: serviceaccount "{name}" not found')
    if should_automount(sa, pod):
        mount_service_account_token(spec, suffix=suffix)


def mount_service_account_token(spec: Obj, *, suffix: str | None = None) -> None:
    volumes = spec.get("volumes")
    if volumes is None:
        volumes = []
    if not isinstance(volumes, list):
        return
    existing = next((v.get("name") for v in _dicts(volumes)
                     if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)), None)
    vol_name = str(existing) if existing else TOKEN_VOLUME_PREFIX + (suffix or random_suffix())
    needs_volume = False
    for key in _CONTAINER_KEYS:
        for c in _dicts(spec.get(key)):
            mounts = c.get("volumeMounts")
            if mounts is None:
                mounts = []
            if not isinstance(mounts, list):
                continue
            if any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in _dicts(mounts)):
                continue
            mounts.append({"name": vol_name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})
            c["volumeMounts"] = mounts
            needs_volume = True
    if needs_volume and not existing:
        volumes.append({"name": vol_name, "projected": token_volume_source()})
        spec["volumes"] = volumes


def carry_over_token_volume(new: Obj, old: Obj) -> None:
    """On a pod update that omits the injected token volume (a ``kubectl replace`` of the original
    manifest), put the volume and its mounts back as they were, so only what the manifest changed
    changes."""
    nspec, ospec = new.get("spec"), old.get("spec")
    if not isinstance(nspec, dict) or not isinstance(ospec, dict):
        return
    old_vol = next((v for v in _dicts(ospec.get("volumes")) if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)),
                   None)
    if old_vol is None:
        return
    vol_name = old_vol["name"]
    volumes = nspec.get("volumes")
    if volumes is None:
        volumes = []
    if not isinstance(volumes, list) or any(v.get("name") == vol_name for v in _dicts(volumes)):
        return
    for key in _CONTAINER_KEYS:
        old_by_name = {c.get("name"): c for c in _dicts(ospec.get(key))}
        for c in _dicts(nspec.get(key)):
            oc = old_by_name.get(c.get("name"))
            if oc is None:
                continue
            old_mount = next((m for m in _dicts(oc.get("volumeMounts")) if m.get("name") == vol_name), None)
            mounts = c.get("volumeMounts")
            if mounts is None:
                mounts = []
            if old_mount is None or not isinstance(mounts, list) or any(
                    m.get("mountPath") == old_mount.get("mountPath") for m in _dicts(mounts)):
                continue
            mounts.append(copy.deepcopy(old_mount))
            c["volumeMounts"] = mounts
    volumes.append(copy.deepcopy(old_vol))
    nspec["volumes"] = volumes


# ------------------------------------------------------------------ DefaultStorageClass
def is_default_class(sc: Obj) -> bool:
    ann = (sc.get("metadata") or {}).get("annotations") or {}
    return ann.get(DEFAULT_CLASS_ANNOTATION) == "true" or ann.get(BETA_DEFAULT_CLASS_ANNOTATION) == "true"


def default_class(classes: list[Obj]) -> Obj | None:
    """The default StorageClass: the newest of those annotated default (ties by name)."""
    defaults = [c for c in classes if is_default_class(c)]
    if not defaults:
        return None
    return max(defaults, key=lambda c: (str((c.get("metadata") or {}).get("creationTimestamp") or ""),
                                        str((c.get("metadata") or {}).get("name") or "")))


def admit_default_storage_class(pvc: Obj, classes: list[Obj]) -> None:
    """Give a claim without ``storageClassName`` the default class, in place."""
    spec = pvc.get("spec")
    if not isinstance(spec, dict) or spec.get("storageClassName") is not None:
        return
    if BETA_CLASS_ANNOTATION in ((pvc.get("metadata") or {}).get("annotations") or {}):
        return  # the class is named the pre-1.6 way
    dc = default_class(classes)
    if dc is not None:
        spec["storageClassName"] = (dc.get("metadata") or {}).get("name", "")
