"""Waiting for a new session to run, with its progress shown (runnerd.client.progress).

Owns `wait_started`: read the session's event stream (a blocking iterator,
stepped in a worker thread) while a spinner ticks, until the session is
`running` or already terminal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import trio

from runnerd.client.progress import TICK_S, Progress
from runnerd.client.transport import Api


def _status_line(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    if data.get("type") == "progress":
        return f"{data.get('phase')}: {data.get('message')}"
    if data.get("type") == "status":
        return str(data["status"].get("kind"))
    return None


async def wait_started(api: Api, session_id: str) -> bool:
    """Show progress until the session runs or ends: True; False when the
    stream broke off before either."""
    progress = Progress(session_id)
    events: Iterator[tuple[int | None, str, Any]] = api.sse(f"/v1/sessions/{session_id}/events")
    started = False
    try:
        async with trio.open_nursery() as nursery:

            async def spin() -> None:
                while True:
                    await trio.sleep(TICK_S)
                    progress.tick()

            nursery.start_soon(spin)
            progress.update("starting")
            while True:
                # Abandoned on Ctrl-C: the read may wait a heartbeat (20 s) for data.
                item = await trio.to_thread.run_sync(next, events, None, abandon_on_cancel=True)
                if item is None:
                    break
                _, _, data = item
                line = _status_line(data)
                if line is not None:
                    progress.update(line)
                if isinstance(data, dict) and data.get("type") == "status":
                    if data["status"].get("kind") != "starting":
                        started = True
                        break
            nursery.cancel_scope.cancel()
    finally:
        progress.done()
        close = getattr(events, "close", None)
        if close is not None:
            with contextlib.suppress(ValueError):  # still reading in an abandoned thread
                close()
    return started
