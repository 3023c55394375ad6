"""Small file operations of a pod start, off the event loop in one worker thread.

Upstream's kubelet makes a pod's directories, its ``/etc/hosts`` and the legacy log symlink inline in
its goroutines (through ``container.OSInterface``); here they must stay off the event loop, which
``asyncio.to_thread`` did. Each ``to_thread`` hop costs 30-140 µs of CPU on this VM (a context copy, an
executor work item and its lock, a concurrent future chained to an asyncio future, a pool thread
woken and a loop wake-up per call), and a 1,000-pod start makes ~3,000 of them for operations of a
few syscalls each. Here a call is one queue put and one future: the worker runs everything queued
and hands the results back with one ``call_soon_threadsafe`` per batch, ~8 µs per call in a burst
of 100 and ~30 µs one at a time (in process, uvloop, ``os.stat`` as the work).

Kept from ``to_thread``: the call runs in another thread; its result, or any exception it raises
(as ``concurrent.futures`` passes them on), is the awaiter's; an awaiter that is cancelled leaves the
call running and its result is dropped. Different: the calls run one at a time, in the order they
were made. So this is only for calls of a few syscalls on local directories (``mkdir``, a symlink, a
small file), never for one that can block for long (a subprocess, the network, big writes, a mount
of anything but tmpfs), which keep ``to_thread``.

Each ``FileWorker`` is its own thread and queue: the agent's (``run``) for the pod directories,
``/etc/hosts`` and log links; the volume manager has one for the content of its configMap, secret,
downwardAPI and projected volumes (a directory, a tmpfs ``mount(2)`` of 15-40 µs, the atomic writer's
small files), so a slow volume never holds up a pod's directories.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar, cast

T = TypeVar("T")
P = ParamSpec("P")

_Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[object]", Callable[[], object]]
_Done = tuple["asyncio.Future[object]", bool, object]


def _deliver(done: list[_Done]) -> None:
    """On the loop: each result to its future (a future cancelled meanwhile drops it)."""
    for fut, ok, value in done:
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        elif isinstance(value, BaseException):
            try:
                fut.set_exception(value)
            except TypeError:  # StopIteration cannot travel through a future (asyncio refuses it)
                fut.set_exception(RuntimeError(f"file operation raised {value!r}"))


class FileWorker:
    """One daemon thread, started on the first call, running queued calls in order."""

    def __init__(self, name: str = "pykubelet-filework") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                t = threading.Thread(target=self._work, name=self._name, daemon=True)
                t.start()
                self._thread = t

    def _work(self) -> None:
        q = self._queue
        while True:
            item = q.get()
            batches: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
            while True:
                loop, fut, call = item
                try:
                    done: _Done = (fut, True, call())
                except BaseException as e:  # the awaiter's, as concurrent.futures passes it on
                    done = (fut, False, e)
                batches.setdefault(loop, []).append(done)
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            for loop, results in batches.items():
                try:
                    loop.call_soon_threadsafe(_deliver, results)
                except RuntimeError:  # that loop is closed: nobody awaits these any more
                    pass

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in the worker thread; its result (or exception) here."""
        if self._thread is None:
            self._start()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[object] = loop.create_future()
        self._queue.put((loop, fut, functools.partial(fn, *args, **kwargs)))
        return cast(T, await fut)


_WORKER = FileWorker()


async def run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in the agent's file worker (see the module docstring for what may go there)."""
    return await _WORKER.run(fn, *args, **kwargs)
