"""metav1.Status error bodies for the kubelet API.

Upstream's kubelet answers API-style errors (unknown pod, bad parameters) with a JSON Status so that
kubectl, going through the API server proxy, prints ``Error from server (Reason): message``; plain
text would be shown verbatim but lose the reason. The API server's own Status helper is not imported
because the agent must not depend on the server package.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def status_response(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    return web.Response(status=code, text=json.dumps(status_body(code, reason, message, details)),
                        content_type="application/json")
