"""A malformed WebSocket upgrade, sent as an attacker would, ends nothing.

Before, a WebSocket upgrade followed in the same write by any byte (or by a
pipelined GET) made hypercorn's h11 state machine raise out of the
connection: runnerd exited 1 and every session's workload with it, from the
UNIX socket, the TCP listener, or a session's own script. Now it is a JSON
400 on that connection, then the close; a live session keeps streaming (its
`/io` echoes what is typed after the attack, and its SSE stream, opened
before, delivers the `stopped` of its DELETE), and the daemon logs no
error. An upgrade of a plain route is a 400 (it was a 500 and two
tracebacks); a handshake hypercorn refuses itself is answered and closed
(it was held open, unevictable).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trio

from tests.e2e.contract_client import SSE_TIMEOUT, start_session
from tests.e2e.edge import tcp_daemon
from tests.harness import Daemon, SseFrame, iter_sse, open_ws, read_pty_until, session_body

WITHIN_S = 20.0  # generous: only bounds a failure
UPGRADE = (
    b"GET /v1/sessions/{sid}/io HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
TAILS = {
    "a byte": b"x",
    "a pipelined GET": b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
}
StillStreaming = Callable[[str], Awaitable[None]]


@contextlib.asynccontextmanager
async def live_session(daemon: Daemon) -> AsyncIterator[StillStreaming]:
    """A running session (`cat`) with its SSE stream and `/io` WebSocket open.

    Yields `still_streaming(marker)`: types `marker` on the WebSocket and
    waits until the PTY echoes it there. At the end the session is deleted,
    and the SSE stream opened at the start must deliver its `stopped`.
    """
    async with daemon.client() as client:
        sid = await start_session(client, "exec cat")
        async with (
            client.stream("GET", f"/v1/sessions/{sid}/events", timeout=SSE_TIMEOUT) as sse,
            contextlib.aclosing(iter_sse(sse)) as events,
        ):
            with trio.fail_after(WITHIN_S):
                await _next_status(events, "running")  # stdin is read from here on
            async with open_ws(daemon.socket_path, f"/v1/sessions/{sid}/io?lastSeq=0") as ws:

                async def still_streaming(marker: str) -> None:
                    with trio.fail_after(WITHIN_S):
                        await ws.send_message(f"{marker}\n".encode())
                        pty = b""
                        while marker.encode() not in pty:
                            message = await ws.get_message()
                            if isinstance(message, bytes):
                                pty += message[4:]  # 4-byte seq, then the bytes

                await still_streaming("before")
                yield still_streaming
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
            with trio.fail_after(WITHIN_S):
                await _next_status(events, "stopped")


async def _next_status(events: AsyncIterator[SseFrame], kind: str) -> None:
    async for frame in events:
        if frame.event == "status" and frame.data["status"]["kind"] == kind:
            return
    raise AssertionError(f"the SSE stream ended before status {kind!r}")


async def _exchange(stream: trio.abc.Stream, request: bytes) -> bytes:
    """Send `request`; everything the server sends until it closes."""
    received = bytearray()
    async with stream:
        await stream.send_all(request)
        with trio.fail_after(WITHIN_S):
            while chunk := await stream.receive_some(65536):
                received += chunk
    return bytes(received)


def _json_400(answer: bytes) -> str:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert b"content-type: application/json" in head, answer
    return str(json.loads(body)["message"])


@pytest.mark.parametrize("tail", TAILS.values(), ids=TAILS.keys())
@pytest.mark.parametrize("transport", ["unix", "tcp"])
async def test_a_malformed_upgrade_is_a_400_and_the_daemon_and_a_session_go_on(
    tmp_path: Path, transport: str, tail: bytes
) -> None:
    async with tcp_daemon(tmp_path) as (daemon, port), live_session(daemon) as still_streaming:
        for sid in (b"no-such-session", b"x"):
            if transport == "unix":
                stream: trio.abc.Stream = await trio.open_unix_socket(str(daemon.socket_path))
            else:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            answer = await _exchange(stream, UPGRADE.replace(b"{sid}", sid) + tail)
            assert "must wait for the handshake's answer" in _json_400(answer)
        await still_streaming("after")
        assert daemon.proc.returncode is None
    assert "ERROR" not in daemon.stderr_text(), daemon.stderr_text()


ATTACK = """
import os, socket
request = os.environ["ATTACK"].encode("latin-1")
try:
    with socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    print("ANSWER:", answer.split(b"\\r\\n")[0].decode(), flush=True)
except OSError as exc:  # a session with its own network sees no runnerd listener
    print("UNREACHABLE:", exc, flush=True)
"""


async def test_a_malformed_upgrade_from_inside_a_session_ends_nothing(tmp_path: Path) -> None:
    # On the host's network, so the attack reaches the listener (an isolated
    # session cannot: tests/daemon/test_network.py).
    host_net = {"local": {"network": "host"}}
    async with (
        tcp_daemon(tmp_path, host_net) as (daemon, port),
        live_session(daemon) as still_streaming,
    ):
        attack = (UPGRADE.replace(b"{sid}", b"x") + b"x").decode("latin-1")
        body = session_body(ATTACK, image="python", entry="main.py",
                            env={"ATTACK": attack, "PORT": str(port)})  # fmt: skip
        async with daemon.client() as client:
            created = await client.post("/v1/sessions", json=body)
            assert created.status_code == 201, created.text
        output = await read_pty_until(
            daemon.socket_path, created.json()["sessionId"], rb"(ANSWER|UNREACHABLE):.*\n"
        )
        assert b"ANSWER: HTTP/1.1 400 Bad Request" in output, output
        await still_streaming("after")
    assert "ERROR" not in daemon.stderr_text(), daemon.stderr_text()


async def test_a_websocket_upgrade_of_a_plain_route_is_a_400(tmp_path: Path) -> None:
    async with tcp_daemon(tmp_path) as (daemon, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        answer = await _exchange(stream, UPGRADE.replace(b"/v1/sessions/{sid}/io", b"/v1/health"))
        assert _json_400(answer) == (
            "/v1/health is not a WebSocket endpoint; send the request without 'Upgrade: websocket'"
        )
    assert "Traceback" not in daemon.stderr_text() and "ERROR" not in daemon.stderr_text()


async def test_a_handshake_hypercorn_refuses_is_answered_and_closed(tmp_path: Path) -> None:
    # No Sec-WebSocket-Key: hypercorn answers 400 itself. The connection used
    # to stay open, busy, so never evicted: 16 such clients filled a listener.
    keyless = UPGRADE.replace(b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", b"")
    async with tcp_daemon(tmp_path, {"server": {"max_connections": 16}}) as (daemon, port):
        for _ in range(20):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            answer = await _exchange(stream, keyless.replace(b"{sid}", b"x"))
            assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200
