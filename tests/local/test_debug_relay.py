"""relay_debug_stream against a real SSE server on loopback; SseDecoder as pure logic."""

from __future__ import annotations

import json
import socket
from typing import Any

import trio

from runnerd.workload.debug_relay import ReplayFilter, SseDecoder, parse_frame, relay_debug_stream


def decode(lines: list[str]) -> list[str]:
    decoder = SseDecoder()
    return [data for line in lines if (data := decoder.feed(line)) is not None]


def test_decoder_joins_data_lines_and_skips_comments_and_other_fields() -> None:
    lines = [": heartbeat", "", "id: 3", "event: debug", 'data: {"a":', "data:1}", ""]
    assert decode(lines) == ['{"a":\n1}']


def test_decoder_keeps_spaces_beyond_the_first_and_bare_data_lines() -> None:
    assert decode(["data:  two spaces", "data", ""]) == [" two spaces\n"]


def new_frames(replay: ReplayFilter, *connections: list[str]) -> list[str]:
    """What the filter lets through of each connection's frames, in order."""
    out: list[str] = []
    for frames in connections:
        replay.connected()
        out += [f for f in frames if replay.is_new(f)]
    return out


def test_replay_filter_drops_a_reconnected_streams_replay_and_keeps_what_is_new() -> None:
    # The server replays everything since its start to each new client.
    assert new_frames(ReplayFilter(), ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "a"]) == [
        "a",
        "b",
        "c",
        "a",
    ]


def test_replay_filter_survives_a_drop_in_the_middle_of_a_replay() -> None:
    assert new_frames(ReplayFilter(), ["a", "b", "c"], ["a"], ["a", "b", "c", "d"]) == [
        "a",
        "b",
        "c",
        "d",
    ]


def test_replay_filter_passes_a_server_that_does_not_replay() -> None:
    assert new_frames(ReplayFilter(), ["a", "b"], ["c"], ["d", "e"]) == ["a", "b", "c", "d", "e"]


def test_replay_filter_memory_is_bounded_and_only_the_tail_beyond_it_repeats() -> None:
    assert new_frames(ReplayFilter(max_frames=2), ["a", "b", "c"], ["a", "b", "c", "d"]) == [
        "a",
        "b",
        "c",
        "c",
        "d",
    ]


def test_parse_frame_accepts_only_json_objects() -> None:
    assert parse_frame('{"kind": "event"}') == {"kind": "event"}
    assert parse_frame("[1, 2]") is None
    assert parse_frame("not json") is None


def sse(*frames: object) -> bytes:
    return b"".join(f"data: {json.dumps(f)}\n\n".encode() for f in frames)


OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class ScriptedSseServer:
    """Answers the n-th connection with `script[n]`, then closes it; connections
    beyond the script get `OK_HEAD` and are held open."""

    def __init__(self, script: list[bytes]) -> None:
        self.script = script
        self.requests: list[bytes] = []

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                head += chunk
            index = len(self.requests)
            self.requests.append(head)
            if index < len(self.script):
                await stream.send_all(self.script[index])
                return
            await stream.send_all(OK_HEAD)
            await trio.sleep_forever()


async def test_relay_retries_until_the_server_answers_and_reconnects_after_drops() -> None:
    frames: list[dict[str, Any]] = []
    got_all = trio.Event()

    def on_frame(frame: dict[str, Any]) -> None:
        frames.append(frame)
        if len(frames) == 4:
            got_all.set()

    server = ScriptedSseServer(
        [
            UNAVAILABLE,
            OK_HEAD
            + sse({"kind": "event", "n": 1}, {"kind": "log", "line": "x"})
            + b"data: not json\n\n: comment\n\n",
            OK_HEAD + b'data: {"n":\ndata: 3}\n\n' + sse({"n": 4}),
        ]
    )
    # Bound but not yet listening: the relay's first attempts are refused.
    raw = socket.socket()
    raw.bind(("127.0.0.1", 0))
    port = raw.getsockname()[1]
    url = f"http://127.0.0.1:{port}/events"
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            with raw:
                nursery.start_soon(lambda: relay_debug_stream(url, on_frame, retry_s=0.01))
                # Not an assertion's precondition: gives the relay time to be
                # refused a few times, which it must survive.
                await trio.sleep(0.05)
                raw.listen()
                listener = trio.SocketListener(trio.socket.from_stdlib_socket(raw.dup()))
            async with listener:
                nursery.start_soon(trio.serve_listeners, server.handle, [listener])
                await got_all.wait()
                nursery.cancel_scope.cancel()
    assert frames == [
        {"kind": "event", "n": 1},
        {"kind": "log", "line": "x"},
        {"n": 3},
        {"n": 4},
    ]
    assert len(server.requests) >= 3
    assert server.requests[0].startswith(b"GET /events HTTP/1.1\r\n")
    assert b"accept: text/event-stream" in server.requests[0].lower()


async def test_relay_ignores_proxy_settings_of_the_daemon(monkeypatch: Any) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    frames: list[dict[str, Any]] = []
    server = ScriptedSseServer([OK_HEAD + sse({"kind": "event"})])
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(5):
        async with listeners[0], trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, server.handle, listeners)
            with trio.move_on_after(5) as scope:
                await relay_debug_stream(
                    f"http://127.0.0.1:{port}/events",
                    lambda f: (frames.append(f), scope.cancel()),
                    retry_s=0.01,
                )
            nursery.cancel_scope.cancel()
    assert frames == [{"kind": "event"}]


# A workload's debug stream must not crash the relay with pathological JSON: the
# relay runs inside the session's task, so an escaping RecursionError would fail
# the session as `internal`.
DEPTH = 100_000


def test_parse_frame_skips_json_nested_past_the_recursion_limit() -> None:
    assert parse_frame("[" * DEPTH) is None
    assert parse_frame('{"a":' * DEPTH + "1" + "}" * DEPTH) is None


async def test_relay_skips_a_deeply_nested_frame_and_keeps_relaying() -> None:
    frames: list[dict[str, Any]] = []
    arrived = trio.Event()

    def on_frame(frame: dict[str, Any]) -> None:
        frames.append(frame)
        arrived.set()

    deep = b"data: " + b"[" * DEPTH + b"\n\n"
    server = ScriptedSseServer([OK_HEAD + deep + sse({"kind": "event", "name": "after"})])
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(10):
        async with listeners[0], trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, server.handle, listeners)
            nursery.start_soon(relay_debug_stream, f"http://127.0.0.1:{port}/events", on_frame)
            await arrived.wait()
            nursery.cancel_scope.cancel()
    assert frames == [{"kind": "event", "name": "after"}]
