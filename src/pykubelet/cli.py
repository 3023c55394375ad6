"""`pykubelet <command>`: one entry point, one package per command.

Each command's ``main(argv) -> int`` lives in the package that owns it, so this module is only a table;
the heavy imports of one command (gRPC for the agent, SQLite for the server) are not paid by another.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("pykubelet.up.main", "all-in-one: private containerd + control plane + agent"),
    "server": ("pykubelet.server.main", "the dev control plane (API server, scheduler, node controller)"),
    "agent": ("pykubelet.agent.main", "the node agent (kubelet)"),
    "images": ("pykubelet.up.images_cli", "the node's images: bootstrap the offline set, load, list"),
    "crictl": ("pykubelet.crictl.main", "inspect the node's runtime like crictl (ps, logs, images, rmi...)"),
    "fakecri": ("pykubelet.fakecri.main", "serve the in-memory fake CRI runtime on a unix socket"),
    "token": ("pykubelet.server.tokencli", "bootstrap tokens for joining nodes: create, list, delete"),
    "hollow": ("pykubelet.up.hollow", "N hollow nodes (agents on fake runtimes) to scale-test a control plane"),
}


def usage() -> str:
    lines = ["usage: pykubelet <command> [flags]", "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("--version", "version"):
        from pykubelet import KUBERNETES_VERSION, __version__

        print(f"pykubelet {__version__} (Kubernetes {KUBERNETES_VERSION})")
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        print(f"pykubelet: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
