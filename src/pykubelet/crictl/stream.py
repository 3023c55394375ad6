"""``crictl exec -it``: the runtime's streaming server over a websocket (``v4.channel.k8s.io``).

CRI ``Exec`` returns a one-time URL on the runtime's streaming server (containerd's, on 127.0.0.1);
its remotecommand handler speaks SPDY or websockets. The websocket channel protocol is apimachinery's
``wsstream``: every binary message is ``<channel byte><payload>`` -- 0 stdin, 1 stdout, 2 stderr,
3 the final ``metav1.Status`` (exit code in ``details.causes[reason=ExitCode]``), 4 terminal size as
JSON ``{"Width": w, "Height": h}``. With ``-t`` the local terminal is put in raw mode for the session
and its size sent at start and on SIGWINCH. ``v4`` cannot half-close stdin, so only terminal sessions
(``-it``) are offered; ``-i`` without ``-t`` stays unsupported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import termios
import tty
from typing import Any

import aiohttp

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4


def exit_code(status: dict[str, Any]) -> int:
    """The remote command's exit code from the channel-3 Status (0 on Success)."""
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            with contextlib.suppress(ValueError):
                return int(cause.get("message", "1"))
    return 1


async def run_terminal(url: str) -> int:
    """Attach the local terminal to an exec URL; returns the remote exit code."""
    ws_url = "ws" + url[len("http"):] if url.startswith("http") else url
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    loop = asyncio.get_running_loop()
    code = 0
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, protocols=("v4.channel.k8s.io",),
                                                                       max_msg_size=0) as ws:

        outbox: asyncio.Queue[bytes] = asyncio.Queue()  # keeps keystrokes in order

        async def sender() -> None:
            while True:
                await ws.send_bytes(await outbox.get())

        def send_size() -> None:
            size = shutil.get_terminal_size()
            outbox.put_nowait(bytes([RESIZE]) + json.dumps({"Width": size.columns, "Height": size.lines}).encode())

        def on_stdin() -> None:
            data = os.read(fd, 4096)
            if not data:
                loop.remove_reader(fd)
                return
            outbox.put_nowait(bytes([STDIN]) + data)

        sending = loop.create_task(sender())
        try:
            if saved is not None:
                tty.setraw(fd)
                send_size()
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(signal.SIGWINCH, send_size)
            loop.add_reader(fd, on_stdin)
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY or not msg.data:
                    continue
                channel, payload = msg.data[0], msg.data[1:]
                if channel in (STDOUT, STDERR) and payload:
                    out = sys.stdout.buffer if channel == STDOUT else sys.stderr.buffer
                    out.write(payload)
                    out.flush()
                elif channel == ERROR and payload:
                    try:
                        code = exit_code(json.loads(payload))
                    except ValueError:
                        sys.stderr.write(payload.decode(errors="replace") + "\r\n")
                        code = 1
        finally:
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await sending
            loop.remove_reader(fd)
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGWINCH)
            if saved is not None:
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return code
