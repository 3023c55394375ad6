"""The offline image archives: layout, annotations, reproducibility and caching."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from pykubelet.up import images


def _read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_archive_is_an_oci_layout_with_both_name_annotations(tmp_path: Path) -> None:
    layer = images.layer_tar([images.Entry("bin/x", "file", 0o755, b"hi"), images.Entry("bin/y", "symlink", target="x")])
    built = images.write_oci_archive(tmp_path / "a.tar", ["example.com/a:1", "example.com/a:latest"], layer, {"os": "linux"})
    files = _read_archive(built.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    anns = [m["annotations"] for m in index["manifests"]]
    assert anns == [
        {"io.containerd.image.name": "example.com/a:1", "org.opencontainers.image.ref.name": "1"},
        {"io.containerd.image.name": "example.com/a:latest", "org.opencontainers.image.ref.name": "latest"},
    ]
    manifest = json.loads(files["blobs/sha256/" + built.manifest_digest.split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["rootfs"]["diff_ids"]
    assert "blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1] in files
    # One image ID per tag (CRI RemoveImage of one tag must not remove the other), one shared layer.
    d1, d2 = built.digests["example.com/a:1"], built.digests["example.com/a:latest"]
    assert d1 != d2
    m2 = json.loads(files["blobs/sha256/" + d2.split(":")[1]])
    assert m2["config"]["digest"] != manifest["config"]["digest"]
    assert m2["layers"] == manifest["layers"]


def test_archives_are_reproducible(tmp_path: Path) -> None:
    layer = images.layer_tar([images.Entry("etc/passwd", "file", 0o644, b"root:x:0:0::/:/bin/sh\n")])
    a = images.write_oci_archive(tmp_path / "a.tar", ["x/y:1"], layer, {"os": "linux"})
    b = images.write_oci_archive(tmp_path / "b.tar", ["x/y:1"], layer, {"os": "linux"})
    assert a.archive.read_bytes() == b.archive.read_bytes()


@pytest.mark.skipif(not Path("/bin/busybox").exists(), reason="busybox-static not installed")
def test_busybox_image_has_shell_applets_and_config(tmp_path: Path) -> None:
    built = images.build_busybox(tmp_path)
    assert built.refs == images.BUSYBOX_REFS
    files = _read_archive(built.archive)
    manifest = json.loads(files["blobs/sha256/" + built.manifest_digest.split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Cmd"] == ["sh"]
    assert any(e.startswith("PATH=") for e in config["config"]["Env"])
    import gzip
    import io

    layer = gzip.decompress(files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]])
    with tarfile.open(fileobj=io.BytesIO(layer)) as tf:
        names = {m.name.rstrip("/"): m for m in tf.getmembers()}
    assert names["bin/sh"].issym() and names["bin/sh"].linkname == "../bin/busybox"
    assert names["usr/bin/wget"].linkname == "../../bin/busybox"
    assert "etc/passwd" in names and "etc/group" in names and "var/www" in names
    assert names["tmp"].mode == 0o1777
    # Cached: a second build returns the same file without rewriting it.
    mtime = built.archive.stat().st_mtime_ns
    assert images.build_busybox(tmp_path).archive.stat().st_mtime_ns == mtime
