"""`pykubelet images ...`: build and import the offline images outside of `pykubelet up`.

Useful when pointing the agent at a containerd the user runs themselves (``--container-runtime-
endpoint``): that containerd still needs the pause image named in its ``sandbox_image`` and the
busybox images the examples use, and there is no internet to pull them from. ``build`` writes the
archives only (e.g. to push them to a local registry); ``bootstrap`` also imports them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from pykubelet.up import images


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pykubelet images", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    boot = sub.add_parser("bootstrap", help="build the offline images and import them into containerd")
    boot.add_argument("--address", default="/run/containerd/containerd.sock", help="containerd socket")
    boot.add_argument("--namespace", default="k8s.io")
    boot.add_argument("--cache-dir", type=Path, default=None)
    build = sub.add_parser("build", help="build the OCI archives and print their paths")
    build.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    try:
        if args.cmd == "build":
            for image in images.build_all(args.cache_dir):
                for ref in image.refs:
                    print(f"{image.archive}\t{ref}\t{image.digests[ref]}")
            return 0
        imported = asyncio.run(
            images.bootstrap_images(args.address, namespace=args.namespace, cache_dir=args.cache_dir, log=_log)
        )
    except images.ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if imported:
        print(f"imported {len(imported)} image reference(s)", file=sys.stderr)
    else:
        print("all images already present", file=sys.stderr)
    for ref in images.ALL_IMAGES:
        print(ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
