"""Small asyncio helpers shared by the long-running loops of the agent and the control plane.

Every subsystem owns one or more background tasks and must stop them without leaking a task or an
exception into the caller's shutdown path: cancel, then wait until each task has really finished
(so nothing runs after ``stop()`` returns), and ignore what the cancelled tasks raised on the way out.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (``None`` entries are skipped) and wait until all have finished."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    await asyncio.gather(*live, return_exceptions=True)
