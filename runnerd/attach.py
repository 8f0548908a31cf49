"""`runnerd attach SESSION`: a terminal for a session, over the API socket.

Owns the command-line client of the WebSocket PTY channel
(`/v1/sessions/{id}/io`): PTY bytes (replayed from `--last-seq`, then live) go
to stdout as they arrive; stdin bytes go to the workload; when stdout is a
terminal its size is sent once as a `resize`. It ends when the server closes
the channel: exit 0 on `1000 session terminal` (or 4410: nothing left to
replay), 1 on any other close or a connection failure, with the close reason
on stderr.

Stdin is forwarded as the terminal delivers it (cooked mode: line by line),
which is what piping into a session and quick interactive checks need;
it is not a full raw-mode terminal emulator. End of stdin (Ctrl-D, or the end
of a pipe) is sent as the terminal's EOF character, so `cat` and friends end;
Ctrl-C detaches and leaves the session running.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import trio
import trio_websocket

EXIT_OK = 0
EXIT_FAILED = 1
EOF_CHAR = b"\x04"
# Close codes that mean "the session is over", not "something went wrong".
_FINISHED = {1000, 4410}


async def run_attach(socket_path: Path, session_id: str, last_seq: int = 0) -> int:
    """Attach until the server closes the channel; return the exit code."""
    resource = f"/v1/sessions/{session_id}/io?lastSeq={last_seq}"
    try:
        stream = await trio.open_unix_socket(str(socket_path))
    except OSError as exc:
        print(f"runnerd attach: cannot connect to {socket_path}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    async with stream, trio.open_nursery() as nursery:
        try:
            ws = await trio_websocket.wrap_client_stream(nursery, stream, "runnerd", resource)
        except trio_websocket.HandshakeError as exc:
            print(f"runnerd attach: handshake failed: {exc!r}", file=sys.stderr)
            return EXIT_FAILED
        try:
            code = await _pump(ws)
        finally:
            await ws.aclose()
            nursery.cancel_scope.cancel()
    return code


async def _pump(ws: trio_websocket.WebSocketConnection) -> int:
    size = shutil.get_terminal_size(fallback=(0, 0))
    if sys.stdout.isatty() and size.columns and size.lines:
        resize = f'{{"type":"resize","cols":{size.columns},"rows":{size.lines}}}'
        await ws.send_message(resize)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_forward_stdin, ws)
        try:
            while True:
                message = await ws.get_message()
                if isinstance(message, bytes):  # 4-byte seq, then PTY bytes
                    await trio.to_thread.run_sync(_write_stdout, message[4:])
        except trio_websocket.ConnectionClosed as closed:
            reason = closed.reason
        nursery.cancel_scope.cancel()
    code, text = (reason.code, reason.reason or "") if reason is not None else (1006, "")
    if code in _FINISHED:
        return EXIT_OK
    print(f"runnerd attach: closed {code} {text}".rstrip(), file=sys.stderr)
    return EXIT_FAILED


def _write_stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


async def _forward_stdin(ws: trio_websocket.WebSocketConnection) -> None:
    # A thread, not a non-blocking fd: O_NONBLOCK on a shared terminal would
    # leak into the shell that started us.
    while True:
        data = await trio.to_thread.run_sync(os.read, 0, 65536, abandon_on_cancel=True)
        try:
            # End of our stdin becomes the terminal's EOF character (^D), as
            # it would be typed: a reader of the PTY then sees end of input.
            await ws.send_message(data or EOF_CHAR)
        except trio_websocket.ConnectionClosed:
            return
        if not data:
            return
