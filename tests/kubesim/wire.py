"""HTTP/1.1 and WebSocket on one trio stream: h11 + wsproto, driven by the apiserver.

Why our own server instead of hypercorn: the fault API needs things an ASGI
server hides — count TCP/TLS connections as accepted, go silent after
accepting, stop and rebind the same port, cut streams abruptly — and a watch
must flush its headers before the first event (chunked, as the real apiserver
does). h11/wsproto keep the protocol sans-IO; this module does the IO.

One `serve_connection` task per accepted connection reads requests in a
keep-alive loop and hands each to the handler as an `Exchange`. The handler
answers exactly once: `respond` (whole body), `open_stream` (chunked; the
body of the `async with` is cancelled when the client disconnects), or
`open_websocket` (101 with the chosen subprotocol, then a `WebSocketConn`).
"""

from __future__ import annotations

import email.utils
import http
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import h11
import trio
import wsproto
import wsproto.events as ws
from wsproto.connection import Connection as WsProtocol
from wsproto.utilities import LocalProtocolError, generate_accept_token

READ_BYTES = 65536
MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's request size limit


@dataclass
class Request:
    method: str
    path: str  # percent-decoded
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names, repeated headers joined with ", "
    body: bytes = b""
    peer_cn: str | None = None  # client-certificate CommonName, when one was presented
    raw_target: str = ""

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def flag(self, name: str) -> bool:
        """Convert_Slice_string_To_bool: absent, `false` (any case) or `0` are false."""
        value = self.param(name)
        return value is not None and value.lower() not in ("false", "0")

    @property
    def is_websocket(self) -> bool:
        return "websocket" in self.headers.get("upgrade", "").lower()

    @property
    def subprotocols(self) -> list[str]:
        raw = self.headers.get("sec-websocket-protocol", "")
        return [p.strip() for p in raw.split(",") if p.strip()]


Handler = Callable[["Exchange"], Awaitable[None]]


class _Transport:
    """The stream plus its h11 state; one writer at a time."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER)
        self.send_lock = trio.Lock()

    async def send(self, *events: h11.Event) -> None:
        data = b"".join(self.h11.send(ev) or b"" for ev in events)
        async with self.send_lock:
            await self.stream.send_all(data)

    async def next_event(self) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.stream.receive_some(READ_BYTES)
            self.h11.receive_data(bytes(data))
            if not data:
                return self.h11.next_event()


@dataclass
class Exchange:
    request: Request
    _t: _Transport
    responded: bool = False
    upgraded: bool = False
    status: int = 0
    extra_headers: list[tuple[str, str]] = field(default_factory=list)
    on_status: Callable[[int], None] | None = None  # called as the status line goes out

    async def respond(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        self._mark(status)
        hdrs = self._headers(content_type, headers) + [("Content-Length", str(len(body)))]
        await self._t.send(h11.Response(status_code=status, headers=hdrs, reason=_reason(status)))
        await self._t.send(h11.Data(data=body), h11.EndOfMessage())

    @asynccontextmanager
    async def open_stream(
        self, status: int = 200, *, content_type: str = "application/json"
    ) -> AsyncIterator[Callable[[bytes], Awaitable[None]]]:
        """Chunked response; headers are flushed now. Yields `write(chunk)`.

        The body of the `async with` is cancelled if the client goes away; leaving it
        normally ends the body with the zero-length chunk.
        """
        self._mark(status)
        hdrs = self._headers(content_type, [("Transfer-Encoding", "chunked")])
        await self._t.send(h11.Response(status_code=status, headers=hdrs, reason=_reason(status)))

        async def write(chunk: bytes) -> None:
            # Chunk framing by hand: this is the hot path of a 1,000-watcher fan-out, and
            # h11's chunked writer keeps no count that this would put out of step.
            if chunk:
                await self._t.stream.send_all(b"%x\r\n%b\r\n" % (len(chunk), chunk))

        async with self.watch_disconnect() as gone:
            yield write
        if not gone.is_set():
            await self._t.send(h11.EndOfMessage())

    async def abort(self) -> None:
        """Close the TCP connection mid-response (no final chunk): a network cut."""
        await trio.aclose_forcefully(self._t.stream)

    @asynccontextmanager
    async def watch_disconnect(self) -> AsyncIterator[trio.Event]:
        """Cancel the body when the peer closes; yields an Event set if it did."""
        gone = trio.Event()
        with _body_error_unwrapped():
            async with trio.open_nursery() as nursery:

                async def read_until_eof() -> None:
                    try:
                        # Pipelined bytes wait in h11 for the next cycle.
                        while data := await self._t.stream.receive_some(READ_BYTES):
                            self._t.h11.receive_data(bytes(data))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    gone.set()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read_until_eof)
                try:
                    yield gone
                finally:
                    nursery.cancel_scope.cancel()

    @asynccontextmanager
    async def open_websocket(self, subprotocol: str) -> AsyncIterator[WebSocketConn]:
        """Answer 101 with `subprotocol`; yields the connection until the body ends."""
        self._mark(101)
        self.upgraded = True
        key = self.request.headers.get("sec-websocket-key", "").encode()
        await self._t.send(
            h11.InformationalResponse(
                status_code=101,
                headers=[
                    ("Upgrade", "websocket"),
                    ("Connection", "Upgrade"),
                    ("Sec-WebSocket-Accept", generate_accept_token(key).decode()),
                    ("Sec-WebSocket-Protocol", subprotocol),
                ],
            )
        )
        trailing, _ = self._t.h11.trailing_data
        conn = WebSocketConn(self._t, subprotocol)
        with _body_error_unwrapped():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.run_reader, bytes(trailing))
                try:
                    yield conn
                finally:
                    nursery.cancel_scope.cancel()

    def _mark(self, status: int) -> None:
        if self.responded:
            raise RuntimeError("response already started")
        self.responded = True
        self.status = status
        if self.on_status is not None:
            self.on_status(status)

    def _headers(
        self, content_type: str, headers: list[tuple[str, str]] | None
    ) -> list[tuple[str, str]]:
        return [
            ("Content-Type", content_type),
            ("Cache-Control", "no-cache, private"),
            ("Date", email.utils.formatdate(usegmt=True)),
            *self.extra_headers,
            *(headers or []),
        ]


class WebSocketConn:
    """The `conn` adapter handed to the kubelet: binary send, message receive, close.

    `receive()` returns each message's bytes (text frames as UTF-8) and None once the
    client closed or the connection dropped. Pings are answered by the reader task,
    whether or not anyone is receiving.
    """

    def __init__(self, transport: _Transport, subprotocol: str) -> None:
        self._t = transport
        self._ws = WsProtocol(wsproto.ConnectionType.SERVER)
        self.subprotocol = subprotocol
        self._send_in, self._recv_out = trio.open_memory_channel[bytes](256)
        self.closed = False

    async def send(self, data: bytes) -> None:
        await self._send_ws(ws.BytesMessage(data=data))

    async def receive(self) -> bytes | None:
        try:
            return await self._recv_out.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    async def close(self, code: int = 1000) -> None:
        if not self.closed:
            self.closed = True
            try:
                await self._send_ws(ws.CloseConnection(code=code))
            except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
                pass

    async def drop(self) -> None:
        """Fault: vanish without a close frame (as a network cut would).

        The kubelet is not cancelled: like a real server it finds out from its next
        `receive()` (None) or `send()` (BrokenResourceError/ClosedResourceError).
        """
        self.closed = True
        await trio.aclose_forcefully(self._t.stream)

    async def _send_ws(self, event: ws.Event) -> None:
        data = self._ws.send(event)
        async with self._t.send_lock:
            await self._t.stream.send_all(data)

    async def run_reader(self, initial: bytes) -> None:
        parts: list[bytes] = []
        async with self._send_in:
            data = initial
            while True:
                if data:
                    self._ws.receive_data(data)
                    for event in self._ws.events():
                        if await self._on_event(event, parts):
                            return
                try:
                    data = bytes(await self._t.stream.receive_some(READ_BYTES))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if not data:
                    return

    async def _on_event(self, event: ws.Event, parts: list[bytes]) -> bool:
        """Handle one protocol event; True when the connection is over."""
        if isinstance(event, ws.Message):
            chunk = event.data if isinstance(event.data, bytes) else event.data.encode()
            parts.append(chunk)
            if event.message_finished:
                await self._send_in.send(b"".join(parts))
                parts.clear()
        elif isinstance(event, ws.Ping):
            await self._send_ws(event.response())
        elif isinstance(event, ws.CloseConnection):
            if not self.closed:
                self.closed = True
                try:
                    await self._send_ws(event.response())
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            return True
        return False


def _reason(code: int) -> bytes:
    try:
        return http.HTTPStatus(code).phrase.encode()
    except ValueError:
        return b""


def parse_request(event: h11.Request) -> Request:
    target = event.target.decode("latin-1")
    split = urllib.parse.urlsplit(target)
    headers: dict[str, str] = {}
    for name, value in event.headers:
        key = name.decode("latin-1").lower()
        val = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {val}" if key in headers else val
    return Request(
        method=event.method.decode("ascii"),
        path=urllib.parse.unquote(split.path),
        query=urllib.parse.parse_qs(split.query, keep_blank_values=True),
        headers=headers,
        raw_target=target,
    )


@contextmanager
def _body_error_unwrapped() -> Iterator[None]:
    """Re-raise the body's own exception bare out of a helper nursery around a `yield`.

    The helper tasks (the EOF reader, the WebSocket reader) catch their own errors, so
    a group that is not cancellation holds exactly one exception: the body's. Under
    trio's strict groups it would otherwise reach `serve_connection` wrapped, where
    `except trio.BrokenResourceError` (the client left mid-stream) no longer matches.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], trio.Cancelled):
            raise group.exceptions[0] from None
        raise


async def serve_connection(
    stream: trio.abc.Stream, handler: Handler, *, peer_cn: str | None
) -> bool:
    """Keep-alive request loop until EOF, an upgrade, or a protocol error.

    True when the client closed the connection while it sat idle between
    requests, after at least one (a keep-alive connection its pool let go).
    """
    t = _Transport(stream)
    served = 0
    while True:
        try:
            event = await t.next_event()
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            # A TLS EOF without close_notify is an idle close too.
            return served > 0 and t.h11.their_state is h11.IDLE
        if not isinstance(event, h11.Request):
            return served > 0 and isinstance(event, h11.ConnectionClosed)
        served += 1
        request = parse_request(event)
        request.peer_cn = peer_cn
        try:
            if request.headers.get("expect", "").lower() == "100-continue":
                await t.send(h11.InformationalResponse(status_code=100, headers=[]))
            request.body = await _read_body(t)
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        ex = Exchange(request, t)
        try:
            await handler(ex)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False  # the client went away mid-response
        if ex.upgraded or not ex.responded or t.h11.our_state is not h11.DONE:
            return False
        if t.h11.their_state is not h11.DONE:
            return False
        t.h11.start_next_cycle()


async def _read_body(t: _Transport) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await t.next_event()
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_BODY_BYTES:
                raise h11.RemoteProtocolError("request entity too large")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
            return b"".join(chunks)
        else:
            raise h11.RemoteProtocolError("connection closed mid-body")
