"""Relay a workload's debug Server-Sent-Events stream as frames.

Owns the client side of the kernel's debug stream (`GET <url>`, SSE): connect,
parse frames, hand each JSON object to the caller, and keep at it. The debug
server comes up some time after the process starts and may restart, so a
refused connection or a dropped stream is retried every `retry_s` until the
session ends.

Every decoded object frame is passed on; choosing event frames over log
frames is the sink's job (`contract.is_event_frame`), so this module has no
opinion on frame kinds. Data that is not a JSON object (or nests too deep to
decode) is skipped.

A reconnect must not repeat frames: the kernel's debug server sends each new
client every frame since it started (so a debugger that attaches late sees
it all), so a reconnected stream opens with frames already relayed.
`ReplayFilter` drops that replay (see its invariants).

`SseDecoder` and `ReplayFilter` are the pure parts (lines in, data payloads
out; payloads in, verdicts out); the relay is the IO around them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import trio

log = logging.getLogger("runnerd.debug_relay")
# The first retry's delay: a kernel's debug server comes up a moment after
# its process (the caller starts the relay with it), so the first refusals
# are retried soon, doubling up to `retry_s` (a full retry_s first cost a
# watch pod's start up to that much on every app).
FIRST_RETRY_S = 0.02


class SseDecoder:
    """Incremental SSE parser (the `data` field only): feed it one line at a
    time, without the line ending; a blank line completes a frame.

    Per the SSE spec: `data:` lines of one frame are joined with "\\n", a
    single space after the colon is dropped, comment lines (`:`) and other
    fields are ignored, and a frame with no data line dispatches nothing.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """The frame's data when `line` completes one, else None."""
        if line == "":
            if not self._data:
                return None
            data = "\n".join(self._data)
            self._data = []
            return data
        field, sep, value = line.partition(":")
        if field == "data" and sep:
            self._data.append(value[1:] if value.startswith(" ") else value)
        elif field == "data":
            self._data.append("")
        return None


class ReplayFilter:
    """Which frames of the current connection are new.

    Invariants: `_seen` holds a digest of every frame relayed, in relay order,
    up to `max_frames`. After `connected()`, frames that equal `_seen` in
    order from its start are the server's replay and are dropped; the first
    frame that differs, or that comes after the whole of `_seen`, ends the
    replay, and it and every later frame of that connection are new. A server
    that does not replay is therefore relayed whole (its first new frame
    differs from the first ever relayed), unless its first new frames repeat
    the session's first ones exactly. Past `max_frames` relayed, a replay's
    tail beyond them is relayed again: a bounded memory over a perfect one.
    """

    def __init__(self, max_frames: int = 100_000) -> None:
        self._max_frames = max_frames
        self._seen: list[int] = []
        self._replayed: int | None = None  # frames of `_seen` matched, while replaying

    def connected(self) -> None:
        """A new connection: its first frames may be a replay."""
        self._replayed = 0

    def is_new(self, data: str) -> bool:
        """Whether this frame's data (the next on the connection) is to be relayed."""
        digest = hash(data)
        at = self._replayed
        if at is not None and at < len(self._seen) and self._seen[at] == digest:
            self._replayed = at + 1
            return False
        self._replayed = None
        if len(self._seen) < self._max_frames:
            self._seen.append(digest)
        return True


def parse_frame(data: str) -> dict[str, Any] | None:
    """The JSON object carried by one frame's data, or None if it is not one."""
    try:
        frame = json.loads(data)
    except (ValueError, RecursionError):
        # RecursionError: nesting deeper than the interpreter's limit. The
        # workload writes this stream, so it must not be able to raise out of
        # the relay and fail its own session as an internal error.
        return None
    return frame if isinstance(frame, dict) else None


async def relay_debug_stream(
    url: str, on_frame: Callable[[dict[str, Any]], None], *, retry_s: float = 0.5
) -> None:
    """Read the SSE stream at `url` and call `on_frame` for every object frame.

    Runs until cancelled: connection failures, error statuses and dropped
    streams are retried, after `FIRST_RETRY_S` first and doubling up to
    every `retry_s`; a reconnected stream's replay of
    frames already relayed is dropped (`ReplayFilter`). `on_frame` must not
    block or raise.
    """
    # trust_env=False: the daemon's proxy settings must not route a loopback
    # debug stream elsewhere. No read timeout: the stream may idle for long.
    timeout = httpx.Timeout(5.0, read=None)
    replay = ReplayFilter()
    delay_s = min(FIRST_RETRY_S, retry_s)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        while True:
            try:
                await _relay_once(client, url, on_frame, replay)
            except (httpx.HTTPError, httpx.StreamError) as exc:
                log.debug("debug stream %s: %s; retrying", url, exc)
            await trio.sleep(delay_s)
            delay_s = min(delay_s * 2, retry_s)


async def _relay_once(
    client: httpx.AsyncClient,
    url: str,
    on_frame: Callable[[dict[str, Any]], None],
    replay: ReplayFilter,
) -> None:
    headers = {"accept": "text/event-stream", "cache-control": "no-cache"}
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            return
        decoder = SseDecoder()
        replay.connected()
        async for line in response.aiter_lines():
            data = decoder.feed(line)
            if data is None or not replay.is_new(data):
                continue
            frame = parse_frame(data)
            if frame is not None:
                on_frame(frame)
