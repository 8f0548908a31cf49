"""One HTTP connection: hypercorn's handler, with what runnerd needs fixed.

`Connection` is hypercorn's `TCPServer` (its protocol code, h11, wsproto and
the ASGI glue kept as shipped), subclassed where hypercorn 0.18 does not do
what runnerd needs; `runnerd.http.server`'s accept loop makes one per
accepted socket and owns its slot under the cap:

- **The keep-alive timeout actually applies.** hypercorn 0.18 restarts its
  idle timer with `nursery.start()` from whichever task sends `Updated`;
  after an HTTP/1.1 response that is quart-trio's per-request task, and
  quart-trio cancels that task's nursery right after the response. The
  timer, still inside `start()`, is cancelled with it (observed: within
  1 ms, so an idle connection stayed open forever). `Connection` starts it
  under a shield, outside that cancellation. The same goes for closing the
  connection after a `connection: close` answer (a 408, a 413, a refused
  request with an unread body): that close was cancelled the same way, and
  the connection stayed open. The same timer bounds how long
  a request's headers may take (it runs from connect, or from the previous
  response, until a whole request head has arrived); the body's deadline is
  quart's `BODY_TIMEOUT`.
- **Closing never races a send, nor resets a WebSocket peer** (`_close`):
  after our FIN its connection lingers until the peer closes too, its
  input read.
- **runnerd's HTTP/1.1 protocol** (`runnerd.http.protocol`) takes the place
  of hypercorn's on every connection: it refuses the upgrades, chunk sizes
  and WebSocket frames that broke hypercorn's.
- **Batched WebSocket output** (`send_frames`, for `ConnectionProbe`): the
  PTY channel writes several whole binary frames in one gathering socket
  write (the payloads as the ring holds them) under the send lock, past
  hypercorn's per-message path (wsproto, the ASGI glue), while wsproto
  says the WebSocket is open. A frame sent uncompressed is valid under
  permessage-deflate too (RFC 7692 §6).
- **Reason phrases.** hypercorn sends `HTTP/1.1 200 ` (an empty reason,
  legal but unhelpful in a trace); `Connection` fills in the standard phrase.
- **JSON protocol errors.** What h11 refuses before the app runs (garbage,
  `Content-Length: abc`, a bad chunk: 400; an oversized head: 431) was
  answered with an empty body; `with_error_body` adds the contract's
  `{"error", "message"}` body.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol as HypercornH11Protocol
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio.tcp_server import TCPServer
from wsproto.connection import ConnectionState

from runnerd.http.connection_probe import CONNECTION_PROBE, ConnectionProbe
from runnerd.http.protocol import H11Protocol, with_error_body, with_reason


class Connection(TCPServer):
    """hypercorn's connection handler with the keep-alive timer fixed and
    reason phrases added (see the module docstring). `on_idle` hears every
    idle/busy transition (idle: no request in flight)."""

    on_idle: Callable[[Connection, bool], None] | None = None
    peer = "unknown"  # for the log: set by the accept loop (`peer_name`)
    _reader: trio.lowlevel.Task | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reader_done = trio.Event()
        probe = self.state.get(CONNECTION_PROBE)
        if isinstance(probe, ConnectionProbe):
            probe.frames_sender = self.send_frames

    @property
    def protocol(self) -> ProtocolWrapper:
        return self._protocol

    @protocol.setter
    def protocol(self, wrapper: ProtocolWrapper) -> None:
        # hypercorn's run() builds the wrapper just before the first read:
        # runnerd's HTTP/1.1 protocol takes the place of hypercorn's there.
        if type(wrapper.protocol) is HypercornH11Protocol:
            wrapper.protocol = H11Protocol(
                wrapper.app, wrapper.config, wrapper.context, wrapper.task_group,
                wrapper.state, wrapper.ssl, wrapper.client, wrapper.server, wrapper.send,
            )  # fmt: skip
        self._protocol = wrapper

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated | Closed):
            if isinstance(event, Updated) and self.on_idle is not None:
                self.on_idle(self, event.idle)
            # Connection-level work sent from quart-trio's request task, which
            # may be cancelled at any moment after its response: shielded.
            with trio.CancelScope(shield=True):
                await super().protocol_send(event)
            return
        if isinstance(event, RawData):
            data = with_error_body(with_reason(event.data))
            event = RawData(data=data, address=event.address)
        await super().protocol_send(event)

    async def send_frames(self, frames: list[bytes]) -> bool:
        """Write the pieces of whole server WebSocket frames, in order and
        gathered (`sendmsg`: the payloads go from the ring to the kernel with
        no copy in between), while the WebSocket is open
        (`ConnectionProbe.send_frames`); False when it is not, nothing
        written. Checked under the send lock: a Close hypercorn sends (its
        reply to the peer's) goes out under it too, so no frame follows one."""
        wrapper = getattr(self, "_protocol", None)
        ws = getattr(getattr(wrapper, "protocol", None), "stream", None)
        async with self.send_lock:
            if not isinstance(ws, WSStream) or ws.closed or not _open(ws):
                return False
            try:
                with trio.CancelScope(shield=True):  # as hypercorn's own sends
                    if isinstance(self.stream, trio.SocketStream):
                        await _send_gathered(self.stream.socket, frames)
                    else:  # a TLS stream encrypts a copy anyway
                        await self.stream.send_all(b"".join(frames))
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                await self.protocol.handle(Closed())
        return True

    async def evict(self) -> None:
        """Close this idle connection now (what the keep-alive timer does)."""
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    async def _close(self) -> None:
        # hypercorn half-closes (send_eof) without its send lock, so a frame
        # the app is sending at that moment failed with BusyResourceError (a
        # 500-style traceback; found by the WebSocket frame fuzzer: a client
        # protocol error makes hypercorn close while the handler sends).
        async with self.send_lock:
            with contextlib.suppress(
                trio.BrokenResourceError, trio.BusyResourceError, trio.ClosedResourceError
            ):
                await self.stream.send_eof()
        await self._linger()
        await self.stream.aclose()

    async def _linger(self) -> None:
        """After our FIN, let the reader take what the peer still sends until
        the peer closes too, for as long as the handler asked
        (`ConnectionProbe.linger_s`; plain HTTP answers do not linger).
        Closing with input unread, or with the peer still sending (a
        WebSocket client's pings), resets the connection, and the peer's
        kernel then drops what its reader had not read yet. The daemon's
        shutdown ends the wait (this runs shielded)."""
        probe = self.state.get(CONNECTION_PROBE)
        linger_s = probe.linger_s if isinstance(probe, ConnectionProbe) else 0.0
        if linger_s <= 0 or self._reader_done.is_set():
            return
        if trio.lowlevel.current_task() is self._reader:
            return  # the reader itself: the peer's input has ended
        with trio.move_on_after(linger_s) as scope:
            async with trio.open_nursery() as waits:
                for event in (self._reader_done, self.context.terminated):
                    waits.start_soon(_set_then_cancel, event, scope)

    async def _read_data(self) -> None:
        self._reader = trio.lowlevel.current_task()
        try:
            await super()._read_data()
        finally:
            self._reader_done.set()
        # The peer is gone. hypercorn leaves the keep-alive timer running, and
        # the connection (and its slot under the cap) lingers until it fires.
        await self.idle_task.stop()


async def _send_gathered(sock: trio.socket.SocketType, pieces: list[bytes]) -> None:
    """Write `pieces` in order, as `SocketStream.send_all` writes one: the
    socket takes what it has room for per `sendmsg`, and the rest follows.
    Raises OSError (the peer is gone) or `trio.ClosedResourceError` (the
    socket was closed, `ConnectionProbe.abort`)."""
    if sock.did_shutdown_SHUT_WR:
        raise trio.ClosedResourceError("can't send data after sending EOF")
    views = [memoryview(piece) for piece in pieces]
    first = 0
    while first < len(views):
        sent = await sock.sendmsg(views[first : first + _IOV_MAX])
        while first < len(views) and sent >= len(views[first]):
            sent -= len(views[first])
            first += 1
        if sent:
            views[first] = views[first][sent:]


# The most buffers one sendmsg takes (Linux's UIO_MAXIOV).
_IOV_MAX = 1024


def _open(ws: WSStream) -> bool:
    connection = getattr(ws, "connection", None)  # set once the handshake is accepted
    return connection is not None and connection.state is ConnectionState.OPEN


async def _set_then_cancel(event: Any, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
