"""Container lifecycle hooks: postStart / preStop handlers (upstream pkg/kubelet/lifecycle/handlers.go
and the hook parts of kuberuntime_container.go).

``HandlerRunner.run`` executes one ``LifecycleHandler`` and returns ``None`` on success or the error
message in upstream's wording (which the kubelet puts into events), e.g.
``Exec lifecycle hook ([sh -c exit 3]) for Container "app" in Pod "web_default(uid)" failed - error:
command 'sh -c exit 3' exited with 3: , message: ""``. Handlers:

* exec: CRI ExecSync; a non-zero exit is an error (``command '<cmd>' exited with N: <stderr>``), like
  the remote runtime client turns it into a CodeExitError;
* httpGet: same URL/header/redirect rules as the HTTP probe (host = pod IP unless set, named ports,
  HTTPS unverified) with User-Agent ``kube-lifecycle/1.33``; transport errors fail, and - as this
  project's contract asks - a status >= 400 fails too;
* sleep: ``asyncio.sleep(seconds)``; interrupted -> "container terminated before sleep hook finished".

Everything runs under ``timeout`` so a hook can never hold the pod worker forever (upstream lets a
timed-out preStop keep running in a goroutine; here it is cancelled since the container is about to
be stopped anyway).

``run_post_start`` returns the message so the engine can emit Warning ``FailedPostStartHook`` and
kill the container. ``run_pre_stop`` runs within the grace period, emits Warning
``FailedPreStopHook`` "PreStopHook failed" itself (upstream keeps hook output out of the event so
secrets don't leak) and returns the grace left for StopContainer: ``grace - elapsed`` in whole
seconds, never below upstream's minimum of 2 seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from pykubelet.agent.prober.probes import (
    KUBE_VERSION,
    ExecRuntime,
    HTTPFailure,
    ProbeError,
    ProbeHTTP,
    bare_container_id,
    build_headers,
    build_url,
    http_get,
)

log = logging.getLogger(__name__)

USER_AGENT_LIFECYCLE = f"kube-lifecycle/{KUBE_VERSION}"
MIN_GRACE_SECONDS = 2
DEFAULT_POST_START_TIMEOUT = 120.0


def format_pod(pod: dict[str, Any]) -> str:
    """Upstream format.Pod: ``name_namespace(uid)``."""
    md = pod.get("metadata") or {}
    return f"{md.get('name', '')}_{md.get('namespace', '')}({md.get('uid', '')})"


def _go_list(items: list[Any]) -> str:
    return "[" + " ".join(str(i) for i in items) + "]"


class HandlerRunner:
    """Runs lifecycle handlers against a container through CRI (exec) or the network."""

    def __init__(self, runtime: ExecRuntime, recorder: Any | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.clock = clock
        self._http = ProbeHTTP()

    async def close(self) -> None:
        await self._http.close()

    async def run(self, pod: dict[str, Any], container: dict[str, Any], container_id: str,
                  handler: dict[str, Any], *, pod_ip: str, timeout: float) -> str | None:  # noqa: ASYNC109
        """Run one handler; None on success, else the upstream-style error message."""
        cname = str(container.get("name", ""))
        where = f'for Container "{cname}" in Pod "{format_pod(pod)}"'
        if handler.get("exec") is not None:
            cmd = [str(c) for c in handler["exec"].get("command") or []]
            err, output = await self._run_exec(container_id, cmd, timeout)
            if err is None:
                return None
            return f'Exec lifecycle hook ({_go_list(cmd)}) {where} failed - error: {err}, message: "{output}"'
        if handler.get("httpGet") is not None:
            action = handler["httpGet"]
            err = await self._run_http(container, action, pod_ip, timeout)
            if err is None:
                return None
            return f"HTTP lifecycle hook ({action.get('path', '')}) {where} failed - error: {err}"
        if handler.get("sleep") is not None:
            seconds = int(handler["sleep"].get("seconds") or 0)
            err = await self._run_sleep(seconds, timeout)
            if err is None:
                return None
            return f"Sleep lifecycle hook ({seconds}) {where} failed - error: {err}"
        return f"Cannot run handler: invalid handler: {handler}"

    async def _run_exec(self, container_id: str, cmd: list[str], timeout: float) -> tuple[str | None, str]:  # noqa: ASYNC109
        from pykubelet.cri import CRIError

        shown = " ".join(cmd)
        secs = max(1, int(timeout)) if timeout > 0 else 0
        try:
            async with asyncio.timeout(timeout if timeout > 0 else None):
                resp = await self.runtime.exec_sync(bare_container_id(container_id), cmd, secs)
        except TimeoutError:
            return f'command "{shown}" timed out', ""
        except CRIError as e:
            if e.deadline_exceeded:
                return f'command "{shown}" timed out', ""
            return str(e), ""
        stdout, stderr = bytes(resp.stdout), bytes(resp.stderr)
        output = (stdout + stderr).decode("utf-8", errors="replace")
        if resp.exit_code != 0:
            return f"command '{shown}' exited with {resp.exit_code}: {stderr.decode('utf-8', errors='replace')}", output
        return None, output

    async def _run_http(self, container: dict[str, Any], action: dict[str, Any], pod_ip: str,
                        timeout: float) -> str | None:  # noqa: ASYNC109
        try:
            url = build_url(action, container, pod_ip)
        except ProbeError as e:
            return str(e)
        headers = build_headers(action, USER_AGENT_LIFECYCLE)
        try:
            res = await http_get(self._http.session(), url, headers, timeout if timeout > 0 else 3600.0)
        except HTTPFailure as e:
            return str(e)
        if res.status >= 400:
            return f'Get "{res.url}": HTTP status code {res.status}'
        return None

    async def _run_sleep(self, seconds: int, timeout: float) -> str | None:  # noqa: ASYNC109
        if seconds <= 0:
            return None
        if 0 < timeout < seconds:
            await asyncio.sleep(timeout)
            return "container terminated before sleep hook finished"
        await asyncio.sleep(seconds)
        return None

    # -- helpers for the engine ---------------------------------------------------------------
    async def run_post_start(self, pod: dict[str, Any], container: dict[str, Any], container_id: str, *,
                             pod_ip: str, timeout: float = DEFAULT_POST_START_TIMEOUT) -> str | None:  # noqa: ASYNC109
        """Run postStart if defined. A message means: emit Warning FailedPostStartHook and kill."""
        handler = (container.get("lifecycle") or {}).get("postStart")
        if not handler:
            return None
        msg = await self.run(pod, container, container_id, handler, pod_ip=pod_ip, timeout=timeout)
        if msg:
            log.warning("PostStartHook failed: %s", msg)
        return msg

    async def run_pre_stop(self, pod: dict[str, Any], container: dict[str, Any], container_id: str, *,
                           pod_ip: str, grace_seconds: float) -> float:
        """Run preStop within the grace period; returns the grace left for StopContainer."""
        handler = (container.get("lifecycle") or {}).get("preStop")
        if not handler or grace_seconds <= 0:
            return grace_seconds
        start = self.clock()
        msg: str | None = None
        try:
            async with asyncio.timeout(grace_seconds):
                msg = await self.run(pod, container, container_id, handler, pod_ip=pod_ip, timeout=grace_seconds)
        except TimeoutError:
            log.info("PreStop hook not completed in grace period for container %s", container.get("name"))
        if msg:
            log.warning("PreStop hook failed: %s", msg)
            if self.recorder is not None:
                with contextlib.suppress(Exception):
                    self.recorder.event(pod, "Warning", "FailedPreStopHook", "PreStopHook failed")
        elapsed = int(self.clock() - start)
        return float(max(MIN_GRACE_SECONDS, int(grace_seconds) - elapsed))
