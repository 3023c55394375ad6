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


async def test_a_job_created_from_a_cronjob_keeps_its_whole_template_or_is_refused(kubectl: Kubectl, http: Http) -> None:
    cronjob = {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "default"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"],
                            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}}}}},
    }
    code, body = await http.req("POST", "/apis/batch/v1/namespaces/default/cronjobs", cronjob)
    assert code == 201, body
    rc, _out, err = await kubectl.run("create", "job", "by-hand", "--from=cronjob/nightly")
    if rc != 0:  # the protobuf schema lacks a field the template carries: said, nothing stored
        assert "not known to this server" in err, err
        code, _ = await http.req("GET", "/apis/batch/v1/namespaces/default/jobs/by-hand")
        assert code == 404
        return
    code, job = await http.req("GET", "/apis/batch/v1/namespaces/default/jobs/by-hand")
    spec = job["spec"]["template"]["spec"]
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
