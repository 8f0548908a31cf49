"""Streams cannot starve a listener, as a flood of subscribers would find.

Each session takes at most `runner.max_subscribers_per_session` live SSE and
WebSocket subscribers together (the next: `429 too_many_subscribers`, the
WebSocket closed 4429), and streams hold at most `stream_share(cap)` of a
listener's connections (the next: `503 too_many_streams`, close 4503), so
`/v1/health` and a POST are still served beside them. Before, 1,000 SSE
subscribers under `nofile=1024` held every connection and health waited in
the backlog (3 of 3 timed out at 5 s).

Only the local backend: the caps live in the HTTP edge, whatever runs the
sessions.
"""

from __future__ import annotations

import contextlib
import json
import re
import resource
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionClosed

from tests.e2e.contract_client import start_session
from tests.harness import Daemon, open_ws, start_daemon

# Generous: each bound only a failure; nothing here is timed.
ANSWER_WITHIN_S = 60.0


def _raise_own_nofile(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


async def _read_head(stream: trio.SocketStream) -> bytes:
    """The response head, and the whole body when it has a length (a refusal;
    a stream's has none); b"" when the server closed without answering."""
    received = b""
    while b"\r\n\r\n" not in received or len(received) < _answer_length(received):
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        received += chunk
    return received


def _answer_length(received: bytes) -> int:
    head, _, _ = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    return len(head) + 4 + (int(length[1]) if length else 0)


async def _subscribe(daemon: Daemon, session_id: str) -> tuple[trio.SocketStream, bytes]:
    """An SSE request on a raw connection: the connection and its answer's head."""
    stream = await trio.open_unix_socket(str(daemon.socket_path))
    await stream.send_all(
        f"GET /v1/sessions/{session_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    return stream, await _read_head(stream)


def _error_of(answer: bytes) -> dict[str, object]:
    """The JSON error body of a complete (content-length) answer's first chunk."""
    body = answer.partition(b"\r\n\r\n")[2]
    parsed = json.loads(body)
    assert isinstance(parsed, dict)
    return parsed


@contextlib.asynccontextmanager
async def _subscribers(
    daemon: Daemon, session_ids: list[str], count: int
) -> AsyncIterator[list[bytes]]:
    """`count` SSE requests, round-robin over `session_ids`, all sent before
    any answer is read (a flood, as the issue's); yields each answer's head."""
    async with contextlib.AsyncExitStack() as stack:
        streams = []
        for i in range(count):
            stream = await trio.open_unix_socket(str(daemon.socket_path))
            stack.push_async_callback(stream.aclose)
            await stream.send_all(
                f"GET /v1/sessions/{session_ids[i % len(session_ids)]}/events HTTP/1.1\r\n"
                "Host: x\r\n\r\n".encode()
            )
            streams.append(stream)
        heads: list[bytes] = [b""] * count

        async def read(i: int) -> None:
            heads[i] = await _read_head(streams[i])

        with trio.fail_after(ANSWER_WITHIN_S):
            async with trio.open_nursery() as nursery:
                for i in range(count):
                    nursery.start_soon(read, i)
        yield heads


async def test_the_65th_subscriber_on_a_session_is_refused_and_a_freed_slot_is_reusable(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path) as daemon:
        async with daemon.client() as client:
            session_id = await start_session(client, "sleep 60")
        async with contextlib.AsyncExitStack() as held:
            first = None
            for _ in range(40):  # SSE and WebSocket subscribers count together
                stream, head = await _subscribe(daemon, session_id)
                held.push_async_callback(stream.aclose)
                assert head.startswith(b"HTTP/1.1 200 OK"), head
                first = first or stream
            for _ in range(24):
                ws = await held.enter_async_context(
                    open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io")
                )
                seq = json.loads(await ws.get_message())
                assert seq["type"] == "seq"
            stream, refused = await _subscribe(daemon, session_id)
            await stream.aclose()
            async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
            assert first is not None
            await first.aclose()
            with trio.fail_after(ANSWER_WITHIN_S):  # the server notices the close
                while True:
                    stream, again = await _subscribe(daemon, session_id)
                    held.push_async_callback(stream.aclose)
                    if not again.startswith(b"HTTP/1.1 429"):
                        break
                    await trio.sleep(0.05)
    assert refused.startswith(b"HTTP/1.1 429 Too Many Requests\r\n"), refused
    error = _error_of(refused)
    assert error["error"] == "too_many_subscribers"
    assert "runner.max_subscribers_per_session" in str(error["message"])
    assert error["limit"] == 64
    reason = closed.value.reason
    assert reason is not None and reason.code == 4429
    assert "runner.max_subscribers_per_session" in (reason.reason or "")
    assert again.startswith(b"HTTP/1.1 200 OK"), again


@pytest.mark.parametrize("sessions", [1, 16], ids=["one_session", "sixteen_sessions"])
async def test_a_thousand_subscribers_under_a_low_nofile_leave_health_and_posts_served(
    tmp_path: Path, sessions: int
) -> None:
    _raise_own_nofile(2500)
    runnerd = [sys.executable, "-m", "runnerd", "serve", "--config"]
    command = ["prlimit", "--nofile=1024:1024", *runnerd]
    # Idle connections are evicted at the cap, not timed out, within the test.
    overrides = {"server": {"idle_timeout_seconds": 60}}
    async with start_daemon(tmp_path, overrides, command=command) as daemon:
        async with daemon.client() as client:
            session_ids = [await start_session(client, "sleep 120") for _ in range(sessions)]
        async with _subscribers(daemon, session_ids, 1000) as heads:
            async with daemon.client() as late:
                with trio.fail_after(ANSWER_WITHIN_S):
                    health = await late.get("/v1/health")
                    started = await start_session(late, "sleep 120")
                    status = (await late.get(f"/v1/sessions/{started}")).status_code
    statuses = {head[9:12] for head in heads}
    assert health.status_code == 200 and status == 200
    live = sum(head.startswith(b"HTTP/1.1 200") for head in heads)
    if sessions == 1:
        assert 0 < live <= 64 and b"429" in statuses
    else:
        # 16 x 64 would fit the per-session cap: the listener's share binds.
        assert 16 <= live < 1000 and b"503" in statuses
        refused = next(head for head in heads if head.startswith(b"HTTP/1.1 503"))
        assert _error_of(refused)["error"] == "too_many_streams"


async def test_a_websocket_over_the_listeners_share_is_closed_4503_and_health_still_served(
    tmp_path: Path,
) -> None:
    # Two connections: one for streams, one kept for everything else.
    async with start_daemon(tmp_path, {"server": {"max_connections": 2}}) as daemon:
        async with daemon.client() as client:
            session_id = await start_session(client, "sleep 60")
            document = (await client.get("/v1/openapi.json")).json()
        stream, head = await _subscribe(daemon, session_id)
        async with stream:
            assert head.startswith(b"HTTP/1.1 200 OK"), head
            async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
            async with daemon.client() as probe:
                with trio.fail_after(ANSWER_WITHIN_S):
                    health = await probe.get("/v1/health")
    reason = closed.value.reason
    assert reason is not None and reason.code == 4503, reason
    assert "server.max_connections" in (reason.reason or "")
    assert health.status_code == 200
    events = document["paths"]["/v1/sessions/{id}/events"]["get"]["responses"]
    assert "too_many_subscribers" in events["429"]["description"]
    assert "too_many_streams" in events["503"]["description"]
    io = document["paths"]["/v1/sessions/{id}/io"]["get"]["summary"]
    assert "4429 too_many_subscribers" in io and "4503 too_many_streams" in io


async def test_the_subscriber_cap_is_read_per_request_so_a_reload_changes_it(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path, {"runner": {"max_subscribers_per_session": 1}}) as daemon:
        async with daemon.client() as client:
            session_id = await start_session(client, "sleep 60")
        first, head = await _subscribe(daemon, session_id)
        async with first:
            assert head.startswith(b"HTTP/1.1 200 OK"), head
            second, refused = await _subscribe(daemon, session_id)
            await second.aclose()
            daemon.write_config({"runner": {"max_subscribers_per_session": 2}})
            daemon.send_signal(signal.SIGHUP)
            await daemon.wait_for_stderr("config reloaded")
            third, admitted = await _subscribe(daemon, session_id)
            await third.aclose()
    assert refused.startswith(b"HTTP/1.1 429") and _error_of(refused)["limit"] == 1
    assert admitted.startswith(b"HTTP/1.1 200 OK"), admitted
