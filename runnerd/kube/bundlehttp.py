"""The bundle listener: `GET /internal/bundles/<id>?token=…` on `bundle_listen`.

Owns a deliberately small HTTP/1.0 server (one request per connection, then
close) in front of `bundle.BundleTokens`: the session pod's init container
is its only client, and it lives on its own listener so the API never has to
be reachable from pods. Anything but a valid, unredeemed token for that
session is a `404` with no body that could tell a guessed id from a used
token; a request that is not complete within `REQUEST_TIMEOUT_S` is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from urllib.parse import parse_qs, urlsplit

import trio

from runnerd.kube.bundle import BundleTokens

log = logging.getLogger(__name__)

PREFIX = "/internal/bundles/"
MAX_HEAD_BYTES = 8192
REQUEST_TIMEOUT_S = 10.0
NOT_FOUND = b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def parse_target(head: bytes) -> tuple[str, str] | None:
    """(session id, token) from a request head, or None for anything else."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "GET" or not parts[2].startswith("HTTP/1."):
        return None
    url = urlsplit(parts[1])
    if not url.path.startswith(PREFIX):
        return None
    session_id = url.path[len(PREFIX) :]
    tokens = parse_qs(url.query).get("token", [])
    if not session_id or "/" in session_id or len(tokens) != 1:
        return None
    return session_id, tokens[0]


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
    return data


async def _serve_one(
    stream: trio.SocketStream, tokens: BundleTokens, now: Callable[[], float]
) -> None:
    async with stream:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                head = await _read_head(stream)
                target = parse_target(head) if head is not None else None
                archive = tokens.redeem(*target, now()) if target is not None else None
                if archive is None:
                    await stream.send_all(NOT_FOUND)
                    return
                log.info("bundle fetched", extra={"session_id": target[0] if target else ""})
                await stream.send_all(
                    b"HTTP/1.0 200 OK\r\nContent-Type: application/gzip\r\n"
                    b"Cache-Control: no-store\r\nConnection: close\r\n"
                    + f"Content-Length: {len(archive)}\r\n\r\n".encode()
                    + archive
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return  # the pod went away mid-request: nothing to tell it


async def bind_bundle_listener(host: str, port: int) -> trio.SocketListener:
    """Bind the listener now, so a taken port fails the start (OSError)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    return listeners[0]


async def serve_bundles(listener: trio.SocketListener, tokens: BundleTokens) -> None:
    """Serve until cancelled."""
    handler = partial(_serve_one, tokens=tokens, now=trio.current_time)
    await trio.serve_listeners(handler, [listener])
