"""TLS bootstrap and certificate rotation (upstream ``pkg/kubelet/certificate`` + ``bootstrap``).

**Bootstrap** (``--bootstrap-kubeconfig`` + ``--kubeconfig`` + ``--cert-dir``, upstream
``LoadClientCert``): if the ``--kubeconfig`` file exists and its client certificate is still
valid, nothing happens.  Otherwise, if ``<cert-dir>/kubelet-client-current.pem`` is valid, a
kubeconfig using it is written.  Otherwise the agent authenticates with the bootstrap kubeconfig
(a bootstrap token), creates a ``kubernetes.io/kube-apiserver-client-kubelet`` CSR for
``CN=system:node:<name>, O=system:nodes`` with a new ECDSA key, waits for the approver and the
signer, stores certificate + key as ``kubelet-client-<timestamp>.pem`` with the symlink
``kubelet-client-current.pem`` pointing at it (upstream's file store), and writes the kubeconfig
(server and CA from the bootstrap kubeconfig, ``client-certificate``/``client-key`` the symlink).
A denied or failed CSR stops the agent with the approver's or signer's message.

**Rotation** (``rotateCertificates``; ``serverTLSBootstrap`` for the serving certificate): the
:class:`CertificateManager` sleeps until a deadline drawn uniformly between 70 % and 90 % of the
current certificate's lifetime after its notBefore (upstream ``nextRotationDeadline``), requests a
new certificate with the node's own credential (the approver's ``selfnodeclient`` path), stores it
as above and hands the new file to ``on_rotate``: for the client certificate that reloads the
agent's API client, whose pooled connections are dropped so the next requests present the new
certificate (upstream closes them too); for the serving certificate it reloads the kubelet
server's TLS context.  Nothing else restarts: pods and containers are untouched.  Failures retry
with exponential backoff (1 s doubling up to 5 min).  The serving certificate's SANs are the
Node's ``status.addresses`` (host names as DNS names, the rest as IPs), which is what the
control plane's approver checks.

Keys and CSRs are made in a child process (:mod:`keytool`), so the agent never imports
``cryptography``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pykubelet.common import aio
from pykubelet.common.apiclient import ApiClient, ApiError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
SERVING_SIGNER = "kubernetes.io/kubelet-serving"
CLIENT_USAGES = ["digital signature", "client auth"]  # ECDSA keys: no key encipherment, as upstream
SERVING_USAGES = ["digital signature", "server auth"]
KEYTOOL = Path(__file__).with_name("keytool.py")


class CertificateError(Exception):
    """The certificate could not be obtained (denied, failed, malformed answer)."""


def rotation_deadline(not_before: float, not_after: float, rand: float) -> float:
    """``nextRotationDeadline``: notBefore + (70..90 %) of the lifetime; ``rand`` in [0, 1)."""
    return not_before + (not_after - not_before) * (0.7 + 0.2 * rand)


def node_address_names(node: Obj | None) -> tuple[list[str], list[str]]:
    """(DNS names, IPs) of a Node's status.addresses, for a serving certificate."""
    dns: list[str] = []
    ips: list[str] = []
    for a in ((node or {}).get("status") or {}).get("addresses") or []:
        value = str(a.get("address") or "")
        if not value:
            continue
        try:
            ip = str(ipaddress.ip_address(value))
        except ValueError:
            if value not in dns:
                dns.append(value)
            continue
        if ip not in ips:
            ips.append(ip)
    return dns, ips


# ------------------------------------------------------------------ child-process helpers
async def _keytool(*args: str) -> bytes:
    rc, out, err = await aio.run_child(sys.executable, str(KEYTOOL), *args)
    if rc != 0:
        raise CertificateError(f"keytool {args[0]}: {err.decode(errors='replace').strip()[-500:]}")
    return out


async def cert_dates(path: Path) -> tuple[float, float] | None:
    """(notBefore, notAfter) of the certificate in ``path``, or None if there is none."""
    if not await asyncio.to_thread(path.exists):
        return None
    try:
        d = json.loads(await _keytool("dates", str(path)))
    except (CertificateError, ValueError):
        return None
    return float(d["notBefore"]), float(d["notAfter"])


async def cert_valid(path: Path, now: float | None = None) -> bool:
    d = await cert_dates(path)
    return d is not None and d[1] > (now if now is not None else time.time())


# ------------------------------------------------------------------ file store
@dataclass
class FileStore:
    """Upstream's certificate file store: ``<prefix>-<timestamp>.pem`` (certificate + key) and the
    ``<prefix>-current.pem`` symlink, replaced atomically."""

    cert_dir: Path
    prefix: str

    @property
    def current(self) -> Path:
        return self.cert_dir / f"{self.prefix}-current.pem"

    def key_path(self) -> Path:
        return self.cert_dir / f"{self.prefix}.key.tmp"

    def store(self, cert_pem: bytes) -> Path:
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        key = self.key_path()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")
        target = self.cert_dir / f"{self.prefix}-{stamp}.pem"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(cert_pem.rstrip(b"\n") + b"\n" + key.read_bytes())
        tmp_link = self.cert_dir / f".{self.prefix}-current.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp_link.unlink()
        tmp_link.symlink_to(target.name)
        os.replace(tmp_link, self.current)
        key.unlink()
        return self.current


# ------------------------------------------------------------------ CSR round trip
async def request_certificate(api: ApiClient, *, signer: str, usages: list[str], node_name: str, key_path: Path,
                              dns: list[str] | None = None, ips: list[str] | None = None,
                              poll: float = 0.5, wait_limit: float = 3600.0) -> bytes:
    """Create a CSR for ``system:node:<node_name>`` and wait for its certificate (PEM)."""
    key_path.parent.mkdir(parents=True, exist_ok=True)
    extra: list[str] = []
    for d in dns or []:
        extra += ["--dns", d]
    for i in ips or []:
        extra += ["--ip", i]
    csr_pem = await _keytool("csr", str(key_path), f"system:node:{node_name}", "system:nodes", *extra)
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "csr-"},
            "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": signer, "usages": usages}}
    created = await api.create("/apis/certificates.k8s.io/v1/certificatesigningrequests", body)
    name = created["metadata"]["name"]
    log.info("created certificate signing request %s (%s); waiting for approval", name, signer)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_limit
    while True:
        try:
            csr = await api.get(f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}")
        except ApiError as e:
            if e.status == 404:
                raise CertificateError(f"certificate signing request {name} was deleted") from e
            raise
        status = csr.get("status") or {}
        for c in status.get("conditions") or []:
            if c.get("type") in ("Denied", "Failed") and c.get("status", "True") == "True":
                raise CertificateError(f"certificate signing request {name} is {c['type'].lower()}: "
                                       f"{c.get('reason', '')} {c.get('message', '')}".rstrip())
        if status.get("certificate"):
            log.info("certificate signing request %s was approved and issued", name)
            return base64.b64decode(status["certificate"])
        if loop.time() > deadline:
            raise CertificateError(f"timed out waiting for certificate signing request {name}")
        await asyncio.sleep(poll)


# ------------------------------------------------------------------ bootstrap
def _cluster_of(kubeconfig: Path) -> tuple[str, str]:
    """(server, base64 CA) of a kubeconfig's current context."""
    cfg = yaml.safe_load(kubeconfig.read_text()) or {}
    ctx_name = cfg.get("current-context") or ((cfg.get("contexts") or [{}])[0].get("name"))
    ctx = next((c.get("context") or {} for c in cfg.get("contexts") or [] if c.get("name") == ctx_name), {})
    cluster = next((c.get("cluster") or {} for c in cfg.get("clusters") or [] if c.get("name") == ctx.get("cluster")),
                   None) or ((cfg.get("clusters") or [{}])[0].get("cluster") or {})
    ca = str(cluster.get("certificate-authority-data") or "")
    if not ca and cluster.get("certificate-authority"):
        p = Path(cluster["certificate-authority"])
        ca = base64.b64encode((p if p.is_absolute() else kubeconfig.parent / p).read_bytes()).decode()
    return str(cluster["server"]), ca


def write_cert_kubeconfig(path: Path, server: str, ca_b64: str, cert: Path) -> None:
    cluster: Obj = {"server": server}
    if ca_b64:
        cluster["certificate-authority-data"] = ca_b64
    cfg = {"apiVersion": "v1", "kind": "Config", "preferences": {},
           "clusters": [{"name": "default-cluster", "cluster": cluster}],
           "users": [{"name": "default-auth", "user": {"client-certificate": str(cert.resolve().parent / cert.name),
                                                       "client-key": str(cert.resolve().parent / cert.name)}}],
           "contexts": [{"name": "default-context", "context": {"cluster": "default-cluster",
                                                                "user": "default-auth"}}],
           "current-context": "default-context"}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(yaml.safe_dump(cfg, sort_keys=False))
    os.replace(tmp, path)


def kubeconfig_client_cert(kubeconfig: Path) -> Path | None:
    """The client-certificate file a kubeconfig names (resolved against its folder), if any."""
    try:
        cfg = yaml.safe_load(kubeconfig.read_text()) or {}
        user = (cfg.get("users") or [{}])[0].get("user") or {}
    except (OSError, yaml.YAMLError, AttributeError, IndexError, TypeError):
        return None
    if not user.get("client-certificate"):
        return None
    p = Path(user["client-certificate"])
    return p if p.is_absolute() else kubeconfig.parent / p


async def bootstrap_client(bootstrap_kubeconfig: Path, kubeconfig: Path, cert_dir: Path, node_name: str, *,
                           wait_limit: float = 3600.0) -> None:
    """Make sure ``kubeconfig`` holds a valid client certificate (see the module docstring)."""
    existing = await asyncio.to_thread(kubeconfig_client_cert, kubeconfig)
    if existing is not None and await cert_valid(existing):
        log.info("kubeconfig %s has a valid client certificate; skipping TLS bootstrap", kubeconfig)
        return
    server, ca = _cluster_of(bootstrap_kubeconfig)
    store = FileStore(cert_dir, "kubelet-client")
    if await cert_valid(store.current):
        log.info("using the client certificate in %s", store.current)
        write_cert_kubeconfig(kubeconfig, server, ca, store.current)
        return
    log.info("no valid client certificate: TLS bootstrap with %s", bootstrap_kubeconfig)
    async with ApiClient.from_kubeconfig(bootstrap_kubeconfig, user_agent=f"kubelet/{node_name}") as api:
        pem = await request_certificate(api, signer=CLIENT_SIGNER, usages=CLIENT_USAGES, node_name=node_name,
                                        key_path=store.key_path(), wait_limit=wait_limit)
    write_cert_kubeconfig(kubeconfig, server, ca, store.store(pem))


# ------------------------------------------------------------------ rotation
class CertificateManager:
    """Renews one certificate (client or serving) before it expires; see the module docstring."""

    def __init__(self, api: ApiClient, *, cert_dir: Path, prefix: str, signer: str, usages: list[str],
                 node_name: str, on_rotate: Callable[[Path], None],
                 names: Callable[[], tuple[list[str], list[str]]] | None = None,
                 rand: Callable[[], float] = random.random, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.store = FileStore(cert_dir, prefix)
        self.signer = signer
        self.usages = usages
        self.node_name = node_name
        self.on_rotate = on_rotate
        self.names = names
        self.rand = rand
        self.clock = clock
        self.rotations = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"certificate-{self.store.prefix}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _deadline(self) -> float:
        d = await cert_dates(self.store.current)
        if d is None:
            return self.clock()  # no certificate yet: request one now
        return rotation_deadline(d[0], d[1], self.rand())

    async def run(self) -> None:
        backoff = 1.0
        deadline = await self._deadline()
        if self.store.current.exists():
            log.info("certificate %s: rotation deadline is %s", self.store.prefix,
                     dt.datetime.fromtimestamp(deadline, dt.UTC).isoformat())
        while True:
            delay = deadline - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                dns, ips = self.names() if self.names is not None else ([], [])
                if self.names is not None and not (dns or ips):
                    raise CertificateError("the node has no addresses yet")
                pem = await request_certificate(self.api, signer=self.signer, usages=self.usages,
                                                node_name=self.node_name, key_path=self.store.key_path(),
                                                dns=dns, ips=ips, wait_limit=900.0)
                current = await asyncio.to_thread(self.store.store, pem)
                self.on_rotate(current)
                self.rotations += 1
                backoff = 1.0
                deadline = await self._deadline()
                log.info("certificate %s rotated; next rotation at %s", self.store.prefix,
                         dt.datetime.fromtimestamp(deadline, dt.UTC).isoformat())
            except asyncio.CancelledError:
                raise
            except (CertificateError, ApiError, OSError) as e:
                log.warning("certificate %s: rotation failed (retrying in %.0f s): %s", self.store.prefix, backoff, e)
                deadline = self.clock() + backoff
                backoff = min(backoff * 2, 300.0)
