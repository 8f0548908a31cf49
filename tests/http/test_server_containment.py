"""One connection's failure ends that connection, never the server.

In-process: `serve_app` on a real UNIX socket with an ASGI app whose one
route has a bug hypercorn does not contain (it answers `101` to a plain
request: h11 refuses it, hypercorn's clean-up then sends on the broken state
machine and that error escapes the connection). Before, it escaped through
the connections nursery and `serve_app` itself ended: runnerd exited 1 with
every session.
"""

from __future__ import annotations

import logging
import os
import socket
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypercorn.config import Config as HypercornConfig

from runnerd.http.server import serve_app

WITHIN_S = 10.0  # generous: only bounds a failure


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["path"] == "/bug":
        await send({"type": "http.response.start", "status": 101, "headers": []})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"ok"})


async def _exchange(path: Path, target: str) -> bytes:
    """Send one GET; everything the server sends until it closes or stays quiet."""
    received = b""
    async with await trio.open_unix_socket(str(path)) as stream:
        await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        with trio.move_on_after(1.0):
            while chunk := await stream.receive_some(65536):
                received += chunk
                if received.endswith(b"ok"):
                    break
    return received


async def test_a_failing_connection_is_logged_with_its_peer_and_closed_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="runnerd.http.server")
    path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    stop = trio.Event()
    with trio.fail_after(WITHIN_S):
        async with trio.open_nursery() as nursery:
            serve = partial(serve_app, _app, HypercornConfig(), [sock],
                            max_connections=16, shutdown_trigger=stop.wait)  # fmt: skip
            await nursery.start(serve)
            async with await trio.open_unix_socket(str(path)) as bystander:
                assert await _exchange(path, "/bug") == b""  # closed, nothing sent
                # The server still serves, new connections and open ones alike.
                assert (await _exchange(path, "/ok")).startswith(b"HTTP/1.1 200 OK")
                await bystander.send_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
                assert (await bystander.receive_some(65536)).startswith(b"HTTP/1.1 200 OK")
            stop.set()
    failures = [r for r in caplog.records if r.getMessage() == "connection failed; closed it"]
    assert len(failures) == 1
    assert failures[0].peer == f"pid {os.getpid()} uid {os.getuid()}"  # type: ignore[attr-defined]
    assert failures[0].exc_info is not None
