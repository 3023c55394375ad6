"""`pykubelet images ...`: the node's images -- offline set, user-built loads, listing.

* ``bootstrap`` / ``build``: the offline images (pause, busybox) outside of `pykubelet up`, e.g.
  for a containerd the user runs themselves (``--container-runtime-endpoint``).
* ``load FILE|DIR...``: images built elsewhere (a ``docker save`` tar, an OCI archive or an OCI
  layout directory) go into the node's local registry (the mirror `pykubelet up` runs) and into
  containerd under their own names, like ``kind load`` / ``k3s ctr images import``; the image's
  registry becomes a mirrored one, so a pull with policy ``Always`` finds it offline too. Errors name
  the file and say what is wrong: not an image archive, no image for this node's platform, a name
  without a tag.
* ``list``: what containerd holds and what the mirror serves.

Where the registry and containerd are comes from ``<data-dir>/images.json`` (written by `pykubelet
up`), or ``--registry`` / ``--address`` / ``--hosts-dir``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from pykubelet.up import images
from pykubelet.up.registry import LocalRegistry, RegistryError, split_ref, write_mirror_hosts_toml

STATE_FILE = "images.json"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_state(data_dir: Path, registry: str, address: str, hosts_dir: Path) -> None:
    """Record (for `pykubelet images load/list`) where `up` runs the mirror and containerd."""
    path = data_dir / STATE_FILE
    path.write_text(json.dumps({"registry": registry, "address": address, "hosts_dir": str(hosts_dir)}) + "\n")


def _state(args: argparse.Namespace) -> tuple[str | None, str, Path | None]:
    state: dict[str, str] = {}
    try:
        state = json.loads((Path(args.data_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        pass
    registry = args.registry or state.get("registry")
    address = args.address or state.get("address") or "/run/containerd/containerd.sock"
    hosts = args.hosts_dir or state.get("hosts_dir")
    return registry, address, Path(hosts) if hosts else None


class Progress:
    """A one-line progress bar on a terminal; plain lines otherwise."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.tty = sys.stderr.isatty()

    def step(self, what: str) -> None:
        if self.tty:
            width = 24
            filled = width * self.done // max(1, self.total)
            bar = "#" * filled + "-" * (width - filled)
            sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {what[:60]:<60}")
            sys.stderr.flush()
        else:
            _log(f"[{self.done + 1}/{self.total}] {what}")

    def advance(self) -> None:
        self.done += 1

    def finish(self) -> None:
        if self.tty:
            self.step("done")
            sys.stderr.write("\n")


async def load(paths: list[Path], registry: str | None, address: str, hosts_dir: Path | None) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="pykubelet-load-") as tmp:
        scratch = Path(tmp)
        sources = [s for p in paths for s in images.find_sources(p, scratch)]
        reg = None
        if registry:
            reg = LocalRegistry(scratch / "unused", port=int(registry.rsplit(":", 1)[1]))
        else:
            _log("warning: no local registry known (run `pykubelet up` or pass --registry): containerd only")
        progress = Progress(len(sources) * (2 if reg else 1))
        loaded = []
        for src in sources:
            if reg is not None:
                progress.step(f"pushing {src.ref} to the mirror")
                await asyncio.to_thread(_push, reg, src)
                progress.advance()
                if hosts_dir is not None:
                    write_mirror_hosts_toml(hosts_dir, split_ref(src.ref)[0], reg.host)
            progress.step(f"importing {src.ref} into containerd")
            archive = await asyncio.to_thread(images.containerd_archive, src, scratch)
            await images._ctr(address, "k8s.io", "images", "import", "--all-platforms", str(archive))
            progress.advance()
            loaded.append(src.ref)
        progress.finish()
        return loaded


def _push(reg: LocalRegistry, src: images.LoadSource) -> None:
    if src.layout is not None:
        reg.mirror_layout(src.layout, src.layout_ref, src.ref, src.manifest_digest or None)
        return
    registry, path, tag = split_ref(src.ref)
    import subprocess

    res = subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", src.skopeo_src,
                          f"docker://{reg.host}/{registry}/{path}:{tag}"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RegistryError(f"skopeo copy of {src.ref} failed: {res.stderr.strip()}")


async def list_all(registry: str | None, address: str) -> list[tuple[str, str, str]]:
    """(image, digest in containerd or "", "yes"/"no"/"?" in the mirror)."""
    node: dict[str, str] = {}
    try:
        node = await images.list_images(address)
    except images.ImageError as e:
        _log(f"warning: containerd at {address}: {e}")
    mirrored: set[str] = set()
    if registry:
        reg = LocalRegistry(Path(tempfile.gettempdir()), port=int(registry.rsplit(":", 1)[1]))
        try:
            for repo, tags in (await asyncio.to_thread(reg.catalog)).items():
                mirrored.update(f"{repo}:{t}" for t in tags)
        except RegistryError as e:
            _log(f"warning: {e}")
    rows = []
    for ref in sorted(set(node) | mirrored):
        if ref.startswith("sha256:") or "@sha256:" in ref:
            continue
        rows.append((ref, node.get(ref, ""), ("yes" if ref in mirrored else "no") if registry else "?"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pykubelet images", description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    boot = sub.add_parser("bootstrap", help="build the offline images and import them into containerd")
    boot.add_argument("--address", default="/run/containerd/containerd.sock", help="containerd socket")
    boot.add_argument("--namespace", default="k8s.io")
    boot.add_argument("--cache-dir", type=Path, default=None)
    build = sub.add_parser("build", help="build the OCI archives and print their paths")
    build.add_argument("--cache-dir", type=Path, default=None)
    for name, help_ in (("load", "load docker save tars, OCI archives or OCI layouts into the node"),
                        ("list", "list the images of containerd and of the local mirror")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--data-dir", default="./.pykubelet", help="the `pykubelet up` data dir")
        p.add_argument("--registry", default=None, help="local registry host:port (default: from the data dir)")
        p.add_argument("--address", default=None, help="containerd socket (default: from the data dir)")
        p.add_argument("--hosts-dir", default=None, help="containerd registry config_path (hosts.toml folders)")
        if name == "load":
            p.add_argument("paths", nargs="+", type=Path, metavar="FILE|DIR")
    args = parser.parse_args(argv)

    try:
        if args.cmd == "build":
            for image in images.build_all(args.cache_dir):
                for ref in image.refs:
                    print(f"{image.archive}\t{ref}\t{image.digests[ref]}")
            return 0
        if args.cmd == "load":
            registry, address, hosts = _state(args)
            for ref in asyncio.run(load(args.paths, registry, address, hosts)):
                print(f"loaded {ref}")
            return 0
        if args.cmd == "list":
            registry, address, _hosts = _state(args)
            rows = asyncio.run(list_all(registry, address))
            width = max([len("IMAGE"), *(len(r[0]) for r in rows)])
            print(f"{'IMAGE':<{width}}  {'NODE DIGEST':<19}  MIRROR")
            for ref, digest, mirror in rows:
                short = digest.split(":", 1)[1][:12] if digest else "<none>"
                print(f"{ref:<{width}}  {short:<19}  {mirror}")
            return 0
        imported = asyncio.run(
            images.bootstrap_images(args.address, namespace=args.namespace, cache_dir=args.cache_dir, log=_log)
        )
    except (images.ImageError, RegistryError) as e:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
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
