"""hypercorn's HTTP/1.1 protocol, with the inputs that broke it refused cleanly.

Owns `H11Protocol`, which `runnerd.http.server` puts in place of
hypercorn's own on every connection (hypercorn's h11, wsproto and ASGI code
still does the work). Each change answers a request a client can send:

- **Bytes before a WebSocket handshake is answered** (RFC 6455 §4.1: a client
  waits for the answer). hypercorn answered 400 but marked the stream closed
  only after that send; the app's `accept` in between sent a 101 on top of
  it, h11's state machine went to ERROR and the next send raised out of the
  connection (issue 16: one request ended runnerd and every session). Here
  the stream is closed before anything is sent, so the app's accept is a
  no-op; the answer is a JSON 400, then the close. Bytes in the same read as
  the upgrade request are refused before the app even starts; bytes after
  the app refused the handshake itself are dropped (its answer, then the
  close, is on its way).
- **A handshake hypercorn refuses itself** (no key, a wrong version): its
  400 said `connection: close` but the connection stayed open, busy (never
  evicted at the cap) until the peer left: 16 such clients filled a
  listener. It is closed after the answer.
- **A chunk size no body can have** (over 2^63 - 1; h11 takes 20 hex
  digits): h11 waited for the data. It is a 400 at once, as a malformed
  chunk line is (h11 puts the peer in ERROR, so the app's own answer, if
  any, is dropped).
- **A WebSocket frame declaring more than `websocket_max_message_size`**:
  wsproto waited for the payload. The connection closes with 1009 at once.

It also owns the rewrites of the bytes hypercorn's protocol sends, which
`runnerd.http.server` applies to everything a connection sends (pure):
`with_reason` fills the empty reason phrase h11 writes (`HTTP/1.1 200 `),
`with_error_body` gives the empty answer to what h11 refuses before any app
runs (garbage, `Content-Length: abc`, a bad chunk: 400; an oversized head:
431) the contract's JSON error body.
"""

from __future__ import annotations

import http
import json
import re
from typing import Any

import h11
from h11._readers import ChunkedReader
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol.h11 import H11Protocol as HypercornH11Protocol
from hypercorn.protocol.ws_stream import ASGIWebsocketState, WSStream
from hypercorn.typing import H11SendableEvent
from wsproto.events import CloseConnection
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError as WsLocalProtocolError

from runnerd.contract import error_body
from runnerd.http.wsframes import FrameLengths

# A chunk larger than this cannot be counted in the 64-bit sizes every
# other HTTP implementation uses (h11 parses up to 2^80).
MAX_CHUNK_BYTES = 2**63 - 1
EARLY_DATA = (
    "a WebSocket client must wait for the handshake's answer before it sends "
    "anything (RFC 6455 section 4.1)"
)


# An HTTP/1.x status line as h11 writes it for hypercorn: no reason phrase.
_BARE_STATUS = re.compile(rb"HTTP/1\.([01]) (\d{3}) \r\n")


def with_reason(data: bytes) -> bytes:
    """`HTTP/1.1 200 \\r\\n...` → `HTTP/1.1 200 OK\\r\\n...`; other bytes unchanged.

    Only a chunk that *starts* with a bare status line is touched: h11 writes
    a response head as one chunk, and no body runnerd sends (JSON, SSE
    frames, chunked sizes, WebSocket frames) starts with one.
    """
    match = _BARE_STATUS.match(data)
    if match is None:
        return data
    try:
        phrase = http.HTTPStatus(int(match[2])).phrase
    except ValueError:
        return data
    return b"HTTP/1.%s %s %s\r\n" % (match[1], match[2], phrase.encode()) + data[match.end() :]


# hypercorn's own error answer (H11Protocol._send_error_response, for what
# h11 refuses before any app runs: a malformed request line or header, a bad
# Content-Length or chunk, a head over h11_max_incomplete_size): a 4xx whose
# first header is `content-length: 0`, with `connection: close` (h11 may move
# it after `date`) and no content-type, then the close. App responses never
# look so: quart always sends content-type first.
_BARE_ERROR = re.compile(rb"(HTTP/1\.[01] (4\d\d) [^\r\n]*\r\n)content-length: 0\r\n")
_PROTOCOL_ERRORS = {
    400: ("invalid_request", "the request is not valid HTTP/1.1 (malformed request line, "
          "header, Content-Length or chunk)"),
    431: ("headers_too_large", "the request line and headers are too large"),
}  # fmt: skip


def with_error_body(data: bytes) -> bytes:
    """hypercorn's empty protocol-error answer (`_BARE_ERROR`) with the
    contract's JSON error body; other bytes unchanged. The head is one chunk
    ending in the blank line (h11 writes it so), and the body is the last
    thing sent before the close, so appending it is safe."""
    match = _BARE_ERROR.match(data)
    if match is None or not data.endswith(b"\r\n\r\n"):
        return data
    rest = data[match.end() :]
    if b"connection: close\r\n" not in rest.lower() or b"content-type:" in rest.lower():
        return data
    status = int(match[2])
    code, message = _PROTOCOL_ERRORS.get(
        status, ("invalid_request", http.HTTPStatus(status).phrase)
    )
    body = json.dumps(error_body(code, message), separators=(",", ":")).encode()
    head = b"%scontent-type: application/json\r\ncontent-length: %d\r\n" % (match[1], len(body))
    return head + rest + body


def _has_length(response: h11.Response) -> bool:
    return any(name == b"content-length" for name, _ in response.headers)


class _EarlyData(Exception):
    """Bytes followed a WebSocket upgrade request in the same read."""


class _BoundedChunks(h11.Connection):
    """h11's server connection, refusing a chunk size over `MAX_CHUNK_BYTES`
    as soon as its line is read (h11 has no option for it; `_reader` and
    `_bytes_in_chunk` are h11 0.16's, see pyproject.toml)."""

    def _extract_next_receive_event(self) -> Any:
        event = super()._extract_next_receive_event()
        reader = self._reader
        # What the chunk still had before this event: the reader may hand
        # out the bytes that came with the size line in the same call, so
        # its remainder alone can be under the bound (2^63 + 1, less 2).
        taken = len(event.data) if isinstance(event, h11.Data) else 0
        if isinstance(reader, ChunkedReader) and reader._bytes_in_chunk + taken > MAX_CHUNK_BYTES:
            # next_event re-raises this as a RemoteProtocolError (status
            # hint 400) with the peer in ERROR: a malformed chunk's path.
            raise h11.LocalProtocolError("chunk size over 2^63 - 1")
        return event


def asks_websocket(request: h11.Request) -> bool:
    """hypercorn's own test (`H11Protocol._create_stream`) for a WebSocket upgrade."""
    upgrade = connection = ""
    for name, value in request.headers:
        if name == b"upgrade":  # h11 lowercases header names
            upgrade = value.decode("latin1").strip()
        elif name == b"connection":
            connection = value.decode("latin1").strip()
    tokens = (token.strip() for token in connection.lower().split(","))
    return "upgrade" in tokens and upgrade.lower() == "websocket" and request.method == b"GET"


class H11Protocol(HypercornH11Protocol):
    """hypercorn's HTTP/1.1 protocol with the refusals of the module docstring,
    and a response's head written together with its body (`_send_h11_event`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = _BoundedChunks(
            h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size
        )
        self._frames = FrameLengths(self.config.websocket_max_message_size)
        # A response head held for its body (see `_send_h11_event`); every
        # other send writes it first (`_send_after_head`), so bytes never
        # reorder and nothing is left behind by a close.
        self._head: bytes | None = None
        self._send_raw, self.send = self.send, self._send_after_head

    async def _send_h11_event(self, event: H11SendableEvent) -> None:
        """hypercorn writes a response's head and its body in two socket
        writes: two wake-ups of the client and two syscalls per answer
        (measured: a third of a `GET /v1/health`'s server CPU). A head with
        a Content-Length is held and written with the body's first bytes (or
        the end of an empty body), which hypercorn sends right after it. A
        head without one (an SSE stream, a chunked body) goes out at once:
        its body may be a long time coming, and the client waits for the head."""
        if isinstance(event, h11.Response) and self._head is None and _has_length(event):
            try:
                self._head = self.connection.send(event)
            except h11.LocalProtocolError:
                if self.connection.their_state != h11.ERROR:
                    raise
            return
        if isinstance(event, h11.Data | h11.EndOfMessage) and self._head is not None:
            try:
                data = self.connection.send(event)
            except h11.LocalProtocolError:
                if self.connection.their_state != h11.ERROR:
                    raise
                data = b""
            head, self._head = self._head, None
            await self._send_raw(RawData(data=head + data))
            return
        await super()._send_h11_event(event)

    async def _send_after_head(self, event: Event) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            await self._send_raw(RawData(data=head))
        await self._send_raw(event)

    async def handle(self, event: Event) -> None:
        stream = self.stream
        if isinstance(event, RawData) and event.data and isinstance(stream, WSStream):
            if stream.state is ASGIWebsocketState.HANDSHAKE and not stream.closed:
                await self._refuse_early_data(stream)
                return
            if not stream.handshake.accepted:
                return  # refused already; the answer and the close are on their way
            if self._frames.feed(event.data) is not None:
                await self._close_too_big(stream)
                return
        try:
            await super().handle(event)
        except _EarlyData:
            await self._refuse_early_data(None)

    async def _create_stream(self, request: h11.Request) -> None:
        if asks_websocket(request) and self.connection.trailing_data[0]:
            raise _EarlyData  # caught in handle, outside hypercorn's read loop
        await super()._create_stream(request)
        if isinstance(self.stream, WSStream) and self.stream.closed:
            await self.send(Closed())  # hypercorn refused the handshake itself

    async def _refuse_early_data(self, stream: WSStream | None) -> None:
        self._end(stream)
        body = json.dumps(error_body("invalid_request", EARLY_DATA), separators=(",", ":"))
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        await self._send_h11_event(h11.Response(status_code=400, headers=headers))
        await self._send_h11_event(h11.Data(data=body.encode()))
        await self._send_h11_event(h11.EndOfMessage())
        await self._disconnect(stream, CloseReason.PROTOCOL_ERROR)

    async def _close_too_big(self, stream: WSStream) -> None:
        self._end(stream)
        try:
            frame = stream.connection.send(CloseConnection(code=CloseReason.MESSAGE_TOO_BIG))
        except WsLocalProtocolError:
            frame = b""  # already closing: the socket's close is all that is left
        if frame:
            await self.send(RawData(data=frame))
        await self._disconnect(stream, CloseReason.MESSAGE_TOO_BIG)

    def _end(self, stream: WSStream | None) -> None:
        """Take the stream out of hypercorn's hands, before any await: from
        here on whatever the app sends (an accept, frames) is dropped."""
        if stream is not None:
            stream.closed = True
        self.stream = None

    async def _disconnect(self, stream: WSStream | None, reason: CloseReason) -> None:
        """Tell the app the client is gone (else it waits on receive, and the
        connection with it), then close the connection."""
        if stream is not None and stream.app_put is not None:
            await stream.app_put({"type": "websocket.disconnect", "code": int(reason)})
        await self.send(Closed())
