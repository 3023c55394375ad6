"""Generate the kubelet's self-signed serving certificate (run as a script, in a child process).

Upstream's kubelet writes ``<root_dir>/pki/kubelet.{crt,key}`` when no ``tlsCertFile`` is configured.
This module is deliberately standalone (stdlib + ``cryptography`` only, no pykubelet imports) so that
``app.ensure_self_signed`` can run it with ``python selfsigned.py`` in a short-lived child process:
importing ``cryptography`` maps its ~8 MB Rust extension and builds ~2 MB of Python objects, and an
extension module can never be unloaded, so doing it in the agent itself would keep ~10 MB of
resident memory for the agent's whole life just for a one-off start-up task.

Usage: ``python selfsigned.py ROOT_DIR NODE_NAME [IP ...]``; writes the two files (key mode 0600).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import sys
import time
from pathlib import Path


def generate(root_dir: Path, node_name: str, ips: list[str]) -> tuple[Path, Path]:
    """Write a fresh EC P-256 key and a one-year self-signed cert for the node (CA:true, SANs)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    pki = root_dir / "pki"
    crt, key = pki / "kubelet.crt", pki / "kubelet.key"
    pki.mkdir(parents=True, exist_ok=True)
    pk = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@{int(time.time())}")])
    sans: list[x509.GeneralName] = [x509.DNSName(node_name or "localhost"), x509.DNSName("localhost")]
    for ip in {"127.0.0.1", *ips}:
        with contextlib.suppress(ValueError):
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(pk.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(pk, hashes.SHA256())
    )
    key.write_bytes(pk.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    os.chmod(key, 0o600)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, key


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: selfsigned.py ROOT_DIR NODE_NAME [IP ...]", file=sys.stderr)
        return 2
    generate(Path(argv[0]), argv[1], argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
