"""The WebSocket PTY channel (`/v1/sessions/{id}/io`) over the chosen endpoint.

Owns opening the channel on a UNIX socket or a TCP (TLS for https) URL with
trio-websocket, and unwrapping its handshake errors into `ClientError`. No
Origin header is sent: the daemon checks Origins for browsers only.

Load-bearing: the stream under trio-websocket drops what we send once
sending has failed, instead of raising. A session that ends at once makes
the server send its output and close right away; a resize or keystroke we
send a moment later then meets a closed socket, and trio-websocket would
abort the connection and discard the output it had already received but not
yet handed to us (seen: `runnerd run` of `echo hi` printing nothing). With
the send side quietly gone, the reader still delivers everything up to the
server's close frame, or sees the connection drop (a killed daemon).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import trio
import trio_websocket

from runnerd.client.transport import ClientError, Endpoint


async def _open_stream(
    endpoint: Endpoint,
) -> trio.SocketStream | trio.SSLStream[trio.SocketStream]:
    try:
        if endpoint.url is None:
            return await trio.open_unix_socket(str(endpoint.socket_path))
        parts = urlsplit(endpoint.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or "localhost"
        if parts.scheme == "https":
            context = ssl.create_default_context()
            return await trio.open_ssl_over_tcp_stream(host, port, ssl_context=context)
        return await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise ClientError(
            f"cannot reach runnerd at {endpoint.describe()}: {exc.strerror or exc}"
        ) from None


class _ReceiveFirstStream(trio.abc.Stream):
    """`inner`, except that once a send fails, later sends are dropped (see above)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self._inner = inner
        self._send_broken = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._send_broken:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._inner.send_all(data)
        except trio.BrokenResourceError:
            self._send_broken = True  # the server closed its side; reading goes on

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def open_channel(
    endpoint: Endpoint, resource: str
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """A connected WebSocket to `resource` (a path with query). Raises ClientError."""
    prefix = urlsplit(endpoint.url).path if endpoint.url else ""
    stream = _ReceiveFirstStream(await _open_stream(endpoint))
    async with stream:
        try:
            async with trio.open_nursery() as nursery:
                try:
                    ws = await trio_websocket.wrap_client_stream(
                        nursery,
                        stream,  # type: ignore[arg-type]  # any trio Stream works
                        endpoint.host,
                        prefix + resource,
                    )
                except (trio_websocket.HandshakeError, OSError) as exc:
                    raise ClientError(f"WebSocket handshake with runnerd failed: {exc!r}") from None
                try:
                    yield ws
                finally:
                    await ws.aclose()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # trio-websocket wraps its errors
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
