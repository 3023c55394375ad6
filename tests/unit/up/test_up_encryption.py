"""`pykubelet up` turns on encryption of Secrets at rest unless the user brings a config of their own."""

from __future__ import annotations

from pathlib import Path

from pykubelet.up import main as up


def _flag(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--encryption-provider-config")]


def test_server_gets_the_generated_encryption_config_by_default(tmp_path: Path) -> None:
    argv = up.server_argv(up.build_parser().parse_args([]), tmp_path)
    i = argv.index("--encryption-provider-config")
    assert argv[i + 1] == str(tmp_path / "pki" / "encryption-config.yaml")
    assert up.encryption_config_path(tmp_path) == tmp_path / "pki" / "encryption-config.yaml"


def test_users_own_encryption_config_replaces_the_generated_one(tmp_path: Path) -> None:
    for extra in (["--server-arg=--encryption-provider-config=/etc/enc.yaml"],
                  ["--server-arg=--encryption-provider-config", "--server-arg=/etc/enc.yaml"]):
        args = up.build_parser().parse_args(extra)
        assert not up.default_encryption(args)
        argv = up.server_argv(args, tmp_path)
        assert len(_flag(argv)) == 1 and str(tmp_path / "pki") not in " ".join(argv)


def test_injected_server_command_gets_no_encryption_flag(tmp_path: Path) -> None:
    args = up.build_parser().parse_args(["--server-command", "sleep 5"])
    assert not up.default_encryption(args)
    assert _flag(up.server_argv(args, tmp_path)) == []
