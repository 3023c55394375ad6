"""The real kubectl's protobuf request bodies against the dev API server: the `kubectl create`
commands that use typed clients (secret, configmap, namespace, serviceaccount, token) must work
and store what JSON would have stored; undecodable bodies are 400/415 Status objects."""

from __future__ import annotations

import base64
import json

import yaml

from pykubelet.server import protobuf as pb

from .conftest import Http, Kubectl

PB = "application/vnd.kubernetes.protobuf"


async def test_kubectl_create_typed(kubectl: Kubectl, http: Http) -> None:
    await kubectl.ok("create", "secret", "generic", "s", "--from-literal=a=b", "--from-literal=empty=")
    got = yaml.safe_load(await kubectl.ok("get", "secret", "s", "-o", "yaml"))
    assert got["data"] == {"a": base64.b64encode(b"b").decode(), "empty": ""}

    await kubectl.ok("create", "secret", "docker-registry", "regcred", "--docker-server=reg.example:5000",
                     "--docker-username=alice", "--docker-password=s3cret")
    got = yaml.safe_load(await kubectl.ok("get", "secret", "regcred", "-o", "yaml"))
    assert got["type"] == "kubernetes.io/dockerconfigjson"
    auths = json.loads(base64.b64decode(got["data"][".dockerconfigjson"]))["auths"]
    assert auths["reg.example:5000"]["username"] == "alice"
    assert auths["reg.example:5000"]["password"] == "s3cret"

    await kubectl.ok("create", "configmap", "c", "--from-literal=x=y", "--from-literal=k=v w")
    got = yaml.safe_load(await kubectl.ok("get", "configmap", "c", "-o", "yaml"))
    assert got["data"] == {"x": "y", "k": "v w"}

    await kubectl.ok("create", "namespace", "team-a")
    got = yaml.safe_load(await kubectl.ok("get", "namespace", "team-a", "-o", "yaml"))
    assert got["metadata"]["name"] == "team-a"
    assert got["status"]["phase"] == "Active"

    await kubectl.ok("create", "serviceaccount", "sa", "-n", "team-a")
    got = yaml.safe_load(await kubectl.ok("get", "serviceaccount", "sa", "-n", "team-a", "-o", "yaml"))
    assert got["metadata"]["namespace"] == "team-a"

    token = (await kubectl.ok("create", "token", "sa", "-n", "team-a", "--audience=aud1", "--duration=2h")).strip()
    assert token.count(".") == 2
    st, review = await http.req("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                 "spec": {"token": token, "audiences": ["aud1"]}})
    assert st == 201, review
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == "system:serviceaccount:team-a:sa"

    # bound to an object, which must exist
    rc, _out, err = await kubectl.run("create", "token", "sa", "-n", "team-a", "--bound-object-kind=Secret",
                                      "--bound-object-name=nope")
    assert rc == 1 and "not found" in err

    # AlreadyExists still comes back as a Status kubectl prints
    rc, _out, err = await kubectl.run("create", "configmap", "c", "--from-literal=x=z")
    assert rc == 1 and "already exists" in err


async def test_protobuf_errors_are_status(http: Http) -> None:
    st, body = await http.req("POST", "/api/v1/namespaces/default/secrets", raw=b"k8s\x00\xff\xff", content_type=PB)
    assert st == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"
    pod = pb.MESSAGES["ConfigMap"]()
    pod.metadata.name = "p"
    st, body = await http.req("POST", "/api/v1/namespaces/default/pods", raw=pb.encode_object(pod, "v1", "Pod"),
                              content_type=PB)
    assert st == 415 and body["reason"] == "UnsupportedMediaType" and "Pod" in body["message"]
    st, body = await http.req("DELETE", "/api/v1/namespaces/default/configmaps/x", raw=b"k8s\x00\x0a\x05",
                              content_type=PB)
    assert st == 400 and body["kind"] == "Status"


TEMPLATE_SPEC = {
    "restartPolicy": "Never",
    "containers": [{
        "name": "c", "image": "busybox:1.36", "command": ["sh", "-c", "true"],
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"containerName": "c", "resource": "limits.cpu",
                                                                   "divisor": "1m"}}},
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw", "optional": True}}}],
        "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"}, "periodSeconds": 7},
        "readinessProbe": {"tcpSocket": {"port": 8080}, "failureThreshold": 2},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                         {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True}],
        "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }],
    "volumes": [{"name": "scratch", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "settings", "defaultMode": 420}}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
}


def _kept(sent: object, got: object) -> bool:
    """Everything sent is in what the server stored (defaulting may add fields, never drop any)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(k in got and _kept(v, got[k]) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(got, list) and len(sent) == len(got) and all(map(_kept, sent, got))
    return sent == got


async def test_a_job_created_from_a_cronjob_keeps_its_whole_template(kubectl: Kubectl, http: Http) -> None:
    cronjob = {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "default"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"backoffLimit": 0,
                                                                   "template": {"spec": TEMPLATE_SPEC}}}},
    }
    code, body = await http.req("POST", "/apis/batch/v1/namespaces/default/cronjobs", cronjob)
    assert code == 201, body
    await kubectl.ok("create", "job", "by-hand", "--from=cronjob/nightly")
    code, job = await http.req("GET", "/apis/batch/v1/namespaces/default/jobs/by-hand")
    assert code == 200, job
    spec = job["spec"]["template"]["spec"]
    assert _kept(TEMPLATE_SPEC, spec), json.dumps(spec, indent=1)
    assert spec["volumes"][0] == {"name": "scratch", "emptyDir": {}}
    assert spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert spec["containers"][0]["livenessProbe"]["httpGet"]["port"] == "http"
    assert spec["containers"][0]["readinessProbe"]["tcpSocket"]["port"] == 8080
    assert job["spec"]["backoffLimit"] == 0


async def test_kubectl_create_deployment_stores_its_template(kubectl: Kubectl, http: Http) -> None:
    await kubectl.ok("create", "deployment", "web", "--image=nginx:1.27", "--replicas=2", "--port=80")
    code, dep = await http.req("GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert code == 200, dep
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "nginx:1.27" and c["ports"][0]["containerPort"] == 80
