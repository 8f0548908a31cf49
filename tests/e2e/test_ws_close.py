"""The WebSocket closing handshake completes: no byte of a replay is lost.

The python `websockets` sync client (the most used Python WebSocket client)
reads in a background thread; when the server closed the transport right
after its Close frame, unread client bytes made the kernel reset the
connection and the client lost the tail it had already received (37-180 KB
of an 850 KB replay), or, over TCP with pings and stdin in flight, never
saw the Close at all (1006). Here a slow reader replays a large finished
session over UNIX and TCP, with and without pings and stdin in flight,
several times each: every byte arrives, with a clean 1000 close.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect, unix_connect

from tests.e2e.contract_client import start_session, wait_terminal
from tests.e2e.edge import tcp_daemon
from tests.shared_daemon import OnBackend

LINES = 130_000
# `seq` output through a PTY: each line ends in \r\n.
EXPECTED_BYTES = sum(len(str(i)) + 2 for i in range(1, LINES + 1))
RUNS = 3


def _read_slowly(ws: ClientConnection, busy: bool) -> tuple[int, int | None]:
    """Replay to the end like a slow consumer; (payload bytes, close code)."""
    received = messages = 0
    with ws:
        try:
            while True:
                message = ws.recv()
                messages += 1
                if isinstance(message, bytes):
                    received += len(message) - 4  # the 4-byte seq
                if messages % 5 == 0:
                    time.sleep(0.005)  # a slow reader: data piles up in the socket
                if busy and messages % 3 == 0:
                    try:
                        ws.ping()
                        ws.send(b"typed\n")  # stdin to an ended session: ignored
                    except ConnectionClosed:
                        pass  # the server's Close arrived; reading goes on
        except ConnectionClosed as closed:
            return received, closed.rcvd.code if closed.rcvd else None
    raise AssertionError("unreachable")


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "pings-and-stdin"])
async def test_slow_sync_client_gets_every_byte_and_a_clean_close(
    tmp_path: Path, busy: bool, on_backend: OnBackend
) -> None:
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (daemon, port):
        async with daemon.client() as client:
            session_id = await start_session(client, f"seq 1 {LINES}")
            await wait_terminal(client, session_id)
        path = f"/v1/sessions/{session_id}/io?lastSeq=0"
        openers = {
            "unix": lambda: unix_connect(
                str(daemon.socket_path), uri=f"ws://runnerd{path}", max_size=None
            ),
            "tcp": lambda: connect(f"ws://127.0.0.1:{port}{path}", max_size=None),
        }
        results = []
        for name, opener in openers.items():
            for _ in range(RUNS):
                with trio.fail_after(20):
                    got = await trio.to_thread.run_sync(_read_slowly, opener(), busy)
                results.append((name, *got))
    assert results == [(name, EXPECTED_BYTES, 1000) for name in openers for _ in range(RUNS)]
