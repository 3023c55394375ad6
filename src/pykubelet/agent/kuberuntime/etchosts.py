"""The kubelet-managed ``/etc/hosts`` of a pod (upstream ``kubelet_pods.go`` ``makeHostsMount``,
``ensureHostsFile``, ``managedHostsFileContent``, ``nodeHostsFileContent``; ``GeneratePodHostNameAndDomain``).

Upstream writes one hosts file per pod, ``<pod dir>/etc-hosts``, and bind-mounts it at ``/etc/hosts``
in every container that does not mount something there itself, once the pod has an IP:

- a pod on the pod network gets the ``# Kubernetes-managed hosts file.`` header, the localhost and
  IPv6 boilerplate, one line per pod IP with ``<hostname>.<subdomain>.<ns>.svc.<clusterDomain>
  <hostname>`` (or just the hostname without a ``subdomain``), then the ``hostAliases``;
- a ``hostNetwork`` pod gets a copy of the node's ``/etc/hosts`` (header ``# Kubernetes-managed
  hosts file (host network).``) with the ``hostAliases`` appended: it sees the host's names.

The file is written once, when the first container needs it, and never rewritten (upstream
``ensureHostsFile`` keeps an existing file, so a container restart sees the same content).
``setHostnameAsFQDN`` makes the sandbox's hostname the FQDN (at most 64 characters, as upstream).
Content builders are pure; ``ensure_hosts_file`` does the file I/O (call it off the event loop).
"""

from __future__ import annotations

import os
from typing import Any

JSON = dict[str, Any]

MANAGED_HEADER = "# Kubernetes-managed hosts file.\n"
MANAGED_HEADER_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
ETC_HOSTS_PATH = "/etc/hosts"
HOSTS_FILE_NAME = "etc-hosts"
MAX_HOSTNAME = 63
MAX_FQDN = 64


class HostnameError(ValueError):
    """The pod's FQDN cannot be its hostname (setHostnameAsFQDN with a too long name)."""


def hostname_and_domain(pod: JSON, cluster_domain: str) -> tuple[str, str]:
    """Upstream ``GeneratePodHostNameAndDomain``: ``spec.hostname`` or the pod name (63 chars at most),
    and ``<subdomain>.<ns>.svc.<clusterDomain>`` when the pod has a ``subdomain``."""
    md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    hostname = str(spec.get("hostname") or md.get("name", ""))[:MAX_HOSTNAME]
    domain = ""
    if spec.get("subdomain"):
        domain = f"{spec['subdomain']}.{md.get('namespace') or 'default'}.svc.{cluster_domain}"
    return hostname, domain


def sandbox_hostname(pod: JSON, cluster_domain: str) -> str:
    """The sandbox's hostname: the pod hostname, or its FQDN with ``setHostnameAsFQDN`` (upstream
    ``GeneratePodHostNameAndDomain`` + ``generatePodSandboxConfig``). Empty for hostNetwork pods, as
    upstream: they share the node's UTS namespace, and runc refuses to set a hostname without one."""
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        return ""
    hostname, domain = hostname_and_domain(pod, cluster_domain)
    if spec.get("setHostnameAsFQDN") is True and domain:
        fqdn = f"{hostname}.{domain}"
        if len(fqdn) > MAX_FQDN:
            raise HostnameError(
                f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long "
                f"({MAX_FQDN} characters is the max, {len(fqdn)} characters requested)")
        return fqdn
    return hostname


def _aliases(host_aliases: list[JSON] | None) -> str:
    """Upstream ``hostsEntriesFromHostAliases``."""
    if not host_aliases:
        return ""
    lines = ["", "# Entries added by HostAliases."]
    for alias in host_aliases:
        if not isinstance(alias, dict):
            continue
        names = [str(n) for n in alias.get("hostnames") or []]
        lines.append(f"{alias.get('ip', '')}\t" + "\t".join(names))
    return "\n".join(lines) + "\n"


def managed_hosts_content(pod_ips: list[str], hostname: str, domain: str, host_aliases: list[JSON] | None) -> str:
    """Upstream ``managedHostsFileContent``."""
    out = [
        MANAGED_HEADER,
        "127.0.0.1\tlocalhost\n",
        "::1\tlocalhost ip6-localhost ip6-loopback\n",
        "fe00::0\tip6-localnet\n",
        "fe00::0\tip6-mcastprefix\n",
        "fe00::1\tip6-allnodes\n",
        "fe00::2\tip6-allrouters\n",
    ]
    for ip in pod_ips:
        out.append(f"{ip}\t{hostname}.{domain}\t{hostname}\n" if domain else f"{ip}\t{hostname}\n")
    out.append(_aliases(host_aliases))
    return "".join(out)


def host_network_hosts_content(node_hosts: str, host_aliases: list[JSON] | None) -> str:
    """Upstream ``nodeHostsFileContent``: the node's file, then the host aliases."""
    if node_hosts and not node_hosts.endswith("\n"):
        node_hosts += "\n"
    return MANAGED_HEADER_HOST_NETWORK + node_hosts + _aliases(host_aliases)


def hosts_content(pod: JSON, pod_ips: list[str], cluster_domain: str, node_hosts_file: str = ETC_HOSTS_PATH) -> str:
    spec = pod.get("spec") or {}
    aliases = spec.get("hostAliases") if isinstance(spec.get("hostAliases"), list) else None
    if spec.get("hostNetwork"):
        try:
            with open(node_hosts_file) as f:
                node_hosts = f.read()
        except OSError:
            node_hosts = ""
        return host_network_hosts_content(node_hosts, aliases)
    hostname, domain = hostname_and_domain(pod, cluster_domain)
    return managed_hosts_content(pod_ips, hostname, domain, aliases)


def needs_hosts_mount(container: JSON, pod_ips: list[str], *, host_network: bool = False) -> bool:
    """Upstream ``makeMounts``: only once the pod has an IP (a hostNetwork pod always has the node's),
    and not over the container's own mount."""
    if not pod_ips and not host_network:
        return False
    return not any(isinstance(m, dict) and m.get("mountPath") == ETC_HOSTS_PATH
                   for m in container.get("volumeMounts") or [])


def ensure_hosts_file(pod_dir: str, pod: JSON, pod_ips: list[str], cluster_domain: str,
                      node_hosts_file: str = ETC_HOSTS_PATH) -> str:
    """Write ``<pod_dir>/etc-hosts`` unless it exists (blocking I/O); returns its path.

    Whole or not at all: written to ``etc-hosts.tmp`` (mode 0644 whatever the umask) and renamed
    into place, so an agent stopped halfway never leaves a partial file behind that would be kept.
    The pod directory is made only when the file cannot be created without it (a pod start makes
    the directory first): the usual case is a ``stat``, ``open``, ``write``, ``fchmod``, ``close`` and
    ``rename``, without a text-mode file object."""
    path = os.path.join(pod_dir, HOSTS_FILE_NAME)
    if os.path.exists(path):
        return path
    data = hosts_content(pod, pod_ips, cluster_domain, node_hosts_file).encode()
    tmp = f"{path}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o644)
    except (FileNotFoundError, NotADirectoryError):  # makedirs raises what it raised before for a file there
        os.makedirs(pod_dir, exist_ok=True)
        fd = os.open(tmp, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path
