"""Watch sessions' `/io` from a test: start one, and read its app sockets
with the python `websockets` sync client (each call in a worker thread),
frames parsed into (seq, stream byte, payload)."""

from __future__ import annotations

import contextlib
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import trio
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, unix_connect

from tests.harness import session_body

TIMEOUT_S = 30.0


def watch_body(apps: list[dict[str, Any]], files: dict[str, str]) -> dict[str, Any]:
    body = session_body("", entry=apps[0]["entryRelativePath"])
    body["bundle"]["files"] = [{"relativePath": p, "contents": c} for p, c in files.items()]
    return {**body, "mode": "watch", "apps": apps}


async def start_watch(
    client: httpx.AsyncClient, apps: list[dict[str, Any]], files: dict[str, str]
) -> str:
    answer = await client.post("/v1/sessions", json=watch_body(apps, files))
    assert answer.status_code == 201, answer.text
    session_id: str = answer.json()["sessionId"]
    return session_id


@dataclass
class Transcript:
    """What one socket received: text frames, and (seq, stream, bytes) chunks."""

    controls: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[tuple[int, int, bytes]] = field(default_factory=list)

    def of(self, stream: int) -> bytes:
        return b"".join(data for _, s, data in self.chunks if s == stream)


class AppSocket:
    """A sync `websockets` client socket; each call runs in a worker thread."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws, self.seen = ws, Transcript()

    def _read_until(self, done: Callable[[Transcript], bool]) -> Transcript:
        while not done(self.seen):
            message = self.ws.recv(timeout=TIMEOUT_S)
            if isinstance(message, bytes):
                (seq,) = struct.unpack(">I", message[:4])
                self.seen.chunks.append((seq, message[4], message[5:]))
            else:
                self.seen.controls.append(json.loads(message))
        return self.seen

    async def until(self, done: Callable[[Transcript], bool]) -> Transcript:
        return await trio.to_thread.run_sync(self._read_until, done)

    async def send(self, message: bytes | str) -> None:
        await trio.to_thread.run_sync(self.ws.send, message)

    def _closed(self) -> tuple[int, str]:
        try:
            while True:
                self._read_until(lambda _: False)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            return closed.rcvd.code, closed.rcvd.reason

    async def closed(self) -> tuple[int, str]:
        return await trio.to_thread.run_sync(self._closed)


def raw(seen: Transcript) -> bytes:
    """A run session's output: each frame's bytes after the seq, as they came."""
    return b"".join(bytes((stream,)) + data for _, stream, data in seen.chunks)


def printed(stream: int, pattern: bytes) -> Callable[[Transcript], bool]:
    return lambda seen: re.search(pattern, seen.of(stream)) is not None


class Io:
    """Open `/io` sockets on the daemon, each entered as its context manager
    (as `websockets` wants it) and left at `close_all`."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.open: list[AppSocket] = []
        self._stack = contextlib.ExitStack()

    async def connect(self, session_id: str, query: str = "") -> AppSocket:
        url = f"ws://runnerd/v1/sessions/{session_id}/io{query}"

        def connect() -> ClientConnection:
            ws = unix_connect(str(self.socket_path), url, max_queue=None, open_timeout=TIMEOUT_S)
            return self._stack.enter_context(ws)

        socket = AppSocket(await trio.to_thread.run_sync(connect))
        self.open.append(socket)
        return socket

    async def close_all(self) -> None:
        await trio.to_thread.run_sync(self._stack.close)


async def assert_sse_conforms(client: httpx.AsyncClient, frames: list[Any]) -> None:
    """Every frame's data matches the daemon's own `SseData` schema
    (`/v1/openapi.json`, JSON Schema 2020-12)."""
    doc = (await client.get("/v1/openapi.json")).json()
    validator = jsonschema.Draft202012Validator({**doc, "$ref": "#/components/schemas/SseData"})
    for frame in frames:
        if frame.event is not None:
            errors = [e.message for e in validator.iter_errors(frame.data)]
            assert errors == [], (frame.raw, errors)
