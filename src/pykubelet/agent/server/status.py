"""metav1.Status error bodies for the kubelet API.

Upstream's kubelet answers API-style errors (unknown pod, bad parameters) with a JSON Status so that
kubectl, going through the API server proxy, prints ``Error from server (Reason): message``; plain
text would be shown verbatim but lose the reason.
"""

from __future__ import annotations

import json

from aiohttp import web

from pykubelet.common.apistatus import status_object


class StatusError(web.HTTPException):
    """Raise from a handler or any helper it calls: aiohttp answers with this Status body.

    Helpers raise instead of returning a ``web.Response`` the caller must recognise and pass on.
    """

    def __init__(self, code: int, reason: str, message: str, *, name: str | None = None,
                 kind: str | None = None) -> None:
        self.status_code = code
        super().__init__(text=json.dumps(status_object(code, reason, message, name=name, kind=kind)),
                         content_type="application/json")


def status_response(code: int, reason: str, message: str, *, name: str | None = None,
                    kind: str | None = None) -> web.Response:
    return web.Response(status=code, text=json.dumps(status_object(code, reason, message, name=name, kind=kind)),
                        content_type="application/json")
