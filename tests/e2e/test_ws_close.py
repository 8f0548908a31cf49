"""The WebSocket closing handshake completes promptly: no byte of a replay is lost.

The python `websockets` sync client (the most used Python WebSocket client)
reads in a background thread; when the server closed the transport right
after its Close frame, unread client bytes made the kernel reset the
connection and the client lost the tail it had already received (37-180 KB
of an 850 KB replay), or, over TCP with pings and stdin in flight, never
saw the Close at all (1006). Here a slow reader replays a large finished
session over UNIX and TCP, with and without pings and stdin in flight,
several times each: every byte arrives, then a clean `1000 "session
terminal"` close, promptly after the last byte.

Pings and stdin go out from their own thread, as a terminal client's
keyboard does, never from the thread that calls `recv()`. websockets (up to
17.4 at least) deadlocks a client that sends from its reading thread once
the server's Close has arrived while more than `max_queue` (16) frames are
still unread: `send()` on the closing connection waits up to `close_timeout`
(10 s) for the background reader, which its own flow control has paused
until `recv()` drains the queue. That stall is the client's alone (the
server's Close and FIN are in the client's socket within a second; see the
README's note on the sync client) and would hide any delay of the server's.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
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
# Last byte read → Close seen. After the last byte the server only has its
# Close frame and then the FIN to send, so this is milliseconds; the bound
# leaves room for a loaded 2-core machine and is far below the 10 s timers
# (request timeout, the client's close_timeout) that a stalled close ends on.
PROMPT_CLOSE_S = 3.0


@dataclass(frozen=True)
class Outcome:
    received: int  # payload bytes, the 4-byte seqs left out
    code: int | None
    reason: str | None
    close_after_last_byte_s: float
    typed: int  # pings + stdin frames the keyboard thread got out


def _keyboard(
    ws: ClientConnection, keys: queue.SimpleQueue[bool], typed: list[int], first: threading.Event
) -> None:
    """Send a ping and a line of stdin per key press until the reader says
    stop or the connection closes (stdin to an ended session is ignored);
    `first` is set once the first press went out (or could not)."""
    try:
        while keys.get():
            try:
                ws.ping()
                ws.send(b"typed\n")
            except ConnectionClosed:
                return
            typed[0] += 1
            first.set()
    finally:
        first.set()


def _read_slowly(ws: ClientConnection, busy: bool) -> Outcome:
    """Replay to the end like a slow consumer, with key presses in flight
    when `busy`; the close as seen from the reader's side."""
    received = messages = 0
    last_byte_at = time.monotonic()
    keys: queue.SimpleQueue[bool] = queue.SimpleQueue()
    typed = [0]
    first = threading.Event()
    keyboard = threading.Thread(target=_keyboard, args=(ws, keys, typed, first))
    keyboard.start()
    try:
        with ws:
            try:
                while True:
                    message = ws.recv()
                    messages += 1
                    if isinstance(message, bytes):
                        received += len(message) - 4  # the 4-byte seq
                        last_byte_at = time.monotonic()
                    if messages % 5 == 0:
                        time.sleep(0.005)  # a slow reader: data piles up in the socket
                    if busy and messages % 3 == 0:
                        keys.put(True)
                        if messages == 3:
                            # The first press is out before the replay goes
                            # on: a replay that outruns the keyboard thread
                            # would test nothing in flight.
                            first.wait(10)
            except ConnectionClosed as closed:
                took = time.monotonic() - last_byte_at
                rcvd = closed.rcvd
                code, reason = (rcvd.code, rcvd.reason) if rcvd else (None, None)
                return Outcome(received, code, reason, took, typed[0])
    finally:
        keys.put(False)
        keyboard.join()
    raise AssertionError("unreachable")


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "pings-and-stdin"])
async def test_slow_sync_client_gets_every_byte_and_a_prompt_clean_close(
    tmp_path: Path, busy: bool, on_backend: OnBackend
) -> None:
    async with tcp_daemon(tmp_path, on_backend.overrides()) as (daemon, port):
        async with daemon.client() as client:
            session_id = await start_session(client, f"seq 1 {LINES}")
            await wait_terminal(client, session_id)
        path = f"/v1/sessions/{session_id}/io?lastSeq=0"
        # A small read-ahead queue (websockets' default is 16 frames): the
        # library's reader thread must not take the whole replay and the
        # close frame while the reader is still at its first messages, or
        # the connection is closing before a key can be pressed (seen under
        # load, when the PTY's chunks are large: ~15 frames of 64 KiB).
        openers = {
            "unix": lambda: unix_connect(
                str(daemon.socket_path), uri=f"ws://runnerd{path}", max_size=None, max_queue=2
            ),
            "tcp": lambda: connect(f"ws://127.0.0.1:{port}{path}", max_size=None, max_queue=2),
        }
        outcomes = []
        for name, opener in openers.items():
            for _ in range(RUNS):
                with trio.fail_after(20):
                    outcome = await trio.to_thread.run_sync(_read_slowly, opener(), busy)
                outcomes.append((name, outcome))
    seen = [(name, o.received, o.code, o.reason) for name, o in outcomes]
    expected = (EXPECTED_BYTES, 1000, "session terminal")
    assert seen == [(name, *expected) for name in openers for _ in range(RUNS)]
    late = [(name, round(o.close_after_last_byte_s, 2)) for name, o in outcomes
            if o.close_after_last_byte_s >= PROMPT_CLOSE_S]  # fmt: skip
    assert not late, f"Close seen this long after the last byte: {late}"
    if busy:  # the pings and stdin were really in flight during the replay
        assert all(o.typed > 0 for _, o in outcomes), outcomes
