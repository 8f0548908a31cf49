"""The attach loop: a session's PTY channel wired to this process's stdio.

Owns `follow_channel`: open `/v1/sessions/{id}/io?lastSeq=N`, write every
output chunk to stdout as it arrives, and, by `StdinMode`:
- `NONE` (logs): read only; optionally stop once seq `stop_at_seq` arrived;
- `PIPE` (stdin is not a terminal): stdin bytes go to the workload; the end
  of stdin is sent as the terminal's EOF character (^D), so `cat` ends;
- `RAW` (stdin is a terminal): raw mode (runnerd.client.terminal), the
  window size is sent at once and on every SIGWINCH, Ctrl-C reaches the
  workload, Ctrl-] detaches.
SIGTERM and SIGHUP end the loop (and so restore the terminal) too.

It returns how the channel ended; what that means for the exit code is the
caller's (runnerd.attach).
"""

from __future__ import annotations

import enum
import json
import os
import signal
import struct
import sys
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


class StdinMode(enum.Enum):
    NONE = "none"
    PIPE = "pipe"
    RAW = "raw"


@dataclass
class ChannelEnd:
    """How the channel ended: a close `code` and `reason`, or a detach
    (the user's Ctrl-], or SIGTERM/SIGHUP to us), or `stop_at_seq` reached."""

    code: int = LOST
    reason: str = ""
    detached: bool = False
    signal: int | None = None  # the signal that made us leave, if one did
    caught_up: bool = False
    last_seq: int = 0

    @property
    def finished(self) -> bool:
        return self.code in FINISHED


async def follow_channel(
    endpoint: Endpoint,
    session_id: str,
    *,
    mode: StdinMode,
    last_seq: int = 0,
    stop_at_seq: int | None = None,
) -> ChannelEnd:
    """Follow the session's PTY until the channel closes (or a detach). Raises ClientError."""
    end = ChannelEnd(last_seq=last_seq)
    if stop_at_seq is not None and last_seq >= stop_at_seq:
        end.caught_up = True
        return end
    resource = f"/v1/sessions/{session_id}/io?lastSeq={last_seq}"
    with raw_terminal(0) if mode is StdinMode.RAW else _nothing():
        async with open_channel(endpoint, resource) as ws, trio.open_nursery() as nursery:
            if mode is StdinMode.RAW:
                await _send_size(ws)
            if mode is not StdinMode.NONE:
                nursery.start_soon(_forward_stdin, ws, mode, end, nursery.cancel_scope)
            nursery.start_soon(_watch_signals, ws, mode, end, nursery.cancel_scope)
            await _receive_output(ws, end, stop_at_seq)
            nursery.cancel_scope.cancel()
    return end


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def _receive_output(
    ws: trio_websocket.WebSocketConnection, end: ChannelEnd, stop_at_seq: int | None
) -> None:
    try:
        while True:
            message = await ws.get_message()
            if not isinstance(message, bytes) or len(message) < 4:
                continue  # the `seq` / `gap` text frames: nothing to show
            (end.last_seq,) = struct.unpack(">I", message[:4])
            await trio.to_thread.run_sync(_write_stdout, message[4:])
            if stop_at_seq is not None and end.last_seq >= stop_at_seq:
                end.caught_up = True
                return
    except trio_websocket.ConnectionClosed as closed:
        reason = closed.reason
        if reason is not None:
            end.code, end.reason = reason.code, reason.reason or ""


def _write_stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


async def _send_size(ws: trio_websocket.WebSocketConnection) -> None:
    size = terminal_size(0) or terminal_size(1)
    if size is not None:
        cols, rows = size
        message = json.dumps({"type": "resize", "cols": cols, "rows": rows})
        try:
            await ws.send_message(message)
        except trio_websocket.ConnectionClosed:
            pass


async def _watch_signals(
    ws: trio_websocket.WebSocketConnection,
    mode: StdinMode,
    end: ChannelEnd,
    scope: trio.CancelScope,
) -> None:
    with trio.open_signal_receiver(signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum == signal.SIGWINCH:
                if mode is StdinMode.RAW:
                    await _send_size(ws)
                continue
            end.detached, end.signal = True, signum  # the session keeps running
            scope.cancel()
            return


async def _forward_stdin(
    ws: trio_websocket.WebSocketConnection,
    mode: StdinMode,
    end: ChannelEnd,
    scope: trio.CancelScope,
) -> None:
    # A thread, not a non-blocking fd: O_NONBLOCK on a shared terminal would
    # leak into the shell that started us.
    while True:
        data = await trio.to_thread.run_sync(os.read, 0, 65536, abandon_on_cancel=True)
        detach = False
        if mode is StdinMode.RAW:
            data, detach = split_at_detach(data)
            if not data and not detach:
                return  # the terminal went away: stop reading, keep showing output
        try:
            # In a pipe, end of our stdin becomes the terminal's EOF character
            # (^D), as it would be typed: a reader of the PTY sees end of input.
            if data or mode is StdinMode.PIPE:
                await ws.send_message(data or EOF_CHAR)
        except trio_websocket.ConnectionClosed:
            return
        if detach:
            end.detached = True
            scope.cancel()
            return
        if not data:
            return
