"""``pykubelet token``: bootstrap tokens for joining nodes (kubeadm's ``kubeadm token`` subset).

``create`` writes a ``bootstrap.kubernetes.io/token`` Secret through the API with the admin
kubeconfig and prints ``<id>.<secret>``; ``--bootstrap-kubeconfig FILE`` also writes a kubeconfig
for ``pykubelet agent --bootstrap-kubeconfig`` carrying that token and the cluster CA, which is all
a new machine needs to join (TLS bootstrap, see :mod:`pykubelet.agent.certificate`).  ``list`` and
``delete <id>`` manage existing ones.  The token format, Secret layout and default 24 h lifetime are
upstream's (:mod:`pykubelet.server.bootstrap_tokens`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from pykubelet.common.apiclient import ApiClient, ApiError
from pykubelet.server import bootstrap_tokens
from pykubelet.server.main import _duration


def _default_kubeconfig() -> str:
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "./.pykubelet/kubeconfig"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pykubelet token", description="bootstrap tokens for joining nodes")
    p.add_argument("--kubeconfig", default=None, help="admin kubeconfig (default: $KUBECONFIG or "
                   "./.pykubelet/kubeconfig)")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create", help="create a token and print <id>.<secret>")
    c.add_argument("--ttl", type=_duration, default=86400.0, help="lifetime (e.g. 24h, 30m; 0 = never expires)")
    c.add_argument("--description", default="")
    c.add_argument("--groups", default="", help="extra groups, each system:bootstrappers:<name>")
    c.add_argument("--bootstrap-kubeconfig", default=None, metavar="FILE",
                   help="also write a bootstrap kubeconfig using the token (for pykubelet agent "
                        "--bootstrap-kubeconfig)")
    c.add_argument("--server", default=None, help="API server URL written into the bootstrap kubeconfig "
                   "(default: the admin kubeconfig's)")
    sub.add_parser("list", help="list bootstrap tokens")
    d = sub.add_parser("delete", help="delete a token by id or <id>.<secret>")
    d.add_argument("token")
    return p


def bootstrap_kubeconfig(server: str, ca_pem: bytes, token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "pykubelet", "cluster": {
                "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
            "users": [{"name": "kubelet-bootstrap", "user": {"token": token}}],
            "contexts": [{"name": "bootstrap", "context": {"cluster": "pykubelet", "user": "kubelet-bootstrap"}}],
            "current-context": "bootstrap"}


def _cluster(kubeconfig: Path) -> tuple[str, bytes]:
    cfg = yaml.safe_load(kubeconfig.read_text())
    cluster = cfg["clusters"][0]["cluster"]
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca_path = Path(cluster["certificate-authority"])
        ca = (ca_path if ca_path.is_absolute() else kubeconfig.parent / ca_path).read_bytes()
    return str(cluster["server"]), ca


def _write_bootstrap(admin_kubeconfig: Path, out: Path, server: str | None, token: str) -> None:
    url, ca = _cluster(admin_kubeconfig)
    out.write_text(yaml.safe_dump(bootstrap_kubeconfig(server or url, ca, token), sort_keys=False))
    out.chmod(0o600)


async def _run(args: argparse.Namespace) -> int:
    kc = Path(args.kubeconfig or _default_kubeconfig())
    api = ApiClient.from_kubeconfig(kc, user_agent="pykubelet-token")
    base = f"/api/v1/namespaces/{bootstrap_tokens.NAMESPACE}/secrets"
    try:
        if args.cmd == "create":
            groups = [g for g in args.groups.split(",") if g]
            bad = [g for g in groups if not g.startswith(bootstrap_tokens.GROUP + ":")]
            if bad:
                print(f"--groups: {bad[0]!r} must start with {bootstrap_tokens.GROUP}:", file=sys.stderr)
                return 1
            tid, secret = bootstrap_tokens.generate()
            await api.create(base, bootstrap_tokens.token_secret(tid, secret, ttl_seconds=args.ttl or None,
                                                                 description=args.description, extra_groups=groups))
            token = f"{tid}.{secret}"
            if args.bootstrap_kubeconfig:
                _write_bootstrap(kc, Path(args.bootstrap_kubeconfig), args.server, token)
            print(token)
        elif args.cmd == "list":
            lst = await api.list(base)
            print(f"{'TOKEN ID':<10} {'EXPIRES':<22} DESCRIPTION")
            for s in lst.get("items") or []:
                if s.get("type") != bootstrap_tokens.SECRET_TYPE:
                    continue
                data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (s.get("data") or {}).items()}
                print(f"{data.get('token-id', ''):<10} {data.get('expiration', '<forever>'):<22} "
                      f"{data.get('description', '')}")
        else:
            tid = args.token.split(".", 1)[0]
            await api.delete(f"{base}/{bootstrap_tokens.PREFIX}{tid}")
            print(f'bootstrap token "{tid}" deleted')
        return 0
    except ApiError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 1
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
