"""The service proxy's I/O: watch Services + EndpointSlices, apply rules with iptables-restore.

Like kube-proxy's iptables ``Proxier``: two list+watch loops keep caches of Services and
EndpointSlices; any change marks the proxy dirty and a sync runs at most every ``min_sync_period``
(default 0.1 s, so a readiness change reaches the rules well within a probe period) and at least
every ``sync_period`` (30 s).  Each sync generates the complete rules
(:mod:`pykubelet.agent.proxy.rules`); the periodic (and first) sync applies all of them with
``iptables-restore -w --noflush``, atomic per table, which also repairs rules someone else removed,
and the syncs in between apply only the chains whose rules changed (upstream's partial sync); the jumps from the builtin
chains are ensured with ``iptables -C``/``-I`` (inserted first, as kube-proxy does).  ``stop()``
removes the jumps and every chain of ours, so nothing is left after Ctrl-C.  Blocking commands run
off the loop (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any, Protocol

from pykubelet.agent.proxy import rules
from pykubelet.common.aio import cancel_and_wait

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_PREFIX = re.compile(r"^[A-Z][A-Z0-9]{0,6}$")


class WatchApi(Protocol):
    async def list(self, path: str, params: Any = None) -> Obj: ...
    def watch(self, path: str, *, resource_version: str | None = None, params: Any = None,
              timeout_seconds: int | None = None) -> Any: ...


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=60)


class IptablesError(RuntimeError):
    pass


class Iptables:
    """The few iptables commands the proxy runs (blocking; call through ``asyncio.to_thread``)."""

    def save(self, table: str) -> str:
        r = _run(["iptables-save", "-t", table])
        if r.returncode != 0:
            raise IptablesError(f"iptables-save -t {table}: {r.stderr.strip()}")
        return r.stdout

    def restore(self, text: str) -> None:
        r = _run(["iptables-restore", "-w", "--noflush"], text)
        if r.returncode != 0:
            raise IptablesError(f"iptables-restore: {r.stderr.strip()}")

    def ensure_jump(self, table: str, chain: str, spec: list[str]) -> None:
        if _run(["iptables", "-w", "-t", table, "-C", chain, *spec]).returncode == 0:
            return
        r = _run(["iptables", "-w", "-t", table, "-I", chain, "1", *spec])
        if r.returncode != 0:
            raise IptablesError(f"iptables -t {table} -I {chain}: {r.stderr.strip()}")

    def delete(self, table: str, args: list[str]) -> None:
        _run(["iptables", "-w", "-t", table, *args])


def remove_rules(prefix: str, ipt: Iptables | None = None) -> None:
    """Remove every jump into and every chain named ``<prefix>-*`` (blocking; idempotent)."""
    ipt = ipt or Iptables()
    for table in ("nat", "filter"):
        try:
            saved = ipt.save(table)
        except IptablesError as e:
            log.warning("service proxy cleanup: %s", e)
            continue
        for args in rules.our_jumps(saved, prefix):
            ipt.delete(table, args)
        text = rules.cleanup_text(table, rules.our_chains(saved, prefix))
        if text:
            try:
                ipt.restore(text)
            except IptablesError as e:
                log.warning("service proxy cleanup of %s: %s", table, e)


def proxy_unavailable() -> str:
    """Why the iptables proxy cannot run here ("" when it can)."""
    for tool in ("iptables", "iptables-save", "iptables-restore"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return ""


class ListWatchCache:
    """One list+watch collection (resourceVersion resume, relist on 410 or error); ``listeners``
    are called (synchronously, cheaply) after every change.  The agent's Service cache is one
    (service environment variables), shared with the proxy."""

    def __init__(self, api: WatchApi, path: str) -> None:
        self.api, self.path = api, path
        self.listeners: list[Callable[[], None]] = []
        self.items: dict[tuple[str, str], Obj] = {}
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def on_change(self) -> None:
        for fn in self.listeners:
            fn()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"list-watch {self.path}")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def run(self) -> None:
        while True:
            try:
                lst = await self.api.list(self.path)
                self.items = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                              for o in lst.get("items") or []}
                rv = (lst.get("metadata") or {}).get("resourceVersion")
                self.synced.set()
                self.on_change()
                while True:
                    async for etype, obj in self.api.watch(self.path, resource_version=rv, timeout_seconds=300):
                        meta = obj.get("metadata") or {}
                        rv = meta.get("resourceVersion") or rv
                        key = (meta.get("namespace", ""), meta.get("name", ""))
                        if etype == "DELETED":
                            self.items.pop(key, None)
                        elif etype in ("ADDED", "MODIFIED"):
                            self.items[key] = obj
                        else:
                            continue
                        self.on_change()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("service proxy: watch %s: %s; relisting", self.path, e)
                await asyncio.sleep(1.0)


class ServiceProxy:
    def __init__(self, api: WatchApi, *, prefix: str = "PYK", masquerade_bit: int = 14,
                 min_sync_period: float = 0.1, sync_period: float = 30.0, iptables: Iptables | None = None,
                 services: ListWatchCache | None = None, node_name: str = "") -> None:
        if not _PREFIX.match(prefix):
            raise ValueError(f"service proxy chain prefix {prefix!r}: 1-7 upper-case letters/digits, a letter first")
        self.prefix = prefix
        self.node_name = node_name  # for the Local traffic policies
        self.masquerade_bit = masquerade_bit
        self.min_sync_period = min_sync_period
        self.sync_period = sync_period
        self.ipt = iptables or Iptables()
        self._own_services = services is None  # a shared cache is stopped by its owner
        self.services = services or ListWatchCache(api, "/api/v1/services")
        self.slices = ListWatchCache(api, "/apis/discovery.k8s.io/v1/endpointslices")
        self.services.listeners.append(self._changed)
        self.slices.listeners.append(self._changed)
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._chains: dict[str, set[str]] = {}
        self._applied: dict[str, dict[str, list[str]]] = {}  # content of the last sync (partial syncs)
        self._last_full = 0.0
        self.last_sync_seconds = 0.0
        self.syncs = 0

    def _changed(self) -> None:
        self._dirty.set()

    async def start(self) -> None:
        await asyncio.to_thread(self._remove_all)  # leftovers of a killed run
        self.services.start()  # a no-op when the shared cache runs already
        self.slices.start()
        self._tasks = [asyncio.create_task(self._loop(), name="proxy:sync")]
        log.info("service proxy (iptables, chains %s-*) started", self.prefix)

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        await self.slices.stop()
        if self._own_services:
            await self.services.stop()
        await asyncio.to_thread(self._remove_all)
        log.info("service proxy stopped; its iptables rules are removed")

    async def _loop(self) -> None:
        await self.services.synced.wait()
        await self.slices.synced.wait()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), self.sync_period)
            self._dirty.clear()
            try:
                await asyncio.to_thread(self.sync)
            except Exception as e:  # keep serving; the next change or period retries (in full)
                log.error("service proxy: sync failed: %s", e)
                self._applied = {}
                self._dirty.set()
                await asyncio.sleep(1.0)
            await asyncio.sleep(self.min_sync_period)

    def sync(self) -> None:
        """One full rebuild (blocking)."""
        t0 = time.perf_counter()
        ports = rules.service_ports(list(self.services.items.values()), list(self.slices.items.values()),
                                    self.node_name)
        full = not self._applied or time.monotonic() - self._last_full >= self.sync_period
        if full:
            self._chains = {t: rules.our_chains(self.ipt.save(t), self.prefix) for t in ("nat", "filter")}
        rs = rules.build_rules(ports, prefix=self.prefix, masquerade_bit=self.masquerade_bit, existing=self._chains)
        if full:  # everything, which also repairs chains someone else changed
            self._applied = {}
            self.ipt.restore(rs.filter + rs.nat)
            for table, chain, spec in rules.jump_rules(self.prefix):
                self.ipt.ensure_jump(table, chain, spec)
            self._last_full = time.monotonic()
        else:
            text = rules.changed_text(rs, self._applied)
            if text:
                self.ipt.restore(text)
        self._applied = rs.content
        self._chains = rs.chains
        self.last_sync_seconds = time.perf_counter() - t0
        self.syncs += 1
        log.debug("service proxy: %d service ports synced in %.3fs", len(ports), self.last_sync_seconds)

    def _remove_all(self) -> None:
        remove_rules(self.prefix, self.ipt)
        self._chains = {}
        self._applied = {}
