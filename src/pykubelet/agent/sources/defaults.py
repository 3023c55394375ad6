"""API defaulting and minimal validation for static pods (which never pass through an API server).

Design: a static pod read from disk must look to the rest of the agent exactly like a pod that came
from the API server, so the agent applies the same *scheme* defaults the API server would
(``pkg/apis/core/v1/defaults.go``).  The agent may not import the dev control plane (layering rule),
hence this small, separate copy.  Admission-time defaults (service account, priority, default
toleration seconds) are deliberately not applied: upstream static pods do not get them either.

Upstream behaviour followed: restartPolicy Always, dnsPolicy ClusterFirst,
terminationGracePeriodSeconds 30, schedulerName default-scheduler, securityContext {},
enableServiceLinks true; per container terminationMessagePath /dev/termination-log,
terminationMessagePolicy File, imagePullPolicy Always for ``:latest``/untagged images else
IfNotPresent, port protocol TCP (hostNetwork copies containerPort to hostPort), probe defaults
(timeout 1 s, period 10 s, success 1, failure 3, httpGet path "/" scheme HTTP), env fieldRef
apiVersion v1, requests defaulted from limits; volumes: defaultMode 420, hostPath type "".
Validation is the subset that would otherwise crash the agent later: a name, containers with
unique names and an image.
"""

from __future__ import annotations

import re
from typing import Any

Pod = dict[str, Any]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def default_image_pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _probe(probe: Any) -> None:
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


def _container(c: dict[str, Any], host_network: bool) -> None:
    if c.get("image") and not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = default_image_pull_policy(str(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if host_network and not p.get("hostPort") and p.get("containerPort"):
                p["hostPort"] = p["containerPort"]
    for e in c.get("env") or []:
        if isinstance(e, dict):
            fr = (e.get("valueFrom") or {}).get("fieldRef")
            if isinstance(fr, dict):
                fr.setdefault("apiVersion", "v1")
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(c.get(key))
    res = c.setdefault("resources", {})
    if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
        reqs = res.setdefault("requests", {})
        if isinstance(reqs, dict):
            for k, v in res["limits"].items():
                reqs.setdefault(k, v)


def default_pod(pod: Pod) -> Pod:
    """Apply scheme defaults in place and return the pod."""
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    meta = pod.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ValueError("metadata must be a mapping")
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise ValueError("spec must be a mapping")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    host_network = bool(spec.get("hostNetwork"))
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _container(c, host_network)
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        if not [k for k in v if k != "name"]:
            v["emptyDir"] = {}
        for key in ("secret", "configMap", "projected", "downwardAPI"):
            src = v.get(key)
            if isinstance(src, dict):
                src.setdefault("defaultMode", 420)
        hp = v.get("hostPath")
        if isinstance(hp, dict):
            hp.setdefault("type", "")
    return pod


def validate_pod(pod: Pod) -> list[str]:
    """Problems that make a static pod unusable (empty list = fine)."""
    errs: list[str] = []
    meta = pod.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errs.append("metadata.name: Required value")
    elif not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        errs.append(f"metadata.name: Invalid value: {name!r}: must be a lowercase RFC 1123 subdomain")
    ns = meta.get("namespace")
    if ns is not None and (not isinstance(ns, str) or (ns and not _DNS_LABEL.match(ns))):
        errs.append(f"metadata.namespace: Invalid value: {ns!r}")
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [*errs, "spec: Required value"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errs.append("spec.containers: Required value")
        containers = []
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        items = spec.get(key) or []
        if not isinstance(items, list):
            errs.append(f"spec.{key}: must be a list")
            continue
        for i, c in enumerate(items):
            path = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                errs.append(f"{path}: must be a mapping")
                continue
            cname = c.get("name")
            if not isinstance(cname, str) or not _DNS_LABEL.match(cname):
                errs.append(f"{path}.name: Invalid value: {cname!r}")
            elif cname in seen:
                errs.append(f"{path}.name: Duplicate value: {cname!r}")
            else:
                seen.add(cname)
            if not isinstance(c.get("image"), str) or not c.get("image"):
                errs.append(f"{path}.image: Required value")
    if spec.get("restartPolicy") not in (None, "Always", "OnFailure", "Never"):
        errs.append(f"spec.restartPolicy: Unsupported value: {spec.get('restartPolicy')!r}")
    return errs
