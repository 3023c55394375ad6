"""The typed decoding of request bodies answers what the generic walk answered: the same decoded
object (key order included), the same unknown fields and the same 400 messages, now that strings,
booleans, in-range integers, well-formed times and nulls skip the generic dispatch (and the
field's path strings, which only an error or an unknown field below it needs).

The oracle is the walk as it stood before (``_GenericWalker.model``); the inputs are the
kubelet's and the benchmark's pods, status writes and Events, and thousands of random mutations
of them (values of the wrong type, integers out of range, bad times, unknown fields, nulls)."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from pykubelet.server import apitypes, schema
from pykubelet.server.schema import DecodeError, _parse, go_name


class _GenericWalker(schema._Walker):
    """``_Walker.model`` before the fast paths: every field through ``value`` but strings and
    nested objects."""

    def model(self, obj: dict[str, Any], model: str, gopath: str, path: str,
              decoded: Mapping[str, Any] | None = None) -> dict[str, Any]:
        fields = apitypes.TYPES[model]
        struct = go_name(model)
        out: dict[str, Any] = {}
        for k, v in obj.items():
            t = fields.get(k)
            if t is None:
                self.unknown.append(f"{path}.{k}" if path else k)
                continue
            pt = _parse(t)
            if decoded is not None and pt[0] == "model" and type(v) is dict and decoded.get(k) is v:
                out[k] = v
                continue
            if pt is schema._STRING and type(v) is str:
                out[k] = v
                continue
            if pt[0] == "model" and type(v) is dict:
                out[k] = self.model(v, pt[1], f"{gopath}.{k}" if gopath else k, f"{path}.{k}" if path else k)
                continue
            d = self.value(v, pt, struct, f"{gopath}.{k}" if gopath else k, f"{path}.{k}" if path else k)
            if d is not None or t == "any":
                out[k] = d
        return out


def _generic(obj: dict[str, Any], model: str) -> tuple[str, Any]:
    w = _GenericWalker()
    try:
        return "ok", (json.dumps(w.model(obj, model, "", "")), w.unknown)
    except DecodeError as e:
        return "error", str(e)


def _fast(obj: dict[str, Any], model: str) -> tuple[str, Any]:
    try:
        got = schema.decode(obj, model)
    except DecodeError as e:
        return "error", str(e)
    return "ok", (json.dumps(got.obj), got.unknown)


POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "7", "generation": 1,
                 "creationTimestamp": "2026-12-02T00:00:00Z", "labels": {"app": "a"}, "deletionGracePeriodSeconds": 30,
                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o",
                                      "controller": True, "blockOwnerDeletion": True}]},
    "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 1, "restartPolicy": "Always",
             "enableServiceLinks": True, "priority": 0,
             "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                             "ports": [{"containerPort": 80, "protocol": "TCP"}],
                             "resources": {"requests": {"cpu": "100m", "memory": 64}},
                             "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1,
                                               "httpGet": {"port": 8080, "path": "/"}},
                             "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": True}]}],
             "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607,
                                                                                         "path": "token"}}],
                                                      "defaultMode": 420}}],
             "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
    "status": {"phase": "Running", "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
               "startTime": "2026-12-02T00:00:00Z", "qosClass": "BestEffort",
               "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": "2026-12-02T00:00:01Z"}],
               "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "busybox",
                                      "imageID": "", "started": True, "state": {"running": {
                                          "startedAt": "2026-12-02T00:00:01Z"}}, "lastState": {}}]},
}
EVENT: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.1", "namespace": "default"},
    "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u", "apiVersion": "v1",
                       "resourceVersion": "5", "fieldPath": "spec.containers{c}"},
    "reason": "Pulled", "message": "m", "type": "Normal", "count": 1, "firstTimestamp": "2026-12-02T00:00:00Z",
    "lastTimestamp": "2026-12-02T00:00:00Z", "eventTime": None, "source": {"component": "kubelet", "host": "n"},
    "reportingComponent": "kubelet", "reportingInstance": "n",
}
CASES = [(POD, "V1Pod"), (EVENT, "CoreV1Event")]

_ODD = [None, True, False, 0, -1, 1.0, 1.5, 2**31, -(2**31) - 1, 2**63, "", "x", "2026-12-02T00:00:00Z",
        "2026-12-02 00:00:00", "2026-12-02T00:00:00.5+01:00", [], [1], {}, {"a": 1}, "100m", "Zm9v"]


def test_the_benchmarks_objects_decode_as_before() -> None:
    for obj, model in CASES:
        assert _fast(obj, model) == _generic(obj, model)
        assert _fast(obj, model)[0] == "ok"


def _mutate(r: random.Random, v: Any) -> Any:
    if isinstance(v, dict):
        out = {k: (_mutate(r, x) if r.random() < 0.3 else x) for k, x in v.items()}
        if r.random() < 0.1:
            out[r.choice(["unknownField", "x", "name"])] = r.choice(_ODD)
        return out
    if isinstance(v, list):
        return [_mutate(r, x) if r.random() < 0.5 else x for x in v]
    return r.choice(_ODD) if r.random() < 0.7 else v


@pytest.mark.parametrize("seed", range(6))
def test_random_bodies_decode_and_fail_as_before(seed: int) -> None:
    r = random.Random(seed)
    for _ in range(700):
        obj, model = r.choice(CASES)
        body = _mutate(r, copy.deepcopy(obj))
        assert _fast(body, model) == _generic(body, model), body
