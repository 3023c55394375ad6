"""Offline images: build OCI image archives from what is on this machine and import them.

The machines pykubelet runs on have no internet, yet every pod needs a sandbox ("pause") image and
the examples and tests need a small general-purpose image. Both are synthesised locally:

* busybox: ``/bin/busybox`` from Debian's ``busybox-static`` plus one symlink per applet (taken from
  ``busybox --list-full``), ``/etc/passwd``, ``/etc/group``, ``/tmp`` and ``/var/www`` (for httpd
  examples). The image config sets ``PATH`` and ``Cmd ["sh"]`` like the Docker Hub image does.
* pause: a tiny C program compiled with ``gcc -Os -static`` that does what upstream's
  ``build/pause/linux/pause.c`` does (sleep in ``pause()``, reap adopted children on SIGCHLD, exit
  on SIGINT/SIGTERM), run as user 65535 like ``registry.k8s.io/pause``.

The images are written as OCI image-layout archives (``oci-layout``, ``index.json``,
``blobs/sha256/...``) with nothing but tarfile/json/hashlib. ``index.json`` carries both
``io.containerd.image.name`` (the full reference ``ctr images import`` uses) and
``org.opencontainers.image.ref.name`` (the tag skopeo's ``oci:DIR:TAG`` looks up). Archives are
made byte-for-byte reproducible (mtime 0, uid 0, gzip without timestamp) and cached under a key
derived from their inputs, so a second bootstrap neither recompiles nor re-tars anything. Importing
skips images that containerd already has with the same manifest digest, which keeps ``pykubelet up``
restarts fast.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from pykubelet.common import aio

# Bump when the layout of the generated images changes, so caches are rebuilt.
FORMAT_VERSION = "4"

BUSYBOX_IMAGE = "docker.io/library/busybox:latest"
BUSYBOX_PINNED_IMAGE = "docker.io/library/busybox:1.36"
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
BUSYBOX_REFS = (BUSYBOX_IMAGE, BUSYBOX_PINNED_IMAGE)
ALL_IMAGES = (*BUSYBOX_REFS, PAUSE_IMAGE)

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE_SOURCE = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }
static void on_chld(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {}
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGINT, &sa, 0);
    sigaction(SIGTERM, &sa, 0);
    sa.sa_handler = on_chld;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, 0);
    for (;;) pause();
    return 1;
}
"""

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
    "www-data:x:33:33:www-data:/var/www:/bin/false\n"
    "nobody:x:65534:65534:nobody:/home:/bin/false\n"
)
GROUP = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\nnogroup:x:65534:\n"
INDEX_HTML = "hello from pykubelet busybox\n"

Log = Callable[[str], None]


class ImageError(RuntimeError):
    """Building or importing an offline image failed."""


def _noop(_: str) -> None:
    pass


def oci_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def default_cache_dir() -> Path:
    env = os.environ.get("PYKUBELET_IMAGE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "pykubelet" / "images"


# ---------------------------------------------------------------------------------------------
# Reproducible tar building


@dataclasses.dataclass(frozen=True)
class Entry:
    """One file system entry of a layer: kind is 'dir', 'file' or 'symlink'."""

    path: str
    kind: str
    mode: int = 0o755
    data: bytes = b""
    target: str = ""


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """An uncompressed, deterministic tar of the given entries (parents created as needed)."""
    seen: set[str] = set()
    ordered: list[Entry] = []

    def add_parents(path: str) -> None:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            if parent and parent not in seen:
                seen.add(parent)
                ordered.append(Entry(parent, "dir"))

    for e in entries:
        p = e.path.strip("/")
        add_parents(p)
        if p in seen:
            continue
        seen.add(p)
        ordered.append(dataclasses.replace(e, path=p))

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in ordered:
            info = tarfile.TarInfo(e.path + ("/" if e.kind == "dir" else ""))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = e.mode
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            elif e.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e.target
                info.mode = 0o777
                tf.addfile(info)
            else:
                info.size = len(e.data)
                tf.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return out.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _canon(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclasses.dataclass
class BuiltImage:
    """An OCI archive on disk and what it contains (ref -> manifest digest)."""

    refs: tuple[str, ...]
    archive: Path
    digests: dict[str, str]

    @property
    def manifest_digest(self) -> str:
        """Digest of the first ref's manifest."""
        return self.digests[self.refs[0]]


def write_oci_archive(
    out: Path, refs: Iterable[str], layer: bytes, config: dict[str, object]
) -> BuiltImage:
    """Write an OCI image-layout tar with one single-layer image per ref, all sharing the layer.

    Each ref gets its own config (labelled with its ref), hence its own image ID: CRI RemoveImage
    deletes every tag of an image ID, so removing busybox:latest must not take busybox:1.36 along.
    """
    refs = tuple(refs)
    gz = _gzip(layer)
    blobs: dict[str, bytes] = {_sha(gz): gz}
    manifests: list[dict[str, object]] = []
    digests: dict[str, str] = {}
    for ref in refs:
        cfg = json.loads(json.dumps(config))
        inner = dict(cfg.get("config") or {})
        inner["Labels"] = {**(inner.get("Labels") or {}), "io.pykubelet.image.ref": ref}
        cfg["config"] = inner
        cfg["rootfs"] = {"type": "layers", "diff_ids": [_sha(layer)]}
        cfg_bytes = _canon(cfg)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(cfg_bytes),
                "size": len(cfg_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _sha(gz),
                    "size": len(gz),
                }
            ],
        }
        man_bytes = _canon(manifest)
        blobs[_sha(cfg_bytes)] = cfg_bytes
        blobs[_sha(man_bytes)] = man_bytes
        digests[ref] = _sha(man_bytes)
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _sha(man_bytes),
                "size": len(man_bytes),
                "platform": {"architecture": cfg.get("architecture", oci_arch()), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
                },
            }
        )
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }
    files: list[tuple[str, bytes]] = [
        ("oci-layout", _canon({"imageLayoutVersion": "1.0.0"})),
        ("index.json", _canon(index)),
    ]
    for digest in sorted(blobs):
        files.append(("blobs/sha256/" + digest.split(":", 1)[1], blobs[digest]))
    entries = [Entry(name, "file", 0o644, data) for name, data in files]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.write_bytes(layer_tar(entries))
    os.replace(tmp, out)
    return BuiltImage(refs, out, digests)


def _image_config(env: list[str], **extra: object) -> dict[str, object]:
    cfg: dict[str, object] = {"Env": env}
    cfg.update(extra)
    return {
        "created": "1970-01-01T00:00:00Z",
        "architecture": oci_arch(),
        "os": "linux",
        "config": cfg,
    }


# ---------------------------------------------------------------------------------------------
# busybox


def _busybox_applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise ImageError(f"{busybox} --list-full failed: {out.stderr.strip()}")
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})


def busybox_entries(busybox_bytes: bytes, applets: Iterable[str]) -> list[Entry]:
    entries = [
        Entry("bin", "dir"),
        Entry("bin/busybox", "file", 0o755, busybox_bytes),
        Entry("sbin", "dir"),
        Entry("usr/bin", "dir"),
        Entry("usr/sbin", "dir"),
        Entry("etc", "dir"),
        Entry("etc/passwd", "file", 0o644, PASSWD.encode()),
        Entry("etc/group", "file", 0o644, GROUP.encode()),
        Entry("root", "dir", 0o700),
        Entry("home", "dir"),
        Entry("tmp", "dir", 0o1777),
        Entry("var/www", "dir"),
        Entry("var/www/index.html", "file", 0o644, INDEX_HTML.encode()),
    ]
    for applet in applets:
        applet = applet.strip("/")
        if applet in ("bin/busybox", ""):
            continue
        depth = applet.count("/")
        entries.append(Entry(applet, "symlink", target="../" * depth + "bin/busybox"))
    return entries


def find_busybox() -> Path:
    for cand in ("/bin/busybox", "/usr/bin/busybox"):
        if Path(cand).is_file():
            return Path(cand)
    found = shutil.which("busybox")
    if not found:
        raise ImageError("busybox not found (apt-get install busybox-static)")
    return Path(found)


def build_busybox(cache_dir: Path, busybox: Path | None = None) -> BuiltImage:
    """Build (or reuse from cache) the busybox archive holding both busybox refs."""
    busybox = busybox or find_busybox()
    data = busybox.read_bytes()
    applets = _busybox_applets(busybox)
    key = hashlib.sha256(
        _canon([FORMAT_VERSION, hashlib.sha256(data).hexdigest(), applets, list(BUSYBOX_REFS)])
    ).hexdigest()[:16]
    return _cached(
        cache_dir,
        f"busybox-{key}",
        lambda out: write_oci_archive(
            out,
            BUSYBOX_REFS,
            layer_tar(busybox_entries(data, applets)),
            _image_config([DEFAULT_PATH], Cmd=["sh"]),
        ),
    )


# ---------------------------------------------------------------------------------------------
# pause


def _compile_pause(workdir: Path) -> bytes:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise ImageError("no C compiler found to build the pause image (apt-get install gcc)")
    src = workdir / "pause.c"
    src.write_text(PAUSE_SOURCE)
    binary = workdir / "pause"
    res = subprocess.run(
        [gcc, "-Os", "-static", "-s", "-o", str(binary), str(src)], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise ImageError(f"compiling pause failed: {res.stderr.strip()}")
    return binary.read_bytes()


def build_pause(cache_dir: Path) -> BuiltImage:
    gcc = shutil.which("gcc") or shutil.which("cc") or ""
    ver = ""
    if gcc:
        ver = subprocess.run([gcc, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(_canon([FORMAT_VERSION, PAUSE_SOURCE, ver, PAUSE_IMAGE])).hexdigest()[:16]

    def build(out: Path) -> BuiltImage:
        with tempfile.TemporaryDirectory(prefix="pykubelet-pause-") as tmp:
            binary = _compile_pause(Path(tmp))
        layer = layer_tar([Entry("pause", "file", 0o755, binary)])
        cfg = _image_config([DEFAULT_PATH], Entrypoint=["/pause"], User="65535:65535")
        return write_oci_archive(out, [PAUSE_IMAGE], layer, cfg)

    return _cached(cache_dir, f"pause-{key}", build)


def _cached(cache_dir: Path, stem: str, build: Callable[[Path], BuiltImage]) -> BuiltImage:
    archive = cache_dir / f"{stem}.tar"
    meta = cache_dir / f"{stem}.json"
    if archive.is_file() and meta.is_file():
        try:
            m = json.loads(meta.read_text())
            return BuiltImage(tuple(m["refs"]), archive, dict(m["digests"]))
        except (ValueError, KeyError):
            pass
    built = build(archive)
    tmp = meta.with_name(meta.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"refs": list(built.refs), "digests": built.digests}))
    os.replace(tmp, meta)
    return built


def build_all(cache_dir: Path | None = None) -> list[BuiltImage]:
    """Build (or reuse) every offline image archive."""
    cache_dir = cache_dir or default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    return [build_busybox(cache_dir), build_pause(cache_dir)]


# ---------------------------------------------------------------------------------------------
# import into containerd


async def _ctr(address: str, namespace: str, *args: str, limit: float = 120) -> str:
    try:
        rc, out, err = await aio.run_child("ctr", "--address", address, "-n", namespace, *args, timeout=limit)
    except TimeoutError:
        raise ImageError(f"ctr {' '.join(args)} timed out") from None
    if rc != 0:
        raise ImageError(f"ctr {' '.join(args)} failed: {err.decode().strip()}")
    return out.decode()


async def list_images(address: str, namespace: str = "k8s.io") -> dict[str, str]:
    """Image ref -> target digest as containerd reports it."""
    out = await _ctr(address, namespace, "images", "ls")
    images: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3:
            images[cols[0]] = cols[2]
    return images


async def import_image(address: str, image: BuiltImage, namespace: str = "k8s.io") -> None:
    await _ctr(address, namespace, "images", "import", str(image.archive))


async def bootstrap_images(
    address: str,
    *,
    namespace: str = "k8s.io",
    cache_dir: Path | None = None,
    log: Log | None = None,
) -> list[str]:
    """Make every offline image present in containerd; returns the refs that were imported."""
    log = log or _noop
    built = await asyncio.to_thread(build_all, cache_dir)
    present = await list_images(address, namespace)
    imported: list[str] = []
    for image in built:
        if all(present.get(ref) == image.digests[ref] for ref in image.refs):
            continue
        log(f"importing {', '.join(image.refs)}")
        await import_image(address, image, namespace)
        imported.extend(image.refs)
    after = await list_images(address, namespace)
    missing = [ref for img in built for ref in img.refs if ref not in after]
    if missing:
        raise ImageError(f"images missing after import: {missing}")
    return imported


def archive_for(ref: str, cache_dir: Path | None = None) -> BuiltImage:
    """The (built or cached) archive containing ref."""
    for image in build_all(cache_dir):
        if ref in image.refs:
            return image
    raise ImageError(f"no offline image named {ref}")


# ---------------------------------------------------------------------------------------------
# `pykubelet images load`: images built elsewhere (docker save, OCI archive, OCI layout)


@dataclasses.dataclass
class LoadSource:
    """One image found in a user's file: its full name and how skopeo / ctr read it."""

    ref: str  # fully qualified, tagged: docker.io/library/busybox:latest
    skopeo_src: str  # oci:DIR:NAME or docker-archive:FILE:NAME
    layout: Path | None  # the OCI layout dir (None for docker archives)
    archive: Path | None  # the docker save tar (None for OCI)
    manifest_digest: str = ""
    layout_ref: str = ""  # the name the OCI layout's index.json gives it (skopeo's oci:DIR:REF)


def normalize_ref(name: str, where: str) -> str:
    """``busybox:1`` -> ``docker.io/library/busybox:1``; a name without a tag is an error."""
    if "@" in name:
        raise ImageError(f"{where}: image {name!r} is named by digest; give it a name with a tag")
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ImageError(f"{where}: image name {name!r} has no tag (tag it, e.g. {name}:latest)")
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = "docker.io/" + (name if "/" in name else "library/" + name)
    return name


def _platform_of(blobs: Path, desc: dict[str, object], where: str, name: str) -> dict[str, object]:
    """The descriptor of the manifest for this node's platform (resolving an image index)."""
    media = str(desc.get("mediaType", ""))
    digest = str(desc.get("digest", ""))
    try:
        data = json.loads((blobs / digest.split(":", 1)[1]).read_bytes())
    except (OSError, ValueError, IndexError):
        raise ImageError(f"{where}: blob {digest} of {name} is missing or not JSON") from None
    if media.endswith("image.index.v1+json") or media.endswith("manifest.list.v2+json") or "manifests" in data:
        for m in data.get("manifests") or []:
            p = m.get("platform") or {}
            if p.get("os", "linux") == "linux" and p.get("architecture") == oci_arch():
                return _platform_of(blobs, m, where, name)
        have = sorted({f"{(m.get('platform') or {}).get('os')}/{(m.get('platform') or {}).get('architecture')}"
                       for m in data.get("manifests") or []})
        raise ImageError(f"{where}: {name} has no linux/{oci_arch()} image (it has {', '.join(have) or 'none'})")
    cfg_digest = str((data.get("config") or {}).get("digest", ""))
    try:
        cfg = json.loads((blobs / cfg_digest.split(":", 1)[1]).read_bytes())
    except (OSError, ValueError, IndexError):
        raise ImageError(f"{where}: config {cfg_digest} of {name} is missing or not JSON") from None
    arch = cfg.get("architecture") or "?"
    if cfg.get("os", "linux") != "linux" or arch != oci_arch():
        raise ImageError(f"{where}: {name} is for {cfg.get('os', 'linux')}/{arch}, this node is linux/{oci_arch()}")
    return desc


def layout_sources(layout: Path, where: str) -> list[LoadSource]:
    """The named images of an OCI layout directory."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        raise ImageError(f"{where} is not an image archive (no readable index.json)") from None
    out = []
    for i, desc in enumerate(index.get("manifests") or []):
        ann = desc.get("annotations") or {}
        name = ann.get("io.containerd.image.name") or ann.get("org.opencontainers.image.ref.name") or ""
        if not name or ("/" not in name and ":" not in name and "." not in name):
            raise ImageError(f"{where}: image #{i + 1} has no name (annotate it with "
                             "org.opencontainers.image.ref.name=REGISTRY/NAME:TAG)")
        ref = normalize_ref(name, where)
        resolved = _platform_of(layout / "blobs" / "sha256", desc, where, ref)
        layout_name = ann.get("org.opencontainers.image.ref.name") or name
        out.append(LoadSource(ref, f"oci:{layout}:{layout_name}", layout, None, str(resolved.get("digest", "")),
                              layout_name))
    if not out:
        raise ImageError(f"{where}: the OCI layout holds no image")
    return out


def docker_archive_sources(archive: Path, tf: tarfile.TarFile, where: str) -> list[LoadSource]:
    """The named images of a `docker save` tar."""
    try:
        member = tf.extractfile("manifest.json")
        entries = json.load(member) if member else []
    except (KeyError, ValueError):
        raise ImageError(f"{where} is not an image archive (bad manifest.json)") from None
    out = []
    for entry in entries:
        tags = entry.get("RepoTags") or []
        if not tags:
            raise ImageError(f"{where}: an image has no name (save it by name: docker save NAME:TAG)")
        try:
            cfg_file = tf.extractfile(entry.get("Config", ""))
            cfg = json.load(cfg_file) if cfg_file else {}
        except (KeyError, ValueError):
            cfg = {}
        arch = cfg.get("architecture") or "?"
        if arch != oci_arch():
            raise ImageError(f"{where}: {tags[0]} is for linux/{arch}, this node is linux/{oci_arch()}")
        for tag in tags:
            out.append(LoadSource(normalize_ref(tag, where), f"docker-archive:{archive}:{tag}", None, archive))
    return out


def find_sources(path: Path, scratch: Path) -> list[LoadSource]:
    """Every image in a file or directory the user named (OCI layout dir, OCI tar, docker save tar)."""
    where = str(path)
    if path.is_dir():
        if not (path / "oci-layout").exists() or not (path / "index.json").exists():
            raise ImageError(f"{where} is not an image archive (a directory must be an OCI layout: "
                             "oci-layout, index.json, blobs/)")
        return layout_sources(path, where)
    if not path.exists():
        raise ImageError(f"{where}: no such file or directory")
    try:
        tf = tarfile.open(path)
    except (tarfile.TarError, OSError):
        raise ImageError(f"{where} is not an image archive (not a tar file; expected docker save output, "
                         "an OCI archive or an OCI layout directory)") from None
    with tf:
        names = set(tf.getnames())
        if "index.json" in names and "oci-layout" in names:
            dest = scratch / hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:16]
            dest.mkdir(parents=True, exist_ok=True)
            tf.extractall(dest, filter="data")
            return layout_sources(dest, where)
        if "manifest.json" in names:
            return docker_archive_sources(path, tf, where)
    raise ImageError(f"{where} is not an image archive (no index.json/oci-layout nor manifest.json inside)")


def containerd_archive(src: LoadSource, scratch: Path) -> Path:
    """A tar `ctr images import` names correctly: the docker save tar itself, or the OCI layout tarred
    with ``io.containerd.image.name`` set to the full name."""
    if src.archive is not None:
        return src.archive
    assert src.layout is not None
    index = json.loads((src.layout / "index.json").read_text())
    layout_name = src.layout_ref
    manifests = []
    for desc in index.get("manifests") or []:
        ann = dict(desc.get("annotations") or {})
        if layout_name in (ann.get("org.opencontainers.image.ref.name"), ann.get("io.containerd.image.name")):
            ann["io.containerd.image.name"] = src.ref
            ann["org.opencontainers.image.ref.name"] = src.ref.rsplit(":", 1)[1]
            manifests.append({**desc, "annotations": ann})
    out = scratch / (hashlib.sha256(src.ref.encode()).hexdigest()[:16] + ".tar")
    with tarfile.open(out, "w") as tf:
        tf.add(src.layout / "oci-layout", "oci-layout")
        data = json.dumps({**index, "manifests": manifests}).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        tf.add(src.layout / "blobs", "blobs")
    return out
