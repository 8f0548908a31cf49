"""A slow WebSocket reader gets every byte before a 1000; one that stops gets no 1000.

Issue 17, item 16, as a user met it: the python `websockets` sync client
over TCP, reading a finished ~850 KB session's replay slowly (1 ms per frame)
while its own keepalive pings go out every 50 ms. The server used to wait a
fixed 2 s for the client's Close and then close the transport with the
client's pings unread: the reset made the client's kernel drop what the
client had not read yet, and the replay came up short. Now the server waits
while the client keeps taking bytes, and a client that takes none for a
while is told, with a code that is not 1000, that its replay is incomplete;
its connection is then freed.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from runnerd.http.io import INCOMPLETE_CLOSE_CODE, STALL_S
from tests.e2e.contract_client import start_session, wait_terminal
from tests.e2e.edge import tcp_daemon

LINES = 130_000
# `seq` output through a PTY: each line ends in \r\n (~850 KB in all).
EXPECTED_BYTES = sum(len(str(i)) + 2 for i in range(1, LINES + 1))
# Three replays: the old server cut 5 of 6 short, and with three it failed
# every run tried (2 of 2, 93ab8ee's parent). Each replay's client pings in a
# tight loop once the pong latency passes 50 ms (websockets 17's keepalive with
# `ping_timeout=None`): that flood is what exposed the bug, and what a replay
# costs (~13 CPU s each, client and daemon), so no more than it takes.
REPLAYS = 3
# The same lines from 1,300 `seq` processes, one after the other: the output
# reaches the daemon in writes of ~650 bytes or less, so the replay is over
# a thousand frames (1,000-5,000 seen, with the machine's load).
SMALL_CHUNKS = "for b in $(seq 0 1299); do seq $((b * 100 + 1)) $((b * 100 + 100)); done"


def _replay_slowly(url: str) -> tuple[int, int | None, str | None]:
    """Read the replay at 1 ms per frame with pings every 50 ms; (payload
    bytes, close code, close reason) as the client saw them."""
    received = 0
    with connect(url, max_size=None, ping_interval=0.05, ping_timeout=None) as ws:
        try:
            while True:
                message = ws.recv()
                if isinstance(message, bytes):
                    received += len(message) - 4  # the 4-byte seq
                time.sleep(0.001)
        except ConnectionClosed as closed:
            rcvd = closed.rcvd
            return received, rcvd.code if rcvd else None, rcvd.reason if rcvd else None
    raise AssertionError("unreachable")


@pytest.mark.slow
async def test_a_slow_reader_with_keepalive_pings_gets_every_byte_then_1000(
    tmp_path: Path,
) -> None:
    async with tcp_daemon(tmp_path) as (daemon, port):
        async with daemon.client() as client:
            session_id = await start_session(client, SMALL_CHUNKS)
            await wait_terminal(client, session_id)
        url = f"ws://127.0.0.1:{port}/v1/sessions/{session_id}/io?lastSeq=0"
        seen = []
        for _ in range(REPLAYS):
            # Generous: a replay takes a few seconds; a stalled close was 10 s+.
            with trio.fail_after(120):
                seen.append(await trio.to_thread.run_sync(_replay_slowly, url))
    assert seen == [(EXPECTED_BYTES, 1000, "session terminal")] * REPLAYS


def _open_and_stop_reading(port: int, session_id: str) -> socket.socket:
    """A client that upgrades, then never reads: a tiny receive buffer, so the
    server's bytes pile up on its side."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /v1/sessions/{session_id}/io?lastSeq=0 HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sent until it closed (or reset) the connection."""
    data = bytearray()
    sock.settimeout(60)
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _close_code(stream: bytes) -> int | None:
    """The code of the server's Close frame if the stream holds one
    (unmasked server frames after the 101 head)."""
    at = stream.find(b"\r\n\r\n") + 4
    while at + 2 <= len(stream):
        opcode, length = stream[at] & 0x0F, stream[at + 1] & 0x7F
        at += 2
        if length == 126:
            length, at = int.from_bytes(stream[at : at + 2], "big"), at + 2
        elif length == 127:
            length, at = int.from_bytes(stream[at : at + 8], "big"), at + 8
        if opcode == 0x8:
            return int.from_bytes(stream[at : at + 2], "big") if length >= 2 else None
        at += length
    return None


def _daemon_holds(daemon_pid: int, client: socket.socket) -> bool:
    """Whether the daemon still has the server end of `client`'s connection
    open (a socket fd whose inode /proc/net/tcp gives that end)."""
    port = client.getsockname()[1]
    server_port = client.getpeername()[1]
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == port:
            inodes.add(fields[9])
    links = set()
    for fd in Path(f"/proc/{daemon_pid}/fd").iterdir():
        try:
            links.add(os.readlink(fd))
        except FileNotFoundError:
            continue  # closed since the listing: the daemon's other work goes on
    return any(f"socket:[{inode}]" in links for inode in inodes)


async def _until(condition: Callable[[], bool]) -> None:
    """Poll `condition` (the daemon's fds: nothing to wait on) until true."""
    while True:
        if condition():
            return
        await trio.sleep(0.05)


@pytest.mark.slow
async def test_a_reader_that_stops_reading_gets_no_1000_and_is_let_go(tmp_path: Path) -> None:
    async with tcp_daemon(tmp_path) as (daemon, port):
        async with daemon.client() as client:
            session_id = await start_session(client, f"seq 1 {LINES}")
            await wait_terminal(client, session_id)
        sock = await trio.to_thread.run_sync(_open_and_stop_reading, port, session_id)
        with sock:
            # The daemon gives up after `STALL_S` without progress; generous
            # on top, whatever the machine's load.
            with trio.fail_after(STALL_S + 60):
                await _until(lambda: _daemon_holds(daemon.proc.pid, sock))
                await _until(lambda: not _daemon_holds(daemon.proc.pid, sock))
            stream = await trio.to_thread.run_sync(_read_all, sock)
    assert b" 101 " in stream.split(b"\r\n", 1)[0]  # it was a WebSocket
    assert len(stream) < EXPECTED_BYTES  # it did stop short
    assert _close_code(stream) in (None, INCOMPLETE_CLOSE_CODE)
