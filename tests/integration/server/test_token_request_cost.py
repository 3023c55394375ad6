"""A kubelet's TokenRequest (one per started pod, for its kube-api-access volume) answers as
before while it does less: the service account is read without a copy, the JWT header is
encoded once, the HMAC is OpenSSL's one-shot. The token's bytes are what HS256 over the same
header and claims gives; a missing account is the same 404."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from pykubelet.server.auth import ISSUER
from pykubelet.server.main import ServerHandle
from pykubelet.server.storage import Storage
from tests.builders import pod
from tests.integration.server.conftest import Http

PODS = "/api/v1/namespaces/default/pods"


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


async def _token_request(http: Http, account: str, name: str, uid: str) -> tuple[int, Any]:
    return await http.req("POST", f"/api/v1/namespaces/default/serviceaccounts/{account}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                                               "uid": uid}}})


async def test_a_pods_token_is_hs256_over_the_same_header_and_claims_and_reads_no_copy(
        http33: Http, server33: ServerHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    st, created = await http33.req("POST", PODS, pod("tok", uid=""))
    assert st == 201, created
    uid = created["metadata"]["uid"]
    copies: list[tuple[str, str, str]] = []
    real_get = Storage.get

    def counting_get(self: Storage, resource: str, namespace: str, name: str) -> Any:
        copies.append((resource, namespace, name))
        return real_get(self, resource, namespace, name)

    monkeypatch.setattr(Storage, "get", counting_get)
    st, tr = await _token_request(http33, "default", "tok", uid)
    assert st == 201, tr
    assert ("serviceaccounts", "default", "default") not in copies  # the account is only read
    head, body, sig = tr["status"]["token"].split(".")
    assert head == _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "pykubelet"}).encode())
    key = server33.http.registry.tokens.pki.sa_key.read_bytes()
    assert _unb64(sig) == hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    claims = json.loads(_unb64(body))
    assert claims["iss"] == ISSUER and claims["kubernetes.io"]["pod"] == {"name": "tok", "uid": uid}
    assert body == _b64(json.dumps(claims, separators=(",", ":")).encode())  # compact, in claim order
    assert server33.http.registry.tokens.verify_sa_token(tr["status"]["token"]) == claims
    forged = f"{head}.{body}.{_b64(hmac.new(b'other', f'{head}.{body}'.encode(), hashlib.sha256).digest())}"
    assert server33.http.registry.tokens.verify_sa_token(forged) is None


async def test_a_token_for_a_missing_account_is_not_found(http33: Http) -> None:
    st, created = await http33.req("POST", PODS, pod("tok2", uid=""))
    assert st == 201, created
    st, out = await _token_request(http33, "nope", "tok2", created["metadata"]["uid"])
    assert st == 404
    assert out["reason"] == "NotFound"
    assert out["message"] == 'serviceaccounts "nope" not found'
    assert out["details"] == {"name": "nope", "kind": "serviceaccounts"}
