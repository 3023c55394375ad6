"""Supervise the control plane and the agent as one unit.

`pykubelet up` runs the server and the agent as child processes (not in-process tasks) so each keeps
its own event loop, signal handling and crash domain, exactly as they run on a real node where the
kubelet and the API server are separate daemons. The supervisor plays the part systemd plays there:

* starts components in order, optionally waiting for a readiness probe (the server's kubeconfig and
  port) before the next starts;
* when a child dies unexpectedly it reports the exit code (or the signal that killed it) with the
  tail of its log and restarts it after an exponential back-off (1 s doubling to 30 s, reset once a
  run has lasted 60 s -- the same shape as a CrashLoopBackOff, and what ``Restart=always`` does for
  containerd.service/kubelet.service on a real node), so a crash never silently takes the cluster
  down; after a restart it waits for the readiness probe again and says when the child is ready;
* stops in reverse order (agent before server before containerd) with SIGTERM by PID, then SIGKILL
  after a grace period.

A component whose process is not a plain command line (the private containerd: its config, socket
and pid file are prepared by :class:`~pykubelet.up.containerd.PrivateContainerd`) gives a ``spawn``
callable instead, and one that was started before the supervisor existed is handed over with
:meth:`Component.adopt`, so every restart goes through the same code and log lines.

Children get their own session (``start_new_session``) so a terminal Ctrl-C reaches only `up`, which
then stops them in the right order. Command lines are plain argv lists, so tests can inject dummy
children. The back-off policy is a pure class for unit tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

Log = Callable[[str], None]
ReadyProbe = Callable[[], Awaitable[bool]]
Spawner = Callable[[], "subprocess.Popen[bytes]"]


@dataclasses.dataclass
class Backoff:
    """Restart delays: initial, doubled per consecutive failure, capped; reset after a stable run."""

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 30.0
    reset_after: float = 60.0
    _next: float = dataclasses.field(default=0.0, init=False)

    def next_delay(self, ran_for: float) -> float:
        """Delay before the next restart, given how long the run that just ended lasted."""
        if ran_for >= self.reset_after or self._next == 0.0:
            self._next = self.initial
        delay = self._next
        self._next = min(self._next * self.factor, self.maximum)
        return delay


@dataclasses.dataclass
class ComponentSpec:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    log_path: Path | None = None
    ready: ReadyProbe | None = None
    ready_timeout: float = 60.0
    stop_grace: float = 15.0
    # Starts the process itself (argv/env/log_path are then only used for messages and log tails).
    spawn: Spawner | None = None


class ComponentFailed(RuntimeError):
    pass


def _tail(path: Path | None, lines: int = 15) -> str:
    if path is None:
        return ""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def describe_exit(rc: int) -> str:
    """"exited with code 3" / "was killed by SIGKILL" (Popen reports a signal as -signum)."""
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with code {rc}"


class Component:
    """One supervised child process."""

    def __init__(self, spec: ComponentSpec, log: Log, backoff: Backoff) -> None:
        self.spec = spec
        self.log = log
        self.backoff = backoff
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.started_at = 0.0
        self.stopping = False
        self._task: asyncio.Task[None] | None = None
        self._exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def _spawn(self) -> None:
        spec = self.spec
        if spec.spawn is not None:
            self.proc = spec.spawn()
            self.started_at = time.monotonic()
            self._exited.clear()
            return
        out: int | None = None
        logf = None
        if spec.log_path is not None:
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            logf = spec.log_path.open("ab")
            out = logf.fileno()
        env = dict(os.environ)
        if spec.env:
            env.update(spec.env)
        try:
            self.proc = subprocess.Popen(
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                env=env,
                start_new_session=True,
            )
        finally:
            if logf is not None:
                logf.close()
        self.started_at = time.monotonic()
        self._exited.clear()

    async def _wait_exit(self) -> int:
        proc = self.proc
        assert proc is not None
        while True:
            rc = proc.poll()
            if rc is not None:
                return rc
            await asyncio.sleep(0.1)

    async def start(self) -> None:
        self._spawn()
        self.log(f"started {self.spec.name} (pid {self.pid})")
        if self.spec.ready is not None:
            deadline = time.monotonic() + self.spec.ready_timeout
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise ComponentFailed(
                        f"{self.spec.name} exited with code {self.proc.returncode} while starting\n"
                        f"{_tail(self.spec.log_path)}"
                    )
                if await self.spec.ready():
                    break
                if time.monotonic() > deadline:
                    raise ComponentFailed(f"{self.spec.name} not ready after {self.spec.ready_timeout}s")
                await asyncio.sleep(0.1)
            self.log(f"{self.spec.name} is ready")
        self._task = asyncio.create_task(self._monitor(), name=f"supervise-{self.spec.name}")

    def adopt(self, proc: subprocess.Popen[bytes]) -> None:
        """Supervise a child that was started (and found ready) before the supervisor existed."""
        self.proc = proc
        self.started_at = time.monotonic()
        self._exited.clear()
        if self._task is None:
            self._task = asyncio.create_task(self._monitor(), name=f"supervise-{self.spec.name}")

    async def _wait_ready_again(self) -> None:
        """After a restart: log when the readiness probe passes (or why it did not)."""
        spec = self.spec
        if spec.ready is None:
            return
        deadline = time.monotonic() + spec.ready_timeout
        while not self.stopping:
            if self.proc is None or self.proc.poll() is not None:
                return  # _monitor reports the exit and restarts it again
            try:
                if await spec.ready():
                    self.log(f"{spec.name} is ready again (restart #{self.restarts})")
                    return
            except Exception as e:  # a probe bug must not stop supervision
                self.log(f"{spec.name} readiness probe failed: {e}")
            if time.monotonic() > deadline:
                self.log(f"{spec.name} not ready {spec.ready_timeout:.0f}s after restart #{self.restarts}")
                return
            await asyncio.sleep(0.1)

    async def _monitor(self) -> None:
        while True:
            rc = await self._wait_exit()
            self._exited.set()
            if self.stopping:
                return
            ran = time.monotonic() - self.started_at
            delay = self.backoff.next_delay(ran)
            tail = _tail(self.spec.log_path)
            where = f" (log {self.spec.log_path})" if self.spec.log_path else ""
            self.log(
                f"{self.spec.name} {describe_exit(rc)} after {ran:.1f}s{where}; restarting in {delay:g}s"
                + (f"\n{tail}" if tail else "")
            )
            while True:
                await asyncio.sleep(delay)
                if self.stopping:
                    return
                self.restarts += 1
                try:
                    self._spawn()
                    break
                except OSError as e:  # e.g. the binary vanished: keep trying with back-off
                    delay = self.backoff.next_delay(0.0)
                    self.log(f"restarting {self.spec.name} failed: {e}; retrying in {delay:g}s")
            self.log(f"restarted {self.spec.name} (pid {self.pid}, restart #{self.restarts})")
            await self._wait_ready_again()

    async def stop(self) -> int | None:
        """SIGTERM the child by PID, SIGKILL after the grace period. Returns its exit code."""
        self.stopping = True
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self.log(f"stopping {self.spec.name} (pid {proc.pid})")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.spec.stop_grace
            while True:
                if proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    self.log(f"{self.spec.name} did not exit in {self.spec.stop_grace}s; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await asyncio.to_thread(proc.wait)
                    break
                await asyncio.sleep(0.05)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return proc.returncode if proc is not None else None


class Supervisor:
    """Start components in order, keep them running, stop them in reverse order."""

    def __init__(
        self,
        specs: list[ComponentSpec],
        *,
        log: Log = print,
        backoff_factory: Callable[[], Backoff] = Backoff,
    ) -> None:
        self.log = log
        self.components = [Component(s, log, backoff_factory()) for s in specs]

    def __getitem__(self, name: str) -> Component:
        for c in self.components:
            if c.spec.name == name:
                return c
        raise KeyError(name)

    async def start(self) -> None:
        started: list[Component] = []
        try:
            for c in self.components:
                await c.start()
                started.append(c)
        except BaseException:
            for c in reversed(started):
                await c.stop()
            # The one that failed may still be running (e.g. not ready in time).
            for c in self.components:
                if c not in started:
                    await c.stop()
            raise

    async def stop(self) -> None:
        for c in reversed(self.components):
            await c.stop()
