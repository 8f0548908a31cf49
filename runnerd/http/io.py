"""`GET /v1/sessions/{id}/io`: the WebSocket PTY channel.

Owns the channel's protocol: the origin check (close 4403), unknown session
(4404), nothing to replay on a terminal session (4410), too many subscribers
on the session (4429) or streams on the listener (4503; both
`runnerd.http.streams`), the `seq` and `gap`
text frames, output as binary frames of a 4-byte big-endian seq plus the
payload, client binary frames as stdin, client `resize` text frames, and the
final `1000 "session terminal"` close, with a closing handshake that
completes (`_close`). Two loops run in one nursery: the sender (replay, then
live) and the receiver (stdin, resizes); the sender's end closes the
connection and cancels the receiver.
"""

from __future__ import annotations

import json
import math
import struct
from typing import TYPE_CHECKING, Any

import trio
from quart import websocket
from quart_trio import QuartTrio

from runnerd.contract import is_terminal
from runnerd.errors import RunnerdError
from runnerd.http.events import parse_cursor
from runnerd.http.guard import edge_refusal, request_host, server_address
from runnerd.http.streams import stream_slot
from runnerd.http.waiting import Wake, wait_for_change
from runnerd.metrics import Metrics

if TYPE_CHECKING:
    from runnerd.http.state import AppState
    from runnerd.session.manager import Session

# The contract's terminal size bounds; this is the one place they are applied.
MAX_TERMINAL_DIMENSION = 10_000
CLOSE_DRAIN_S = 2.0
# A resize message is ~40 characters; longer text is no control message and
# is ignored unparsed (parsing it could only cost time or hit the recursion limit).
MAX_CONTROL_TEXT = 1024
GAP_MESSAGE = json.dumps({"type": "gap", "reason": "buffer_evicted"}, separators=(",", ":"))


def frame_chunk(seq: int, payload: bytes) -> bytes:
    """Server → client output frame: 4-byte big-endian unsigned seq, then bytes."""
    return struct.pack(">I", seq) + payload


def _dimension(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value):
        return None
    floored = math.floor(value)
    return min(floored, MAX_TERMINAL_DIMENSION) if floored >= 1 else None


def parse_resize(text: str) -> tuple[int, int] | None:
    """`{"type":"resize","cols":C,"rows":R}` → (cols, rows); anything else → None.

    Values are floored, must be ≥ 1, and are capped at 10000; a message with
    a value that is not a number is ignored as a whole, and so is text that
    is not JSON, whatever its shape or size.
    """
    if len(text) > MAX_CONTROL_TEXT:
        return None
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("type") != "resize":
        return None
    cols, rows = _dimension(message.get("cols")), _dimension(message.get("rows"))
    if cols is None or rows is None:
        return None
    return cols, rows


def parse_terminal_size(text: str) -> tuple[int, int] | None:
    """`COLSxROWS` (the start POST's `x-runnerd-terminal-size`) → (cols, rows),
    with `parse_resize`'s bounds (≥ 1, capped at 10000); anything else → None."""
    cols, sep, rows = text.strip().partition("x")
    if not sep or not cols.isdigit() or not rows.isdigit() or len(cols) + len(rows) > 12:
        return None
    width, height = _dimension(int(cols)), _dimension(int(rows))
    return None if width is None or height is None else (width, height)


async def _close(code: int, reason: str) -> None:
    """Send Close, then complete the closing handshake: keep reading (and
    discarding) until the client's Close arrives, at most CLOSE_DRAIN_S.

    Returning right after sending Close lets hypercorn close the transport
    while the client may still be sending (pings, stdin) and before it has
    read the last frames: unread bytes make the kernel reset the connection,
    and the client then loses the tail it had already received (the python
    `websockets` sync client dropped up to 180 KB of a replay). When the
    client's Close arrives, hypercorn hands quart-trio a disconnect and
    quart-trio cancels this handler, ending the wait; only then does the
    transport close. Reading is what lets that Close through: quart-trio
    queues at most 10 messages and stops reading the socket when the queue
    is full. Bounded, so a client that never answers cannot hold the handler.
    """
    with trio.move_on_after(CLOSE_DRAIN_S):
        await websocket.close(code, reason)
        while True:
            await websocket.receive()


async def _receive_input(session: Session) -> None:
    while True:
        message = await websocket.receive()
        if isinstance(message, bytes):
            session.write_stdin(message)
        elif isinstance(message, str):
            size = parse_resize(message)
            if size is not None:
                session.resize(*size)
        # None is quart's rendering of an empty binary frame: nothing to write.


async def _send_output(
    session: Session, cursor: int, closing: trio.Event, metrics: Metrics
) -> bool:
    """Replay then stream PTY chunks. True when the session is terminal and
    everything was sent; False when the daemon is shutting down."""
    while not closing.is_set():
        replay = session.pty.since(cursor)
        if replay.gap:
            metrics.replay_gap("websocket")
            await websocket.send(GAP_MESSAGE)
            cursor = max(cursor, replay.evicted_to)  # told once, never again
        for seq, chunk in replay.items:
            await websocket.send(frame_chunk(seq, chunk))
            cursor = seq
        if replay.gap or replay.items:
            continue
        if is_terminal(session.status):
            return True

        def has_news(after: int = cursor) -> bool:
            return session.pty.last_seq > after or is_terminal(session.status)

        if await wait_for_change(session, has_news, closing) is Wake.CLOSING:
            return False
    return False


async def _stream(session: Session, last_seq: int, state: AppState) -> bool:
    """Accept, then run the sender and the receiver until the sender ends;
    its answer (True: the session is terminal and everything was sent)."""
    await websocket.accept()
    await websocket.send(json.dumps({"type": "seq", "seq": last_seq}, separators=(",", ":")))
    with state.metrics.subscriber("websocket"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_receive_input, session)
            terminal = await _send_output(session, last_seq, state.closing, state.metrics)
            nursery.cancel_scope.cancel()
    return terminal


def register_io_route(app: QuartTrio, state: AppState) -> None:
    async def session_io(session_id: str) -> None:
        refusal = edge_refusal(
            request_host(websocket.scope, websocket.headers.get("host")),
            websocket.headers.get("origin"),
            server_address(websocket.scope),
            state.config,
        )
        if refusal is not None:
            await websocket.accept()
            await _close(4403, refusal[0])
            return
        try:
            session = await state.sessions.lookup(session_id)
        except RunnerdError as exc:
            await websocket.accept()
            await _close(4000 + exc.status_hint, exc.message)
            return
        last_seq = parse_cursor(websocket.args.get("lastSeq"))
        if is_terminal(session.status) and not session.pty.since(last_seq).items:
            await websocket.accept()
            await _close(4410, "session terminal and nothing buffered after lastSeq")
            return
        slot = stream_slot(websocket.scope)
        try:
            slot.claim(
                state.subscribers, session.id, state.config.runner.max_subscribers_per_session
            )
        except RunnerdError as exc:  # 4429 too many subscribers, 4503 listener full
            await websocket.accept()
            await _close(4000 + exc.status_hint, exc.message)
            return
        try:
            terminal = await _stream(session, last_seq, state)
        finally:
            slot.release()
        if terminal:
            await _close(1000, "session terminal")
        else:
            await _close(1001, "runnerd is shutting down")

    app.add_websocket("/v1/sessions/<session_id>/io", view_func=session_io)
