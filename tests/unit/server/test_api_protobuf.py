"""Protobuf request bodies (server/protobuf.py): round trips through the schema-built classes, the
exact bytes kubectl sends, and garbage that must fail as ValueError (400), never crash."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykubelet.server import protobuf as pb

M = pb.MESSAGES

# `kubectl create secret generic s --from-literal=a=b` (1.33), recorded from the wire
KUBECTL_SECRET = (b'k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x1d\n\x11\n\x01s\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00'
                  b'\x12\x06\n\x01a\x12\x01b\x1a\x00\x1a\x00"\x00')


def _meta(m: Any) -> None:
    """Fill an ObjectMeta message like a Go client does, empty strings included."""
    m.name, m.generateName, m.namespace, m.uid, m.resourceVersion = "obj", "", "ns1", "", ""
    m.generation = 0
    m.creationTimestamp.seconds = 1_700_000_000
    m.labels["app"] = "web"
    m.annotations["note"] = "x y"
    ref = m.ownerReferences.add(apiVersion="apps/v1", kind="ReplicaSet", name="rs", uid="u1")
    ref.controller = True
    ref.blockOwnerDeletion = False
    m.finalizers.append("example.com/f")
    mf = m.managedFields.add(manager="kubectl", operation="Update", apiVersion="v1", fieldsType="FieldsV1")
    mf.fieldsV1.Raw = b'{"f:data":{".":{}}}'


META_JSON = {"name": "obj", "namespace": "ns1", "creationTimestamp": "2023-11-14T22:13:20Z",
             "labels": {"app": "web"}, "annotations": {"note": "x y"},
             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1",
                                  "controller": True, "blockOwnerDeletion": False}],
             "finalizers": ["example.com/f"],
             "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}}}}]}


def test_secret_round_trip() -> None:
    s = M["Secret"]()
    _meta(s.metadata)
    s.data["bin"] = b"\x00\xffpw"
    s.data["empty"] = b""
    s.stringData["plain"] = "text"
    s.type = "Opaque"
    s.immutable = False  # a Go *bool: an explicit false survives
    got = pb.decode_object(pb.encode_object(s, "v1", "Secret"))
    assert got == {"apiVersion": "v1", "kind": "Secret", "metadata": META_JSON,
                   "data": {"bin": base64.b64encode(b"\x00\xffpw").decode(), "empty": ""},
                   "stringData": {"plain": "text"}, "type": "Opaque", "immutable": False}
    json.dumps(got)  # plain JSON types only


def test_configmap_namespace_serviceaccount() -> None:
    c = M["ConfigMap"]()
    c.metadata.name = "c"
    c.data["x"] = "y"
    c.binaryData["b"] = b"\x01\x02"
    c.immutable = True
    assert pb.decode_object(pb.encode_object(c, "v1", "ConfigMap")) == {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "y"},
        "binaryData": {"b": "AQI="}, "immutable": True}
    n = M["Namespace"]()
    n.metadata.name = "n"
    n.spec.finalizers.append("kubernetes")
    n.status.phase = ""
    assert pb.decode_object(pb.encode_object(n, "", "Namespace")) == {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}, "spec": {"finalizers": ["kubernetes"]}}
    sa = M["ServiceAccount"]()
    sa.metadata.name = "sa"
    sa.secrets.add(name="tok", namespace="d", kind="", uid="")
    sa.imagePullSecrets.add(name="regcred")
    sa.automountServiceAccountToken = False
    assert pb.decode_object(pb.encode_object(sa, "v1", "ServiceAccount")) == {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"},
        "secrets": [{"name": "tok", "namespace": "d"}], "imagePullSecrets": [{"name": "regcred"}],
        "automountServiceAccountToken": False}


def test_token_request_and_csr() -> None:
    tr = M["TokenRequest"]()
    tr.spec.audiences.extend(["a1", "a2"])
    tr.spec.expirationSeconds = 7200
    tr.spec.boundObjectRef.kind = "Secret"
    tr.spec.boundObjectRef.name = "s"
    tr.status.token = ""
    tr.status.expirationTimestamp.seconds = 0
    assert pb.decode_object(pb.encode_object(tr, "authentication.k8s.io/v1", "TokenRequest")) == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["a1", "a2"], "expirationSeconds": 7200,
                 "boundObjectRef": {"kind": "Secret", "name": "s"}}}
    csr = M["CertificateSigningRequest"]()
    csr.metadata.name = "node-csr-1"
    csr.spec.request = b"-----BEGIN CERTIFICATE REQUEST-----\n"
    csr.spec.signerName = "kubernetes.io/kube-apiserver-client-kubelet"
    csr.spec.usages.extend(["digital signature", "client auth"])
    csr.spec.extra["scopes"].items.extend(["a", "b"])
    cond = csr.status.conditions.add(type="Approved", status="True", reason="KubectlApprove", message="ok")
    cond.lastUpdateTime.seconds = 1_700_000_000
    got = pb.decode_object(pb.encode_object(csr, "certificates.k8s.io/v1", "CertificateSigningRequest"))
    assert got["spec"] == {"request": base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\n").decode(),
                           "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                           "usages": ["digital signature", "client auth"], "extra": {"scopes": ["a", "b"]}}
    assert got["status"] == {"conditions": [{"type": "Approved", "status": "True", "reason": "KubectlApprove",
                                             "message": "ok", "lastUpdateTime": "2023-11-14T22:13:20Z"}]}


def test_delete_options() -> None:
    d = M["DeleteOptions"]()
    d.gracePeriodSeconds = 0  # *int64: zero means "now" and must survive
    d.propagationPolicy = "Background"
    d.dryRun.append("All")
    d.preconditions.uid = "u"
    raw = pb.encode_object(d, "v1", "DeleteOptions")
    want = {"gracePeriodSeconds": 0, "propagationPolicy": "Background", "dryRun": ["All"],
            "preconditions": {"uid": "u"}}
    assert pb.decode_delete_options(raw) == want
    assert pb.decode_delete_options(d.SerializeToString()) == want  # bare, without the envelope
    with pytest.raises(ValueError):
        pb.decode_delete_options(pb.encode_object(M["ConfigMap"](), "v1", "ConfigMap"))
    with pytest.raises(ValueError):
        pb.decode_delete_options(b"k8s\x00\xff\xff")


def test_recorded_kubectl_secret() -> None:
    assert pb.decode_object(KUBECTL_SECRET) == {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                                                "data": {"a": "Yg=="}}


def test_unknown_kind_and_garbage() -> None:
    with pytest.raises(pb.UnsupportedKind, match="Pod"):
        pb.decode_object(pb.encode_object(M["ConfigMap"](), "v1", "Pod"))
    for bad in (b"", b"{}", b"k8s\x00\xff\xff", b"k8s\x00\x0a\x05\x0a", KUBECTL_SECRET[:-9],
                b"k8s\x00\x12\x03\x0a\x01\xff" + b"\x0a\x08\x12\x06Secret"):
        with pytest.raises(ValueError):
            pb.decode_object(bad)
    # invalid UTF-8 inside a string field of the object
    s = M["Secret"]()
    s.metadata.name = "x"
    body = bytearray(pb.encode_object(s, "v1", "Secret"))
    body[body.rindex(b"x")] = 0xFF
    with pytest.raises(ValueError):
        pb.decode_object(bytes(body))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.sampled_from(sorted(pb.KINDS)))
def test_fuzz_never_crashes(junk: bytes, kind: str) -> None:
    env = M["Unknown"]()
    env.typeMeta.kind = kind
    env.raw = junk
    for raw in (pb.MAGIC + env.SerializeToString(), pb.MAGIC + junk):
        try:
            out = pb.decode_object(raw)
        except ValueError:
            continue
        # whatever decodes is a Kubernetes JSON object of a supported kind
        assert isinstance(json.loads(json.dumps(out)), dict) and out["kind"] in pb.KINDS


def test_a_field_the_schema_does_not_know_is_refused_not_dropped() -> None:
    data_only = M["ConfigMap"]()
    data_only.data["a"] = "b"
    meta = M["ObjectMeta"]()
    meta.name = "cfg"
    # ObjectMeta field 15 (length-delimited "x"): a field this server's schema has no entry for
    meta_bytes = meta.SerializeToString() + bytes([15 << 3 | 2, 1]) + b"x"
    raw = bytes([1 << 3 | 2, len(meta_bytes)]) + meta_bytes + data_only.SerializeToString()
    with pytest.raises(pb.UnsupportedKind, match=r"field number\(s\) 15 of ConfigMap.metadata \(ObjectMeta\)"):
        pb.decode_object(pb.encode_object(M["ConfigMap"].FromString(raw), "v1", "ConfigMap"))
    known = M["ConfigMap"].FromString(bytes([1 << 3 | 2, len(meta.SerializeToString())]) + meta.SerializeToString()
                                      + data_only.SerializeToString())
    assert pb.decode_object(pb.encode_object(known, "v1", "ConfigMap"))["data"] == {"a": "b"}
    # an empty unknown field (Go writes `resources: {}` and zero statuses) carries nothing: accepted
    empty = meta.SerializeToString() + bytes([15 << 3 | 2, 0])
    zero = M["ConfigMap"].FromString(bytes([1 << 3 | 2, len(empty)]) + empty + data_only.SerializeToString())
    assert pb.decode_object(pb.encode_object(zero, "v1", "ConfigMap"))["metadata"] == {"name": "cfg"}


def _pod_template(t: Any) -> None:
    """Fill a PodTemplateSpec message the way a Go client would for a hand-written template."""
    t.metadata.labels["app"] = "web"
    s = t.spec
    s.restartPolicy = "OnFailure"
    s.terminationGracePeriodSeconds = 0  # a Go *int64: explicit zero kept
    s.hostNetwork = False  # a plain bool: false dropped, as Kubernetes JSON omits it
    v = s.volumes.add(name="scratch")
    v.volumeSource.emptyDir.SetInParent()  # `emptyDir: {}` must survive
    v = s.volumes.add(name="cfg")
    v.volumeSource.configMap.localObjectReference.name = "settings"
    v.volumeSource.configMap.items.add(key="k", path="p", mode=0o400)
    v.volumeSource.configMap.defaultMode = 0o644
    v = s.volumes.add(name="tok")
    src = v.volumeSource.projected.sources.add()
    src.serviceAccountToken.audience = "vault"
    src.serviceAccountToken.expirationSeconds = 3600
    src.serviceAccountToken.path = "token"
    f = v.volumeSource.projected.sources.add().downwardAPI.items.add(path="cpu")
    f.resourceFieldRef.containerName = "c"
    f.resourceFieldRef.resource = "limits.cpu"
    f.resourceFieldRef.divisor.string = "1m"
    c = s.containers.add(name="c", image="busybox:1.36", command=["sleep", "3600"], imagePullPolicy="IfNotPresent")
    c.ports.add(name="http", containerPort=8080, protocol="TCP")
    c.env.add(name="POD").valueFrom.fieldRef.fieldPath = "metadata.name"
    e = c.env.add(name="PW")
    e.valueFrom.secretKeyRef.localObjectReference.name = "db"
    e.valueFrom.secretKeyRef.key = "password"
    e.valueFrom.secretKeyRef.optional = False
    c.envFrom.add(prefix="CFG_").configMapRef.localObjectReference.name = "settings"
    c.resources.limits["cpu"].string = "500m"
    c.resources.requests["memory"].string = "64Mi"
    c.volumeMounts.add(name="scratch", mountPath="/scratch", readOnly=True, mountPropagation="None")
    c.livenessProbe.handler.httpGet.path = "/healthz"
    c.livenessProbe.handler.httpGet.port.type = 1
    c.livenessProbe.handler.httpGet.port.strVal = "http"
    c.livenessProbe.handler.httpGet.httpHeaders.add(name="X-A", value="b")
    c.livenessProbe.periodSeconds = 5
    c.readinessProbe.handler.tcpSocket.port.intVal = 8080
    c.startupProbe.handler.exec.command.extend(["cat", "/ready"])
    c.startupProbe.failureThreshold = 30
    c.lifecycle.preStop.sleep.seconds = 5
    sc = c.securityContext
    sc.runAsUser = 1000
    sc.runAsNonRoot = True
    sc.allowPrivilegeEscalation = False
    sc.capabilities.drop.append("ALL")
    sc.seccompProfile.type = "RuntimeDefault"
    s.securityContext.fsGroup = 2000
    s.securityContext.supplementalGroups.extend([3000, 4000])
    s.securityContext.sysctls.add(name="net.ipv4.ping_group_range", value="0 1")
    term = s.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.add()
    term.matchExpressions.add(key="kubernetes.io/os", operator="In", values=["linux"])
    w = s.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.add(weight=50)
    w.podAffinityTerm.topologyKey = "kubernetes.io/hostname"
    w.podAffinityTerm.labelSelector.matchLabels["app"] = "web"
    s.tolerations.add(key="dedicated", operator="Equal", value="batch", effect="NoExecute", tolerationSeconds=60)
    s.tolerations.add(operator="Exists")
    s.initContainers.add(name="init", image="busybox:1.36", restartPolicy="Always")


POD_TEMPLATE_JSON: dict[str, Any] = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {
        "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 0,
        "volumes": [
            {"name": "scratch", "emptyDir": {}},
            {"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "k", "path": "p", "mode": 0o400}],
                                          "defaultMode": 0o644}},
            {"name": "tok", "projected": {"sources": [
                {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 3600, "path": "token"}},
                {"downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {
                    "containerName": "c", "resource": "limits.cpu", "divisor": "1m"}}]}}]}},
        ],
        "containers": [{
            "name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"], "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password",
                                                                  "optional": False}}}],
            "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
            "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "64Mi"}},
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": True,
                              "mountPropagation": "None"}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http",
                                          "httpHeaders": [{"name": "X-A", "value": "b"}]}, "periodSeconds": 5},
            "readinessProbe": {"tcpSocket": {"port": 8080}},
            "startupProbe": {"exec": {"command": ["cat", "/ready"]}, "failureThreshold": 30},
            "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        }],
        "securityContext": {"fsGroup": 2000, "supplementalGroups": [3000, 4000],
                            "sysctls": [{"name": "net.ipv4.ping_group_range", "value": "0 1"}]},
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                   "labelSelector": {"matchLabels": {"app": "web"}}}}]}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoExecute",
                         "tolerationSeconds": 60}, {"operator": "Exists"}],
        "initContainers": [{"name": "init", "image": "busybox:1.36", "restartPolicy": "Always"}],
    },
}


def _canon(x: Any) -> Any:
    """Key order does not matter in JSON objects; compare the canonical text."""
    return json.loads(json.dumps(x, sort_keys=True))


def test_a_full_pod_template_decodes_to_the_kubernetes_json() -> None:
    job = M["Job"]()
    job.metadata.name = "j"
    _pod_template(job.spec.template)
    job.spec.backoffLimit = 0
    rule = job.spec.podFailurePolicy.rules.add(action="FailJob")
    rule.onExitCodes.operator = "In"
    rule.onExitCodes.values.extend([42])
    job.spec.successPolicy.rules.add().succeededCount = 1
    got = pb.decode_object(pb.encode_object(job, "batch/v1", "Job"))
    assert _canon(got) == _canon({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": POD_TEMPLATE_JSON, "backoffLimit": 0,
                 "podFailurePolicy": {"rules": [{"action": "FailJob",
                                                 "onExitCodes": {"operator": "In", "values": [42]}}]},
                 "successPolicy": {"rules": [{"succeededCount": 1}]}}})


def test_a_deployment_rolling_update_keeps_int_or_string_values() -> None:
    d = M["Deployment"]()
    d.metadata.name = "web"
    d.spec.replicas = 2
    d.spec.selector.matchLabels["app"] = "web"
    _pod_template(d.spec.template)
    d.spec.strategy.type = "RollingUpdate"
    d.spec.strategy.rollingUpdate.maxUnavailable.intVal = 0  # pointer IntOrString: an explicit 0 stays
    d.spec.strategy.rollingUpdate.maxSurge.type = 1
    d.spec.strategy.rollingUpdate.maxSurge.strVal = "25%"
    got = pb.decode_object(pb.encode_object(d, "apps/v1", "Deployment"))
    assert got["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}
    assert _canon(got["spec"]["template"]) == _canon(POD_TEMPLATE_JSON)


def test_an_ephemeral_container_and_an_ephemeral_volume_flatten_their_embedded_parts() -> None:
    cj = M["CronJob"]()
    cj.metadata.name = "n"
    cj.spec.schedule = "@daily"
    s = cj.spec.jobTemplate.spec.template.spec
    s.containers.add(name="c", image="busybox:1.36")
    ec = s.ephemeralContainers.add(targetContainerName="c")
    ec.ephemeralContainerCommon.name = "debug"
    ec.ephemeralContainerCommon.image = "busybox:1.36"
    ec.ephemeralContainerCommon.tty = True
    tmpl = s.volumes.add(name="data").volumeSource.ephemeral.volumeClaimTemplate
    tmpl.spec.accessModes.append("ReadWriteOnce")
    tmpl.spec.resources.requests["storage"].string = "1Gi"
    tmpl.spec.storageClassName = ""  # a Go *string: "" means "no class", kept
    got = pb.decode_object(pb.encode_object(cj, "batch/v1", "CronJob"))
    spec = got["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert spec["ephemeralContainers"] == [{"name": "debug", "image": "busybox:1.36", "tty": True,
                                            "targetContainerName": "c"}]
    assert spec["volumes"] == [{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": ""}}}}]


def test_a_volume_source_left_out_of_the_schema_is_refused_by_number() -> None:
    job = M["Job"]()
    job.metadata.name = "j"
    vol = job.spec.template.spec.volumes.add(name="old")
    # VolumeSource field 3 is gcePersistentDisk, which this server does not list: refused, not dropped
    vol.volumeSource.MergeFromString(bytes([3 << 3 | 2, 3, 1 << 3 | 2, 1]) + b"d")
    with pytest.raises(pb.UnsupportedKind, match=r"field number\(s\) 3 of Job.spec.template.spec.volumes"
                                                 r".volumeSource \(VolumeSource\)"):
        pb.decode_object(pb.encode_object(job, "batch/v1", "Job"))
