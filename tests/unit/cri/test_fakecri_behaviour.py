"""How the fake runtime derives container lifetime/exit code from the command line."""

from __future__ import annotations

import math

import pytest

from pykubelet.fakecri import behaviour_for, normalize_image


@pytest.mark.parametrize(
    ("command", "args", "seconds", "code"),
    [
        (["sh", "-c", "exit 1"], [], 0.0, 1),
        (["/bin/sh"], ["-c", "exit 3"], 0.0, 3),
        (["sh", "-c", "echo hi; exit 0"], [], 0.0, 0),
        (["sleep", "2"], [], 2.0, 0),
        (["sh", "-c", "sleep 1.5"], [], 1.5, 0),
        (["sh", "-c", "sleep 2; exit 4"], [], 2.0, 4),
        (["sh", "-c", "sleep 1 && false"], [], 1.0, 1),
        (["true"], [], 0.0, 0),
        (["sh", "-c", "echo done"], [], 0.0, 0),
    ],
)
def test_finite(command: list[str], args: list[str], seconds: float, code: int) -> None:
    b = behaviour_for(command, args)
    assert b.run_seconds is not None and math.isclose(b.run_seconds, seconds)
    assert b.exit_code == code


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ([], []),
        (["nginx"], ["-g", "daemon off;"]),
        (["sleep", "infinity"], []),
        (["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"], []),
        (["sh", "-c", "echo hi; sleep 3600 & wait"], []),
        (["/pause"], []),
    ],
)
def test_runs_forever(command: list[str], args: list[str]) -> None:
    assert behaviour_for(command, args).run_seconds is None


def test_echo_output() -> None:
    assert behaviour_for(["sh", "-c", "echo hello world; echo 'a b'"], []).output == ["hello world", "a b"]


@pytest.mark.parametrize(
    ("ref", "norm"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/nginx", "docker.io/library/nginx:latest"),
        ("foo/bar:1", "docker.io/foo/bar:1"),
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
        ("127.0.0.1:5000/app", "127.0.0.1:5000/app:latest"),
        ("localhost/app:v1", "localhost/app:v1"),
        ("busybox@sha256:abcd", "docker.io/library/busybox@sha256:abcd"),
    ],
)
def test_normalize_image(ref: str, norm: str) -> None:
    assert normalize_image(ref) == norm
