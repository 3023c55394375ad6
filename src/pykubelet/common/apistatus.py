"""``meta/v1 Status`` bodies, shared by the API server and the kubelet API.

kubectl and client-go decode the body of any non-2xx answer as a Status and print
``Error from server (<reason>): <message>``; both of our HTTP servers answer that way, so they build
the object with the same helper (``k8s.io/apimachinery/pkg/api/errors`` shapes: details only when
they say something).
"""

from __future__ import annotations

from typing import Any


def status_object(
    code: int,
    reason: str,
    message: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    group: str | None = None,
    causes: list[dict[str, str]] | None = None,
    retry_after: int | None = None,
) -> dict[str, Any]:
    """Build a Failure Status the way apimachinery does (details only when they say something)."""
    st: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if group:
        details["group"] = group
    if kind is not None:
        details["kind"] = kind
    if causes:
        details["causes"] = causes
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
    if details:
        st["details"] = details
    if not reason:
        del st["reason"]
    return st


def success_status(details: dict[str, Any] | None = None) -> dict[str, Any]:
    st: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        st["details"] = details
    return st
