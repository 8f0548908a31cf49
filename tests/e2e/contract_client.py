"""A test's view of the `/v1` contract: start sessions, read SSE and WebSocket.

Owns the small client-side pieces the end-to-end tests share: request bodies
for `sh` bundle sessions, reading an SSE stream to its end, and reading the
WebSocket PTY channel (seq/gap text frames, seq-framed binary chunks, the
close reason). Every wait is bounded by `trio.fail_after`.
"""

from __future__ import annotations

import contextlib
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from trio_websocket import CloseReason, ConnectionClosed, WebSocketConnection

from tests.harness import SseFrame, iter_sse

SH_CONFIG = {"image": "sh", "pullPolicy": "missing"}
TERMINAL = {"exited", "failed", "stopped"}
SSE_TIMEOUT = httpx.Timeout(10.0, read=None)


def bundle_body(script: str, *, env: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A `POST /v1/sessions` body running `script` under the `sh` runtime."""
    return {
        "env": env or {},
        "config": dict(SH_CONFIG),  # a copy: tests edit the body they get
        "bundle": {
            "entryRelativePath": "main.sh",
            "files": [{"relativePath": "main.sh", "contents": script}],
        },
        **extra,
    }


async def start_session(client: httpx.AsyncClient, script: str, **kwargs: Any) -> str:
    response = await client.post("/v1/sessions", json=bundle_body(script, **kwargs))
    assert response.status_code == 201, response.text
    return str(response.json()["sessionId"])


async def read_events(
    client: httpx.AsyncClient,
    session_id: str,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> list[SseFrame]:
    """Every frame of the session's SSE stream until the server ends it."""
    frames: list[SseFrame] = []
    with trio.fail_after(timeout_s):
        async with client.stream(
            "GET",
            f"/v1/sessions/{session_id}/events",
            headers=headers,
            params=params,
            timeout=SSE_TIMEOUT,
        ) as response:
            assert response.status_code == 200, await response.aread()
            async for frame in iter_sse(response):
                frames.append(frame)
    return frames


def statuses(frames: list[SseFrame]) -> list[dict[str, Any]]:
    return [f.data["status"] for f in frames if f.event == "status"]


async def wait_terminal(
    client: httpx.AsyncClient, session_id: str, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The session's terminal status, read from its SSE stream (which ends there)."""
    frames = await read_events(client, session_id, timeout_s=timeout_s)
    final = statuses(frames)[-1]
    assert final["kind"] in TERMINAL, frames
    return final


async def wait_status(
    client: httpx.AsyncClient, session_id: str, kind: str, timeout_s: float = 10.0
) -> dict[str, Any]:
    """Follow the session's SSE stream until a status of `kind` arrives."""
    with trio.fail_after(timeout_s):
        async with client.stream(
            "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
        ) as response:
            async with contextlib.aclosing(iter_sse(response)) as frames:
                async for frame in frames:
                    if frame.event == "status" and frame.data["status"]["kind"] == kind:
                        return dict(frame.data["status"])
    raise AssertionError(f"session {session_id} ended without a {kind!r} status")


@dataclass
class PtyTranscript:
    """What a WebSocket client saw: control messages, output chunks, the close."""

    controls: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    close: CloseReason | None = None

    @property
    def output(self) -> bytes:
        return b"".join(payload for _, payload in self.chunks)

    @property
    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.chunks]

    def record(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            (seq,) = struct.unpack(">I", message[:4])
            self.chunks.append((seq, message[4:]))
        else:
            self.controls.append(json.loads(message))


async def read_pty(
    ws: WebSocketConnection,
    transcript: PtyTranscript | None = None,
    *,
    until: bytes | None = None,
    timeout_s: float = 10.0,
) -> PtyTranscript:
    """Read the PTY channel until `until` appears in the output, or (with no
    `until`) until the server closes the connection."""
    transcript = transcript or PtyTranscript()
    with trio.fail_after(timeout_s):
        while until is None or until not in transcript.output:
            try:
                transcript.record(await ws.get_message())
            except ConnectionClosed as closed:
                transcript.close = closed.reason
                if until is not None:
                    raise AssertionError(
                        f"closed before {until!r} arrived; got {transcript.output!r}"
                    ) from closed
                break
    return transcript


def resize_message(cols: Any, rows: Any) -> str:
    return json.dumps({"type": "resize", "cols": cols, "rows": rows})
