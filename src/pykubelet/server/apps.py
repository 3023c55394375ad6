"""apps/v1 strategies: defaulting, validation and the ``scale`` subresource (no controller logic).

What the API server does for Deployments, ReplicaSets, DaemonSets, StatefulSets and
ControllerRevisions before storing them, following upstream ``pkg/apis/apps/v1/defaults.go``,
``pkg/apis/apps/validation`` and ``pkg/registry/apps/*/strategy.go``:

- defaults: ``replicas: 1``; Deployment ``strategy`` RollingUpdate 25%/25%,
  ``revisionHistoryLimit: 10``, ``progressDeadlineSeconds: 600``; DaemonSet ``updateStrategy``
  RollingUpdate maxUnavailable 1 / maxSurge 0; StatefulSet ``podManagementPolicy: OrderedReady``,
  RollingUpdate partition 0, ``persistentVolumeClaimRetentionPolicy`` Retain/Retain; the pod
  template gets the pod type defaults (never admission, which runs when the pods are created);
- validation: a selector is required, non-empty and must match the template's labels
  (``selector does not match template labels``), selectors are immutable, replicas >= 0, template
  ``restartPolicy`` must be ``Always``, rolling-update parameters (0/0, > 100%, Recreate with
  rollingUpdate), ``progressDeadlineSeconds`` > ``minReadySeconds``; StatefulSet spec fields other
  than replicas, ordinals, template, updateStrategy, persistentVolumeClaimRetentionPolicy and
  minReadySeconds are immutable (upstream's "updates to statefulset spec for fields other than …
  are forbidden");
- create resets ``status`` to ``{}`` and sets ``generation: 1``; spec writes bump generation;
- ``scale``: an ``autoscaling/v1`` Scale whose ``spec.replicas`` is the object's and whose
  ``status.selector`` is the selector in its string form (``LabelSelectorAsSelector().String()``),
  which is what ``kubectl scale`` and HPAs read and write.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from pykubelet.common import podspec

Obj = dict[str, Any]
FieldErrors = list[tuple[str, str]]

WORKLOADS = ("deployments", "replicasets", "daemonsets", "statefulsets")
SCALABLE = ("deployments", "replicasets", "statefulsets")
_KIND_NAME = {"deployments": "deployment", "replicasets": "replicaset", "daemonsets": "daemonset",
              "statefulsets": "statefulset"}


def _dict(parent: Obj, key: str) -> Obj:
    v = parent.get(key)
    if not isinstance(v, dict):
        v = parent[key] = {}
    return v


def default_template(spec: Obj) -> None:
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict) or not isinstance(tmpl.get("spec"), dict):
        return
    pod = {"metadata": copy.deepcopy(tmpl.get("metadata") or {}), "spec": tmpl["spec"]}
    podspec.default_pod(pod, admission=False)
    tmpl["spec"] = pod["spec"]


def default_workload(resource: str, obj: Obj) -> None:
    """SetDefaults_<Kind> for apps/v1, in place; malformed shapes are left for validation."""
    if resource not in WORKLOADS:
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if resource in SCALABLE and spec.get("replicas") is None:
        spec["replicas"] = 1
    if resource == "deployments":
        st = _dict(spec, "strategy")
        st.setdefault("type", "RollingUpdate")
        if st["type"] == "RollingUpdate":
            ru = _dict(st, "rollingUpdate")
            ru.setdefault("maxUnavailable", "25%")
            ru.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif resource == "daemonsets":
        st = _dict(spec, "updateStrategy")
        st.setdefault("type", "RollingUpdate")
        if st["type"] == "RollingUpdate":
            ru = _dict(st, "rollingUpdate")
            ru.setdefault("maxUnavailable", 1)
            ru.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)
    elif resource == "statefulsets":
        spec.setdefault("podManagementPolicy", "OrderedReady")
        st = _dict(spec, "updateStrategy")
        st.setdefault("type", "RollingUpdate")
        if st["type"] == "RollingUpdate":
            _dict(st, "rollingUpdate").setdefault("partition", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        pol = _dict(spec, "persistentVolumeClaimRetentionPolicy")
        pol.setdefault("whenDeleted", "Retain")
        pol.setdefault("whenScaled", "Retain")
        for claim in spec.get("volumeClaimTemplates") or []:
            if isinstance(claim, dict):
                cspec = _dict(claim, "spec")
                cspec.setdefault("volumeMode", "Filesystem")
                claim.setdefault("status", {"phase": "Pending"})
                claim.setdefault("apiVersion", "v1")
                claim.setdefault("kind", "PersistentVolumeClaim")
    default_template(spec)


def prepare_create(resource: str, obj: Obj) -> None:
    """PrepareForCreate: status starts empty, generation 1, then the defaults."""
    if resource in WORKLOADS:
        obj["status"] = {}
        obj.setdefault("metadata", {})["generation"] = 1
        default_workload(resource, obj)


# --- validation -----------------------------------------------------------------------------

_PERCENT = re.compile(r"^(\d+)%$")


def int_or_percent(value: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``; raises ValueError on a bad string."""
    if isinstance(value, bool):
        raise ValueError(f"invalid value {value!r}")
    if isinstance(value, int):
        return value
    m = _PERCENT.match(str(value))
    if not m:
        raise ValueError("invalid value for IntOrString: invalid type: string is not a percentage")
    pct = int(m.group(1))
    q, r = divmod(pct * total, 100)
    return q + (1 if round_up and r else 0)


def _int_or_percent_errors(value: Any, path: str) -> FieldErrors:
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [(path, podspec.invalid(value, "must be greater than or equal to 0"))] if value < 0 else []
    m = _PERCENT.match(str(value))
    if not m:
        return [(path, podspec.invalid(value, "a valid percent string must be a numeric string followed by an "
                                              "ending '%' (e.g. '1%',  or '93%', regex used for validation is "
                                              "'[0-9]+%')"))]
    if int(m.group(1)) > 100:
        return [(path, podspec.invalid(value, "must not be greater than 100%"))]
    return []


def _is_zero(value: Any) -> bool:
    return value in (0, "0%") or value is None


def _selector_errors(spec: Obj, kind: str) -> FieldErrors:
    sel = spec.get("selector")
    if sel is None:
        return [("spec.selector", podspec.required())]
    if not isinstance(sel, dict):
        return [("spec.selector", podspec.invalid(sel, "must be an object"))]
    errs: FieldErrors = []
    if not sel.get("matchLabels") and not sel.get("matchExpressions"):
        errs.append(("spec.selector", podspec.invalid(sel, f"empty selector is invalid for {kind}")))
    errs += podspec.validate_labels(sel.get("matchLabels") or {}, "spec.selector.matchLabels")
    for i, e in enumerate(sel.get("matchExpressions") or []):
        path = f"spec.selector.matchExpressions[{i}]"
        op = e.get("operator") if isinstance(e, dict) else None
        vals = (e.get("values") if isinstance(e, dict) else None) or []
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errs.append((path + ".operator", podspec.not_supported(op, ["In", "NotIn", "Exists", "DoesNotExist"])))
        elif op in ("In", "NotIn") and not vals:
            errs.append((path + ".values", podspec.required("must be specified when `operator` is 'In' or 'NotIn'")))
        elif op in ("Exists", "DoesNotExist") and vals:
            errs.append((path + ".values",
                         podspec.forbidden("may not be specified when `operator` is 'Exists' or 'DoesNotExist'")))
    if errs:
        return errs
    tmpl = spec.get("template")
    labels = ((tmpl or {}).get("metadata") or {}).get("labels") or {} if isinstance(tmpl, dict) else {}
    from pykubelet.server.selectors import label_selector_matches
    if not label_selector_matches(sel, labels):
        errs.append(("spec.template.metadata.labels",
                     podspec.invalid(labels, "`selector` does not match template `labels`")))
    return errs


def _template_errors(spec: Obj, *, allow_other_restart: bool = False) -> FieldErrors:
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        return [("spec.template", podspec.required())]
    errs = podspec.validate_labels((tmpl.get("metadata") or {}).get("labels") or {},
                                   "spec.template.metadata.labels")
    pod_spec = tmpl.get("spec")
    claims = [c for c in spec.get("volumeClaimTemplates") or [] if isinstance(c, dict)]
    if claims and isinstance(pod_spec, dict) and isinstance(pod_spec.get("volumes", []), list):
        # a StatefulSet's mounts may name its claim templates: the controller adds those volumes
        have = {v.get("name") for v in pod_spec.get("volumes") or [] if isinstance(v, dict)}
        extra = [{"name": n, "persistentVolumeClaim": {"claimName": n}}
                 for n in ((c.get("metadata") or {}).get("name") for c in claims) if n and n not in have]
        pod_spec = {**pod_spec, "volumes": [*(pod_spec.get("volumes") or []), *extra]}
    errs += podspec.validate_pod_spec(pod_spec, "spec.template.spec")
    rp = (tmpl.get("spec") or {}).get("restartPolicy") if isinstance(tmpl.get("spec"), dict) else None
    if not allow_other_restart and rp not in (None, "Always"):
        errs.append(("spec.template.spec.restartPolicy", podspec.not_supported(rp, ["Always"])))
    if isinstance(tmpl.get("spec"), dict) and tmpl["spec"].get("activeDeadlineSeconds") is not None:
        errs.append(("spec.template.spec.activeDeadlineSeconds",
                     podspec.forbidden("activeDeadlineSeconds in ReplicaSet is not Supported")))
    return errs


def _nonneg(spec: Obj, key: str, path: str | None = None) -> FieldErrors:
    v = spec.get(key)
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        return [(path or f"spec.{key}", podspec.invalid(v, "must be greater than or equal to 0"))]
    return []


def _rolling_errors(ru: Obj, path: str, *, surge_key: str = "maxSurge") -> FieldErrors:
    errs = _int_or_percent_errors(ru.get("maxUnavailable"), path + ".maxUnavailable")
    errs += _int_or_percent_errors(ru.get(surge_key), path + "." + surge_key)
    if not errs and _is_zero(ru.get("maxUnavailable")) and _is_zero(ru.get(surge_key)):
        errs.append((path + ".maxUnavailable",
                     podspec.invalid(ru.get("maxUnavailable", 0), "may not be 0 when `maxSurge` is 0")))
    return errs


_STS_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds")


def validate_workload(resource: str, obj: Obj, old: Obj | None) -> FieldErrors:
    """Field errors for an apps/v1 workload (empty = valid)."""
    if resource not in WORKLOADS:
        return []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("spec", podspec.required())]
    kind = _KIND_NAME[resource]
    errs = _nonneg(spec, "replicas") + _nonneg(spec, "minReadySeconds") + _nonneg(spec, "revisionHistoryLimit")
    errs += _selector_errors(spec, kind)
    errs += _template_errors(spec)
    if resource == "deployments":
        st = spec.get("strategy") or {}
        if st.get("type") not in ("RollingUpdate", "Recreate"):
            errs.append(("spec.strategy.type", podspec.not_supported(st.get("type"), ["Recreate", "RollingUpdate"])))
        elif st["type"] == "Recreate" and st.get("rollingUpdate") is not None:
            errs.append(("spec.strategy.rollingUpdate",
                         podspec.forbidden("may not be specified when strategy `type` is 'Recreate'")))
        elif st["type"] == "RollingUpdate":
            errs += _rolling_errors(st.get("rollingUpdate") or {}, "spec.strategy.rollingUpdate")
        pds = spec.get("progressDeadlineSeconds")
        if isinstance(pds, int) and pds <= int(spec.get("minReadySeconds") or 0):
            errs.append(("spec.progressDeadlineSeconds", podspec.invalid(pds, "must be greater than minReadySeconds")))
    elif resource == "daemonsets":
        st = spec.get("updateStrategy") or {}
        if st.get("type") not in ("RollingUpdate", "OnDelete"):
            errs.append(("spec.updateStrategy.type",
                         podspec.not_supported(st.get("type"), ["OnDelete", "RollingUpdate"])))
        elif st["type"] == "RollingUpdate":
            errs += _rolling_errors(st.get("rollingUpdate") or {}, "spec.updateStrategy.rollingUpdate")
    elif resource == "statefulsets":
        if spec.get("podManagementPolicy") not in ("OrderedReady", "Parallel"):
            errs.append(("spec.podManagementPolicy",
                         podspec.not_supported(spec.get("podManagementPolicy"), ["OrderedReady", "Parallel"])))
        st = spec.get("updateStrategy") or {}
        if st.get("type") not in ("RollingUpdate", "OnDelete"):
            errs.append(("spec.updateStrategy.type",
                         podspec.not_supported(st.get("type"), ["OnDelete", "RollingUpdate"])))
        ru = st.get("rollingUpdate") or {}
        errs += _nonneg(ru, "partition", "spec.updateStrategy.rollingUpdate.partition")
        for i, claim in enumerate(spec.get("volumeClaimTemplates") or []):
            name = ((claim or {}).get("metadata") or {}).get("name") if isinstance(claim, dict) else None
            if not name:
                errs.append((f"spec.volumeClaimTemplates[{i}].metadata.name", podspec.required()))
        if old is not None:
            ospec = old.get("spec") or {}
            if {k: v for k, v in spec.items() if k not in _STS_MUTABLE} != \
                    {k: v for k, v in ospec.items() if k not in _STS_MUTABLE}:
                errs.append(("spec", podspec.forbidden(
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
                    "'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")))
    if old is not None and isinstance(old.get("spec"), dict) and "selector" in old["spec"] \
            and spec.get("selector") != old["spec"]["selector"]:
        errs.append(("spec.selector", podspec.invalid(spec.get("selector"), "field is immutable")))
    return errs


def validate_controller_revision(obj: Obj) -> FieldErrors:
    rev = obj.get("revision")
    if not isinstance(rev, int) or rev < 0:
        return [("revision", podspec.invalid(rev, "must be greater than or equal to 0"))]
    return []


# --- scale ----------------------------------------------------------------------------------


def selector_string(selector: Any) -> str:
    """``metav1.LabelSelectorAsSelector(s).String()``: requirements sorted by key."""
    if not isinstance(selector, dict):
        return ""
    reqs: list[tuple[str, str]] = []
    for k, v in (selector.get("matchLabels") or {}).items():
        reqs.append((str(k), f"{k}={v}"))
    for e in selector.get("matchExpressions") or []:
        key, op = str(e.get("key", "")), e.get("operator")
        vals = ",".join(sorted(str(v) for v in e.get("values") or []))
        text = {"In": f"{key} in ({vals})", "NotIn": f"{key} notin ({vals})", "Exists": key,
                "DoesNotExist": f"!{key}"}.get(str(op), key)
        reqs.append((key, text))
    return ",".join(t for _, t in sorted(reqs, key=lambda r: r[0]))


def to_scale(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                     if k in meta},
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas") or 0)},
        "status": {"replicas": int((obj.get("status") or {}).get("replicas") or 0),
                   "selector": selector_string((obj.get("spec") or {}).get("selector"))},
    }


def scale_errors(scale: Obj) -> FieldErrors:
    replicas = (scale.get("spec") or {}).get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        return [("spec.replicas", podspec.invalid(replicas, "must be greater than or equal to 0"))]
    return []
