"""PKI, authentication and authorization for the dev API server.

PKI (like kubeadm's ``/etc/kubernetes/pki``): a self-signed CA, an apiserver serving cert with SANs
127.0.0.1, localhost and the host name, and ``apiserver-kubelet-client`` (CN
kube-apiserver-kubelet-client, O system:masters) the server uses towards kubelets.  All are made
on first start and reused afterwards.

Authentication, in upstream's order: TLS client certificate signed by our CA (user = CN, groups =
O), then bearer tokens from ``tokens.csv`` (upstream ``--token-auth-file`` format
``token,user,uid,"group1,group2"``), then service-account tokens.  Service-account tokens are
JWTs (HS256 here, with a key in pki/sa.key, instead of upstream's RS256) carrying the upstream
claims (``sub: system:serviceaccount:NS:NAME``, ``kubernetes.io`` private claims: namespace,
serviceaccount name/uid and, for a TokenRequest with a ``boundObjectRef``, the pod/secret/node
name/uid); TokenReview verifies them with the same code.  As upstream's claims validator, a
signature is not enough: ``claims_validator`` (the registry) checks that the ServiceAccount and the
bound object still exist with the uid in the token (a deleted pod's token stops working, after
upstream's 60 s grace for objects being deleted).  Authenticated users also get ``system:authenticated``.

Authorization, as ``--authorization-mode=Node,RBAC``: ``system:masters`` may do anything (upstream's
privileged-group authorizer), then the Node authorizer (:mod:`pykubelet.server.nodeauthorizer`)
for kubelets, then RBAC (:mod:`pykubelet.server.rbac`) over the Roles and bindings in storage.
Non-resource health/version paths are public, as upstream's system:public-info-viewer role.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hmac
import ipaddress
import json
import os
import secrets
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.server import bootstrap_tokens
from pykubelet.server.nodeauthorizer import NodeAuthorizer
from pykubelet.server.rbac import RBACAuthorizer, Request

ISSUER = "https://kubernetes.default.svc.cluster.local"
# The JWT header of every service-account token this server signs (HS256 with ``pki/sa.key``),
# encoded once: it never changes.
_JWT_HEAD = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "pykubelet"}).encode()
                                     ).rstrip(b"=").decode()
PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz"}


@dataclass
class UserInfo:
    name: str
    uid: str = ""
    groups: list[str] = field(default_factory=list)
    extra: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"username": self.name, "uid": self.uid, "groups": self.groups}
        if self.extra:
            d["extra"] = self.extra
        return d


# ------------------------------------------------------------------ PKI
def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_key(path: Path, key: Any) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _load_key(path: Path) -> Any:
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _name(cn: str, orgs: list[str] | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in (orgs or [])]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def sign_cert(ca_cert: x509.Certificate, ca_key: Any, public_key: Any, subject: x509.Name, *,
              server: bool, client: bool, sans: list[x509.GeneralName] | None = None,
              days: float = 365) -> x509.Certificate:
    now = _now()
    # upstream's signer backdates by 5 minutes (clock skew), but by at most 10% of a short lifetime
    backdate = min(dt.timedelta(minutes=5), dt.timedelta(days=days) / 10)
    eku = []
    if server:
        eku.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        eku.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject).public_key(public_key)
         .serial_number(x509.random_serial_number()).not_valid_before(now - backdate)
         .not_valid_after(now + dt.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                                      data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                      crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                        critical=False))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256())


class PKI:
    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / "pki"
        self.ca_crt = self.dir / "ca.crt"
        self.ca_key = self.dir / "ca.key"
        self.server_crt = self.dir / "apiserver.crt"
        self.server_key = self.dir / "apiserver.key"
        self.kubelet_client_crt = self.dir / "apiserver-kubelet-client.crt"
        self.kubelet_client_key = self.dir / "apiserver-kubelet-client.key"
        self.sa_key = self.dir / "sa.key"
        # kube-controller-manager --cluster-signing-duration: the longest certificate the CSR
        # signer issues (a CSR's spec.expirationSeconds may ask for less)
        self.signing_duration = 365 * 86400.0
        # Addresses pods reach the API server on (advertise address, the kubernetes Service's
        # ClusterIP): SANs of the serving cert, which is re-issued when one is missing.
        self.extra_ips: list[str] = []

    def _server_cert_lacks_ips(self) -> bool:
        if not self.extra_ips or not self.server_crt.exists():
            return False
        try:
            have = set(_load_cert(self.server_crt).extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value.get_values_for_type(x509.IPAddress))
        except (ValueError, x509.ExtensionNotFound):
            return True
        return any(ipaddress.ip_address(ip) not in have for ip in self.extra_ips)

    def ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.ca_crt.exists() or not self.ca_key.exists():
            key = ec.generate_private_key(ec.SECP256R1())
            subj = _name("pykubelet-ca")
            now = _now()
            cert = (x509.CertificateBuilder().subject_name(subj).issuer_name(subj).public_key(key.public_key())
                    .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                    .not_valid_after(now + dt.timedelta(days=3650))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                                 content_commitment=False, data_encipherment=False,
                                                 key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                 encipher_only=False, decipher_only=False), critical=True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                    .sign(key, hashes.SHA256()))
            _write_key(self.ca_key, key)
            self.ca_crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        ca_cert, ca_key = _load_cert(self.ca_crt), _load_key(self.ca_key)
        if not self.server_crt.exists() or self._server_cert_lacks_ips():
            key = ec.generate_private_key(ec.SECP256R1())
            host = socket.gethostname()
            sans: list[x509.GeneralName] = [
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
                x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
                x509.DNSName("kubernetes.default.svc"), x509.DNSName("kubernetes.default.svc.cluster.local")]
            if host and host != "localhost":
                sans.append(x509.DNSName(host))
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys(self.extra_ips)]
            cert = sign_cert(ca_cert, ca_key, key.public_key(), _name("kube-apiserver"), server=True,
                             client=False, sans=sans, days=3650)
            _write_key(self.server_key, key)
            self.server_crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if not self.kubelet_client_crt.exists():
            key = ec.generate_private_key(ec.SECP256R1())
            cert = sign_cert(ca_cert, ca_key, key.public_key(),
                             _name("kube-apiserver-kubelet-client", ["system:masters"]),
                             server=False, client=True, days=3650)
            _write_key(self.kubelet_client_key, key)
            self.kubelet_client_crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if not self.sa_key.exists():
            self.sa_key.write_bytes(secrets.token_bytes(32))
            self.sa_key.chmod(0o600)

    def server_ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.server_crt), str(self.server_key))
        ctx.load_verify_locations(str(self.ca_crt))
        ctx.verify_mode = ssl.CERT_OPTIONAL  # client certs are one way to authenticate
        return ctx

    def sign_csr(self, csr_pem: bytes, signer: str, usages: list[str], expiration_seconds: int | None) -> bytes:
        """Sign a PKCS#10 request with the CA (the csrsigning controller's job upstream)."""
        csr = x509.load_pem_x509_csr(csr_pem)
        if signer in ("kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"):
            cn, orgs = csr_subject(csr_pem)
            if orgs != ["system:nodes"] or not cn.startswith("system:node:"):
                raise ValueError(f"invalid signer request for {signer}: subject must be O=system:nodes, "
                                 "CN=system:node:<nodeName>")
        ca_cert, ca_key = _load_cert(self.ca_crt), _load_key(self.ca_key)
        sans: list[x509.GeneralName] = []
        try:
            ext = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            sans = list(ext.value)
        except x509.ExtensionNotFound:
            pass
        server = "server auth" in usages or signer == "kubernetes.io/kubelet-serving"
        client = "client auth" in usages or signer.endswith("-client") or signer.endswith("client-kubelet")
        seconds = min(float(expiration_seconds), self.signing_duration) if expiration_seconds \
            else self.signing_duration
        days = seconds / 86400
        cert = sign_cert(ca_cert, ca_key, csr.public_key(), csr.subject, server=server, client=client,
                         sans=sans or None, days=days)
        return cert.public_bytes(serialization.Encoding.PEM)


def csr_subject(csr_pem: bytes) -> tuple[str, list[str]]:
    csr = x509.load_pem_x509_csr(csr_pem)
    cn = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return (str(cn[0]) if cn else ""), [str(o) for o in orgs]


@functools.lru_cache(maxsize=1024)
def _cert_user(der: bytes) -> tuple[str, tuple[str, ...]] | None:
    """(common name, organizations) of a DER client certificate; parsed once per certificate
    (every request over a client-certificate connection presents the same bytes, and each
    kubelet sends a dozen requests per pod).  A certificate that does not parse raises, and is
    not remembered."""
    cert = x509.load_der_x509_certificate(der)
    cn = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if not cn:
        return None
    return cn[0], tuple(orgs)


def user_from_peercert(der: bytes | None) -> UserInfo | None:
    """The user a verified client certificate names (CN, O as groups); a new object per call."""
    if not der:
        return None
    named = _cert_user(bytes(der))
    if named is None:
        return None
    return UserInfo(named[0], "", [*named[1], "system:authenticated"])


# ------------------------------------------------------------------ tokens
def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class TokenAuth:
    """Static tokens (tokens.csv) and service-account JWTs."""

    def __init__(self, data_dir: Path, pki: PKI) -> None:
        self.path = data_dir / "tokens.csv"
        self.pki = pki
        self._static: dict[str, UserInfo] = {}
        self._mtime = -1.0
        self._path_str = str(self.path)
        self._sa_key: tuple[tuple[int, int, int, int], bytes] | None = None
        # Checks a verified JWT's bound objects still exist (the registry's, as upstream's
        # validator reads them from the API): returns why the token is no longer valid, or "".
        self.claims_validator: Callable[[dict[str, Any]], str] | None = None
        # Reads a Secret (namespace, name) for bootstrap tokens; set once storage is open.
        self.secret_lookup: Callable[[str, str], dict[str, Any] | None] | None = None

    def _reload(self) -> None:
        try:
            mtime = os.stat(self._path_str).st_mtime  # every request: os.stat, not Path.stat
        except FileNotFoundError:
            self._static = {}
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        import csv

        static = {}
        with self.path.open() as f:
            for row in csv.reader(f):
                if len(row) < 3 or row[0].startswith("#"):
                    continue
                groups = [g for g in (row[3].split(",") if len(row) > 3 else []) if g]
                static[row[0]] = UserInfo(row[1], row[2], groups)
        self._static = static

    def add_token(self, user: str, uid: str, groups: list[str]) -> str:
        """Append a new token for user (reusing an existing one for the same user)."""
        self._mtime = -1.0
        self._reload()
        for tok, u in self._static.items():
            if u.name == user:
                return tok
        tok = secrets.token_hex(24)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(f'{tok},{user},{uid},"{",".join(groups)}"\n')
        self.path.chmod(0o600)
        self._mtime = -1.0
        return tok

    def authenticate(self, token: str) -> UserInfo | None:
        return self.authenticate_token(token)[0]

    def _sa_key_bytes(self) -> bytes:
        """The service-account signing key (``pki/sa.key``), read again only when the file
        changed (its inode, size, mtime or ctime): a kubelet's TokenRequest per started pod opened
        and read it each time.  A replaced key is used from the next token on, as before; a
        missing file raises ``OSError`` as reading it did."""
        path = self.pki.sa_key
        st = os.stat(path)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if self._sa_key is None or self._sa_key[0] != sig:
            self._sa_key = (sig, path.read_bytes())
        return self._sa_key[1]

    def authenticate_token(self, token: str, audiences: list[str] | None = None) -> tuple[UserInfo | None, str]:
        """The user a bearer token stands for, or None and why not (TokenReview's status.error).
        A service-account token must be meant for one of ``audiences`` (default: this API
        server's, as upstream's ``--api-audiences``)."""
        self._reload()
        u = self._static.get(token)
        if u is not None:
            groups = list(u.groups)
            if "system:authenticated" not in groups:
                groups.append("system:authenticated")
            return UserInfo(u.name, u.uid, groups), ""
        if self.secret_lookup is not None and (boot := bootstrap_tokens.authenticate(token, self.secret_lookup)):
            return UserInfo(boot[0], "", boot[1]), ""
        claims = self.verify_sa_token(token, audiences or [ISSUER])
        if claims is None:
            return None, "invalid bearer token"
        if self.claims_validator is not None:
            why = self.claims_validator(claims)
            if why:
                return None, f"invalid bearer token, {why}"
        return self._sa_user(claims), ""

    @staticmethod
    def _sa_user(claims: dict[str, Any]) -> UserInfo:
        k8s = claims.get("kubernetes.io") or {}
        ns = k8s.get("namespace", "")
        extra: dict[str, list[str]] = {}
        pod = k8s.get("pod")
        if pod:
            extra["authentication.kubernetes.io/pod-name"] = [pod.get("name", "")]
            extra["authentication.kubernetes.io/pod-uid"] = [pod.get("uid", "")]
        node = k8s.get("node")
        if node:
            extra["authentication.kubernetes.io/node-name"] = [node.get("name", "")]
            extra["authentication.kubernetes.io/node-uid"] = [node.get("uid", "")]
        if claims.get("jti"):
            extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims['jti']}"]
        return UserInfo(str(claims.get("sub", "")), (k8s.get("serviceaccount") or {}).get("uid", ""),
                        ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"], extra)

    # JWT (HS256)
    def issue_sa_token(self, namespace: str, sa_name: str, sa_uid: str, audiences: list[str],
                       expiration_seconds: int, bound: dict[str, Any] | None = None,
                       node: dict[str, str] | None = None) -> tuple[str, int]:
        """A JWT with upstream's claims; ``bound`` is the TokenRequest's boundObjectRef (its uid
        filled in), ``node`` the bound pod's node {name, uid} (upstream's
        ServiceAccountTokenPodNodeInfo)."""
        now = int(time.time())
        exp = now + expiration_seconds
        k8s: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": sa_name, "uid": sa_uid}}
        if bound and bound.get("kind") in ("Pod", "Secret", "Node"):
            k8s[bound["kind"].lower()] = {"name": bound.get("name", ""), "uid": bound.get("uid", "")}
        if node and "node" not in k8s:
            k8s["node"] = {"name": node.get("name", ""), "uid": node.get("uid", "")}
        claims = {"aud": audiences or [ISSUER], "exp": exp, "iat": now, "nbf": now, "iss": ISSUER,
                  "jti": str(uuid.uuid4()), "sub": f"system:serviceaccount:{namespace}:{sa_name}",
                  "kubernetes.io": k8s}
        signed = f"{_JWT_HEAD}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
        # one-shot HMAC (OpenSSL's, no HMAC object to set up per token): the same digest
        sig = hmac.digest(self._sa_key_bytes(), signed.encode(), "sha256")
        return f"{signed}.{_b64(sig)}", exp

    def verify_sa_token(self, token: str, audiences: list[str] | None = None) -> dict[str, Any] | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            want = hmac.digest(self._sa_key_bytes(), f"{parts[0]}.{parts[1]}".encode(), "sha256")
            if not hmac.compare_digest(want, _unb64(parts[2])):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, OSError):
            return None
        if not isinstance(claims, dict) or claims.get("iss") != ISSUER:
            return None
        if int(claims.get("exp", 0)) < time.time():
            return None
        if audiences and not set(audiences) & set(claims.get("aud") or []):
            return None
        return claims


# ------------------------------------------------------------------ authorization
@dataclass
class Attributes:
    user: UserInfo
    verb: str
    namespace: str = ""
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


class Authorizer:
    """``--authorization-mode=Node,RBAC`` behind upstream's always-on ``system:masters`` superuser
    check: the first authorizer with an opinion decides; reasons of the ones without are kept
    for the 403 message (upstream's union authorizer)."""

    def __init__(self, data_dir: Path, store: Any = None) -> None:
        self.data_dir = data_dir
        self.rbac: RBACAuthorizer | None = None
        self.node: NodeAuthorizer | None = None
        if store is not None:
            self.bind(store)

    def bind(self, store: Any) -> None:
        """Start reading roles, bindings and pods from the server's storage."""
        self.rbac = RBACAuthorizer(store)
        self.node = NodeAuthorizer(store)

    def authorize(self, a: Attributes) -> tuple[bool, str]:
        groups = list(a.user.groups)
        if "system:masters" in groups:
            return True, ""
        req = Request(a.user.name, groups, a.verb, a.namespace, a.api_group, a.resource, a.subresource, a.name,
                      a.path, a.resource_request)
        reasons: list[str] = []
        if self.node is not None:
            ok, why = self.node.authorize(a.user.name, groups, req)
            if ok:
                return True, why
            if why:
                reasons.append(why)
        if self.rbac is not None:
            ok2, why2 = self.rbac.authorize(req)
            if ok2:
                return True, why2
            if why2:
                reasons.append(why2)
        return False, ", ".join(reasons)


# ------------------------------------------------------------------ kubeconfigs
def write_kubeconfig(path: Path, server_url: str, ca_file: Path, user: str, token: str) -> Path:
    cfg = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "pykubelet", "cluster": {"server": server_url,
                                                        "certificate-authority": str(ca_file.resolve())}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "pykubelet", "context": {"cluster": "pykubelet", "user": user}}],
        "current-context": "pykubelet",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    path.chmod(0o600)
    return path


def _server_url_from_admin(data_dir: Path) -> str:
    cfg = yaml.safe_load((data_dir / "kubeconfig").read_text())
    return str(cfg["clusters"][0]["cluster"]["server"])


def ensure_admin(data_dir: Path, server_url: str) -> tuple[str, Path]:
    """Create (or reuse) the admin token and write D/kubeconfig for it."""
    pki = PKI(data_dir)
    pki.ensure()
    tok = TokenAuth(data_dir, pki).add_token("admin", "admin", ["system:masters"])
    return tok, write_kubeconfig(data_dir / "kubeconfig", server_url, pki.ca_crt, "admin", tok)


def node_kubeconfig(data_dir: str | Path, node_name: str, server_url: str | None = None) -> Path:
    """Add a token for system:node:<node_name> and write D/nodes/<node_name>.kubeconfig."""
    d = Path(data_dir)
    pki = PKI(d)
    pki.ensure()
    url = server_url or _server_url_from_admin(d)
    user = f"system:node:{node_name}"
    tok = TokenAuth(d, pki).add_token(user, user, ["system:nodes", "system:authenticated"])
    return write_kubeconfig(d / "nodes" / f"{node_name}.kubeconfig", url, pki.ca_crt, user, tok)


