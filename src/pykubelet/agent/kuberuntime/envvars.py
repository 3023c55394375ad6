"""Service environment variables of a container (upstream ``pkg/kubelet/envvars`` + kubelet's
``getServiceEnvVarMap``), pure.

Which Services: the ``kubernetes`` Service of the ``default`` namespace always (so
``KUBERNETES_SERVICE_HOST``/``_PORT`` reach every pod, which is what in-cluster clients read), and,
when ``enableServiceLinks`` is true (the default), every Service of the pod's namespace.  Services
without a ClusterIP (headless, ExternalName) give none.  Per Service ``web-api`` with ClusterIP
``198.18.128.5`` and port ``http`` 80/TCP:

    WEB_API_SERVICE_HOST=198.18.128.5      WEB_API_SERVICE_PORT=80   WEB_API_SERVICE_PORT_HTTP=80
    WEB_API_PORT=tcp://198.18.128.5:80     (first port only)
    WEB_API_PORT_80_TCP=tcp://198.18.128.5:80   WEB_API_PORT_80_TCP_PROTO=tcp
    WEB_API_PORT_80_TCP_PORT=80            WEB_API_PORT_80_TCP_ADDR=198.18.128.5

These have the lowest precedence: ``envFrom`` and ``env`` of the container override them, and a
``$(VAR)`` in ``env`` may refer to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]


def _env_name(s: str) -> str:
    return s.upper().replace("-", "_")


def from_services(services: Iterable[Obj]) -> list[tuple[str, str]]:
    """Upstream ``envvars.FromServices``: the variables of these Services, in order."""
    out: list[tuple[str, str]] = []
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            continue
        name = _env_name((svc.get("metadata") or {}).get("name", ""))
        ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
        out.append((f"{name}_SERVICE_HOST", ip))
        if ports:
            out.append((f"{name}_SERVICE_PORT", str(ports[0].get("port"))))
        for p in ports:
            if p.get("name"):
                out.append((f"{name}_SERVICE_PORT_{_env_name(p['name'])}", str(p.get("port"))))
        host = f"[{ip}]" if ":" in ip else ip
        for i, p in enumerate(ports):
            proto = str(p.get("protocol") or "TCP")
            url = f"{proto.lower()}://{host}:{p.get('port')}"
            if i == 0:
                out.append((f"{name}_PORT", url))
            prefix = f"{name}_PORT_{p.get('port')}_{proto.upper()}"
            out += [(prefix, url), (f"{prefix}_PROTO", proto.lower()), (f"{prefix}_PORT", str(p.get("port"))),
                    (f"{prefix}_ADDR", ip)]
    return out


def service_env(pod: Obj, services: Iterable[Obj]) -> list[tuple[str, str]]:
    """The service variables of ``pod`` given all Services the node knows."""
    ns = (pod.get("metadata") or {}).get("namespace", "default")
    links = (pod.get("spec") or {}).get("enableServiceLinks")
    links = True if links is None else bool(links)
    chosen: dict[str, Obj] = {}
    master: Obj | None = None
    for svc in services:
        meta = svc.get("metadata") or {}
        if meta.get("namespace") == "default" and meta.get("name") == "kubernetes":
            master = svc
        if links and meta.get("namespace") == ns:
            chosen[meta.get("name", "")] = svc
    if master is not None and "kubernetes" not in chosen:
        chosen["kubernetes"] = master
    return from_services(chosen[k] for k in sorted(chosen))
