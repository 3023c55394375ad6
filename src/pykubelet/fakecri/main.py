"""``pykubelet fakecri --listen unix:///path.sock``: run the in-memory fake CRI runtime.

Used for hollow-node style scale tests and agent tests without containerd. Serves until SIGTERM or
SIGINT, then stops the gRPC server (short grace) and removes the socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal

from pykubelet.common import aio
from pykubelet.cri.client import socket_path
from pykubelet.fakecri.runtime import DEFAULT_IMAGES, FakeRuntime
from pykubelet.fakecri.server import serve

log = logging.getLogger("pykubelet.fakecri")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pykubelet fakecri", description="In-memory fake CRI runtime")
    p.add_argument("--listen", default="unix:///run/pykubelet/fakecri.sock",
                   help="unix socket endpoint to serve CRI on")
    p.add_argument("--image", action="append", default=[],
                   help="extra image reference to pre-populate (repeatable)")
    p.add_argument("--network-not-ready", action="store_true",
                   help="report NetworkReady=false in Status")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


async def _amain(args: argparse.Namespace) -> int:
    rt = FakeRuntime(images=(*DEFAULT_IMAGES, *args.image))
    rt.network_ready = not args.network_not_ready
    server, _ = await serve(args.listen, rt)
    path = socket_path(args.listen)
    log.info("fakecri serving CRI v1 on unix://%s", path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await server.stop(1.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        socket_path(args.listen)
    except ValueError as e:
        log.error("%s", e)
        return 2
    return aio.run(_amain(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
