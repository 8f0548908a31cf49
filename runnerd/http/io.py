"""`GET /v1/sessions/{id}/io`: the WebSocket PTY channel.

Owns the channel's protocol: the origin check (close 4403), unknown session
or app (4404, `runnerd.http.io_target`), nothing to replay on a terminal
session (4410), too many subscribers on the session (4429) or streams on
the listener (4503; both
`runnerd.http.streams`), the `seq` and `gap` text frames (`gap` says
`buffer_evicted` for what the replay buffer dropped, `output_lost` where
the backend lost output), output as binary frames of a 4-byte big-endian
seq plus the payload (one frame per chunk; a backlog goes out up to
`BATCH_CHUNKS` frames per socket write, `_Delivery.send_chunks`), client
binary frames as stdin, client `resize` text frames, and the final
`1000 "session terminal"` close, sent only once the client has taken every
byte before it, with a closing handshake that completes
(`_close_when_taken`); and giving up on a client that stopped taking bytes
(`_Delivery`: close `4408`, connection dropped). Three tasks run in one
nursery: the sender (replay, then live, then the close), the receiver
(stdin, resizes; it keeps reading until the end, so no input is left unread)
and the stall watch; the sender's end cancels the other two. Each socket
holds `session.subscribed()` while open (a watch session's idle suspend
counts it).

On a watch session a socket is one app's (`?app=NAME`; absent: the only
app of a one-app session): it replays and follows that app's own ring
(`AppChannel.ring`, whose chunks already start with their stream byte, so a
frame is the seq then the chunk as stored, the same framing as a run
session's), its first frame says `app` and `io`, stdin goes to the app's
current process, and a `resize` on a `streams` app is answered with the
`resize_unsupported` error frame. An app's process exiting is output
ending for a while, nothing more: the socket closes on the session's
terminal status (1000) or shutdown (1001), as a run session's, or when
the app leaves the set (`PUT /apps`: 4404, once its output is sent). A run
session's socket (no `app`, or `app`) is byte for byte what it always was.
"""

from __future__ import annotations

import json
import math
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

import trio
from quart import websocket
from quart_trio import QuartTrio

from runnerd.contract import is_terminal
from runnerd.errors import RunnerdError
from runnerd.http.connection_probe import ConnectionProbe, probe_of
from runnerd.http.events import parse_cursor
from runnerd.http.guard import edge_refusal, request_host, server_address
from runnerd.http.io_target import IoTarget, io_target
from runnerd.http.streams import stream_slot
from runnerd.http.wsframes import binary_frame_pieces
from runnerd.metrics import Metrics
from runnerd.session.reader import EVICTED, LOST, Items, open_reader

if TYPE_CHECKING:
    from runnerd.http.state import AppState
    from runnerd.session.manager import Session

# The contract's terminal size bounds; this is the one place they are applied.
MAX_TERMINAL_DIMENSION = 10_000
# After our Close: how long the handler waits for the client's Close reply.
CLOSE_DRAIN_S = 2.0
# After the handler, how long the connection waits for the client to close
# its side (reading what it still sends): a slow reader may still have
# megabytes in its kernel to read before it reaches our Close.
CLOSE_LINGER_S = 30.0
# A client that takes none of the bytes waiting for it for this long has
# stopped reading (or is gone): it is told its output is incomplete and its
# connection is dropped. A reader that takes anything at all is never cut.
STALL_S = 10.0
STALL_POLL_S = 0.05
INCOMPLETE_CLOSE_CODE = 4408
INCOMPLETE_CLOSE_REASON = "client stopped reading; output incomplete"
# A resize message is ~40 characters; longer text is no control message and
# is ignored unparsed (parsing it could only cost time or hit the recursion limit).
MAX_CONTROL_TEXT = 1024
SEP = (",", ":")
GAP_MESSAGE = json.dumps({"type": "gap", "reason": "buffer_evicted"}, separators=SEP)
# Output the backend could not deliver is missing here (`Sink.output_lost`).
LOST_MESSAGE = json.dumps({"type": "gap", "reason": "output_lost"}, separators=SEP)
# Output chunks written in one socket write, at most (≤ 64 KiB each): a
# client that is behind gets its backlog in ~1 MiB writes.
BATCH_CHUNKS = 16
RESIZE_UNSUPPORTED = json.dumps(
    {"type": "error", "error": "resize_unsupported", "io": "streams"}, separators=SEP
)


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


class _Delivery:
    """The sender's sends, and whether the client still takes them.

    Progress is a send that completes or the socket's untaken bytes
    (`ConnectionProbe.unsent_bytes`) going down; a stall is bytes waiting
    for the client (a send in progress, or untaken bytes) and no progress
    for `STALL_S`. Without a probe (a server other than `serve_app`) nothing
    is measured: `until_taken` returns at once and `watch` never returns.
    """

    def __init__(self, probe: ConnectionProbe | None) -> None:
        self._probe = probe
        self._sending = False
        self._closed = False
        self._progress_at = trio.current_time()

    async def close(self, code: int, reason: str) -> None:
        self._closed = True
        await websocket.close(code, reason)

    async def send_aside(self, message: str) -> None:
        """A control frame from beside the sender (the receiver's answer to
        a request): not counted as the sender's sends; nothing once closed."""
        if not self._closed:
            await websocket.send(message)

    async def send(self, message: bytes | str) -> None:
        self._sending = True
        try:
            await websocket.send(message)
        finally:
            self._sending = False
            self._progress_at = trio.current_time()

    async def send_chunks(self, entries: list[tuple[int, bytes]]) -> None:
        """Each `(seq, payload)` as its own binary frame (the contract's), up
        to `BATCH_CHUNKS` frames per socket write (`ConnectionProbe.send_frames`);
        through the framework, one message each, where that cannot be done."""
        for start in range(0, len(entries), BATCH_CHUNKS):
            batch = entries[start : start + BATCH_CHUNKS]
            self._sending = True
            try:
                probe = self._probe
                if probe is None or not await probe.send_frames(binary_frame_pieces(batch)):
                    for entry in batch:
                        await websocket.send(frame_chunk(*entry))
            finally:
                self._sending = False
                self._progress_at = trio.current_time()

    def linger(self, seconds: float) -> None:
        """Have the connection's close linger (`ConnectionProbe.linger_s`)."""
        if self._probe is not None:
            self._probe.linger_s = seconds

    def _unsent(self) -> int:
        return (self._probe.unsent_bytes() or 0) if self._probe is not None else 0

    async def until_taken(self) -> None:
        """Until the client has taken everything sent (a stall is `watch`'s
        to handle). Cancellable."""
        while True:
            if self._unsent() == 0:
                return
            await trio.sleep(STALL_POLL_S)  # the kernel has no event for this: poll

    async def watch(self) -> None:
        """Return when the client has stalled. Cancellable."""
        if self._probe is None:
            await trio.sleep_forever()
        last = self._unsent()
        while True:
            await trio.sleep(STALL_POLL_S)
            unsent, now = self._unsent(), trio.current_time()
            if unsent < last or not (unsent or self._sending):
                self._progress_at = now
            last = unsent
            if now - self._progress_at >= STALL_S:
                return

    async def give_up(self) -> None:
        """Tell a stalled client its output is incomplete (the Close goes out
        if a send is not stuck on it) and drop the connection; quart-trio then
        cancels the handler. Cancellable."""
        if not (self._sending or self._closed):
            with trio.move_on_after(STALL_POLL_S * 10):
                await self.close(INCOMPLETE_CLOSE_CODE, INCOMPLETE_CLOSE_REASON)
        if self._probe is not None:
            self._probe.abort()


async def _watch_stall(delivery: _Delivery) -> None:
    await delivery.watch()
    await delivery.give_up()


async def _close_when_taken(delivery: _Delivery, code: int, reason: str) -> None:
    """Close once the client has taken every byte sent before it, then wait
    for its Close reply (which makes quart-trio cancel the handler), at most
    `CLOSE_DRAIN_S`.

    A Close sent earlier could not be taken back if the client stalls (it
    would say 1000 over an incomplete replay); `watch` gives up on such a
    client instead. The receiver keeps reading meanwhile, so the client's
    pings and its Close get through. After the handler, the server's
    connection lingers until the client closes its side (`serve_app`): a
    slow reader may still have megabytes in its kernel to read, and closing
    under it, with its pings arriving, would reset the connection and lose
    them (a slow reader lost up to 180 KB of a replay that way).
    """
    await delivery.until_taken()
    delivery.linger(CLOSE_LINGER_S)
    await delivery.close(code, reason)
    with trio.move_on_after(CLOSE_DRAIN_S):
        await trio.sleep_forever()


async def _receive_input(target: IoTarget, delivery: _Delivery) -> None:
    while True:
        message = await websocket.receive()
        if isinstance(message, bytes):
            target.write_stdin(message)
        elif isinstance(message, str):
            size = parse_resize(message)
            if size is None:
                continue
            if target.resize is None:
                await delivery.send_aside(RESIZE_UNSUPPORTED)
            else:
                target.resize(*size)
        # None is quart's rendering of an empty binary frame: nothing to write.


async def _send_output(
    session: Session, target: IoTarget, cursor: int, state: AppState, delivery: _Delivery
) -> bool:
    """Replay then stream the target's chunks (`runnerd.session.reader`),
    each gap as a `gap` frame in its place (`buffer_evicted` once,
    `output_lost` per lost-output mark). True when the stream ended (the
    session terminal, or the app gone) and everything was sent; False when
    the daemon is shutting down."""
    metrics: Metrics = state.metrics
    async with open_reader(target.ring, target.changes, cursor, state.closing) as reader:
        async for part in reader:
            if isinstance(part, Items):
                await delivery.send_chunks(part.entries)
            elif part is EVICTED:
                metrics.replay_gap("websocket")
                await delivery.send(GAP_MESSAGE)
            elif part is LOST:
                await delivery.send(LOST_MESSAGE)
        return reader.finished


async def _serve_channel(
    session: Session, target: IoTarget, last_seq: int, state: AppState
) -> None:
    """An accepted channel from `seq` to its close: the sender here, the
    receiver and the stall watch beside it."""
    delivery = _Delivery(probe_of(websocket.scope))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_input, target, delivery)
        nursery.start_soon(_watch_stall, delivery)
        await delivery.send(target.seq_frame(last_seq))
        ended = await _send_output(session, target, last_seq, state, delivery)
        gone = None if session.is_terminal else target.gone_reason()
        if ended and gone is not None:
            await _close_when_taken(delivery, 4404, gone)
        elif ended:
            await _close_when_taken(delivery, 1000, "session terminal")
        else:
            await _close_when_taken(delivery, 1001, "runnerd is shutting down")
        nursery.cancel_scope.cancel()


class _Refusal(NamedTuple):
    code: int
    reason: str


async def _admit(state: AppState, session_id: str) -> tuple[Session, IoTarget] | _Refusal:
    """The session and target a socket is for, or its refusal (the close
    code and reason), checked in this order: origin or host (4403), the session
    (4404), the app (4404), nothing to replay on a terminal session (4410)."""
    refusal = edge_refusal(
        request_host(websocket.scope, websocket.headers.get("host")),
        websocket.headers.get("origin"),
        server_address(websocket.scope),
        state.config,
    )
    if refusal is not None:
        return _Refusal(4403, refusal[0])
    try:
        session = await state.sessions.lookup(session_id)
    except RunnerdError as exc:
        return _Refusal(4000 + exc.status_hint, exc.message)
    target = io_target(session, websocket.args.get("app"))
    if isinstance(target, str):
        return _Refusal(4404, target)
    last_seq = parse_cursor(websocket.args.get("lastSeq"))
    pending = target.ring.since(last_seq)
    held = target.ring.holding  # output there, its seqs not yet reserved on disk
    if is_terminal(session.status) and not (pending.items or pending.lost or held):
        return _Refusal(4410, "session terminal and nothing buffered after lastSeq")
    return session, target


def register_io_route(app: QuartTrio, state: AppState) -> None:
    async def session_io(session_id: str) -> None:
        admitted = await _admit(state, session_id)
        if isinstance(admitted, _Refusal):
            await websocket.accept()
            await _close(*admitted)
            return
        session, target = admitted
        last_seq = parse_cursor(websocket.args.get("lastSeq"))
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
            await websocket.accept()
            with state.metrics.subscriber("websocket"), session.subscribed():
                await _serve_channel(session, target, last_seq, state)
        finally:
            slot.release()

    app.add_websocket("/v1/sessions/<session_id>/io", view_func=session_io)
