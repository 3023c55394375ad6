"""The dev control plane (``pykubelet server``): a Kubernetes-compatible API server plus controllers.

It exists so that the agent can be developed and tested against the real Kubernetes API on one
machine, and so that the real ``kubectl`` can drive a cluster made of it. Layout, following
upstream's split:

- ``main``          wiring and start-up order (PKI, storage, HTTPS listener, then controllers).
- ``app``           the HTTP layer (k8s.io/apiserver endpoints): routing, authn/authz, REST verbs,
                    watch; ``auth`` holds PKI, tokens and the authorizers, ``errors`` the Status
                    answers, ``resources`` + ``discovery`` what is served and how it is described.
- ``registry``      object semantics independent of HTTP (generic registry + resource strategies),
                    on ``storage`` (SQLite, resourceVersions, watch fan-out); ``validation``,
                    ``schema``/``apitypes``, ``patch``, ``managedfields``, ``selectors``,
                    ``tables``, ``events_conv`` and ``protobuf`` are the pieces it and ``app`` use.
- ``kubeletproxy``  pods/{name}/log|exec|attach|portforward and nodes/{name}/proxy, forwarded to
                    the node's kubelet API.
- ``scheduler``, ``nodelifecycle`` (+ ``tainteviction``, its NoExecute eviction workers)  controllers
                    that, like upstream's, talk to the API server only through ``ApiClient`` and never
                    touch storage.

The server never imports ``pykubelet.agent``; what both need lives in ``pykubelet.common``.
"""
