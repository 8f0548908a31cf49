"""The attach loop: a session's PTY channel wired to this process's stdio.

Owns `follow_channel`: open `/v1/sessions/{id}/io?lastSeq=N`, write every
output chunk to stdout as it arrives (a `gap` frame saying `output_lost`
becomes one notice line on stderr, in its place: `LOST_NOTICE`), and, by
`StdinMode`:
- `NONE` (logs): read only; optionally stop once seq `stop_at_seq` arrived;
- `PIPE` (stdin is not a terminal): stdin bytes go to the workload; the end
  of stdin is sent as the terminal's EOF character (^D), so `cat` ends;
- `RAW` (stdin is a terminal): raw mode (runnerd.client.terminal), the
  window size is sent at once and on every SIGWINCH, Ctrl-C reaches the
  workload, Ctrl-] detaches.
SIGTERM and SIGHUP end the loop (and so restore the terminal) too.

Three tasks race in one nursery (output, stdin, signals); the first that
knows how the channel ends returns it as a `ChannelEnd` and the rest are
cancelled. What that end means for the exit code is the caller's
(`runnerd.client.attach`).

Error handling: a connection that cannot be opened is `ClientError`; one
that drops later is an end like any other (`Ended.CLOSED`, code 1006).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import os
import signal
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio
import trio_websocket

from runnerd.client.terminal import raw_terminal, split_at_detach, terminal_size
from runnerd.client.transport import Endpoint
from runnerd.client.ws import open_channel

EOF_CHAR = b"\x04"
LOST = 1006  # no close frame: the connection dropped (a killed daemon)
# Close codes that mean "the session is over", not "something went wrong".
FINISHED = frozenset({1000, 4410})
# For `{"type":"gap","reason":"output_lost"}`: the backend lost output here.
LOST_NOTICE = "some of the session's output is missing here (runnerd could not deliver it)"

WebSocket = trio_websocket.WebSocketConnection


class StdinMode(enum.Enum):
    NONE = "none"
    PIPE = "pipe"
    RAW = "raw"


class Ended(enum.Enum):
    CLOSED = "closed"  # the server closed the channel (or it dropped): see `code`
    DETACHED = "detached"  # we left: Ctrl-], or a signal (see `signal`)
    CAUGHT_UP = "caught_up"  # `stop_at_seq` arrived (logs without -f)


@dataclass(frozen=True)
class ChannelEnd:
    how: Ended
    code: int = LOST
    reason: str = ""
    signal: int | None = None  # the signal that made us leave, if one did

    @property
    def finished(self) -> bool:
        """The session is over (the channel closed 1000 or 4410)."""
        return self.how is Ended.CLOSED and self.code in FINISHED


async def follow_channel(
    endpoint: Endpoint,
    session_id: str,
    *,
    mode: StdinMode,
    last_seq: int = 0,
    stop_at_seq: int | None = None,
) -> ChannelEnd:
    """Follow the session's PTY until the channel ends (module docstring).

    Raises:
        ClientError: the channel could not be opened.
    """
    if stop_at_seq is not None and last_seq >= stop_at_seq:
        return ChannelEnd(Ended.CAUGHT_UP)
    resource = f"/v1/sessions/{session_id}/io?lastSeq={last_seq}"
    raw = mode is StdinMode.RAW
    with raw_terminal(0) if raw else contextlib.nullcontext():
        async with open_channel(endpoint, resource) as ws:
            if raw:
                await _send_size(ws)
            tasks: list[Task] = [
                functools.partial(_receive_output, ws, stop_at_seq),
                functools.partial(_watch_signals, ws, raw),
            ]
            if mode is not StdinMode.NONE:
                tasks.append(functools.partial(_forward_stdin, ws, raw))
            return await _first_end(tasks)


Task = Callable[[], Awaitable[ChannelEnd | None]]


async def _first_end(tasks: list[Task]) -> ChannelEnd:
    """Run `tasks` together; the first `ChannelEnd` returned wins and cancels the rest.
    (The output task always returns one, so there always is a winner.)"""
    ends: list[ChannelEnd] = []

    async def settle(task: Task) -> None:
        end = await task()
        if end is not None:
            ends.append(end)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for task in tasks:
            nursery.start_soon(settle, task)
    return ends[0]


async def _receive_output(ws: WebSocket, stop_at_seq: int | None) -> ChannelEnd:
    try:
        while True:
            message = await ws.get_message()
            if isinstance(message, str):
                if is_lost_output(message):
                    await trio.to_thread.run_sync(_write_notice, LOST_NOTICE)
                continue  # the `seq` frame, the eviction `gap`: nothing to show
            if len(message) < 4:
                continue
            (seq,) = struct.unpack(">I", message[:4])
            await trio.to_thread.run_sync(_write_stdout, message[4:])
            if stop_at_seq is not None and seq >= stop_at_seq:
                return ChannelEnd(Ended.CAUGHT_UP)
    except trio_websocket.ConnectionClosed as closed:
        reason = closed.reason
        if reason is None:
            return ChannelEnd(Ended.CLOSED)
        return ChannelEnd(Ended.CLOSED, reason.code, reason.reason or "")


def is_lost_output(text: str) -> bool:
    """Whether a text frame is the `gap` frame saying `output_lost`."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(message, dict):
        return False
    return message.get("type") == "gap" and message.get("reason") == "output_lost"


def _write_notice(text: str) -> None:
    # "\r\n" on a terminal: in raw mode the cursor may sit mid-line.
    sys.stderr.write(f"\r\nrunnerd: {text}\r\n" if os.isatty(2) else f"runnerd: {text}\n")
    sys.stderr.flush()


def _write_stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


async def _send_size(ws: WebSocket) -> None:
    size = terminal_size(0) or terminal_size(1)
    if size is not None:
        cols, rows = size
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            await ws.send_message(json.dumps({"type": "resize", "cols": cols, "rows": rows}))


async def _watch_signals(ws: WebSocket, raw: bool) -> ChannelEnd:
    with trio.open_signal_receiver(signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum != signal.SIGWINCH:
                return ChannelEnd(Ended.DETACHED, signal=signum)  # the session keeps running
            if raw:
                await _send_size(ws)
    raise AssertionError("a signal receiver never ends")


async def _forward_stdin(ws: WebSocket, raw: bool) -> ChannelEnd | None:
    """Stdin to the workload; a `DETACHED` end on Ctrl-] (raw), None when
    there is nothing more to send (the output decides the end then)."""
    read = functools.partial(os.read, 0, 65536)
    while True:
        # A thread, not a non-blocking fd: O_NONBLOCK on a shared terminal
        # would leak into the shell that started us.
        data = await trio.to_thread.run_sync(read, abandon_on_cancel=True)
        detach = False
        if raw:
            data, detach = split_at_detach(data)
        try:
            if data:
                await ws.send_message(data)
            elif not raw and not detach:
                # End of a piped stdin: the terminal's EOF character (^D), as
                # it would be typed, so a reader of the PTY sees end of input.
                await ws.send_message(EOF_CHAR)
                return None
        except trio_websocket.ConnectionClosed:
            return None
        if detach:
            return ChannelEnd(Ended.DETACHED)
        if not data:
            return None  # the terminal went away: keep showing output
