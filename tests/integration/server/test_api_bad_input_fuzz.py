"""A corpus of malformed requests against every resource and verb the API server serves.

Each case says what upstream kube-apiserver answers (status code) and the suite checks, for all of
them, that the server answers exactly that, never 5xx, within 5 s (client-side timeouts), and that
an invalid write leaves nothing behind: a refused create leaves no object, a refused
update/patch/delete leaves the object at the same resourceVersion.  The corpus is generated from
small tables (resources x malformations) so adding a resource or a malformation extends every verb;
its size is asserted (>= 300 cases).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pykubelet.server.main import ServerHandle
from tests.builders import container, pod

CLIENT_TIMEOUT = 5.0
JSON = "application/json"
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
YAML = "application/yaml"


def _csr_request() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fuzz")])).sign(key, hashes.SHA256())
    return base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode()


@dataclass(frozen=True)
class Res:
    """One served resource: where it lives and a valid object of it."""

    plural: str
    prefix: str  # API group/version path
    namespaced: bool
    seed: Callable[[str], dict[str, Any]]
    # a change to a valid object that Go's decoder refuses (type error)
    type_error: Callable[[dict[str, Any]], None]

    def coll(self) -> str:
        return f"{self.prefix}/namespaces/default/{self.plural}" if self.namespaced else f"{self.prefix}/{self.plural}"

    def item(self, name: str) -> str:
        return f"{self.coll()}/{name}"


def _meta(kind: str, api: str, name: str, **rest: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, **rest}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(o: dict[str, Any]) -> None:
        cur = o
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur.setdefault(k, {})
        cur[keys[-1]] = value
    return mutate


CSR = _csr_request()
RESOURCES = [
    Res("pods", "/api/v1", True, lambda n: pod(n, uid=""),
        lambda o: o["spec"]["containers"][0].__setitem__("image", 5)),
    Res("nodes", "/api/v1", False, lambda n: _meta("Node", "v1", n), _set("spec.unschedulable", "yes")),
    Res("namespaces", "/api/v1", False, lambda n: _meta("Namespace", "v1", n), _set("spec.finalizers", "x")),
    Res("configmaps", "/api/v1", True, lambda n: _meta("ConfigMap", "v1", n, data={"a": "b"}), _set("data.a", 1)),
    Res("secrets", "/api/v1", True, lambda n: _meta("Secret", "v1", n, data={"a": "Yg=="}), _set("data.a", "!!")),
    Res("serviceaccounts", "/api/v1", True, lambda n: _meta("ServiceAccount", "v1", n),
        _set("automountServiceAccountToken", "no")),
    Res("services", "/api/v1", True, lambda n: _meta("Service", "v1", n, spec={"ports": [{"port": 80}]}),
        lambda o: o["spec"]["ports"][0].__setitem__("port", "eighty")),
    Res("endpoints", "/api/v1", True, lambda n: _meta("Endpoints", "v1", n, subsets=[]), _set("subsets", {})),
    Res("events", "/api/v1", True,
        lambda n: _meta("Event", "v1", n, involvedObject={"kind": "Pod", "name": "x", "namespace": "default"},
                        reason="R", message="m"),
        _set("count", "many")),
    Res("events", "/apis/events.k8s.io/v1", True,
        lambda n: _meta("Event", "events.k8s.io/v1", n, eventTime="2024-01-01T00:00:00.000000Z",
                        reportingController="fuzz", reportingInstance="fuzz-1", action="A", reason="R",
                        regarding={"kind": "Pod", "name": "x", "namespace": "default"}),
        _set("deprecatedCount", [1])),
    Res("leases", "/apis/coordination.k8s.io/v1", True,
        lambda n: _meta("Lease", "coordination.k8s.io/v1", n, spec={"holderIdentity": "h", "leaseDurationSeconds": 10}),
        _set("spec.leaseDurationSeconds", "ten")),
    Res("certificatesigningrequests", "/apis/certificates.k8s.io/v1", False,
        lambda n: _meta("CertificateSigningRequest", "certificates.k8s.io/v1", n,
                        spec={"request": CSR, "signerName": "example.com/fuzz", "usages": ["client auth"]}),
        _set("spec.usages", "client auth")),
    Res("runtimeclasses", "/apis/node.k8s.io/v1", False,
        lambda n: _meta("RuntimeClass", "node.k8s.io/v1", n, handler="runc"), _set("handler", ["runc"])),
    Res("persistentvolumes", "/api/v1", False,
        lambda n: _meta("PersistentVolume", "v1", n, spec={"accessModes": ["ReadWriteOnce"], "capacity": {
            "storage": "1Gi"}, "hostPath": {"path": f"/tmp/{n}"}}),
        _set("spec.capacity", "1Gi")),
    Res("persistentvolumeclaims", "/api/v1", True,
        lambda n: _meta("PersistentVolumeClaim", "v1", n, spec={
            "accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
            "resources": {"requests": {"storage": "1Gi"}}}),
        _set("spec.accessModes", "ReadWriteOnce")),
    Res("storageclasses", "/apis/storage.k8s.io/v1", False,
        lambda n: _meta("StorageClass", "storage.k8s.io/v1", n, provisioner="example.com/fuzz"),
        _set("allowVolumeExpansion", "yes")),
    Res("poddisruptionbudgets", "/apis/policy/v1", True,
        lambda n: _meta("PodDisruptionBudget", "policy/v1", n, spec={"minAvailable": 1}),
        _set("spec.minAvailable", [1])),
]


@dataclass
class Case:
    name: str
    method: str
    path: str
    expect: int
    body: Any = None
    raw: bytes | None = None
    content_type: str | None = JSON
    params: dict[str, str] = field(default_factory=dict)
    # what must hold afterwards: ("absent", path) | ("unchanged", path) | None
    after: tuple[str, str] | None = None


def _deep_json(depth: int) -> bytes:
    return b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"deep"},"x":' + b"[" * depth + b"]" * depth + b"}"


def _deep_yaml(depth: int) -> bytes:
    return b"apiVersion: v1\nkind: Pod\nmetadata: {name: deep}\nx: " + b"[" * depth + b"]" * depth + b"\n"


YAML_BOMB = b"".join([b"apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\n", b"a: &a [x,x,x,x,x,x,x,x,x,x]\n"]
                     + [f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode()
                        for p, c in zip("abcdefg", "bcdefgh", strict=True)])


def create_cases(r: Res, i: int) -> list[Case]:
    """Malformed creates: every one must be refused and leave no object behind."""
    def n(k: int) -> str:
        return f"fz{i}-{k}"

    def obj(k: int) -> dict[str, Any]:
        return r.seed(n(k))

    def mutated(k: int, f: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        o = obj(k)
        f(o)
        return o

    c = r.coll()
    out = [
        Case("truncated json", "POST", c, 400, raw=json.dumps(obj(0)).encode()[:-3]),
        Case("array body", "POST", c, 400, body=[obj(1)]),
        Case("string body", "POST", c, 400, body="pod"),
        Case("number body", "POST", c, 400, body=5),
        Case("json nested 2000 deep", "POST", c, 400, raw=_deep_json(2000)),
        Case("json nested 101 deep", "POST", c, 400, raw=_deep_json(101)),
        Case("yaml nested 2000 deep", "POST", c, 400, raw=_deep_yaml(2000), content_type=YAML),
        Case("yaml alias bomb", "POST", c, 400, raw=YAML_BOMB, content_type=YAML),
        Case("yaml syntax error", "POST", c, 400, raw=b"kind: [\n  - : :", content_type=YAML),
        Case("NaN in json", "POST", c, 400, raw=json.dumps(obj(9)).encode()[:-1] + b',"x":NaN}'),
        Case("text/plain", "POST", c, 415, body=obj(10), content_type="text/plain"),
        Case("octet-stream", "POST", c, 415, body=obj(11), content_type="application/octet-stream"),
        Case("xml", "POST", c, 415, body=obj(12), content_type="application/xml"),
        Case("patch type on create", "POST", c, 415, body=obj(13), content_type=MERGE),
        Case("wrong kind", "POST", c, 400, body={**obj(14), "kind": "Widget"}),
        Case("wrong apiVersion", "POST", c, 400, body={**obj(15), "apiVersion": "nope/v9"}),
        Case("kind is a number", "POST", c, 400, body={**obj(16), "kind": 5}),
        Case("metadata is a string", "POST", c, 400, body={**obj(17), "metadata": "x"}),
        Case("name is a number", "POST", c, 400, body=mutated(18, _set("metadata.name", 5))),
        Case("label value is a number", "POST", c, 400, body=mutated(19, _set("metadata.labels", {"a": 1}))),
        Case("annotations is a list", "POST", c, 400, body=mutated(20, _set("metadata.annotations", ["a"]))),
        Case("finalizers is a string", "POST", c, 400, body=mutated(21, _set("metadata.finalizers", "x"))),
        Case("creationTimestamp not a time", "POST", c, 400,
             body=mutated(22, _set("metadata.creationTimestamp", "yesterday"))),
        Case("field of the wrong type", "POST", c, 400, body=mutated(23, r.type_error)),
        Case("unknown field, Strict", "POST", c, 400, body={**obj(24), "bogusField": 1},
             params={"fieldValidation": "Strict"}),
        Case("duplicate field, Strict", "POST", c, 400,
             raw=json.dumps(obj(25)).encode()[:-1] + b',"metadata":{"name":"' + n(25).encode() + b'"}}',
             params={"fieldValidation": "Strict"}),
        Case("dryRun=Bogus", "POST", c, 422, body=obj(26), params={"dryRun": "Bogus"}),
        Case("fieldValidation=Bogus", "POST", c, 422, body=obj(27), params={"fieldValidation": "Bogus"}),
        Case("fieldManager with a control character", "POST", c, 422, body=obj(28),
             params={"fieldManager": "bad\x07manager"}),
        Case("fieldManager too long", "POST", c, 422, body=obj(29), params={"fieldManager": "m" * 129}),
        Case("name with a % (no resource allows it)", "POST", c, 422,
             body=mutated(30, _set("metadata.name", "bad%name"))),
        Case("invalid label key", "POST", c, 422, body=mutated(31, _set("metadata.labels", {"-a-": "b"}))),
        Case("dryRun=All persists nothing", "POST", c, 201, body=obj(32), params={"dryRun": "All"}),
    ]
    for k, cs in enumerate(out):
        cs.after = ("absent", r.item(n(k)))  # case k writes (or would write) the object named n(k)
    return out


def write_cases(r: Res, seed_name: str) -> list[Case]:
    """Malformed updates/patches/deletes of an existing object: each refused, object unchanged."""
    p = r.item(seed_name)
    base = r.seed(seed_name)
    bad_type = copy.deepcopy(base)
    r.type_error(bad_type)
    unchanged = ("unchanged", p)
    cases = [
        # PUT
        Case("PUT field of the wrong type", "PUT", p, 400, body=bad_type),
        Case("PUT text/plain", "PUT", p, 415, body=base, content_type="text/plain"),
        Case("PUT resourceVersion abc", "PUT", p, 400, body={**base, "metadata": {"name": seed_name,
                                                                                   "resourceVersion": "abc"}}),
        Case("PUT name mismatch", "PUT", p, 400, body={**base, "metadata": {"name": "other"}}),
        Case("PUT dryRun=Bogus", "PUT", p, 422, body=base, params={"dryRun": "Bogus"}),
        Case("PUT dryRun=All persists nothing", "PUT", p, 200,
             body={**base, "metadata": {"name": seed_name, "labels": {"dry": "run"}}}, params={"dryRun": "All"}),
        Case("PUT json nested 2000 deep", "PUT", p, 400, raw=_deep_json(2000)),
        Case("PUT array body", "PUT", p, 400, body=[base]),
        Case("PUT managedFields with a bogus operation", "PUT", p, 422,
             body={**base, "metadata": {"name": seed_name, "managedFields": [{"manager": "m", "operation": "Bogus"}]}}),
        Case("PUT managedFields of fieldsType FieldsV2", "PUT", p, 422,
             body={**base, "metadata": {"name": seed_name, "managedFields": [
                 {"manager": "m", "operation": "Update", "fieldsType": "FieldsV2"}]}}),
        # PATCH
        Case("PATCH application/json", "PATCH", p, 415, body={"metadata": {"labels": {"a": "b"}}}),
        Case("PATCH without Content-Type", "PATCH", p, 415, body={"metadata": {"labels": {"a": "b"}}},
             content_type=None),
        Case("PATCH apply-patch+json", "PATCH", p, 415, body=base, content_type="application/apply-patch+json"),
        Case("merge patch of the wrong type", "PATCH", p, 422, body={"metadata": {"labels": {"a": 1}}},
             content_type=MERGE),
        Case("merge patch making metadata a list", "PATCH", p, 422, body={"metadata": ["x"]}, content_type=MERGE),
        Case("strategic patch that is a list", "PATCH", p, 400, body=[{"a": 1}], content_type=SMP),
        Case("strategic patch of the wrong type", "PATCH", p, 422,
             body={"metadata": {"annotations": {"a": ["x"]}}}, content_type=SMP),
        Case("json patch that is an object", "PATCH", p, 400, body={"op": "add"}, content_type=JSONPATCH),
        Case("json patch with a bad op", "PATCH", p, 422, body=[{"op": "frobnicate", "path": "/x"}],
             content_type=JSONPATCH),
        Case("json patch to a missing path", "PATCH", p, 422,
             body=[{"op": "replace", "path": "/no/such/path", "value": 1}], content_type=JSONPATCH),
        Case("json patch with a failing test", "PATCH", p, 422,
             body=[{"op": "test", "path": "/metadata/name", "value": "nope"}], content_type=JSONPATCH),
        Case("json patch of the wrong type", "PATCH", p, 422,
             body=[{"op": "add", "path": "/metadata/labels", "value": {"a": 1}}], content_type=JSONPATCH),
        Case("patch nested 2000 deep", "PATCH", p, 400, raw=b'{"x":' + b"[" * 2000 + b"]" * 2000 + b"}",
             content_type=MERGE),
        Case("patch with NaN", "PATCH", p, 400, raw=b'{"x": NaN}', content_type=MERGE),
        Case("empty patch", "PATCH", p, 400, raw=b"", content_type=MERGE),
        Case("apply without fieldManager", "PATCH", p, 422, body=base, content_type=APPLY),
        Case("apply of the wrong type", "PATCH", p, 400, body=bad_type, content_type=APPLY,
             params={"fieldManager": "fuzz"}),
        Case("apply yaml nested 2000 deep", "PATCH", p, 400, raw=_deep_yaml(2000), content_type=APPLY,
             params={"fieldManager": "fuzz"}),
        Case("force on a merge patch", "PATCH", p, 422, body={"metadata": {}}, content_type=MERGE,
             params={"force": "true"}),
        Case("patch dryRun=Bogus", "PATCH", p, 422, body={"metadata": {"labels": {"a": "b"}}}, content_type=MERGE,
             params={"dryRun": "Bogus"}),
        Case("patch dryRun=All persists nothing", "PATCH", p, 200, body={"metadata": {"labels": {"dry": "run"}}},
             content_type=MERGE, params={"dryRun": "All"}),
        Case("merge patch unknown field, Strict", "PATCH", p, 400, body={"bogusField": 1}, content_type=MERGE,
             params={"fieldValidation": "Strict"}),
        Case("patch resourceVersion abc", "PATCH", p, 400, body={"metadata": {"resourceVersion": "abc"}},
             content_type=MERGE),
        # DELETE
        Case("DELETE dryRun=Bogus", "DELETE", p, 422, params={"dryRun": "Bogus"}),
        Case("DELETE dryRun=All persists nothing", "DELETE", p, 200, params={"dryRun": "All"}),
        Case("DELETE body dryRun=Bogus", "DELETE", p, 422, body={"kind": "DeleteOptions", "apiVersion": "v1",
                                                                "dryRun": ["Bogus"]}),
        Case("DELETE body text/plain", "DELETE", p, 415, body={"kind": "DeleteOptions"}, content_type="text/plain"),
        Case("DELETE body gracePeriodSeconds string", "DELETE", p, 400, body={"gracePeriodSeconds": "x"}),
        Case("DELETE body is a list", "DELETE", p, 400, body=[1]),
        Case("DELETE body of another kind", "DELETE", p, 400, body={"kind": "Pod"}),
        Case("DELETE gracePeriodSeconds=abc", "DELETE", p, 400, params={"gracePeriodSeconds": "abc"}),
        Case("DELETE propagationPolicy bogus", "DELETE", p, 422, params={"propagationPolicy": "Sometimes"}),
        Case("DELETE propagation and orphan", "DELETE", p, 422, body={"propagationPolicy": "Orphan",
                                                                     "orphanDependents": True}),
        Case("DELETE precondition uid mismatch", "DELETE", p, 409, body={"preconditions": {"uid": "nope"}}),
        Case("DELETE json nested 2000 deep", "DELETE", p, 400, raw=b"[" * 2000 + b"]" * 2000),
    ]
    for cs in cases:
        cs.after = unchanged
    return cases


def read_cases(r: Res, seed_name: str) -> list[Case]:
    c, p = r.coll(), r.item(seed_name)
    w = {"watch": "true"}
    return [
        Case("list resourceVersion=abc", "GET", c, 400, params={"resourceVersion": "abc"}),
        Case("list resourceVersion=-1", "GET", c, 400, params={"resourceVersion": "-1"}),
        Case("list resourceVersion too big", "GET", c, 400, params={"resourceVersion": "1" * 30}),
        Case("list limit=abc", "GET", c, 400, params={"limit": "abc"}),
        Case("list limit overflowing int64", "GET", c, 400, params={"limit": "9" * 25}),
        Case("list garbage continue", "GET", c, 400, params={"continue": "%%%garbage"}),
        Case("list continue and resourceVersion", "GET", c, 400, params={"continue": "abc", "resourceVersion": "5"}),
        Case("list resourceVersionMatch bogus", "GET", c, 422, params={"resourceVersion": "1",
                                                                      "resourceVersionMatch": "Bogus"}),
        Case("list resourceVersionMatch without resourceVersion", "GET", c, 422,
             params={"resourceVersionMatch": "Exact"}),
        Case("list sendInitialEvents", "GET", c, 422, params={"sendInitialEvents": "true"}),
        Case("label selector unclosed set", "GET", c, 400, params={"labelSelector": "a in (b"}),
        Case("label selector bad key", "GET", c, 400, params={"labelSelector": "-bad-=x"}),
        Case("label selector bad value", "GET", c, 400, params={"labelSelector": "a=$$$"}),
        Case("label selector two values", "GET", c, 400, params={"labelSelector": "a=b c"}),
        Case("label selector gt not an integer", "GET", c, 400, params={"labelSelector": "a>b"}),
        Case("label selector trailing comma", "GET", c, 400, params={"labelSelector": "a,"}),
        Case("label selector x in () (upstream: the empty value)", "GET", c, 200, params={"labelSelector": "x in ()"}),
        Case("field selector unsupported", "GET", c, 400, params={"fieldSelector": "spec.bogus=1"}),
        Case("field selector without operator", "GET", c, 400, params={"fieldSelector": "metadata.name"}),
        Case("field selector bad escape", "GET", c, 400, params={"fieldSelector": "metadata.name=a\\b"}),
        Case("field selector unescaped =", "GET", c, 400, params={"fieldSelector": "metadata.name=a=b"}),
        Case("get resourceVersion=abc", "GET", p, 400, params={"resourceVersion": "abc"}),
        Case("watch timeoutSeconds overflowing int64", "GET", c, 400,
             params={**w, "timeoutSeconds": "99999999999999999999999"}),
        Case("watch timeoutSeconds=abc", "GET", c, 400, params={**w, "timeoutSeconds": "abc"}),
        Case("watch resourceVersion=abc", "GET", c, 400, params={**w, "resourceVersion": "abc"}),
        Case("watch allowWatchBookmarks=maybe", "GET", c, 400, params={**w, "allowWatchBookmarks": "maybe"}),
        Case("watch sendInitialEvents without NotOlderThan", "GET", c, 422,
             params={**w, "sendInitialEvents": "true", "allowWatchBookmarks": "true"}),
        Case("watch of a name with a different field selector", "GET", p, 400,
             params={**w, "fieldSelector": "metadata.name=other"}),
        Case("watch timeoutSeconds=max int64 ends with the server's timeout", "GET", c, 200,
             params={**w, "timeoutSeconds": str(2**63 - 1)}),
        Case("watch with a negative timeout ends at once", "GET", c, 200, params={**w, "timeoutSeconds": "-5"}),
    ]


POD_SPEC_CASES: list[tuple[str, int, dict[str, Any]]] = [
    ("image is a number", 400, {"image": 5}),
    ("command of numbers", 400, {"command": [1, 2]}),
    ("args is a string", 400, {"args": "a b"}),
    ("runAsUser is a string", 400, {"securityContext": {"runAsUser": "root"}}),
    ("runAsUser is negative", 422, {"securityContext": {"runAsUser": -1}}),
    ("runAsUser above MaxInt32", 422, {"securityContext": {"runAsUser": 2**31}}),
    ("runAsUser overflows int64", 400, {"securityContext": {"runAsUser": 2**64}}),
    ("runAsGroup is negative", 422, {"securityContext": {"runAsGroup": -3}}),
    ("privileged is a string", 400, {"securityContext": {"privileged": "yes"}}),
    ("privileged without privilege escalation", 422,
     {"securityContext": {"privileged": True, "allowPrivilegeEscalation": False}}),
    ("procMount unsupported", 422, {"securityContext": {"procMount": "Sometimes"}}),
    ("seccomp type unsupported", 422, {"securityContext": {"seccompProfile": {"type": "Strictest"}}}),
    ("seccomp Localhost without a profile", 422, {"securityContext": {"seccompProfile": {"type": "Localhost"}}}),
    ("capabilities add is a string", 400, {"securityContext": {"capabilities": {"add": "NET_ADMIN"}}}),
    ("env value is a number", 400, {"env": [{"name": "A", "value": 1}]}),
    ("env is an object", 400, {"env": {"A": "1"}}),
    ("env fieldRef spec.bogus", 422, {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}),
    ("env fieldRef not for env", 422,
     {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.restartPolicy"}}}]}),
    ("env fieldRef subscript on name", 422,
     {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name['x']"}}}]}),
    ("env valueFrom with two sources", 422,
     {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                          "secretKeyRef": {"name": "s", "key": "k"}}}]}),
    ("env valueFrom empty", 422, {"env": [{"name": "A", "valueFrom": {}}]}),
    ("env value and valueFrom", 422,
     {"env": [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
    ("env secretKeyRef bad key", 422, {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a b"}}}]}),
    ("env resourceFieldRef bogus", 422,
     {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.bogus"}}}]}),
    ("containerPort is a string", 400, {"ports": [{"containerPort": "80"}]}),
    ("containerPort overflows int32", 400, {"ports": [{"containerPort": 2**31}]}),
    ("containerPort is a float", 400, {"ports": [{"containerPort": 80.5}]}),
    ("containerPort out of range", 422, {"ports": [{"containerPort": 70000}]}),
    ("cpu limit not a quantity", 400, {"resources": {"limits": {"cpu": "lots"}}}),
    ("cpu limit is a list", 400, {"resources": {"limits": {"cpu": [1]}}}),
    ("requests above limits", 422, {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}),
    ("tty is a number", 400, {"tty": 1}),
    ("probe port is a list", 400, {"livenessProbe": {"httpGet": {"port": [80]}}}),
    ("probe without handler", 422, {"livenessProbe": {"periodSeconds": 5}}),
    ("volumeMounts of a missing volume", 422, {"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}),
    ("imagePullPolicy unsupported", 422, {"imagePullPolicy": "Sometimes"}),
    ("container name invalid", 422, {"name": "Not_A_Label"}),
    ("unknown container field, Strict", 400, {"imageName": "busybox"}),
]

POD_LEVEL_CASES: list[tuple[str, int, dict[str, Any]]] = [
    ("sysctl name kernel.$$$", 422, {"securityContext": {"sysctls": [{"name": "kernel.$$$", "value": "1"}]}}),
    ("sysctl without a name", 422, {"securityContext": {"sysctls": [{"value": "1"}]}}),
    ("duplicate sysctl", 422, {"securityContext": {"sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"},
                                                              {"name": "net.ipv4.ip_forward", "value": "0"}]}}),
    ("fsGroup negative", 422, {"securityContext": {"fsGroup": -1}}),
    ("supplementalGroups negative", 422, {"securityContext": {"supplementalGroups": [-2]}}),
    ("fsGroupChangePolicy unsupported", 422, {"securityContext": {"fsGroupChangePolicy": "Never"}}),
    ("restartPolicy unsupported", 422, {"restartPolicy": "Sometimes"}),
    ("restartPolicy is a number", 400, {"restartPolicy": 1}),
    ("hostNetwork is a string", 400, {"hostNetwork": "true"}),
    ("terminationGracePeriodSeconds negative", 422, {"terminationGracePeriodSeconds": -1}),
    ("terminationGracePeriodSeconds a float", 400, {"terminationGracePeriodSeconds": 1.5}),
    ("activeDeadlineSeconds zero", 422, {"activeDeadlineSeconds": 0}),
    ("nodeSelector value a number", 400, {"nodeSelector": {"a": 1}}),
    ("tolerations an object", 400, {"tolerations": {"key": "x"}}),
    ("toleration operator unsupported", 422, {"tolerations": [{"key": "x", "operator": "Maybe"}]}),
    ("containers an object", 400, {"containers": {"name": "c"}}),
    ("containers empty", 422, {"containers": []}),
    ("volumes of a number", 400, {"volumes": [5]}),
    ("downwardAPI volume fieldRef unsupported", 422,
     {"volumes": [{"name": "d", "downwardAPI": {"items": [{"path": "x", "fieldRef": {"fieldPath": "spec.nodeName"}}]}}]}),
    ("emptyDir sizeLimit not a quantity", 400, {"volumes": [{"name": "d", "emptyDir": {"sizeLimit": "big"}}]}),
    ("dnsPolicy unsupported", 422, {"dnsPolicy": "Everywhere"}),
    ("overhead not a quantity", 400, {"overhead": {"cpu": "x"}}),
    ("priority a string", 400, {"priority": "high"}),
]

OTHER_KIND_CASES: list[tuple[str, str, int, dict[str, Any]]] = [
    ("secret data not base64", "/api/v1/namespaces/default/secrets", 400,
     _meta("Secret", "v1", "s-b64", data={"a": "not base64!"})),
    ("secret data badly padded", "/api/v1/namespaces/default/secrets", 400,
     _meta("Secret", "v1", "s-pad", data={"a": "YWJ"})),
    ("secret stringData a number", "/api/v1/namespaces/default/secrets", 400,
     _meta("Secret", "v1", "s-num", stringData={"a": 1})),
    ("secret data key invalid", "/api/v1/namespaces/default/secrets", 422,
     _meta("Secret", "v1", "s-key", data={"a b": "Yg=="})),
    ("secret stringData key invalid", "/api/v1/namespaces/default/secrets", 422,
     _meta("Secret", "v1", "s-skey", stringData={"../x": "y"})),
    ("tls secret without a key", "/api/v1/namespaces/default/secrets", 422,
     _meta("Secret", "v1", "s-tls", type="kubernetes.io/tls", data={"tls.crt": "Yg=="})),
    ("dockerconfigjson secret not json", "/api/v1/namespaces/default/secrets", 422,
     _meta("Secret", "v1", "s-dcj", type="kubernetes.io/dockerconfigjson",
           data={".dockerconfigjson": base64.b64encode(b"nope").decode()})),
    ("configmap key invalid", "/api/v1/namespaces/default/configmaps", 422,
     _meta("ConfigMap", "v1", "c-key", data={"a/b": "x"})),
    ("configmap key in data and binaryData", "/api/v1/namespaces/default/configmaps", 422,
     _meta("ConfigMap", "v1", "c-dup", data={"a": "x"}, binaryData={"a": "eA=="})),
    ("configmap binaryData not base64", "/api/v1/namespaces/default/configmaps", 400,
     _meta("ConfigMap", "v1", "c-bin", binaryData={"a": "@@"})),
    ("lease duration zero", "/apis/coordination.k8s.io/v1/namespaces/default/leases", 422,
     _meta("Lease", "coordination.k8s.io/v1", "l-zero", spec={"leaseDurationSeconds": 0})),
    ("lease renewTime not a time", "/apis/coordination.k8s.io/v1/namespaces/default/leases", 400,
     _meta("Lease", "coordination.k8s.io/v1", "l-time", spec={"renewTime": "soon"})),
    ("csr request not base64", "/apis/certificates.k8s.io/v1/certificatesigningrequests", 400,
     _meta("CertificateSigningRequest", "certificates.k8s.io/v1", "csr-b64",
           spec={"request": "???", "signerName": "example.com/x"})),
    ("csr request not a CSR", "/apis/certificates.k8s.io/v1/certificatesigningrequests", 422,
     _meta("CertificateSigningRequest", "certificates.k8s.io/v1", "csr-pem",
           spec={"request": "Yg==", "signerName": "example.com/x"})),
    ("node taints an object", "/api/v1/nodes", 400, _meta("Node", "v1", "n-taints", spec={"taints": {"key": "x"}})),
    ("node capacity not a quantity", "/api/v1/nodes", 400,
     _meta("Node", "v1", "n-cap", status={"capacity": {"cpu": "many"}})),
    ("service port a string", "/api/v1/namespaces/default/services", 400,
     _meta("Service", "v1", "svc-port", spec={"ports": [{"port": "http"}]})),
    ("service targetPort a list", "/api/v1/namespaces/default/services", 400,
     _meta("Service", "v1", "svc-tp", spec={"ports": [{"port": 80, "targetPort": [80]}]})),
    ("pdb minAvailable a float", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", 400,
     _meta("PodDisruptionBudget", "policy/v1", "pdb-f", spec={"minAvailable": 1.5})),
    ("event count a string", "/api/v1/namespaces/default/events", 400,
     _meta("Event", "v1", "ev-c", involvedObject={"name": "x"}, count="2")),
    ("event eventTime not a time", "/apis/events.k8s.io/v1/namespaces/default/events", 400,
     _meta("Event", "events.k8s.io/v1", "ev-t", eventTime="now")),
    ("namespace name not a label", "/api/v1/namespaces", 422, _meta("Namespace", "v1", "a.b")),
    ("events.k8s.io name not a subdomain", "/apis/events.k8s.io/v1/namespaces/default/events", 422,
     _meta("Event", "events.k8s.io/v1", "Bad_Event", eventTime="2024-01-01T00:00:00.000000Z",
           reportingController="x", reportingInstance="y", action="A", reason="R")),
    ("runtimeclass overhead not a quantity", "/apis/node.k8s.io/v1/runtimeclasses", 400,
     _meta("RuntimeClass", "node.k8s.io/v1", "rc-o", handler="runc", overhead={"podFixed": {"cpu": "x"}})),
]

SUBRESOURCE_CASES: list[tuple[str, str, str, int, Any, str]] = [
    # (name, method, path suffix under the seeded pod "seed-pods"/others, expect, body, content type)
    ("status phase a number", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"phase": 5}}, MERGE),
    ("status conditions a string", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"conditions": "x"}}, MERGE),
    ("status condition of a number", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"conditions": [5]}}, SMP),
    ("status condition type invalid", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"conditions": [{"type": "not valid!", "status": "True"}]}}, SMP),
    ("status podIP not an IP", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"podIP": "300.1.1.1"}}, MERGE),
    ("status podIPs disagree with podIP", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"podIP": "198.18.0.5", "podIPs": [{"ip": "198.18.0.6"}]}}, MERGE),
    ("status startTime not a time", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"startTime": "later"}}, MERGE),
    ("status containerStatuses restartCount a string", "PATCH",
     "/api/v1/namespaces/default/pods/seed-pods/status", 422,
     {"status": {"containerStatuses": [{"name": "c", "restartCount": "1"}]}}, MERGE),
    ("status PUT phase a number", "PUT", "/api/v1/namespaces/default/pods/seed-pods/status", 400,
     {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "seed-pods"}, "status": {"phase": 5}}, JSON),
    ("node status conditions an object", "PATCH", "/api/v1/nodes/seed-nodes/status", 422,
     {"status": {"conditions": {"type": "Ready"}}}, MERGE),
    ("node status capacity not a quantity", "PATCH", "/api/v1/nodes/seed-nodes/status", 422,
     {"status": {"capacity": {"cpu": "lots"}}}, MERGE),
    ("namespace status phase a list", "PATCH", "/api/v1/namespaces/seed-namespaces/status", 422,
     {"status": {"phase": ["Active"]}}, MERGE),
    ("binding target a string", "POST", "/api/v1/namespaces/default/pods/seed-pods/binding", 400,
     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "seed-pods"}, "target": "node1"}, JSON),
    ("binding without a target", "POST", "/api/v1/namespaces/default/pods/seed-pods/binding", 422,
     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "seed-pods"}}, JSON),
    ("binding dryRun=Bogus", "POST", "/api/v1/namespaces/default/pods/seed-pods/binding", 422,
     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "seed-pods"}, "target": {"name": "n"}}, JSON),
    ("eviction deleteOptions a string", "POST", "/api/v1/namespaces/default/pods/seed-pods/eviction", 400,
     {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "seed-pods"}, "deleteOptions": "now"},
     JSON),
    ("eviction dryRun Bogus", "POST", "/api/v1/namespaces/default/pods/seed-pods/eviction", 422,
     {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "seed-pods"},
      "deleteOptions": {"dryRun": ["Bogus"]}}, JSON),
    ("eviction text/plain", "POST", "/api/v1/namespaces/default/pods/seed-pods/eviction", 415,
     {"apiVersion": "policy/v1", "kind": "Eviction"}, "text/plain"),
    ("token expirationSeconds a string", "POST",
     "/api/v1/namespaces/default/serviceaccounts/default/token", 400,
     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": "1h"}}, JSON),
    ("token audiences a string", "POST", "/api/v1/namespaces/default/serviceaccounts/default/token", 400,
     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": "api"}}, JSON),
    ("token too short", "POST", "/api/v1/namespaces/default/serviceaccounts/default/token", 422,
     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 1}}, JSON),
    ("tokenreview token a number", "POST", "/apis/authentication.k8s.io/v1/tokenreviews", 400,
     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": 5}}, JSON),
    ("SAR groups a string", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", 400,
     {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"groups": "x"}}, JSON),
    ("SAR without attributes", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", 422,
     {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "u"}}, JSON),
    ("SSAR resourceAttributes a list", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", 400,
     {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
      "spec": {"resourceAttributes": []}}, JSON),
    ("selfsubjectreview xml", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", 415, {}, "text/xml"),
    ("csr approval conditions a string", "PUT",
     "/apis/certificates.k8s.io/v1/certificatesigningrequests/seed-certificatesigningrequests/approval", 400,
     {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
      "metadata": {"name": "seed-certificatesigningrequests"}, "status": {"conditions": "Approved"}}, JSON),
    ("namespace finalize finalizers a string", "PUT", "/api/v1/namespaces/seed-namespaces/finalize", 400,
     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "seed-namespaces"},
      "spec": {"finalizers": "kubernetes"}}, JSON),
    ("ephemeralcontainers of a number", "PATCH", "/api/v1/namespaces/default/pods/seed-pods/ephemeralcontainers",
     422, {"spec": {"ephemeralContainers": [5]}}, SMP),
    ("pdb status observedGeneration a string", "PATCH",
     "/apis/policy/v1/namespaces/default/poddisruptionbudgets/seed-poddisruptionbudgets/status", 422,
     {"status": {"observedGeneration": "1"}}, MERGE),
]


def kind_cases() -> list[Case]:
    out: list[Case] = []
    pods = "/api/v1/namespaces/default/pods"
    for i, (what, code, change) in enumerate(POD_SPEC_CASES):
        name = f"pc{i}"
        body = pod(name, uid="", containers=[container(**change)])
        out.append(Case(f"pod: {what}", "POST", pods, code, body=body, params={"fieldValidation": "Strict"},
                        after=("absent", f"{pods}/{name}")))
    for i, (what, code, change) in enumerate(POD_LEVEL_CASES):
        name = f"pl{i}"
        body = pod(name, uid="")
        body["spec"].update(change)
        out.append(Case(f"pod: {what}", "POST", pods, code, body=body, after=("absent", f"{pods}/{name}")))
    for what, coll, code, body in OTHER_KIND_CASES:
        out.append(Case(what, "POST", coll, code, body=body, after=("absent", f"{coll}/{body['metadata']['name']}")))
    for what, method, path, code, body, ct in SUBRESOURCE_CASES:
        params = {"dryRun": "Bogus"} if "dryRun=Bogus" in what else {}
        owner = path.split("/status")[0].split("/binding")[0].split("/eviction")[0].split("/approval")[0] \
            .split("/finalize")[0].split("/ephemeralcontainers")[0]
        after = ("unchanged", owner) if "/serviceaccounts/" not in path and "/apis/auth" not in path else None
        out.append(Case(what, method, path, code, body=body, content_type=ct, params=params, after=after))
    return out


@pytest.fixture
async def fuzz_server(server33: ServerHandle) -> AsyncIterator[ServerHandle]:
    # every watch without a shorter timeoutSeconds ends within 1-2 s (upstream: --min-request-timeout)
    server33.http.min_request_timeout = 1.0
    yield server33


class Runner:
    def __init__(self, srv: ServerHandle, session: aiohttp.ClientSession) -> None:
        self.srv = srv
        self.session = session
        self.failures: list[str] = []
        self.count = 0

    async def send(self, method: str, path: str, *, body: Any = None, raw: bytes | None = None,
                   content_type: str | None = JSON, params: dict[str, str] | None = None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {self.srv.admin_token}"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        async with self.session.request(method, self.srv.url + path, data=data, headers=headers, params=params,
                                        timeout=aiohttp.ClientTimeout(total=CLIENT_TIMEOUT),
                                        skip_auto_headers=["Content-Type"]) as r:
            return r.status, await r.text()

    async def rv(self, path: str) -> str | None:
        st, text = await self.send("GET", path)
        return json.loads(text)["metadata"].get("resourceVersion") if st == 200 else None

    async def run(self, c: Case) -> None:
        self.count += 1
        before = await self.rv(c.after[1]) if c.after and c.after[0] == "unchanged" else None
        t0 = time.monotonic()
        try:
            st, text = await self.send(c.method, c.path, body=c.body, raw=c.raw, content_type=c.content_type,
                                       params=c.params)
        except TimeoutError:
            self.failures.append(f"{c.name}: {c.method} {c.path} hung for more than {CLIENT_TIMEOUT} s")
            return
        took = time.monotonic() - t0
        if st != c.expect or st >= 500:
            self.failures.append(f"{c.name}: {c.method} {c.path} {c.params} -> {st} (want {c.expect}): {text[:300]}")
        elif st >= 400:
            status = json.loads(text)
            if status.get("kind") != "Status" or status.get("code") != st or not status.get("message"):
                self.failures.append(f"{c.name}: not a Status body: {text[:200]}")
        if took > CLIENT_TIMEOUT:
            self.failures.append(f"{c.name}: took {took:.1f} s")
        if c.after is None:
            return
        check, path = c.after
        if check == "absent":
            st2, _ = await self.send("GET", path)
            if st2 != 404:
                self.failures.append(f"{c.name}: {path} exists after a refused/dry-run create ({st2})")
        elif check == "unchanged":
            after = await self.rv(path)
            if after != before or after is None:
                self.failures.append(f"{c.name}: {path} changed ({before} -> {after})")


@pytest.fixture
async def runner(fuzz_server: ServerHandle) -> AsyncIterator[Runner]:
    ctx = ssl.create_default_context(cafile=str(fuzz_server.ca_file))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        yield Runner(fuzz_server, session)


async def _seed(runner: Runner) -> None:
    for r in RESOURCES:
        st, text = await runner.send("POST", r.coll(), body=r.seed(f"seed-{r.plural}"))
        assert st in (201, 409), (r.plural, st, text)


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for i, r in enumerate(RESOURCES):
        cases += create_cases(r, i)
        cases += write_cases(r, f"seed-{r.plural}")
        cases += read_cases(r, f"seed-{r.plural}")
    return cases + kind_cases()


def test_corpus_covers_every_resource_and_verb() -> None:
    cases = all_cases()
    assert len(cases) >= 300
    verbs = {c.method for c in cases}
    assert verbs == {"GET", "POST", "PUT", "PATCH", "DELETE"}
    for r in RESOURCES:
        assert {c.method for c in cases if c.path.startswith(r.coll())} == verbs, r.plural


async def test_malformed_requests_are_refused_without_5xx_or_hangs(runner: Runner) -> None:
    await _seed(runner)
    t0 = time.monotonic()
    cases = all_cases()
    watches = [c for c in cases if c.params.get("watch") and c.expect == 200]
    others = [c for c in cases if c not in watches]
    # the long-running watches run side by side with the rest; each must still end by itself
    await asyncio.gather(*(runner.run(c) for c in watches), _serial(runner, others))
    elapsed = time.monotonic() - t0
    assert not runner.failures, f"{len(runner.failures)} of {runner.count} cases failed:\n" + "\n".join(
        runner.failures)
    assert runner.count == len(cases) and elapsed < 120
    st, _ = await runner.send("GET", "/readyz")
    assert st == 200


async def _serial(runner: Runner, cases: list[Case]) -> None:
    for c in cases:
        await runner.run(c)
