"""The four probe mechanisms (upstream pkg/probe/{exec,http,tcp,grpc} and prober/prober.go).

Each ``probe_*`` coroutine returns ``(Outcome, output)`` and raises ``ProbeError`` when the probe
could not be run at all (upstream returns an ``err`` and the worker throws the result away). Every
I/O path runs under ``asyncio.timeout(timeoutSeconds)`` so a hung container can never stall the
worker, and nothing here blocks the event loop.

Upstream behaviour followed:

* exec: CRI ExecSync with the probe timeout; exit 0 = success, anything else = failure; a runtime
  deadline is a *failure* ("command ... timed out", ExecProbeTimeout GA); output (stdout+stderr) is
  capped at 10 KiB. The runtime enforces ``timeoutSeconds``; in case it hangs, the call itself is
  bounded by ``timeoutSeconds + 10 s``: through ``CRIClient`` as the gRPC deadline of the call (free:
  gRPC's C core tracks it; an ``asyncio.timeout`` costs a loop timer and its bookkeeping per probe,
  ~5 % of the agent's CPU at 200 probes/s), for any other ``ExecRuntime`` as an asyncio timeout.
  (``InProcessCRIClient``, hollow nodes, ignores deadlines: its fake runtime answers at once.) ``$(VAR)`` references expand from the container's literal env only
  (``ExpandContainerCommandOnlyStatic``).
* httpGet: host defaults to the pod IP, port may be a number or a named container port (falling back
  to parsing the name as a number), scheme HTTPS skips verification, headers are multi-valued and
  a ``Host`` header overrides the request host; User-Agent ``kube-probe/1.33`` and ``Accept: */*``
  unless given. No keep-alive and no proxy. Redirects are followed (max 10) only while they stay on
  the same host; a redirect elsewhere stops there and, like any other 3xx, is a *success with a
  warning* ("Probe terminated redirects"). 2xx = success, body read capped at 10 KiB; other codes =
  "HTTP probe failed with statuscode: N". Transport errors are failures with Go-like messages.
* tcpSocket: a TCP connect within the timeout.
* grpc: ``grpc.health.v1.Health/Check`` on ``podIP:port`` with ``service``, through the official
  ``grpcio-health-checking`` stub and messages (``grpc_health.v1``) over ``grpc.aio``. SERVING is
  success; other statuses, UNIMPLEMENTED and deadlines are failures with upstream's wording.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import ssl
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from pykubelet.agent.prober.results import Outcome
from pykubelet.common.durations import format_duration
from pykubelet.cri import CRIClient, CRIError

if TYPE_CHECKING:  # grpcio (~8.5 MB of RSS) is imported by the first gRPC probe, not by the agent
    import grpc

log = logging.getLogger(__name__)

KUBE_VERSION = "1.33"
USER_AGENT_PROBE = f"kube-probe/{KUBE_VERSION}"
MAX_BODY = 10 * 1024
MAX_EXEC_OUTPUT = 10 * 1024
MAX_REDIRECTS = 10
# an exec probe gives the runtime timeoutSeconds + this before giving up on the call itself
EXEC_GUARD_MARGIN = 10.0
# seconds: the prober's wake grid (manager docstring); exec probes' answers are read on it too
WAKE_GRID = 0.1
_REDIRECT_CODES = (301, 302, 303, 307, 308)


class ProbeError(Exception):
    """The probe could not be run (upstream: probe returned an error, result discarded)."""


class ExecRuntime(Protocol):
    async def exec_sync(self, container_id: str, cmd: Iterable[str], timeout: int = 0) -> Any: ...  # noqa: ASYNC109


# --------------------------------------------------------------------------------------------
# helpers shared with lifecycle handlers
# --------------------------------------------------------------------------------------------
def bare_container_id(container_id: str) -> str:
    """``containerd://abc`` -> ``abc`` (the API form carries the runtime scheme, CRI wants the id)."""
    return container_id.split("://", 1)[1] if "://" in container_id else container_id


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    """Upstream ResolveContainerPort: int as-is, name via container ports, else try int(name)."""
    value: int
    if isinstance(port, bool) or port is None:
        raise ProbeError(f"intOrString had no kind: {port!r}")
    if isinstance(port, int):
        value = port
    else:
        name = str(port)
        found = [p.get("containerPort") for p in (container.get("ports") or []) if p.get("name") == name]
        if found and isinstance(found[0], int):
            value = found[0]
        else:
            try:
                value = int(name)
            except ValueError:
                raise ProbeError(
                    f"couldn't find port: {name} in container {container.get('name', '')!r}"
                ) from None
    if 0 < value < 65536:
        return value
    raise ProbeError(f"invalid port number: {value}")


_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand_static(args: Sequence[str], env: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """Expand ``$(VAR)`` from literal env values; ``$$`` escapes; unknown refs stay verbatim."""
    if "$" not in "".join(args):
        return list(args)  # the common case, run on every exec probe: nothing to expand
    values = {e["name"]: str(e.get("value", "")) for e in (env or []) if "name" in e and "valueFrom" not in e}

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return values[name] if name in values else m.group(0)

    return [_VAR_RE.sub(sub, a) for a in args]


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def build_url(action: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str) -> URL:
    scheme = str(action.get("scheme") or "HTTP").lower()
    host = action.get("host") or pod_ip
    port = resolve_port(action.get("port"), container)
    path = str(action.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    try:
        return URL(f"{scheme}://{join_host_port(host, port)}{path}")
    except ValueError as e:
        raise ProbeError(f"invalid probe URL: {e}") from None


def build_headers(action: Mapping[str, Any], user_agent: str) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for h in action.get("httpHeaders") or []:
        if h.get("name"):
            headers.add(str(h["name"]), str(h.get("value", "")))
    if "User-Agent" not in headers:
        headers["User-Agent"] = user_agent
    if "Accept" not in headers:
        headers["Accept"] = "*/*"
    headers["Connection"] = "close"
    return headers


class HTTPResult:
    """A finished GET: final status, capped body, and whether a foreign-host redirect stopped it."""

    def __init__(self, status: int, body: str, url: URL) -> None:
        self.status = status
        self.body = body
        self.url = url


def _go_url(url: URL) -> str:
    return str(url)


def _describe_client_error(url: URL, err: BaseException) -> str:
    hostport = f"{url.host}:{url.port}" if url.host else str(url)
    if isinstance(err, aiohttp.ClientConnectorError):
        os_err = err.os_error
        if getattr(os_err, "errno", None) == errno.ECONNREFUSED:
            return f'Get "{_go_url(url)}": dial tcp {hostport}: connect: connection refused'
        return f'Get "{_go_url(url)}": dial tcp {hostport}: {os_err.strerror or os_err}'
    return f'Get "{_go_url(url)}": {err}'


_NO_VERIFY = ssl.create_default_context()
_NO_VERIFY.check_hostname = False
_NO_VERIFY.verify_mode = ssl.CERT_NONE


def new_http_session() -> aiohttp.ClientSession:
    """A session like upstream's probe transport: no keep-alive, no proxy, TLS unverified."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True, ssl=_NO_VERIFY, limit=0),
        trust_env=False,
        auto_decompress=True,
        skip_auto_headers=("User-Agent",),
    )


class ProbeHTTP:
    """One lazily created probe session, shared by a prober or a hook runner and closed with it."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_http_session()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def http_get(
    session: aiohttp.ClientSession, url: URL, headers: CIMultiDict[str], timeout: float  # noqa: ASYNC109
) -> HTTPResult:
    """GET following same-host redirects (max 10); ``HTTPFailure`` on transport errors/timeouts."""
    current = url
    try:
        async with asyncio.timeout(timeout):
            for hop in range(MAX_REDIRECTS + 1):
                async with session.get(current, headers=headers, allow_redirects=False) as resp:
                    location = resp.headers.get("Location")
                    if resp.status in _REDIRECT_CODES and location:
                        target = current.join(URL(location))
                        if target.host != url.host:
                            body = await _read_capped(resp)
                            return HTTPResult(resp.status, body, current)
                        if hop >= MAX_REDIRECTS:
                            raise HTTPFailure(f'Get "{_go_url(target)}": stopped after {MAX_REDIRECTS} redirects')
                        current = target
                        continue
                    body = await _read_capped(resp)
                    return HTTPResult(resp.status, body, current)
    except TimeoutError:
        raise HTTPFailure(
            f'Get "{_go_url(current)}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
        ) from None
    except aiohttp.ClientError as e:
        raise HTTPFailure(_describe_client_error(current, e)) from None
    raise HTTPFailure(f'Get "{_go_url(current)}": stopped after {MAX_REDIRECTS} redirects')  # pragma: no cover


class HTTPFailure(Exception):
    """A transport-level HTTP failure; ``str()`` is the Go-like message."""


async def _read_capped(resp: aiohttp.ClientResponse) -> str:
    chunks: list[bytes] = []
    size = 0
    while size < MAX_BODY:
        chunk = await resp.content.read(MAX_BODY - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------
# the probes
# --------------------------------------------------------------------------------------------
async def probe_http(
    session: aiohttp.ClientSession, action: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str,
    timeout: float,  # noqa: ASYNC109
) -> tuple[Outcome, str]:
    url = build_url(action, container, pod_ip)
    headers = build_headers(action, USER_AGENT_PROBE)
    try:
        res = await http_get(session, url, headers, timeout)
    except HTTPFailure as e:
        return Outcome.FAILURE, str(e)
    if 200 <= res.status < 400:
        if res.status >= 300:
            return Outcome.WARNING, f"Probe terminated redirects, Response body: {res.body}"
        return Outcome.SUCCESS, res.body
    return Outcome.FAILURE, f"HTTP probe failed with statuscode: {res.status}"


async def probe_tcp(host: str, port: int, timeout: float) -> tuple[Outcome, str]:  # noqa: ASYNC109
    addr = join_host_port(host, port)
    try:
        async with asyncio.timeout(timeout):
            _reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return Outcome.FAILURE, f"dial tcp {addr}: i/o timeout"
    except OSError as e:
        if e.errno == errno.ECONNREFUSED:
            return Outcome.FAILURE, f"dial tcp {addr}: connect: connection refused"
        return Outcome.FAILURE, f"dial tcp {addr}: {e.strerror or e}"
    writer.close()
    try:
        async with asyncio.timeout(timeout):
            await writer.wait_closed()
    except (TimeoutError, OSError):
        pass
    return Outcome.SUCCESS, ""


async def probe_exec(
    runtime: ExecRuntime, container_id: str, command: Sequence[str], timeout: float  # noqa: ASYNC109
) -> tuple[Outcome, str]:
    secs = max(1, int(timeout))
    cid = bare_container_id(container_id)
    try:
        if isinstance(runtime, CRIClient):
            # the guard is the call's own gRPC deadline: no asyncio timer per probe (docstring)
            # the answer is read on the prober's wake grid (manager docstring)
            resp = await runtime.exec_sync(cid, command, secs, deadline=secs + EXEC_GUARD_MARGIN, read_grid=WAKE_GRID)
        else:
            async with asyncio.timeout(secs + EXEC_GUARD_MARGIN):
                resp = await runtime.exec_sync(cid, list(command), secs)
    except TimeoutError:
        shown = " ".join(command)
        return Outcome.FAILURE, f'command "{shown}" timed out'
    except CRIError as e:
        if e.deadline_exceeded:
            return Outcome.FAILURE, f'command "{" ".join(command)}" timed out'
        raise ProbeError(str(e)) from None
    out = (bytes(resp.stdout) + bytes(resp.stderr))[:MAX_EXEC_OUTPUT].decode("utf-8", errors="replace")
    return (Outcome.SUCCESS if resp.exit_code == 0 else Outcome.FAILURE), out


# grpc.health.v1 ---------------------------------------------------------------------------------
def _serving_status_name(status: int) -> str:
    """Like Go's ``ServingStatus.String()``: the enum name, or the number for an unknown value."""
    from grpc_health.v1 import health_pb2

    try:
        return health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    except ValueError:
        return str(status)


async def probe_grpc(host: str, port: int, service: str, timeout: float) -> tuple[Outcome, str]:  # noqa: ASYNC109
    import grpc
    import grpc.aio
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    addr = join_host_port(host, port)
    options = [("grpc.primary_user_agent", USER_AGENT_PROBE), ("grpc.enable_http_proxy", 0)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with grpc.aio.insecure_channel(addr, options=options) as channel:
        try:
            async with asyncio.timeout(timeout):
                await channel.channel_ready()
        except TimeoutError:
            return Outcome.FAILURE, (
                f'timeout: failed to connect service "{addr}" within {format_duration(timeout)}: context deadline exceeded'
            )
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = cast(
                health_pb2.HealthCheckResponse,
                await stub.Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=max(0.001, deadline - loop.time())
                ),
            )
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return Outcome.FAILURE, (
                    "error: this server does not implement the grpc health protocol "
                    f"(grpc.health.v1.Health): {e.details()}"
                )
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome.FAILURE, f"timeout: health rpc did not complete within {format_duration(timeout)}"
            return Outcome.FAILURE, f"error: health rpc probe failed: rpc error: code = {_go_code(e.code())} desc = {e.details()}"
    if resp.status != health_pb2.HealthCheckResponse.SERVING:
        return Outcome.FAILURE, f'service unhealthy (responded with "{_serving_status_name(resp.status)}")'
    return Outcome.SUCCESS, "service healthy"


def _go_code(code: grpc.StatusCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_"))


# --------------------------------------------------------------------------------------------
class Prober:
    """Runs one probe spec against one container (upstream prober.runProbe + retries)."""

    MAX_RETRIES = 3

    def __init__(self, runtime: ExecRuntime) -> None:
        self.runtime = runtime
        self._http = ProbeHTTP()

    def session(self) -> aiohttp.ClientSession:
        return self._http.session()

    async def close(self) -> None:
        await self._http.close()

    async def run(
        self, probe: Mapping[str, Any], container: Mapping[str, Any], container_id: str, pod_ip: str
    ) -> tuple[Outcome, str]:
        """Run with upstream's retry-on-error (3 attempts); raises the last ProbeError."""
        err: ProbeError | None = None
        for _ in range(self.MAX_RETRIES):
            try:
                return await self.run_once(probe, container, container_id, pod_ip)
            except ProbeError as e:
                err = e
        assert err is not None
        raise err

    def run_once(
        self, probe: Mapping[str, Any], container: Mapping[str, Any], container_id: str, pod_ip: str
    ) -> Awaitable[tuple[Outcome, str]]:
        """One attempt (awaitable). An exec probe is ``probe_exec``'s coroutine itself: no
        coroutine of its own around it, one level fewer to resume per probe."""
        if probe.get("exec") is not None:
            timeout = float(probe.get("timeoutSeconds") or 1)
            cmd = expand_static(probe["exec"].get("command") or [], container.get("env"))
            return probe_exec(self.runtime, container_id, cmd, timeout)
        return self._run_other(probe, container, pod_ip)

    async def _run_other(self, probe: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str,
                         ) -> tuple[Outcome, str]:
        timeout = float(probe.get("timeoutSeconds") or 1)
        if probe.get("httpGet") is not None:
            return await probe_http(self.session(), probe["httpGet"], container, pod_ip, timeout)
        if probe.get("tcpSocket") is not None:
            action = probe["tcpSocket"]
            port = resolve_port(action.get("port"), container)
            return await probe_tcp(action.get("host") or pod_ip, port, timeout)
        if probe.get("grpc") is not None:
            action = probe["grpc"]
            port = action.get("port")
            if not isinstance(port, int) or not 0 < port < 65536:
                raise ProbeError(f"invalid port number: {port}")
            return await probe_grpc(pod_ip, port, str(action.get("service") or ""), timeout)
        log.warning("failed to find probe builder for container %s", container.get("name"))
        return Outcome.UNKNOWN, ""
