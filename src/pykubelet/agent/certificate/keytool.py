"""Key, CSR and certificate-date helpers, run in a short-lived child process.

Why a child process: like ``agent/server/selfsigned.py``, this keeps ``cryptography`` (~10 MB of
resident memory once imported) out of the long-running agent, which needs it only at a TLS
bootstrap or a rotation, a few times a year.  Usage::

    python keytool.py csr KEY_OUT CN ORG [--dns NAME]... [--ip ADDR]...   # new EC P-256 key -> KEY_OUT, CSR PEM on stdout
    python keytool.py dates PEM_FILE                                     # {"notBefore": s, "notAfter": s} on stdout

Keys are ECDSA P-256, as upstream's kubelet generates for its CSRs; a rotation always makes a new
key (upstream's certificate manager does the same).
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from pathlib import Path


def make_csr(key_out: Path, cn: str, org: str, dns: list[str], ips: list[str]) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    fd = os.open(key_out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def dates(pem: Path) -> dict[str, float]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem.read_bytes())
    return {"notBefore": cert.not_valid_before_utc.timestamp(), "notAfter": cert.not_valid_after_utc.timestamp()}


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "csr":
        dns = [argv[i + 1] for i, a in enumerate(argv) if a == "--dns" and i + 1 < len(argv)]
        ips = [argv[i + 1] for i, a in enumerate(argv) if a == "--ip" and i + 1 < len(argv)]
        sys.stdout.buffer.write(make_csr(Path(argv[1]), argv[2], argv[3], dns, ips))
        return 0
    if len(argv) == 2 and argv[0] == "dates":
        try:
            print(json.dumps(dates(Path(argv[1]))))
        except (OSError, ValueError) as e:
            print(str(e), file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
