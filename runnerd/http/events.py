"""`GET /v1/sessions/{id}/events`: the session's events as Server-Sent Events.

Owns the SSE framing of the session's stream reader
(`runnerd.session.reader`: replay, then live). Each event is one frame
(`id: n`, `event: type`, `data: json`); a resume point older than the buffer
first gets a `gap` frame with no id; a `: heartbeat` comment keeps idle
proxies from cutting the stream. The stream ends right after it delivers a
terminal status (at once when the session was already terminal and nothing
is left to replay) and at once when the daemon shuts down. Each stream holds
a subscriber slot (`runnerd.http.streams`): over the session's or the
listener's bound the request is refused 429 / 503 instead. An open stream
holds `session.subscribed()` (a watch session's idle suspend counts it). A
`suspended` status is not terminal: the stream goes on over it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING

from quart import Response, request
from quart.wrappers.response import ResponseBody
from quart_trio import QuartTrio

from runnerd.contract import RunEvent
from runnerd.http.streams import StreamSlot, released_at_end, stream_slot
from runnerd.metrics import Metrics
from runnerd.session.reader import Gap, Items, StreamReader, open_reader

if TYPE_CHECKING:
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


def _frames_of(items: Items[RunEvent]) -> Iterator[bytes]:
    """One read's events as SSE frames, joined up to about `BATCH_BYTES`
    per write: a late reader of thousands of events cost the daemon a send
    (chunk header, lock, syscall) for each."""
    batch: list[bytes] = []
    size = 0
    for event_id, event in items.entries:
        frame = format_event(event_id, event)
        batch.append(frame)
        size += len(frame)
        if size >= BATCH_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


async def stream_events(reader: StreamReader[RunEvent]) -> AsyncIterator[bytes]:
    """SSE frames for what `reader` hands out, until it ends (the session's
    terminal status delivered, or the daemon shutting down)."""
    async for part in reader:
        if isinstance(part, Items):
            for frame in _frames_of(part):
                yield frame
        elif isinstance(part, Gap):
            yield GAP_FRAME  # an event ring only ever says buffer_evicted
        else:
            yield HEARTBEAT_FRAME


class _EventsBody(ResponseBody):
    """The response body: a reader of the session's events, open (with its
    shutdown watch, `open_reader`) while quart iterates the body, which it
    does inside `async with body`. The stream slot is released when the
    frames end or the body is closed, whichever comes first."""

    def __init__(
        self, session: Session, cursor: int, state: AppState, slot: StreamSlot, heartbeat_s: float
    ) -> None:
        self._session, self._cursor, self._state = session, cursor, state
        self._slot, self._heartbeat_s = slot, heartbeat_s
        self._stack = AsyncExitStack()
        self._frames: AsyncIterator[bytes] | None = None

    async def __aenter__(self) -> _EventsBody:
        state = self._state
        async with AsyncExitStack() as stack:
            # Held while the stream is open: a watch session's idle suspend counts it.
            stack.enter_context(self._session.subscribed())
            reader = await stack.enter_async_context(
                open_reader(
                    self._session.events,
                    self._session,
                    self._cursor,
                    state.closing,
                    heartbeat_s=self._heartbeat_s,
                )
            )
            frames = released_at_end(stream_events(reader), self._slot)
            if state.metrics.enabled:
                frames = counted_sse(frames, state.metrics)
            self._frames = frames
            stack.push_async_callback(aclose_frames, frames)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, exc_type: type, exc_value: BaseException, tb: TracebackType) -> None:
        # Never suppresses: the stack only closes (the frames, then the reader).
        await self._stack.__aexit__(exc_type, exc_value, tb)

    def __aiter__(self) -> AsyncIterator[bytes]:
        assert self._frames is not None, "iterated outside `async with`"
        return self._frames


async def aclose_frames(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        await aclose()


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
            await aclose_frames(frames)


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
        body = _EventsBody(session, cursor, state, slot, heartbeat_s)
        response = Response(body, 200, SSE_HEADERS)
        # The default RESPONSE_TIMEOUT (60 s) would cut a live stream.
        response.timeout = None
        return response

    app.add_url_rule("/v1/sessions/<session_id>/events", view_func=session_events, methods=["GET"])
