"""Connections are bounded, as an idle or slow client (or a flood) would find.

Idle keep-alive connections close after `idle_timeout_seconds` (before,
hypercorn's timer was cancelled right after each response and they stayed
open forever); a request head or body that trickles in is cut; streams are
exempt; a listener serves at most `max_connections` at once and the rest
wait in the backlog; a flood of idle clients under a low open-files limit
never stops live sessions from streaming.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import trio

from tests.e2e.contract_client import SSE_TIMEOUT, start_session
from tests.e2e.edge import tcp_daemon
from tests.harness import iter_sse, open_ws, start_daemon
from tests.metrics.test_scrape import scrape, value
from tests.shared_daemon import OnBackend

IDLE = {"server": {"idle_timeout_seconds": 0.5, "request_timeout_seconds": 0.5}}
# Generous: the daemon closes within the timeout; this only bounds a failure.
CLOSED_WITHIN_S = 5.0


async def _closed_by_server(stream: trio.abc.Stream, *, reset_ok: bool = False) -> bytes:
    """Everything the server sends until it closes the connection.

    `reset_ok`: the client may still be sending when the server closes, and
    a close with unread bytes is a reset (RFC 1122 4.2.2.13): that is the
    connection cut as well."""
    received = bytearray()
    with trio.fail_after(CLOSED_WITHIN_S):
        try:
            while chunk := await stream.receive_some(65536):
                received += chunk
        except trio.BrokenResourceError:
            if not reset_ok:
                raise
    return bytes(received)


async def test_idle_keep_alive_connections_close_on_unix_and_tcp(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    async with tcp_daemon(tmp_path, on_backend.overrides(IDLE)) as (daemon, port):

        async def unix() -> trio.SocketStream:
            return await trio.open_unix_socket(str(daemon.socket_path))

        async def tcp() -> trio.SocketStream:
            return await trio.open_tcp_stream("127.0.0.1", port)

        answers: list[bytes] = []

        async def one_request_then_idle(opener: Callable[[], Awaitable[trio.SocketStream]]) -> None:
            async with await opener() as stream:
                await stream.send_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
                answers.append(await _closed_by_server(stream))

        async def silent(opener: Callable[[], Awaitable[trio.SocketStream]]) -> None:
            # A connection that never sends a request head is closed too.
            async with await opener() as stream:
                answers.append(await _closed_by_server(stream))

        async with trio.open_nursery() as nursery:
            for opener in (unix, tcp):
                nursery.start_soon(one_request_then_idle, opener)
                nursery.start_soon(silent, opener)
    assert sorted(answers)[:2] == [b"", b""]
    for answer in sorted(answers)[2:]:
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b'"0.1.0"}')


async def test_a_trickling_head_or_body_is_cut(tmp_path: Path, on_backend: OnBackend) -> None:
    async with start_daemon(tmp_path, on_backend.overrides(IDLE)) as daemon:
        async with await trio.open_unix_socket(str(daemon.socket_path)) as head:

            async def trickle() -> None:
                with contextlib.suppress(trio.BrokenResourceError):  # cut off: the point
                    for byte in b"GET /v1/health HTTP/1.1\r\nHost: x":
                        await head.send_all(bytes([byte]))
                        await trio.sleep(0.1)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                assert await _closed_by_server(head, reset_ok=True) == b""
                nursery.cancel_scope.cancel()
        async with await trio.open_unix_socket(str(daemon.socket_path)) as body:
            await body.send_all(
                b"POST /v1/probe HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                b'content-length: 100\r\n\r\n{"config":'
            )
            answer = await _closed_by_server(body)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b'"error":"request_timeout"' in answer


async def test_streams_outlive_the_idle_timeout(tmp_path: Path, on_backend: OnBackend) -> None:
    script = "for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.2; done"
    async with (
        start_daemon(tmp_path, on_backend.overrides(IDLE)) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_session(client, script)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as events:
                kinds = [frame.data["status"]["kind"] async for frame in iter_sse(events)
                         if frame.event == "status"]  # fmt: skip
            output = b""
            with trio.fail_after(10):
                while b"tick6" not in output:
                    message = await ws.get_message()
                    output += message[4:] if isinstance(message, bytes) else b""
    # 1.2 s of streaming on both channels, over twice the idle timeout.
    assert kinds[-1] == "exited"


async def test_the_connection_cap_queues_new_clients_until_a_slot_frees(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"server": {"max_connections": 2}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_session(client, "sleep 30")
        await client.aclose()  # its keep-alive connection would hold a slot
        async with contextlib.AsyncExitStack() as streams:
            # A live SSE stream (streams may hold only one of the two slots)
            # and a request whose body never comes fill the cap.
            first = await streams.enter_async_context(
                await trio.open_unix_socket(str(daemon.socket_path))
            )
            await first.send_all(
                f"GET /v1/sessions/{session_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            with trio.fail_after(5):
                assert (await first.receive_some(65536)).startswith(b"HTTP/1.1 200 OK")
            slow = await streams.enter_async_context(
                await trio.open_unix_socket(str(daemon.socket_path))
            )
            await slow.send_all(
                b"POST /v1/probe HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                b"content-length: 100\r\nexpect: 100-continue\r\n\r\n{"
            )
            with trio.fail_after(5):  # the head is read: the connection is busy
                assert (await slow.receive_some(65536)).startswith(b"HTTP/1.1 100")
            async with daemon.client() as third:
                queued = None
                with trio.move_on_after(0.5):
                    queued = await third.get("/v1/health")
                assert queued is None  # waiting in the backlog, not refused
                assert first is not None
                await first.aclose()
                with trio.fail_after(5):
                    assert (await third.get("/v1/health")).status_code == 200


async def test_two_thousand_idle_clients_under_a_low_nofile_never_stop_a_live_stream(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    _raise_own_nofile(2500)
    runnerd = [sys.executable, "-m", "runnerd", "serve", "--config"]
    command = ["prlimit", "--nofile=1024:1024", *runnerd]
    # An idle timeout far beyond the test: room is made by evicting the
    # longest-idle connections at the cap, not by waiting for timeouts.
    overrides = {"server": {"idle_timeout_seconds": 60}}
    script = "i=0; while true; do i=$((i+1)); echo line$i; sleep 0.02; done"
    async with start_daemon(tmp_path, on_backend.overrides(overrides), command=command) as daemon:
        async with daemon.client() as client:
            session_id = await start_session(client, script)
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            before = await _latest_seq(ws)
            flood = []
            try:
                for _ in range(2000):
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    flood.append(sock)
                    sock.connect(str(daemon.socket_path))
                during = await _latest_seq(ws)
                async with daemon.client(timeout=httpx.Timeout(30)) as late:
                    with trio.fail_after(30):
                        health = await late.get("/v1/health")
                after = await _latest_seq(ws)
            finally:
                for sock in flood:
                    sock.close()
    assert during > before and after > during  # the stream kept flowing throughout
    assert health.status_code == 200
    log = daemon.stderr_text()
    assert "accept returned" not in log  # no per-attempt EMFILE storm
    assert log.count("cannot accept connections") <= 1


async def _latest_seq(ws: object) -> int:
    """Read the PTY channel until a fresh output frame; its seq."""
    import struct

    from trio_websocket import WebSocketConnection

    assert isinstance(ws, WebSocketConnection)
    with trio.fail_after(10):
        while True:
            message = await ws.get_message()
            if isinstance(message, bytes):
                return int(struct.unpack(">I", message[:4])[0])


def _raise_own_nofile(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


async def test_a_low_nofile_warns_with_the_fix_and_still_serves_health_beside_streams(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    # 256 descriptors cannot also cover 32 sessions' worth (64 + 8 x 32): the
    # cap used to collapse to 1, and one open stream then starved /v1/health.
    runnerd = [sys.executable, "-m", "runnerd", "serve", "--config"]
    command = ["prlimit", "--nofile=256:256", *runnerd]
    async with start_daemon(tmp_path, on_backend.overrides(), command=command) as daemon:
        warning = next(
            line for line in daemon.stderr_text().splitlines() if "open files limit" in line
        )
        assert "WARNING" in warning and "LimitNOFILE" in warning, warning
        assert "runner.max_sessions" in warning and "max_connections=16" in warning, warning
        async with daemon.client() as client:
            session_id = await start_session(client, "sleep 30")
        async with contextlib.AsyncExitStack() as streams:
            for _ in range(3):
                client = await streams.enter_async_context(daemon.client(timeout=SSE_TIMEOUT))
                response = await streams.enter_async_context(
                    client.stream("GET", f"/v1/sessions/{session_id}/events")
                )
                frames = iter_sse(response)
                streams.push_async_callback(frames.aclose)  # type: ignore[attr-defined]
                with trio.fail_after(5):
                    await anext(frames)
            async with daemon.client() as probe:
                with trio.fail_after(5):
                    assert (await probe.get("/v1/health")).status_code == 200


async def test_clients_trickling_bodies_at_the_cap_are_warned_about_once_and_counted(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {
        "server": {"max_connections": 2, "request_timeout_seconds": 1},
        "metrics": {"listen": [f"unix:{tmp_path / 'metrics.sock'}"]},
    }
    slow = (
        b"POST /v1/probe HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ncontent-length: 100\r\n"
        b"expect: 100-continue\r\n\r\n{"
    )
    async with tcp_daemon(tmp_path, on_backend.overrides(overrides)) as (daemon, port):
        for _ in range(2):  # two bursts: one WARNING between them, two counts
            async with contextlib.AsyncExitStack() as stack:
                for _ in range(2):  # every slot held by a body that never comes
                    stream = await stack.enter_async_context(
                        await trio.open_tcp_stream("127.0.0.1", port)
                    )
                    await stream.send_all(slow)
                    # The server read the head (the connection is busy) once
                    # it answers the expectation.
                    with trio.fail_after(5):
                        assert b" 100 " in await stream.receive_some(65536)
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as late:
                    # Served once the body deadline cuts a trickler (408).
                    with trio.fail_after(10):
                        assert (await late.get("/v1/health")).status_code == 200
                await daemon.wait_for_stderr("connection cap reached")
        samples = await scrape(daemon, tmp_path)
    warnings = [line for line in daemon.stderr_text().splitlines() if "cap reached" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings
    assert f"listener=127.0.0.1:{port}" in warnings[0]
    listener = f"127.0.0.1:{port}"
    queued = value(
        samples, "runnerd_connection_cap_reached_total", listener=listener, action="queued"
    )
    assert queued >= 2, samples
