"""CSR approver: approves kubelet certificate requests, as upstream's ``csrapproving`` controller.

Client certificates (signer ``kubernetes.io/kube-apiserver-client-kubelet``): a request that is a
well-formed node client request (``isNodeClientCert``: organization exactly ``system:nodes``, common
name ``system:node:<name>``, no SANs, usages within digital signature / key encipherment / client
auth and including client auth) is approved when a SubjectAccessReview for its requester says
they may ``create`` ``certificatesigningrequests/selfnodeclient`` (the node renewing its own
certificate: CN equals the requester) or ``certificatesigningrequests/nodeclient`` (a new node,
typically a bootstrap token in ``system:bootstrappers``).  The default RBAC policy grants the
former to ``system:nodes`` and the latter to ``system:bootstrappers``, as kubeadm does, so revoking
a binding stops auto-approval without touching this controller.

Serving certificates (signer ``kubernetes.io/kubelet-serving``, requested with
``serverTLSBootstrap``): upstream leaves them to an administrator because it cannot know which
addresses are the node's; here the Node object is the judge.  A request is approved when its
requester is the node named in its CN (``system:node:<name>`` in ``system:nodes``), the
organization is ``system:nodes``, the usages are within digital signature / key encipherment /
server auth, and every DNS and IP SAN is one of that Node's ``status.addresses``.  Anything else
is left pending for ``kubectl certificate approve``, never denied (as upstream: the approver only
approves).

:func:`decide` is the pure part; the controller only watches CSRs, asks the API and writes the
``Approved`` condition through the ``/approval`` subresource.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from pykubelet.common.apiclient import ApiError
from pykubelet.server.controllers import kit

log = logging.getLogger(__name__)
Obj = dict[str, Any]
CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
SERVING_SIGNER = "kubernetes.io/kubelet-serving"
CLIENT_USAGES = {"digital signature", "key encipherment", "client auth"}
SERVING_USAGES = {"digital signature", "key encipherment", "server auth"}


@dataclass
class Decision:
    """What to do with a CSR: ``sar_subresource`` to check first (client CSRs), ``approve`` with
    ``message``, or nothing (``why`` says why, for the log)."""

    approve: bool = False
    message: str = ""
    sar_subresource: str = ""
    why: str = ""


def _parse(csr: Obj) -> x509.CertificateSigningRequest | None:
    try:
        return x509.load_pem_x509_csr(base64.b64decode((csr.get("spec") or {}).get("request", "")))
    except (ValueError, TypeError):
        return None


def _names(req: x509.CertificateSigningRequest) -> tuple[list[str], list[str], list[str], list[str]]:
    """(common names, organizations, DNS SANs, IP SANs)."""
    cn = [str(a.value) for a in req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    org = [str(a.value) for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    try:
        sans = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
        ips = [str(n) for n in sans.get_values_for_type(x509.IPAddress)]
        other = len(list(sans)) - len(dns) - len(ips)
    except x509.ExtensionNotFound:
        dns, ips, other = [], [], 0
    if other:
        dns.append("<other>")  # email/URI SANs: never a kubelet's
    return cn, org, dns, ips


def _pending(csr: Obj) -> bool:
    status = csr.get("status") or {}
    types = {c.get("type") for c in status.get("conditions") or []}
    return not (types & {"Approved", "Denied", "Failed"}) and not status.get("certificate")


def decide(csr: Obj, node: Obj | None) -> Decision:
    """The approver's judgement of one CSR, before any SubjectAccessReview."""
    if not _pending(csr):
        return Decision(why="already decided")
    spec = csr.get("spec") or {}
    signer = spec.get("signerName")
    req = _parse(csr)
    if req is None or signer not in (CLIENT_SIGNER, SERVING_SIGNER):
        return Decision(why="not a kubelet request")
    cn, org, dns, ips = _names(req)
    usages = set(spec.get("usages") or [])
    if org != ["system:nodes"] or len(cn) != 1 or not cn[0].startswith("system:node:"):
        return Decision(why="subject is not system:nodes/system:node:<name>")
    if signer == CLIENT_SIGNER:
        if dns or ips or not usages <= CLIENT_USAGES or "client auth" not in usages:
            return Decision(why="not a node client certificate request")
        if cn[0] == spec.get("username"):
            return Decision(sar_subresource="selfnodeclient",
                            message="Auto approving self kubelet client certificate after SubjectAccessReview.")
        return Decision(sar_subresource="nodeclient",
                        message="Auto approving kubelet client certificate after SubjectAccessReview.")
    # kubelet serving
    if spec.get("username") != cn[0] or "system:nodes" not in (spec.get("groups") or []):
        return Decision(why="serving certificates are approved only when the node requests its own")
    if not usages <= SERVING_USAGES or "server auth" not in usages:
        return Decision(why="usages are not those of a kubelet serving certificate")
    if not dns and not ips:
        return Decision(why="no subject alternative names")
    if node is None:
        return Decision(why="node not registered yet")
    addrs = {str(a.get("address", "")) for a in (node.get("status") or {}).get("addresses") or []}
    norm = set()
    for a in addrs:
        try:
            norm.add(str(ipaddress.ip_address(a)))
        except ValueError:
            norm.add(a)
    unknown = [n for n in dns + ips if n not in norm]
    if unknown:
        return Decision(why=f"names {unknown} are not addresses of node {cn[0].removeprefix('system:node:')}")
    return Decision(approve=True,
                    message="Auto approving kubelet serving certificate: its names are the Node's addresses.")


class CSRApprover(kit.Controller):
    name = "csrapproving"
    workers = 1

    def __init__(self, api: kit.Api) -> None:
        super().__init__(api)
        self.csrs = self.informer("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        self.nodes = self.informer("/api/v1/nodes")
        self.csrs.add_handlers(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))
        # a serving CSR waits for the node's addresses: look at pending ones again when nodes change
        self.nodes.add_handlers(on_add=lambda _n: self._requeue_pending(), on_update=lambda _o, _n: self._requeue_pending())

    def _requeue_pending(self) -> None:
        for c in self.csrs.items():
            if _pending(c) and (c.get("spec") or {}).get("signerName") == SERVING_SIGNER:
                self.enqueue(c)

    async def _sar_allows(self, csr: Obj, subresource: str) -> bool:
        spec = csr.get("spec") or {}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": spec.get("username", ""), "uid": spec.get("uid", ""),
                         "groups": list(spec.get("groups") or []), "extra": spec.get("extra") or {},
                         "resourceAttributes": {"group": "certificates.k8s.io", "resource": "certificatesigningrequests",
                                                "verb": "create", "subresource": subresource}}}
        out = await self.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        return bool((out.get("status") or {}).get("allowed"))

    async def reconcile(self, key: str) -> float | None:
        csr = self.csrs.get(key)
        if csr is None:
            return None
        req = _parse(csr)
        cn = _names(req)[0] if req is not None else []
        node = self.nodes.get(cn[0].removeprefix("system:node:")) if cn else None
        d = decide(csr, node)
        if d.sar_subresource:
            if not await self._sar_allows(csr, d.sar_subresource):
                log.info("CSR %s: requester may not create certificatesigningrequests/%s; leaving it pending",
                         key, d.sar_subresource)
                return None
            d.approve = True
        if not d.approve:
            log.debug("CSR %s left pending: %s", key, d.why)
            return None
        cond = {"type": "Approved", "status": "True", "reason": "AutoApproved", "message": d.message,
                "lastUpdateTime": kit.now_rfc3339(), "lastTransitionTime": kit.now_rfc3339()}
        body = {**csr, "status": {**(csr.get("status") or {}),
                                  "conditions": [*((csr.get("status") or {}).get("conditions") or []), cond]}}
        try:
            await self.api.replace(f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{key}/approval", body)
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        log.info("CSR %s approved: %s", key, d.message)
        return None
