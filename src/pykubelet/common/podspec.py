"""Pod defaulting and validation (plus object-name validation), shared by both sides of the API.

Upstream keeps ``pkg/apis/core/v1/defaults.go`` and ``pkg/apis/core/validation`` apart from the
API server so the kubelet can apply the very same rules to static pods, which never pass through
an API server; this module plays that part here: the dev control plane calls it on every write, and
the agent's file source calls ``default_pod(pod, admission=False)`` and ``validate_pod`` on
manifests.

Design: pure functions over v1 JSON dicts.  ``default_pod`` mutates in place (like upstream's
generated ``SetObjectDefaults_Pod`` followed by the admission plugins the API server runs on
create); the validators return ``[(field_path, message)]`` where ``message`` is the text upstream's
``field.Error`` prints after the path, so the server core can render
``Pod "x" is invalid: [spec.containers[0].image: Required value, ...]`` verbatim.

Entry points for the server core:
- ``default_pod(pod)`` before validation on create (and on update, after merging patches);
- ``validate(resource, obj, old)``: one call per write; for pods it is ``validate_pod`` (metadata
  checks included), for any other resource ``validate_metadata``.  Do not call both for pods.

Upstream behaviour followed:
- pkg/apis/core/v1/defaults.go: restartPolicy Always, dnsPolicy ClusterFirst,
  terminationGracePeriodSeconds 30, schedulerName default-scheduler, securityContext {},
  enableServiceLinks true, container terminationMessagePath/-Policy, imagePullPolicy Always for
  ``:latest`` or untagged images else IfNotPresent, port protocol TCP, hostNetwork copies
  containerPort to hostPort, probe defaults (1s/10s/1/3, httpGet path "/" scheme HTTP), volume
  defaultMode 0644 (420), missing volume source -> emptyDir, fieldRef apiVersion v1, requests
  defaulted from limits;
- admission: ServiceAccount (serviceAccountName "default"), Priority (priority 0),
  DefaultTolerationSeconds (not-ready/unreachable NoExecute for 300 s unless already tolerated);
- registry strategy: status {phase: Pending, qosClass} on create;
- pkg/apis/core/validation: message wording of Required/Invalid/Duplicate/NotSupported/Forbidden,
  RFC 1123 names, pod update immutability (only images, activeDeadlineSeconds, tolerations
  additions, schedulingGates removal may change).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from typing import Any

from pykubelet.common.podutil import qos_class
from pykubelet.common.quantity import QuantityError, parse_quantity

FieldErrors = list[tuple[str, str]]

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
ENV_VAR_FMT = "[-._a-zA-Z][-._a-zA-Z0-9]*"

DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    f"validation is '{DNS1123_LABEL_FMT}')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    f"validation is '{DNS1123_SUBDOMAIN_FMT}')"
)
DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    f"regex used for validation is '{DNS1035_LABEL_FMT}')"
)
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{QUALIFIED_NAME_FMT}')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    f"'12345', regex used for validation is '{LABEL_VALUE_FMT}')"
)
ENV_VAR_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or "
    "'.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', "
    f"regex used for validation is '{ENV_VAR_FMT}')"
)
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)

_LABEL_RE = re.compile(f"^{DNS1123_LABEL_FMT}$")
_SUBDOMAIN_RE = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}$")
_DNS1035_RE = re.compile(f"^{DNS1035_LABEL_FMT}$")
_QUALIFIED_RE = re.compile(f"^{QUALIFIED_NAME_FMT}$")
_LABEL_VALUE_RE = re.compile(f"^{LABEL_VALUE_FMT}$")
_ENV_RE = re.compile(f"^{ENV_VAR_FMT}$")
_IANA_SVC_RE = re.compile("^[-a-z0-9]+$")

DEFAULT_TOLERATION_SECONDS = 300
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


# --- message helpers (upstream field.Error.ErrorBody wording) ----------------------------------


def _fmt_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(v, sort_keys=True)


def required(detail: str = "") -> str:
    return "Required value" + (f": {detail}" if detail else "")


def invalid(value: Any, detail: str) -> str:
    return f"Invalid value: {_fmt_value(value)}" + (f": {detail}" if detail else "")


def duplicate(value: Any) -> str:
    return f"Duplicate value: {_fmt_value(value)}"


def not_supported(value: Any, supported: list[str]) -> str:
    return f"Unsupported value: {_fmt_value(value)}: supported values: " + ", ".join(
        json.dumps(s) for s in supported
    )


def forbidden(detail: str) -> str:
    return f"Forbidden: {detail}"


def not_found(value: Any) -> str:
    return f"Not found: {_fmt_value(value)}"


# --- name validation ------------------------------------------------------------------------


def dns1123_label_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_RE.match(value):
        errs.append(DNS1123_LABEL_MSG)
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _SUBDOMAIN_RE.match(value):
        errs.append(DNS1123_SUBDOMAIN_MSG)
    return errs


def dns1035_label_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1035_RE.match(value):
        errs.append(DNS1035_LABEL_MSG)
    return errs


def path_segment_errors(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    for bad in ("/", "%"):
        if bad in value:
            return [f"may not contain '{bad}'"]
    return []


# Which name rule upstream applies per resource (most use DNS subdomain).
_NAME_RULES = {
    "namespaces": dns1123_label_errors,
    "services": dns1035_label_errors,
    "clusterroles": path_segment_errors,
    "clusterrolebindings": path_segment_errors,
    "roles": path_segment_errors,
    "rolebindings": path_segment_errors,
    "certificatesigningrequests": path_segment_errors,
}


def validate_object_name(resource: str, name: str) -> list[str]:
    """Messages (without the Invalid prefix) for ``name`` under ``resource``'s naming rule."""
    rule = _NAME_RULES.get(resource, dns1123_subdomain_errors)
    return rule(name)


def qualified_name_errors(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name " + QUALIFIED_NAME_MSG.removeprefix("name part ")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_RE.match(name):
        errs.append(QUALIFIED_NAME_MSG)
    return errs


def label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(value):
        errs.append(LABEL_VALUE_MSG)
    return errs


def validate_labels(labels: Any, path: str) -> FieldErrors:
    errs: FieldErrors = []
    if not labels:
        return errs
    if not isinstance(labels, dict):
        return [(path, invalid(labels, "must be a map of string to string"))]
    for k, v in labels.items():
        for m in qualified_name_errors(str(k)):
            errs.append((path, invalid(k, m)))
        v = "" if v is None else str(v)
        if len(v) > 63:
            errs.append((path, invalid(v, "must be no more than 63 characters")))
        if not _LABEL_VALUE_RE.match(v):
            errs.append((path, invalid(v, LABEL_VALUE_MSG)))
    return errs


def validate_annotations(annotations: Any, path: str) -> FieldErrors:
    errs: FieldErrors = []
    if not annotations:
        return errs
    if not isinstance(annotations, dict):
        return [(path, invalid(annotations, "must be a map of string to string"))]
    total = 0
    for k, v in annotations.items():
        for m in qualified_name_errors(str(k).lower()):
            errs.append((path, invalid(k, m)))
        total += len(str(k)) + len(str(v))
    if total > 256 * 1024:
        errs.append((path, f"Too long: may not be more than {256 * 1024} bytes"))
    return errs


def validate_metadata(resource: str, obj: dict[str, Any]) -> FieldErrors:
    """ObjectMeta checks: name (per-resource rule), namespace, labels, annotations."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        return [("metadata", invalid(meta, "must be an object"))]
    errs: FieldErrors = []
    name = meta.get("name") or ""
    if not isinstance(name, str):
        return [("metadata.name", invalid(name, "must be a string"))]
    if not name:
        if not meta.get("generateName"):
            errs.append(("metadata.name", required("name or generateName is required")))
    else:
        for m in validate_object_name(resource, name):
            errs.append(("metadata.name", invalid(name, m)))
    ns = meta.get("namespace")
    if ns:
        for m in dns1123_label_errors(ns):
            errs.append(("metadata.namespace", invalid(ns, m)))
    errs.extend(validate_labels(meta.get("labels"), "metadata.labels"))
    errs.extend(validate_annotations(meta.get("annotations"), "metadata.annotations"))
    return errs


def validate(resource: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> FieldErrors:
    """Single entry point for the server core: pods get full validation, others metadata only."""
    if resource == "pods":
        return validate_pod(obj, old)
    return validate_metadata(resource, obj)


# --- defaulting -----------------------------------------------------------------------------


def default_image_pull_policy(image: str) -> str:
    """Always for ``:latest`` or untagged (and undigested) images, else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _default_probe(probe: dict[str, Any] | None) -> None:
    if not isinstance(probe, dict):
        return
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")
    grpc = probe.get("grpc")
    if isinstance(grpc, dict):
        grpc.setdefault("service", "")


def _default_container(c: dict[str, Any], host_network: bool) -> None:
    if c.get("image") and not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = default_image_pull_policy(str(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for p in _dicts(c.get("ports")):
        p.setdefault("protocol", "TCP")
        if host_network and not p.get("hostPort") and p.get("containerPort"):
            p["hostPort"] = p["containerPort"]
    for e in _dicts(c.get("env")):
        vf = e.get("valueFrom")
        if isinstance(vf, dict):
            fr = vf.get("fieldRef")
            if isinstance(fr, dict):
                fr.setdefault("apiVersion", "v1")
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(key))
    res = c.get("resources")
    if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
        reqs = res.setdefault("requests", {})
        if isinstance(reqs, dict):
            for k, v in res["limits"].items():
                reqs.setdefault(k, v)
    elif "resources" not in c:
        c["resources"] = {}


def _default_volume(v: dict[str, Any]) -> None:
    sources = [k for k in v if k != "name"]
    if not sources:
        v["emptyDir"] = {}
    for key in ("secret", "configMap", "projected", "downwardAPI"):
        src = v.get(key)
        if isinstance(src, dict):
            src.setdefault("defaultMode", 420)
    hp = v.get("hostPath")
    if isinstance(hp, dict):
        hp.setdefault("type", "")
    # downwardAPI items (also inside a projected volume) default fieldRef.apiVersion to v1, as env does
    dapis = [v.get("downwardAPI")] + [s.get("downwardAPI") for s in (v.get("projected") or {}).get("sources") or []
                                      if isinstance(s, dict)]
    for dapi in dapis:
        for item in (dapi or {}).get("items") or [] if isinstance(dapi, dict) else []:
            fr = item.get("fieldRef") if isinstance(item, dict) else None
            if isinstance(fr, dict):
                fr.setdefault("apiVersion", "v1")


def _tolerates(tolerations: list[dict[str, Any]], key: str, effect: str) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("effect") and t.get("effect") != effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key") and op == "Exists":
            return True
        if t.get("key") == key:
            return True
    return False


# Spec fields set by admission or the scheduler rather than by the user's manifest.
_SERVER_POPULATED = ("serviceAccountName", "serviceAccount", "priority", "nodeName", "tolerations")


def _dict_field(obj: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``obj[key]`` as a dict, creating it when absent or null (a JSON ``null`` decodes to the
    zero value upstream, which defaulting then fills); None when it has another shape, which
    validation reports instead of defaulting crashing on it."""
    v = obj.get(key)
    if v is None:
        v = obj[key] = {}
    return v if isinstance(v, dict) else None


def _dicts(v: Any) -> list[dict[str, Any]]:
    """The dict items of a list field; wrong shapes yield nothing (validation reports them)."""
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def default_pod(
    pod: dict[str, Any],
    *,
    not_ready_toleration_seconds: int = DEFAULT_TOLERATION_SECONDS,
    unreachable_toleration_seconds: int = DEFAULT_TOLERATION_SECONDS,
    admission: bool = True,
    old: dict[str, Any] | None = None,
) -> None:
    """Apply upstream defaults and (with ``admission``) create-time admission defaults, in place.

    Updates run with ``admission=False``: upstream applies the type defaults on every write
    (so a partial PUT is completed before validation) but the ServiceAccount/Priority admission
    only on create.  The toleration seconds are the kube-apiserver flags
    ``--default-not-ready-toleration-seconds`` / ``--default-unreachable-toleration-seconds``.
    With ``old`` (an update), spec fields the server populated (admission results and the
    scheduler's nodeName) that the new object omits are carried over from ``old``: a deliberate
    leniency over upstream so ``kubectl replace`` with the original manifest only changes what
    the manifest changes.  Never raises on malformed input: fields of the wrong shape are left
    for validation.
    """
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    if _dict_field(pod, "metadata") is None:
        return
    spec = _dict_field(pod, "spec")
    if spec is None:
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    old_spec = (old or {}).get("spec")
    if isinstance(old_spec, dict):
        for k in _SERVER_POPULATED:
            if spec.get(k) is None and old_spec.get(k) is not None:
                spec[k] = copy.deepcopy(old_spec[k])
    # `serviceAccount` is the deprecated alias of serviceAccountName, kept in sync by defaulting.
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if admission:
        # ServiceAccount admission; Priority admission without priority classes.
        sa = sa or "default"
        if spec.get("priority") is None:
            spec["priority"] = 0
    if sa:
        spec["serviceAccountName"] = sa
        spec["serviceAccount"] = sa
    host_network = bool(spec.get("hostNetwork"))
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _dicts(spec.get(key)):
            _default_container(c, host_network)
    for v in _dicts(spec.get("volumes")):
        _default_volume(v)
    tolerations = spec.get("tolerations")
    if tolerations is None:
        tolerations = []
    if admission and isinstance(tolerations, list):
        # DefaultTolerationSeconds admission.
        for key, seconds in ((NOT_READY_TAINT, not_ready_toleration_seconds),
                             (UNREACHABLE_TAINT, unreachable_toleration_seconds)):
            if not _tolerates(tolerations, key, "NoExecute"):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
                )
    if tolerations or "tolerations" in spec:
        spec["tolerations"] = tolerations
    status = _dict_field(pod, "status")
    if status is None:
        return
    status.setdefault("phase", "Pending")
    try:
        status["qosClass"] = qos_class(pod)
    except Exception:  # malformed resources: validation reports them
        status.setdefault("qosClass", "BestEffort")


# --- validation -----------------------------------------------------------------------------

_RESTART_POLICIES = ["Always", "OnFailure", "Never"]
_DNS_POLICIES = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
_PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
_PROTOCOLS = ["SCTP", "TCP", "UDP"]
_TERM_MSG_POLICIES = ["File", "FallbackToLogsOnError"]
_TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
_TOLERATION_OPS = ["Equal", "Exists"]


def _port_errors(value: Any, path: str) -> FieldErrors:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [(path, invalid(value, "must be between 1 and 65535, inclusive"))]
    return []


def _validate_resources(res: Any, path: str) -> FieldErrors:
    errs: FieldErrors = []
    if not isinstance(res, dict):
        return errs
    parsed: dict[str, dict[str, Any]] = {"limits": {}, "requests": {}}
    for kind in ("limits", "requests"):
        for name, q in (res.get(kind) or {}).items():
            p = f"{path}.{kind}[{name}]"
            try:
                qq = parse_quantity(q)
            except QuantityError as e:
                errs.append((p, invalid(q, str(e))))
                continue
            if qq.value < 0:
                errs.append((p, invalid(str(q), "must be greater than or equal to 0")))
                continue
            parsed[kind][name] = qq
    for name, req in parsed["requests"].items():
        lim = parsed["limits"].get(name)
        if lim is not None and req.value > lim.value:
            errs.append(
                (f"{path}.requests", invalid(req.canonical(), f"must be less than or equal to {name} limit of {lim.canonical()}"))
            )
    return errs


def _validate_probe(probe: Any, path: str) -> FieldErrors:
    errs: FieldErrors = []
    if not isinstance(probe, dict):
        return errs
    handlers = [k for k in ("exec", "httpGet", "tcpSocket", "grpc") if probe.get(k) is not None]
    if not handlers:
        errs.append((path, required("must specify a handler type")))
    elif len(handlers) > 1:
        errs.append((f"{path}.{handlers[1]}", forbidden("may not specify more than 1 handler type")))
    for k in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        v = probe.get(k)
        if isinstance(v, int) and v < 0:
            errs.append((f"{path}.{k}", invalid(v, "must be greater than or equal to 0")))
    return errs


def _validate_container(
    c: Any, path: str, names: set[str], volumes: set[str], kind: str
) -> FieldErrors:
    errs: FieldErrors = []
    if not isinstance(c, dict):
        return [(path, invalid(c, "must be an object"))]
    name = c.get("name") or ""
    if not name:
        errs.append((f"{path}.name", required()))
    else:
        for m in dns1123_label_errors(name):
            errs.append((f"{path}.name", invalid(name, m)))
        if name in names:
            errs.append((f"{path}.name", duplicate(name)))
        names.add(name)
    if not c.get("image"):
        errs.append((f"{path}.image", required()))
    ipp = c.get("imagePullPolicy")
    if not ipp:
        errs.append((f"{path}.imagePullPolicy", required()))
    elif ipp not in _PULL_POLICIES:
        errs.append((f"{path}.imagePullPolicy", not_supported(ipp, _PULL_POLICIES)))
    tmp = c.get("terminationMessagePolicy")
    if tmp and tmp not in _TERM_MSG_POLICIES:
        errs.append((f"{path}.terminationMessagePolicy", not_supported(tmp, _TERM_MSG_POLICIES)))
    port_names: set[str] = set()
    for i, p in enumerate(c.get("ports") or []):
        pp = f"{path}.ports[{i}]"
        if not isinstance(p, dict):
            errs.append((pp, invalid(p, "must be an object")))
            continue
        if p.get("containerPort") is None:
            errs.append((f"{pp}.containerPort", required()))
        else:
            errs.extend(_port_errors(p.get("containerPort"), f"{pp}.containerPort"))
        if p.get("hostPort"):
            errs.extend(_port_errors(p.get("hostPort"), f"{pp}.hostPort"))
        proto = p.get("protocol")
        if not proto:
            errs.append((f"{pp}.protocol", required()))
        elif proto not in _PROTOCOLS:
            errs.append((f"{pp}.protocol", not_supported(proto, _PROTOCOLS)))
        pname = p.get("name")
        if pname:
            if len(pname) > 15:
                errs.append((f"{pp}.name", invalid(pname, "must be no more than 15 characters")))
            if not _IANA_SVC_RE.match(pname) or not re.search("[a-z]", pname):
                errs.append(
                    (f"{pp}.name", invalid(pname, "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"))
                )
            if pname in port_names:
                errs.append((f"{pp}.name", duplicate(pname)))
            port_names.add(pname)
    for i, e in enumerate(c.get("env") or []):
        ep = f"{path}.env[{i}]"
        ename = (e or {}).get("name") if isinstance(e, dict) else None
        if not ename:
            errs.append((f"{ep}.name", required()))
        elif not _ENV_RE.match(ename):
            errs.append((f"{ep}.name", invalid(ename, ENV_VAR_MSG)))
        if isinstance(e, dict) and e.get("valueFrom") is not None and not isinstance(e["valueFrom"], dict):
            errs.append((f"{ep}.valueFrom", invalid(e["valueFrom"], "must be an object")))
        elif isinstance(e, dict):
            errs.extend(validate_env_value_from(e, f"{ep}.valueFrom"))
    for i, vm in enumerate(c.get("volumeMounts") or []):
        vp = f"{path}.volumeMounts[{i}]"
        if not isinstance(vm, dict):
            continue
        vname = vm.get("name") or ""
        if not vname:
            errs.append((f"{vp}.name", required()))
        elif vname not in volumes:
            errs.append((f"{vp}.name", not_found(vname)))
        if not vm.get("mountPath"):
            errs.append((f"{vp}.mountPath", required()))
    errs.extend(_validate_resources(c.get("resources"), f"{path}.resources"))
    errs.extend(validate_container_security_context(c.get("securityContext"), f"{path}.securityContext"))
    if kind == "initContainers":
        rp = c.get("restartPolicy")
        if rp is not None and rp != "Always":
            errs.append((f"{path}.restartPolicy", not_supported(rp, ["Always"])))
        if rp != "Always":
            for k in ("livenessProbe", "readinessProbe", "startupProbe"):
                if c.get(k) is not None:
                    errs.append((f"{path}.{k}", forbidden("may not be set for init containers without restartPolicy=Always")))
    elif kind == "containers" and c.get("restartPolicy") is not None:
        errs.append((f"{path}.restartPolicy", forbidden("may not be set for non-init containers")))
    for k in ("livenessProbe", "readinessProbe", "startupProbe"):
        errs.extend(_validate_probe(c.get(k), f"{path}.{k}"))
    return errs


def _validate_tolerations(tolerations: Any, path: str) -> FieldErrors:
    errs: FieldErrors = []
    for i, t in enumerate(tolerations or []):
        tp = f"{path}[{i}]"
        if not isinstance(t, dict):
            errs.append((tp, invalid(t, "must be an object")))
            continue
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        if key:
            for m in qualified_name_errors(key):
                errs.append((f"{tp}.key", invalid(key, m)))
        elif op != "Exists":
            errs.append((f"{tp}.operator", invalid(op, "operator must be Exists when `key` is empty, which means \"match all values and all keys\"")))
        if op not in _TOLERATION_OPS:
            errs.append((f"{tp}.operator", not_supported(op, _TOLERATION_OPS)))
        if op == "Exists" and t.get("value"):
            errs.append((f"{tp}.operator", invalid(t.get("value"), "value must be empty when `operator` is 'Exists'")))
        eff = t.get("effect")
        if eff and eff not in _TAINT_EFFECTS:
            errs.append((f"{tp}.effect", not_supported(eff, _TAINT_EFFECTS)))
        if t.get("tolerationSeconds") is not None and eff != "NoExecute":
            errs.append((f"{tp}.effect", invalid(eff or "", "effect must be 'NoExecute' when `tolerationSeconds` is set")))
    return errs


_SPEC_LISTS = ("volumes", "containers", "initContainers", "ephemeralContainers", "tolerations",
               "imagePullSecrets", "hostAliases", "readinessGates", "schedulingGates")
_SPEC_MAPS = ("nodeSelector", "securityContext", "affinity", "overhead", "dnsConfig")
_CONTAINER_LISTS = ("command", "args", "ports", "env", "envFrom", "volumeMounts")
_CONTAINER_MAPS = ("resources", "securityContext", "livenessProbe", "readinessProbe", "startupProbe")


def _shape_errors(obj: dict[str, Any], path: str, lists: tuple[str, ...], maps: tuple[str, ...]) -> FieldErrors:
    """Fields whose JSON type is wrong (upstream would fail decoding); checked first so the
    detailed validators can assume the shapes and never raise on malformed input."""
    errs: FieldErrors = []
    for k in lists:
        v = obj.get(k)
        if v is not None and not isinstance(v, list):
            errs.append((f"{path}.{k}", invalid(v, "must be a list")))
    for k in maps:
        v = obj.get(k)
        if v is not None and not isinstance(v, dict):
            errs.append((f"{path}.{k}", invalid(v, "must be an object")))
    return errs


def validate_pod_spec(spec: Any, path: str = "spec") -> FieldErrors:
    errs: FieldErrors = []
    if not isinstance(spec, dict):
        return [(path, required() if spec is None else invalid(spec, "must be an object"))]
    errs = _shape_errors(spec, path, _SPEC_LISTS, _SPEC_MAPS)
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        cs = spec.get(kind)
        for i, c in enumerate(cs if isinstance(cs, list) else []):
            if isinstance(c, dict):
                errs.extend(_shape_errors(c, f"{path}.{kind}[{i}]", _CONTAINER_LISTS, _CONTAINER_MAPS))
    if errs:
        return errs
    volumes: set[str] = set()
    for i, v in enumerate(spec.get("volumes") or []):
        vp = f"{path}.volumes[{i}]"
        vname = (v or {}).get("name") if isinstance(v, dict) else None
        if not vname:
            errs.append((f"{vp}.name", required()))
            continue
        for m in dns1123_label_errors(vname):
            errs.append((f"{vp}.name", invalid(vname, m)))
        if vname in volumes:
            errs.append((f"{vp}.name", duplicate(vname)))
        volumes.add(vname)
    containers = spec.get("containers")
    names: set[str] = set()
    if not containers:
        errs.append((f"{path}.containers", required()))
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(kind) or []):
            errs.extend(_validate_container(c, f"{path}.{kind}[{i}]", names, volumes, kind))
    rp = spec.get("restartPolicy")
    if not rp:
        errs.append((f"{path}.restartPolicy", required()))
    elif rp not in _RESTART_POLICIES:
        errs.append((f"{path}.restartPolicy", not_supported(rp, _RESTART_POLICIES)))
    dp = spec.get("dnsPolicy")
    if not dp:
        errs.append((f"{path}.dnsPolicy", required()))
    elif dp not in _DNS_POLICIES:
        errs.append((f"{path}.dnsPolicy", not_supported(dp, _DNS_POLICIES)))
    tgps = spec.get("terminationGracePeriodSeconds")
    if tgps is not None and (not isinstance(tgps, int) or tgps < 0):
        errs.append((f"{path}.terminationGracePeriodSeconds", invalid(tgps, "must be greater than or equal to 0")))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not isinstance(ads, int) or not 1 <= ads <= 2147483647):
        errs.append((f"{path}.activeDeadlineSeconds", invalid(ads, "must be between 1 and 2147483647, inclusive")))
    errs.extend(validate_labels(spec.get("nodeSelector"), f"{path}.nodeSelector"))
    node_name = spec.get("nodeName")
    if node_name:
        for m in dns1123_subdomain_errors(node_name):
            errs.append((f"{path}.nodeName", invalid(node_name, m)))
    sa = spec.get("serviceAccountName")
    if sa:
        for m in dns1123_subdomain_errors(sa):
            errs.append((f"{path}.serviceAccountName", invalid(sa, m)))
    errs.extend(_validate_tolerations(spec.get("tolerations"), f"{path}.tolerations"))
    errs.extend(validate_pod_security_context(spec.get("securityContext"), f"{path}.securityContext"))
    for i, v in enumerate(spec.get("volumes") or []):
        if isinstance(v, dict):
            errs.extend(_downward_volume_errors(v, f"{path}.volumes[{i}]"))
    return errs


def _spec_for_update_compare(new_spec: dict[str, Any], old_spec: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``new_spec`` with the mutable fields reset to ``old_spec``'s values."""
    munged = copy.deepcopy(new_spec)
    for kind in ("containers", "initContainers"):
        new_cs = munged.get(kind) or []
        old_cs = old_spec.get(kind) or []
        if len(new_cs) == len(old_cs):
            for nc, oc in zip(new_cs, old_cs, strict=True):
                if isinstance(nc, dict) and isinstance(oc, dict) and "image" in oc:
                    nc["image"] = oc["image"]
    old_ads = old_spec.get("activeDeadlineSeconds")
    new_ads = munged.get("activeDeadlineSeconds")
    if isinstance(new_ads, int) and (old_ads is None or (isinstance(old_ads, int) and new_ads <= old_ads)):
        if old_ads is None:
            munged.pop("activeDeadlineSeconds", None)
        else:
            munged["activeDeadlineSeconds"] = old_ads
    old_tol = old_spec.get("tolerations") or []
    new_tol = munged.get("tolerations") or []
    if all(t in new_tol for t in old_tol):
        if "tolerations" in old_spec:
            munged["tolerations"] = old_spec["tolerations"]
        else:
            munged.pop("tolerations", None)
    old_gates = old_spec.get("schedulingGates") or []
    new_gates = munged.get("schedulingGates") or []
    if all(g in old_gates for g in new_gates):
        if "schedulingGates" in old_spec:
            munged["schedulingGates"] = old_spec["schedulingGates"]
        else:
            munged.pop("schedulingGates", None)
    old_tg = old_spec.get("terminationGracePeriodSeconds")
    if isinstance(old_tg, int) and old_tg < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_tg
    return munged


def validate_pod(pod: dict[str, Any], old: dict[str, Any] | None = None) -> FieldErrors:
    """Full pod validation (metadata + spec); with ``old`` also the update rules."""
    if not isinstance(pod, dict):
        return [("", invalid(pod, "must be an object"))]
    errs = validate_metadata("pods", pod)
    spec = pod.get("spec")
    errs.extend(validate_pod_spec(spec))
    if old is not None and isinstance(spec, dict) and not _shape_errors(spec, "spec", _SPEC_LISTS, _SPEC_MAPS):
        old_spec = old.get("spec") or {}
        if _spec_for_update_compare(spec, old_spec) != old_spec:
            errs.append(("spec", forbidden(POD_UPDATE_FORBIDDEN)))
        old_ads = old_spec.get("activeDeadlineSeconds")
        new_ads = spec.get("activeDeadlineSeconds")
        if old_ads is not None and new_ads is None:
            errs.append(("spec.activeDeadlineSeconds", invalid(None, "must not update from a positive integer to nil value")))
        elif old_ads is not None and isinstance(new_ads, int) and new_ads > old_ads:
            errs.append(("spec.activeDeadlineSeconds", invalid(new_ads, "must be less than or equal to previous value")))
    return errs



# --- security contexts, sysctls, env sources, status (pkg/apis/core/validation) ---------------

_MAX_ID = 2147483647  # validation.IsValidUserID / IsValidGroupID: 0..MaxInt32
_ID_MSG = f"must be between 0 and {_MAX_ID}, inclusive"
SYSCTL_SEGMENT_FMT = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
SYSCTL_FMT = f"^({SYSCTL_SEGMENT_FMT}[\\./])*{SYSCTL_SEGMENT_FMT}$"
_SYSCTL_RE = re.compile(SYSCTL_FMT)
_PROFILE_TYPES = ["Localhost", "RuntimeDefault", "Unconfined"]
# validEnvDownwardAPIFieldPathExpressions / validVolumeDownwardAPIFieldPathExpressions
ENV_FIELD_PATHS = ["metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                   "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"]
VOLUME_FIELD_PATHS = ["metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
                      "metadata.uid"]
# podshelper.ConvertDownwardAPIFieldLabel: what a v1 pod fieldPath may name at all
_CONVERTIBLE_FIELD_PATHS = {"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
                            "metadata.uid", "spec.nodeName", "spec.restartPolicy", "spec.serviceAccountName",
                            "spec.schedulerName", "status.phase", "status.hostIP", "status.hostIPs",
                            "status.podIP", "status.podIPs", "spec.host"}
RESOURCE_FIELD_PATHS = ["limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu",
                        "requests.ephemeral-storage", "requests.memory"]
_SUBSCRIPTED = re.compile(r"^(.+)\['(.*)'\]$")
_SYSTEM_POD_CONDITIONS = {"PodScheduled", "Ready", "Initialized", "ContainersReady"}


def config_key_errors(key: str) -> list[str]:
    """validation.IsConfigMapKey."""
    errs = []
    if len(key) > 253:
        errs.append("must be no more than 253 characters")
    if not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
        errs.append("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
                    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
    if key == ".":
        errs.append("must not be '.'")
    elif key == "..":
        errs.append("must not be '..'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def _id_errors(sc: dict[str, Any], keys: tuple[str, ...], path: str) -> FieldErrors:
    errs: FieldErrors = []
    for k in keys:
        v = sc.get(k)
        ids = v if isinstance(v, list) else [v]
        for i, n in enumerate(ids):
            if isinstance(n, int) and not 0 <= n <= _MAX_ID:
                p = f"{path}.{k}" + (f"[{i}]" if isinstance(v, list) else "")
                errs.append((p, invalid(n, _ID_MSG)))
    return errs


def _profile_errors(profile: Any, path: str, what: str) -> FieldErrors:
    """ValidateSeccompProfileField / validateAppArmorProfileField."""
    if not isinstance(profile, dict):
        return []
    typ, local = profile.get("type"), profile.get("localhostProfile")
    if typ == "Localhost":
        if not local:
            return [(f"{path}.localhostProfile", required(f"must be set when {what} type is Localhost"))]
        return []
    if typ in ("RuntimeDefault", "Unconfined"):
        if local is not None:
            return [(f"{path}.localhostProfile", invalid(profile, f"can only be set when {what} type is Localhost"))]
        return []
    return [(f"{path}.type", not_supported(typ or "", _PROFILE_TYPES))]


def _enum_errors(value: Any, allowed: list[str], path: str) -> FieldErrors:
    return [] if value is None or value in allowed else [(path, not_supported(value, allowed))]


def validate_pod_security_context(sc: Any, path: str) -> FieldErrors:
    if not isinstance(sc, dict):
        return []
    errs = _id_errors(sc, ("runAsUser", "runAsGroup", "fsGroup", "supplementalGroups"), path)
    errs += _enum_errors(sc.get("fsGroupChangePolicy"), ["OnRootMismatch", "Always"], f"{path}.fsGroupChangePolicy")
    errs += _enum_errors(sc.get("supplementalGroupsPolicy"), ["Merge", "Strict"], f"{path}.supplementalGroupsPolicy")
    errs += _profile_errors(sc.get("seccompProfile"), f"{path}.seccompProfile", "seccomp")
    errs += _profile_errors(sc.get("appArmorProfile"), f"{path}.appArmorProfile", "AppArmor")
    names: set[str] = set()
    for i, s in enumerate(sc.get("sysctls") or []):
        sp = f"{path}.sysctls[{i}]"
        name = s.get("name") or "" if isinstance(s, dict) else ""
        if not name:
            errs.append((f"{sp}.name", required()))
        elif len(name) > 253 or not _SYSCTL_RE.match(name):
            errs.append((f"{sp}.name", invalid(name, f"must have at most 253 characters and match regex {SYSCTL_FMT}")))
        elif name in names:
            errs.append((f"{sp}.name", duplicate(name)))
        names.add(name)
    return errs


def validate_container_security_context(sc: Any, path: str) -> FieldErrors:
    if not isinstance(sc, dict):
        return []
    errs = _id_errors(sc, ("runAsUser", "runAsGroup"), path)
    errs += _enum_errors(sc.get("procMount"), ["Default", "Unmasked"], f"{path}.procMount")
    errs += _profile_errors(sc.get("seccompProfile"), f"{path}.seccompProfile", "seccomp")
    errs += _profile_errors(sc.get("appArmorProfile"), f"{path}.appArmorProfile", "AppArmor")
    if sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            errs.append((path, invalid(sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true")))
        caps = sc.get("capabilities") or {}
        if "CAP_SYS_ADMIN" in (caps.get("add") or []):
            errs.append((path, invalid(sc, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` "
                                           "CAP_SYS_ADMIN")))
    return errs


def _field_ref_errors(fs: dict[str, Any], supported: list[str], path: str) -> FieldErrors:
    """validateObjectFieldSelector."""
    if not fs.get("apiVersion"):
        return [(f"{path}.apiVersion", required())]
    fp = fs.get("fieldPath") or ""
    if not fp:
        return [(f"{path}.fieldPath", required())]
    m = _SUBSCRIPTED.match(fp)
    if fs["apiVersion"] != "v1":
        why = f"unsupported pod version: {fs['apiVersion']}"
    elif m is not None and m.group(1) not in ("metadata.annotations", "metadata.labels"):
        why = f"field label does not support subscript: {fp}"
    elif m is None and fp not in _CONVERTIBLE_FIELD_PATHS:
        why = f"field label not supported: {fp}"
    else:
        why = ""
    if why:
        return [(f"{path}.fieldPath", invalid(fp, f"error converting fieldPath: {why}"))]
    if m is not None:
        sub = m.group(2).lower() if m.group(1) == "metadata.annotations" else m.group(2)
        return [(path, invalid(sub, msg)) for msg in qualified_name_errors(sub)]
    internal = "spec.nodeName" if fp == "spec.host" else fp
    if internal not in supported:
        return [(f"{path}.fieldPath", not_supported(internal, supported))]
    return []


def _key_selector_errors(sel: dict[str, Any], path: str) -> FieldErrors:
    """validateConfigMapKeySelector / validateSecretKeySelector."""
    errs = [(f"{path}.name", invalid(sel.get("name") or "", m))
            for m in dns1123_subdomain_errors(sel.get("name") or "")]
    key = sel.get("key") or ""
    if not key:
        errs.append((f"{path}.key", required()))
    else:
        errs += [(f"{path}.key", invalid(key, m)) for m in config_key_errors(key)]
    return errs


def _resource_ref_errors(ref: dict[str, Any], path: str) -> FieldErrors:
    res = ref.get("resource") or ""
    if not res:
        return [(f"{path}.resource", required())]
    if res in RESOURCE_FIELD_PATHS or res.startswith(("limits.hugepages-", "requests.hugepages-")):
        return []
    return [(f"{path}.resource", not_supported(res, RESOURCE_FIELD_PATHS))]


def validate_env_value_from(e: dict[str, Any], path: str) -> FieldErrors:
    """validateEnvVarValueFrom: exactly one source, each source well-formed."""
    vf = e.get("valueFrom")
    if not isinstance(vf, dict):
        return []
    errs: FieldErrors = []
    sources = 0
    if isinstance(vf.get("fieldRef"), dict):
        sources += 1
        errs += _field_ref_errors(vf["fieldRef"], ENV_FIELD_PATHS, f"{path}.fieldRef")
    if isinstance(vf.get("resourceFieldRef"), dict):
        sources += 1
        errs += _resource_ref_errors(vf["resourceFieldRef"], f"{path}.resourceFieldRef")
    for k in ("configMapKeyRef", "secretKeyRef"):
        if isinstance(vf.get(k), dict):
            sources += 1
            errs += _key_selector_errors(vf[k], f"{path}.{k}")
    if sources == 0:
        errs.append((path, invalid("", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` "
                                       "or `secretKeyRef`")))
    elif e.get("value"):
        errs.append((path, invalid("", "may not be specified when `value` is not empty")))
    elif sources > 1:
        errs.append((path, invalid("", "may not have more than one field specified at a time")))
    return errs


def _downward_volume_errors(v: dict[str, Any], path: str) -> FieldErrors:
    errs: FieldErrors = []
    dapi = v.get("downwardAPI")
    for i, item in enumerate((dapi or {}).get("items") or [] if isinstance(dapi, dict) else []):
        if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
            errs += _field_ref_errors(item["fieldRef"], VOLUME_FIELD_PATHS, f"{path}.downwardAPI.items[{i}].fieldRef")
    return errs


# A dotted-quad IPv4 address without leading zeros: what ``ipaddress.ip_address`` accepts for
# every pod and host IP the kubelets write, checked without building an address object (the
# status PATCH's validation parsed each IP). Anything else goes to ``ipaddress`` as before.
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_PLAIN_IPV4 = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")


def _ip_errors(value: Any, path: str) -> FieldErrors:
    if type(value) is str and _PLAIN_IPV4.fullmatch(value):
        return []
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return [(path, invalid(value, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))]
    return []


def validate_pod_status(pod: dict[str, Any], old: dict[str, Any] | None = None) -> FieldErrors:
    """The parts of ValidatePodStatusUpdate that judge the status itself: condition types,
    nominatedNodeName, pod and host IPs (values, duplicates, podIP == podIPs[0])."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return []
    errs: FieldErrors = []
    for i, c in enumerate(status.get("conditions") or []):
        t = c.get("type") or ""
        if t not in _SYSTEM_POD_CONDITIONS:
            errs += [(f"status.conditions[{i}].Type", invalid(t, m)) for m in qualified_name_errors(t)]
    nnn = status.get("nominatedNodeName")
    if nnn and nnn != ((old or {}).get("status") or {}).get("nominatedNodeName"):
        errs += [("status.nominatedNodeName", invalid(nnn, m)) for m in dns1123_subdomain_errors(nnn)]
    for single, plural in (("podIP", "podIPs"), ("hostIP", "hostIPs")):
        ips = [x.get("ip") or "" for x in status.get(plural) or []]
        seen: set[str] = set()
        for i, ip in enumerate(ips):
            errs += _ip_errors(ip, f"status.{plural}[{i}].ip")
            if ip in seen:
                errs.append((f"status.{plural}[{i}].ip", duplicate(ip)))
            seen.add(ip)
        one = status.get(single)
        if one:
            errs += _ip_errors(one, f"status.{single}")
            if ips and ips[0] != one:
                errs.append((f"status.{plural}[0].ip", invalid(ips[0], f"must be equal to {single}")))
    return errs


def format_invalid(kind: str, name: str, errs: FieldErrors) -> str:
    """Upstream NewInvalid message: ``Pod "x" is invalid: a: m`` or ``... invalid: [a: m, b: n]``."""
    parts = [f"{p}: {m}" for p, m in errs]
    body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return f'{kind} "{name}" is invalid: {body}'
