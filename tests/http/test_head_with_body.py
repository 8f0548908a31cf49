"""A response's head is written with its body, never held from a client that
waits for it (`runnerd.http.protocol.H11Protocol._send_h11_event`).

In-process: `serve_app` (runnerd's connections and HTTP/1.1 protocol) on a
real UNIX socket, read by a raw socket client, with an ASGI app whose
streamed answer (no Content-Length, as an SSE stream) sends its body only
once the test has read the head: a head held for its body would never
arrive. Pipelined requests on one connection come back whole and in order.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig

from runnerd.http.server import serve_app

WITHIN_S = 10.0  # generous: only bounds a failure
PLAIN = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: "


class _App:
    def __init__(self) -> None:
        self.head_read = trio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/stream":  # chunked: no Content-Length
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await self.head_read.wait()
            await send({"type": "http.response.body", "body": b"event", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        body = scope["path"].encode()[1:6].ljust(5, b".")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"5")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def _serving(tmp_path: Path, app: _App) -> AsyncIterator[trio.SocketStream]:
    path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        serve = partial(serve_app, app, HypercornConfig(), [sock],
                        max_connections=16, shutdown_trigger=stop.wait)  # fmt: skip
        await nursery.start(serve)
        async with await trio.open_unix_socket(str(path)) as stream:
            yield stream
        stop.set()


async def _read_until(stream: trio.SocketStream, received: bytes, end: bytes) -> bytes:
    while end not in received:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed after {received!r}"
        received += chunk
    return received


async def test_a_streamed_answer_s_head_arrives_before_its_body_is_sent(tmp_path: Path) -> None:
    app = _App()
    with trio.fail_after(WITHIN_S):
        async with _serving(tmp_path, app) as stream:
            await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await _read_until(stream, b"", b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"transfer-encoding: chunked" in head.lower()
            assert b"event" not in head
            app.head_read.set()
            rest = await _read_until(stream, head, b"0\r\n\r\n")
            assert b"5\r\nevent\r\n" in rest


async def test_pipelined_answers_come_back_whole_and_in_order(tmp_path: Path) -> None:
    with trio.fail_after(WITHIN_S):
        async with _serving(tmp_path, _App()) as stream:
            requests = b"".join(
                f"{method} /{name} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                for method, name in (("GET", "one"), ("HEAD", "two"), ("GET", "three"))
            )
            await stream.send_all(requests)
            received = await _read_until(stream, b"", b"three")
    answers = received.split(PLAIN)
    assert answers[0] == b""
    assert len(answers) == 4, received
    # Each answer: the date header's value, the blank line, then its body
    # (none for the HEAD).
    assert [a.split(b"\r\n\r\n", 1)[1] for a in answers[1:]] == [b"one..", b"", b"three"]
