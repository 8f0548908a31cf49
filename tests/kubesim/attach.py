"""The pods/attach and pods/exec channel protocol (k/k `wsstream/conn.go`).

Owns the framing (pure helpers: channel byte + payload, the v5 CLOSE frame,
the streaming resize decoder, the channel-3 Status bodies) and `serve_channels`,
the loop that runs one upgraded connection against one process endpoint.

What the loop guarantees, in order: one empty frame on the lowest writable
channel; process output as binary frames on 1 (and 2 without a tty); client
frames demultiplexed (0 stdin, 4 resize, v5 255 close, zero-length and unknown
channels dropped); when the output ends, the channel-3 Status and a close 1000.
A malformed CLOSE frame or a client that goes away ends the connection early;
the caller decides what that means for the process (exec: kill it).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from trio_websocket import ConnectionClosed
from wsproto.utilities import LocalProtocolError

# What a socket that went away raises, whichever layer the adapter lets through.
_GONE = (
    ConnectionClosed,
    LocalProtocolError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5 = "v5.channel.k8s.io"
# Channels a CLOSE frame may name (remotecommand's highest stream id is RESIZE).
_CLOSABLE = frozenset({STDIN, STDOUT, STDERR, ERROR, RESIZE})


class Conn(Protocol):
    """The upgraded WebSocket, as K1's apiserver hands it over."""

    async def send(self, data: bytes) -> None: ...

    async def receive(self) -> bytes | None: ...

    async def close(self, code: int = 1000) -> None: ...


class Endpoint(Protocol):
    """The process side of a connection: where stdin, EOF and resizes go."""

    async def write_stdin(self, data: bytes) -> None: ...

    async def close_stdin(self) -> None: ...

    def resize(self, width: int, height: int) -> None: ...


class Ending(enum.Enum):
    """How `serve_channels` returned."""

    FINISHED = "finished"  # output ended, the Status went out, the socket is closed
    CLIENT_GONE = "client-gone"  # the client closed (or the socket broke) first
    PROTOCOL_ERROR = "protocol-error"  # a malformed CLOSE frame ended the connection


# ---- pure framing ---------------------------------------------------------------


def build_frame(channel: int, payload: bytes = b"") -> bytes:
    """One data message: the channel byte, then the payload."""
    return bytes([channel]) + payload


def parse_frame(message: bytes) -> tuple[int, bytes] | None:
    """(channel, payload), or None for a zero-length message (ignored by servers)."""
    if not message:
        return None
    return message[0], message[1:]


def parse_close(payload: bytes) -> int:
    """The channel a v5 CLOSE names; ValueError for a malformed frame (length, range)."""
    if len(payload) != 1 or payload[0] not in _CLOSABLE:
        raise ValueError(f"invalid close frame: {(bytes([CLOSE]) + payload)!r}")
    return payload[0]


def first_channel(*, stdout: bool, stderr: bool) -> int:
    """The lowest writable channel, which gets the one initial empty frame (§1.4)."""
    return STDOUT if stdout else STDERR if stderr else ERROR


class ResizeDecoder:
    """Go's streaming `json.NewDecoder` over channel 4: objects may share or split frames.

    Keys match case-insensitively, as Go's decoder does for the untagged
    `TerminalSize{Width, Height}`. A malformed stream raises ValueError; the
    real server then stops handling resizes for the connection.
    """

    _WS = re.compile(r"\s*")

    def __init__(self) -> None:
        self._buf = ""
        self._json = json.JSONDecoder()

    def feed(self, data: bytes) -> Iterator[tuple[int, int]]:
        """(width, height) for every complete object seen so far."""
        self._buf += data.decode("utf-8")  # resize JSON is ASCII; bad bytes are malformed
        while True:
            start = self._WS.match(self._buf).end()  # type: ignore[union-attr]
            if start == len(self._buf):
                self._buf = ""
                return
            try:
                obj, end = self._json.raw_decode(self._buf, start)
            except json.JSONDecodeError as exc:
                if exc.pos >= len(self._buf) or self._truncated(start):
                    self._buf = self._buf[start:]
                    return  # wait for the rest of the object
                raise ValueError(f"invalid resize message: {exc}") from None
            self._buf = self._buf[end:]
            yield _terminal_size(obj)

    def _truncated(self, start: int) -> bool:
        # raw_decode reports some truncations mid-buffer (an unterminated string);
        # an object that never closed is incomplete, not malformed.
        depth = 0
        in_str = escaped = False
        for ch in self._buf[start:]:
            if in_str:
                escaped, in_str = (False, True) if escaped else (ch == "\\", ch != '"')
            elif ch == '"':
                in_str = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
        return depth > 0 or in_str


def _terminal_size(obj: Any) -> tuple[int, int]:
    if not isinstance(obj, dict):
        raise ValueError(f"invalid resize message: {obj!r}")
    keys = {str(k).lower(): v for k, v in obj.items()}
    width, height = keys.get("width", 0), keys.get("height", 0)
    if not all(isinstance(v, int) and 0 <= v <= 0xFFFF for v in (width, height)):
        raise ValueError(f"invalid resize message: {obj!r}")
    return width, height


def _go_json(obj: Any) -> bytes:
    # encoding/json: compact, UTF-8, and HTML-safe escapes for < > &.
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def build_success_status() -> bytes:
    """The channel-3 body when the streams ended normally (exec exit 0, attach)."""
    return _go_json({"metadata": {}, "status": "Success"})


def build_exit_status(code: int) -> bytes:
    """The channel-3 body for an exec that exited non-zero (§1.7)."""
    if code == 0:
        return build_success_status()
    return _go_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": "command terminated with non-zero exit code: "
            f"command terminated with exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    )


def build_internal_error_status(cause: str) -> bytes:
    """A kubelet-side failure as the v5 translator reports it (§1.8)."""
    return _go_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {cause}",
            "reason": "InternalError",
            "details": {"causes": [{"message": cause}]},
            "code": 500,
        }
    )


# ---- the serving loop -----------------------------------------------------------


@dataclass(frozen=True)
class Streams:
    """What the connection carries, after the kubelet's adjustments (tty drops stderr)."""

    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    protocol: str


async def send_failure(conn: Conn, streams: Streams, cause: str) -> None:
    """Report a failure found after the upgrade: empty frame, channel-3 Status, close."""
    await _send_quietly(
        conn, build_frame(first_channel(stdout=streams.stdout, stderr=streams.stderr))
    )
    await _send_quietly(conn, build_frame(ERROR, build_internal_error_status(cause)))
    await _close_quietly(conn)


async def serve_channels(
    conn: Conn,
    streams: Streams,
    endpoint: Endpoint,
    output: trio.MemoryReceiveChannel[tuple[int, bytes]],
    finish: Callable[[], Awaitable[bytes]],
) -> Ending:
    """Run one connection until the output ends, the client leaves, or it misbehaves.

    `output` yields (channel, bytes) from the process and ends at EOF; `finish`
    is then awaited for the channel-3 Status body. Never raises for a broken
    socket: that is `Ending.CLIENT_GONE`. Cancellation propagates.
    """
    ending = Ending.CLIENT_GONE
    async with trio.open_nursery() as nursery:

        async def pump_out() -> None:
            nonlocal ending
            if await _pump_output(conn, streams, output):
                if await _send_quietly(conn, build_frame(ERROR, await finish())):
                    await _close_quietly(conn)
                    ending = Ending.FINISHED
            nursery.cancel_scope.cancel()

        async def pump_in() -> None:
            nonlocal ending
            if not await _pump_input(conn, streams, endpoint):
                ending = Ending.PROTOCOL_ERROR
                await _close_quietly(conn)
            nursery.cancel_scope.cancel()

        if await _send_quietly(
            conn, build_frame(first_channel(stdout=streams.stdout, stderr=streams.stderr))
        ):
            nursery.start_soon(pump_out)
            nursery.start_soon(pump_in)
    return ending


async def _pump_output(
    conn: Conn, streams: Streams, output: trio.MemoryReceiveChannel[tuple[int, bytes]]
) -> bool:
    """Copy process output to the client; False if the client went away first."""
    async for channel, data in output:
        wanted = streams.stdout if channel == STDOUT else streams.stderr and not streams.tty
        if wanted and data and not await _send_quietly(conn, build_frame(channel, data)):
            return False
    return True


async def _pump_input(conn: Conn, streams: Streams, endpoint: Endpoint) -> bool:
    """Demultiplex client frames until the client closes; False on a malformed CLOSE."""
    resizes: ResizeDecoder | None = ResizeDecoder() if streams.tty else None
    stdin_open = streams.stdin
    while True:
        try:
            message = await conn.receive()
        except _GONE:
            return True
        if message is None:
            return True
        frame = parse_frame(message)
        if frame is None:
            continue
        channel, payload = frame
        if channel == STDIN and stdin_open:
            await endpoint.write_stdin(payload)
        elif channel == RESIZE and resizes is not None:
            try:
                for width, height in resizes.feed(payload):
                    endpoint.resize(width, height)
            except ValueError:
                resizes = None  # as the real handler: stop reading resizes, keep the rest
        elif channel == CLOSE and streams.protocol == V5:
            try:
                closed = parse_close(payload)
            except ValueError:
                return False
            if closed == STDIN and stdin_open:
                stdin_open = False
                await endpoint.close_stdin()


async def _send_quietly(conn: Conn, data: bytes) -> bool:
    try:
        await conn.send(data)
    except _GONE:
        return False
    return True


async def _close_quietly(conn: Conn) -> None:
    try:
        await conn.close(1000)
    except _GONE:
        pass
