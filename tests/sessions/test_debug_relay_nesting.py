"""A workload's debug stream cannot crash the relay with pathological JSON.

The relay runs inside the session's task, so an exception escaping it would
fail the session as `internal`. Served by a real SSE server on loopback.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import trio

from runnerd.debug_relay import parse_frame, relay_debug_stream

DEPTH = 100_000
OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"


async def _serve_deep_then_normal(stream: trio.SocketStream) -> None:
    async with stream:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some()
            if not chunk:
                return
            head += chunk
        deep = b"data: " + b"[" * DEPTH + b"\n\n"
        after = b"data: " + json.dumps({"kind": "event", "name": "after"}).encode() + b"\n\n"
        await stream.send_all(OK_HEAD + deep + after)
        await trio.sleep_forever()


def test_parse_frame_skips_json_nested_past_the_recursion_limit() -> None:
    assert parse_frame("[" * DEPTH) is None
    assert parse_frame('{"a":' * DEPTH + "1" + "}" * DEPTH) is None


async def test_relay_skips_a_deeply_nested_frame_and_keeps_relaying() -> None:
    frames: list[dict[str, Any]] = []
    arrived = trio.Event()

    def on_frame(frame: dict[str, Any]) -> None:
        frames.append(frame)
        arrived.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _serve_deep_then_normal, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(relay_debug_stream, f"http://127.0.0.1:{port}/debug", on_frame)
        with trio.fail_after(10):
            await arrived.wait()
        nursery.cancel_scope.cancel()
    assert frames == [{"kind": "event", "name": "after"}]
