"""How a stream writer (SSE or WebSocket) waits for a session to change.

Owns one primitive, `wait_for_change`, shared by the two stream writers: it
returns when the session has something new, when the daemon is shutting
down, or when a timeout passes (the SSE heartbeat), whichever comes first.

The writer's loop is: read the ring's `since(cursor)` → send → wait. Nothing
may be appended unnoticed between the read and the wait, so the waiter
re-checks `has_news()` and calls `session.wait_change()` with no checkpoint
in between (the session wakes every waiter on each append or status change).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from runnerd.session.manager import Session


class Wake(enum.Enum):
    CHANGED = "changed"
    CLOSING = "closing"
    TIMEOUT = "timeout"


async def wait_for_change(
    session: Session,
    has_news: Callable[[], bool],
    closing: trio.Event,
    timeout_s: float = math.inf,
) -> Wake:
    """Wait until `has_news()` would be true, shutdown, or `timeout_s`.

    Cancellation: cancellable; nothing is consumed from the session, so a
    cancelled wait loses nothing.
    """
    wake = Wake.TIMEOUT
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:

            async def on_change() -> None:
                nonlocal wake
                # Load-bearing: the check and the subscription happen with no
                # checkpoint between them, so an append cannot slip past.
                if not has_news():
                    await session.wait_change()
                wake = Wake.CHANGED
                nursery.cancel_scope.cancel()

            async def on_closing() -> None:
                nonlocal wake
                await closing.wait()
                wake = Wake.CLOSING
                nursery.cancel_scope.cancel()

            nursery.start_soon(on_closing)
            nursery.start_soon(on_change)
    return wake
