"""`pykubelet images load` input checks: what is an image archive, its names and its platform."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from pykubelet.up import images


def _layout(tmp: Path, name: str | None, arch: str | None = None) -> Path:
    layer = images.layer_tar([images.Entry("hello", "file", 0o644, b"hi")])
    config = {"architecture": arch or images.oci_arch(), "os": "linux", "config": {}}
    built = images.write_oci_archive(tmp / "img.tar", ["example.com/x:1"], layer, config)
    out = tmp / "layout"
    with tarfile.open(built.archive) as tf:
        tf.extractall(out, filter="data")
    index = json.loads((out / "index.json").read_text())
    index["manifests"][0]["annotations"] = {"org.opencontainers.image.ref.name": name} if name else {}
    (out / "index.json").write_text(json.dumps(index))
    return out


def test_an_oci_layout_yields_its_named_images_normalised(tmp_path: Path) -> None:
    [src] = images.find_sources(_layout(tmp_path, "myapp:1"), tmp_path / "scratch")
    assert src.ref == "docker.io/library/myapp:1" and src.layout_ref == "myapp:1"
    assert src.manifest_digest.startswith("sha256:")


def test_a_name_without_a_tag_is_refused_naming_the_file(tmp_path: Path) -> None:
    layout = _layout(tmp_path, "example.com/me/app")
    with pytest.raises(images.ImageError, match=r"image name 'example.com/me/app' has no tag"):
        images.find_sources(layout, tmp_path / "scratch")


def test_an_image_without_a_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(images.ImageError, match="has no name"):
        images.find_sources(_layout(tmp_path, None), tmp_path / "scratch")


def test_an_image_for_another_platform_is_refused(tmp_path: Path) -> None:
    other = "s390x"
    with pytest.raises(images.ImageError, match=f"is for linux/{other}, this node is linux/{images.oci_arch()}"):
        images.find_sources(_layout(tmp_path, "example.com/x:1", arch=other), tmp_path / "scratch")


def test_files_that_are_not_image_archives_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(images.ImageError, match="is not an image archive"):
        images.find_sources(text, tmp_path)
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tf:
        info = tarfile.TarInfo("readme")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(images.ImageError, match="is not an image archive"):
        images.find_sources(plain, tmp_path)
    (tmp_path / "dir").mkdir()
    with pytest.raises(images.ImageError, match="a directory must be an OCI layout"):
        images.find_sources(tmp_path / "dir", tmp_path)


def test_a_docker_save_archive_yields_its_repo_tags(tmp_path: Path) -> None:
    archive = tmp_path / "saved.tar"
    cfg = json.dumps({"architecture": images.oci_arch(), "os": "linux"}).encode()
    manifest = json.dumps([{"Config": "c.json", "RepoTags": ["busybox:mine"], "Layers": []}]).encode()
    with tarfile.open(archive, "w") as tf:
        for name, data in (("c.json", cfg), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    [src] = images.find_sources(archive, tmp_path)
    assert src.ref == "docker.io/library/busybox:mine" and src.archive == archive
