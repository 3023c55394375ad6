"""envFrom injects ConfigMap and Secret keys as variables; keys that cannot be variables are reported."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pytest

from pykubelet.agent.kuberuntime.criconfig import ConfigError, make_env
from tests.builders import container, pod

JSON = dict[str, Any]
OBJECTS: dict[tuple[str, str], JSON] = {
    ("ConfigMap", "cfg"): {"data": {"MODE": "fast", "1bad": "x", "with space": "y", "ok.dotted": "z"},
                           "binaryData": {"BLOB": base64.b64encode(b"\x00").decode()}},
    ("Secret", "sec"): {"data": {"PASSWORD": base64.b64encode(b"hunter2").decode(), "9lives": "eA=="}},
}


async def lookup(kind: str, namespace: str, name: str) -> JSON | None:
    return OBJECTS.get((kind, name))


async def env_of(env_from: list[JSON], warnings: list[tuple[str, str]]) -> dict[str, str]:
    c = container(envFrom=env_from)
    out = await make_env(pod(containers=[c]), c, pod_ips=[], host_ips=[], node_name="n", node_allocatable={
        "cpu": Decimal(1)}, lookup=lookup, warn=lambda reason, msg: warnings.append((reason, msg)))
    return dict(out)


async def test_config_map_keys_become_prefixed_variables_and_invalid_names_are_reported() -> None:
    warnings: list[tuple[str, str]] = []
    env = await env_of([{"configMapRef": {"name": "cfg"}, "prefix": "APP_"}], warnings)
    assert env == {"APP_MODE": "fast", "APP_1bad": "x", "APP_ok.dotted": "z"}  # binaryData is not env (upstream)
    assert warnings == [("InvalidEnvironmentVariableNames",
                         "Keys [APP_with space] from the EnvFrom configMap default/cfg were skipped since they are "
                         "considered invalid environment variable names.")]


async def test_secret_values_are_decoded_and_invalid_keys_reported() -> None:
    warnings: list[tuple[str, str]] = []
    env = await env_of([{"secretRef": {"name": "sec"}}], warnings)
    assert env == {"PASSWORD": "hunter2"}
    assert warnings == [("InvalidEnvironmentVariableNames",
                         "Keys [9lives] from the EnvFrom secret default/sec were skipped since they are considered "
                         "invalid environment variable names.")]


async def test_a_missing_source_fails_unless_optional() -> None:
    assert await env_of([{"configMapRef": {"name": "absent", "optional": True}}], []) == {}
    with pytest.raises(ConfigError, match='configmap "absent" not found'):
        await env_of([{"configMapRef": {"name": "absent"}}], [])
