"""A request handler's view of its own connection's socket.

Owns `ConnectionProbe`: `serve_app` puts one in each connection's ASGI
`state` (under `CONNECTION_PROBE`), and the WebSocket route's close uses it
to tell a client that is still taking bytes from one that stopped
(`runnerd.http.io`), and the PTY channel writes its output frames through
it in batches (`send_frames`). hypercorn gives an app neither the socket
nor its send queue; this is the narrow part of them a handler needs.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

# The key of a connection's `ConnectionProbe` in the ASGI scope's "state".
CONNECTION_PROBE = "runnerd.connection"


class ConnectionProbe:
    """How much of what was sent the peer has not taken yet, a way to drop
    the connection, and how long its close may linger.

    `linger_s`: after the server's FIN, how long the connection waits for
    the peer to close its side, reading (and discarding) what the peer still
    sends; 0 (the default) closes at once. A handler sets it.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._socket = stream.socket
        self.linger_s = 0.0
        # Set by the connection (`runnerd.http.connection.Connection`).
        self.frames_sender: Callable[[list[bytes]], Awaitable[bool]] | None = None

    async def send_frames(self, frames: list[bytes]) -> bool:
        """Write `frames` (the pieces of whole server WebSocket frames,
        `wsframes.binary_frame_pieces`) to the socket in order, gathered into
        as few writes as it takes, in turn with every other send of the
        connection, while its WebSocket is open. False, with nothing written,
        when it is not open (not yet accepted, or a Close was sent or
        received) or the connection cannot do it: the caller then sends
        through the framework, which knows what to do with a late message.
        Cancellation: as the framework's sends (the write is shielded; a
        stalled peer is cut with `abort`)."""
        sender = self.frames_sender
        return False if sender is None else await sender(frames)

    def unsent_bytes(self) -> int | None:
        """Bytes written to the socket that the peer has not taken yet: on
        TCP unsent or not yet acknowledged by the peer's kernel (`SIOCOUTQ`),
        on a UNIX socket not yet read by the peer. None once the socket is
        closed. Never raises."""
        try:
            # SIOCOUTQ has TIOCOUTQ's number; Python's socket module lacks it.
            raw = fcntl.ioctl(self._socket.fileno(), termios.TIOCOUTQ, b"\0" * 4)
        except (OSError, ValueError):
            return None
        unsent: int = struct.unpack("i", raw)[0]
        return unsent

    def abort(self) -> None:
        """Close the socket now: a send stuck on a peer that stopped reading
        fails (trio wakes it), and hypercorn ends the connection. Idempotent."""
        self._socket.close()


def probe_of(scope: Mapping[str, Any]) -> ConnectionProbe | None:
    """The probe `serve_app` put in this request's scope; None under another
    server (hypercorn's own `serve`, as some in-process tests use)."""
    probe = scope.get("state", {}).get(CONNECTION_PROBE)
    return probe if isinstance(probe, ConnectionProbe) else None
