"""`GET /v1/sessions/{id}/events`: the session's events as Server-Sent Events.

Owns the SSE framing and the replay-then-live loop. Each event is one frame
(`id: n`, `event: type`, `data: json`); a resume point older than the buffer
first gets a `gap` frame with no id; a `: heartbeat` comment keeps idle
proxies from cutting the stream. The stream ends right after it delivers a
terminal status (at once when the session was already terminal and nothing
is left to replay) and at once when the daemon shuts down. Each stream holds
a subscriber slot (`runnerd.http.streams`): over the session's or the
listener's bound the request is refused 429 / 503 instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from runnerd.contract import RunEvent, is_terminal
from runnerd.http.streams import released_at_end, stream_slot
from runnerd.http.waiting import Wake, wait_for_change
from runnerd.metrics import Metrics

if TYPE_CHECKING:
    import trio

    from runnerd.http.state import AppState
    from runnerd.session.manager import Session

GAP_FRAME = b'event: gap\ndata: {"reason":"buffer_evicted"}\n\n'
HEARTBEAT_FRAME = b": heartbeat\n\n"
DEFAULT_HEARTBEAT_S = 20.0
# Replayed frames are joined up to about this much per write.
BATCH_BYTES = 64 * 1024

SSE_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache, no-transform",
    "x-accel-buffering": "no",
}


def format_event(event_id: int, event: RunEvent) -> bytes:
    """One SSE frame. JSON never contains a raw newline, so `data` is one line."""
    data = json.dumps(event, separators=(",", ":"))
    return f"id: {event_id}\nevent: {event['type']}\ndata: {data}\n\n".encode()


def parse_cursor(raw: str | None) -> int:
    """A client's resume point (SSE `Last-Event-ID`/`lastEventId`, WebSocket
    `lastSeq`); absent or not a non-negative integer → 0.

    A garbled cursor counts as 0 (replay everything): such a client is better
    served by a full replay than by an error.
    """
    try:
        return max(int((raw or "0").strip()), 0)
    except ValueError:
        return 0


def _is_terminal_event(event: RunEvent) -> bool:
    return event["type"] == "status" and is_terminal(event["status"])


async def stream_events(
    session: Session, cursor: int, closing: trio.Event, heartbeat_s: float
) -> AsyncIterator[bytes]:
    """Yield SSE frames from after `cursor` until the session's terminal status.

    Never yields inside a cancel scope: waiting happens in `wait_for_change`,
    which returns before the next frame is yielded.
    """
    while not closing.is_set():
        replay = session.events.since(cursor)
        if replay.gap:
            yield GAP_FRAME
            cursor = max(cursor, replay.evicted_to)  # told once, never again
        # A replay goes out in batches, not a write per event: a late reader
        # of thousands of events cost the daemon a send (chunk header, lock,
        # syscall) for each.
        batch: list[bytes] = []
        size = 0
        for event_id, event in replay.items:
            frame = format_event(event_id, event)
            batch.append(frame)
            size += len(frame)
            cursor = event_id
            if _is_terminal_event(event):
                yield b"".join(batch)
                return
            if size >= BATCH_BYTES:
                yield b"".join(batch)
                batch, size = [], 0
        if batch:
            yield b"".join(batch)
        if replay.gap or replay.items:
            continue  # more may have arrived while we were sending
        if is_terminal(session.status):
            return

        def has_news(after: int = cursor) -> bool:
            return session.events.last_id > after or is_terminal(session.status)

        wake = await wait_for_change(session, has_news, closing, heartbeat_s)
        if wake is Wake.TIMEOUT:
            yield HEARTBEAT_FRAME


async def counted_sse(frames: AsyncIterator[bytes], metrics: Metrics) -> AsyncIterator[bytes]:
    """`frames`, with the reader counted live (and each `gap` frame counted)
    until the stream ends or is dropped, closing `frames` then too."""
    with metrics.subscriber("sse"):
        try:
            async for frame in frames:
                if frame == GAP_FRAME:
                    metrics.replay_gap("sse")
                yield frame
        finally:
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:
                await aclose()


def register_events_route(app: QuartTrio, state: AppState, *, heartbeat_s: float) -> None:
    async def session_events(session_id: str) -> Response:
        session = await state.sessions.lookup(session_id)
        # The header wins over the query (a reconnecting EventSource sends it);
        # an empty one is absent (a proxy or client that always sends it).
        raw = request.headers.get("last-event-id", "").strip() or None
        cursor = parse_cursor(raw if raw is not None else request.args.get("lastEventId"))
        # Last before the answer: nothing below may fail and leave it claimed.
        slot = stream_slot(request.scope)
        slot.claim(state.subscribers, session.id, state.config.runner.max_subscribers_per_session)
        frames = released_at_end(stream_events(session, cursor, state.closing, heartbeat_s), slot)
        body = counted_sse(frames, state.metrics) if state.metrics.enabled else frames
        response = Response(body, 200, SSE_HEADERS)
        # The default RESPONSE_TIMEOUT (60 s) would cut a live stream.
        response.timeout = None
        return response

    app.add_url_rule("/v1/sessions/<session_id>/events", view_func=session_events, methods=["GET"])
