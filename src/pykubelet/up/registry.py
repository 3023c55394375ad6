"""A throwaway local image registry, for tests that exercise real image pulls.

Without internet the only way to test PullImage (and imagePullSecrets, and ErrImagePull/back-off)
against a real containerd is a registry on 127.0.0.1. Debian's ``docker-registry`` (the CNCF
distribution registry) serves one from a folder; optional htpasswd (bcrypt, made with
``htpasswd -B``) gives it basic auth like a private registry. Images get in with ``skopeo copy`` from
the OCI archives of :mod:`pykubelet.up.images` (unpacked to ``oci:DIR:TAG``).

It listens on plain HTTP, so containerd must be told so through a ``hosts.toml`` in its registry
``config_path`` (:func:`write_hosts_toml`; the deprecated ``registry.mirrors`` cannot be combined
with ``config_path``). The process is started and stopped by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from pathlib import Path

from pykubelet.up import images


class RegistryError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_hosts_toml(config_dir: Path, host: str) -> Path:
    """Tell containerd (registry config_path = config_dir) that `host` speaks plain HTTP."""
    d = config_dir / host
    d.mkdir(parents=True, exist_ok=True)
    path = d / "hosts.toml"
    path.write_text(
        f'server = "http://{host}"\n\n'
        f'[host."http://{host}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
        "  skip_verify = true\n"
    )
    return path


class LocalRegistry:
    """docker-registry on 127.0.0.1:port storing under dir, optionally with basic auth."""

    def __init__(
        self,
        dir: Path,
        port: int = 0,
        htpasswd_user: str | None = None,
        password: str | None = None,
    ) -> None:
        if (htpasswd_user is None) != (password is None):
            raise ValueError("htpasswd_user and password go together")
        self.dir = Path(dir).absolute()
        self.port = port or free_port()
        self.user = htpasswd_user
        self.password = password
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """host:port, the prefix of image references in this registry."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _write_config(self) -> Path:
        storage = self.dir / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.user is not None:
            htpasswd = self.dir / "htpasswd"
            res = subprocess.run(
                ["htpasswd", "-Bbn", self.user, self.password or ""], capture_output=True, text=True, check=False
            )
            if res.returncode != 0:
                raise RegistryError(f"htpasswd failed: {res.stderr.strip()}")
            htpasswd.write_text(res.stdout.strip() + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: pykubelet-registry\n    path: {htpasswd}\n"
        config = self.dir / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
            f"{auth}"
        )
        return config

    def start(self, timeout: float = 15.0) -> None:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RegistryError("docker-registry not installed (apt-get install docker-registry)")
        config = self._write_config()
        log = (self.dir / "registry.log").open("ab")
        self._proc = subprocess.Popen(
            [binary, "serve", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RegistryError(f"docker-registry exited with {self._proc.returncode}; see {self.dir}/registry.log")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RegistryError("docker-registry did not start listening")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> LocalRegistry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def push_archive(self, archive: Path, tag: str, dest: str) -> str:
        """Copy the image tagged `tag` (ref.name) in an OCI archive to host/dest; returns the ref."""
        if shutil.which("skopeo") is None:
            raise RegistryError("skopeo not installed (apt-get install skopeo)")
        layout = self.dir / "layouts" / archive.stem
        if not (layout / "index.json").exists():
            layout.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tf:
                tf.extractall(layout, filter="data")
        ref = f"{self.host}/{dest}"
        cmd = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
        if self.user is not None:
            cmd += ["--dest-creds", f"{self.user}:{self.password}"]
        cmd += [f"oci:{layout}:{tag}", f"docker://{ref}"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RegistryError(f"skopeo copy failed: {res.stderr.strip()}")
        return ref

    def push(self, source_ref: str, dest: str, cache_dir: Path | None = None) -> str:
        """Push one of the offline images (e.g. busybox:1.36) as host/dest (e.g. "private/bb:1")."""
        image = images.archive_for(source_ref, cache_dir)
        return self.push_archive(image.archive, source_ref.rsplit(":", 1)[1], dest)

    async def apush(self, source_ref: str, dest: str, cache_dir: Path | None = None) -> str:
        return await asyncio.to_thread(self.push, source_ref, dest, cache_dir)
