"""Stream admission: how many SSE and WebSocket subscribers may be live.

Owns the two bounds a stream request passes before it may hold a connection
for as long as it likes (`GET /v1/sessions/{id}/events`, `/io`):

- **Per session**: at most `runner.max_subscribers_per_session` live
  subscribers, SSE and WebSocket together; the next is refused
  `429 too_many_subscribers` (a WebSocket: accepted, then closed 4429).
- **Per listener**: streams hold at most `stream_share(cap)` of a listener's
  `cap` connections; `reserved_connections(cap)` stay for everything else,
  so `/v1/health`, a POST or a DELETE is always served while streams hold
  the rest. The next stream is refused `503 too_many_streams` with a
  `Retry-After` (a WebSocket: closed 4503). A refused request leaves its
  connection idle, so the accept loop may close it to make room.

Resource handling: a request claims its slot with `StreamSlot.claim` and
the slot is released once, by whichever comes first: the route when its
stream ends, or `ListenerApp` when the request's ASGI call ends (a
disconnect, a cancellation, an error, a body never iterated), so no path
leaks one. Claiming is synchronous (check and count with no checkpoint
between), so two requests never both take the last slot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from runnerd.errors import RunnerdError

# The scope key under which `ListenerApp` hands each request its slot.
SCOPE_KEY = "runnerd.stream_slot"
# A listener keeps this fraction of its connections from streams.
_RESERVED_FRACTION = 8
# How soon a client refused for the listener's share may try again: streams
# end on their own (a terminal session, a closed tab), so soon.
RETRY_AFTER_S = 1


class TooManySubscribers(RunnerdError):
    status_hint = 429
    code = "too_many_subscribers"

    def __init__(self, session_id: str, limit: int) -> None:
        # Short: it is also a WebSocket close reason (at most 123 bytes).
        super().__init__(
            f"{limit} live subscribers already, the limit "
            "(runner.max_subscribers_per_session); close one first",
            extra={"limit": limit},
        )
        self.session_id = session_id


class TooManyStreams(RunnerdError):
    status_hint = 503
    code = "too_many_streams"

    def __init__(self, listener: ListenerStreams) -> None:
        super().__init__(
            f"this listener's {listener.limit} stream slots are all live "
            f"({reserved_connections(listener.cap)} of server.max_connections kept for "
            "other requests); retry later",
            extra={"limit": listener.limit},
            headers={"retry-after": str(RETRY_AFTER_S)},
        )


def reserved_connections(cap: int) -> int:
    """Connections of a listener's `cap` that streams may not hold: an
    eighth (health checks and POSTs are short, a few slots serve many), at
    least 1, and never the whole cap (a cap of 1 reserves nothing)."""
    return min(max(1, cap // _RESERVED_FRACTION), cap - 1)


def stream_share(cap: int) -> int:
    """Streams a listener of `cap` connections serves at once."""
    return cap - reserved_connections(cap)


class ListenerStreams:
    """The live streams on one listener, at most `limit` (`stream_share`)."""

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.cap = cap
        self.limit = stream_share(cap)
        self.live = 0


class SubscriberCounts:
    """Live subscribers per session id (an id at zero is dropped: ids are
    never reused, so the table holds only sessions being watched)."""

    def __init__(self) -> None:
        self._live: dict[str, int] = {}

    def live(self, session_id: str) -> int:
        return self._live.get(session_id, 0)

    def add(self, session_id: str, delta: int) -> None:
        count = self._live.get(session_id, 0) + delta
        if count > 0:
            self._live[session_id] = count
        else:
            self._live.pop(session_id, None)


class StreamSlot:
    """One request's claim on both bounds; `release` is idempotent."""

    def __init__(self, listener: ListenerStreams | None) -> None:
        self._listener = listener
        self._held: tuple[SubscriberCounts, str] | None = None

    def claim(self, counts: SubscriberCounts, session_id: str, limit: int) -> None:
        """Count this request as a live subscriber of `session_id`.

        Raises TooManySubscribers (the session has `limit`) or TooManyStreams
        (the listener's share is live); either way nothing is counted.
        """
        if self._held is not None:
            return
        if counts.live(session_id) >= limit:
            raise TooManySubscribers(session_id, limit)
        listener = self._listener
        if listener is not None:
            if listener.live >= listener.limit:
                raise TooManyStreams(listener)
            listener.live += 1
        counts.add(session_id, 1)
        self._held = (counts, session_id)

    def release(self) -> None:
        if self._held is None:
            return
        counts, session_id = self._held
        self._held = None
        counts.add(session_id, -1)
        if self._listener is not None:
            self._listener.live -= 1


def stream_slot(scope: Any) -> StreamSlot:
    """The slot `ListenerApp` put in this request's scope; a slot bound to no
    listener when the app is served without one (in-process tests)."""
    slot = scope.get(SCOPE_KEY)
    return slot if isinstance(slot, StreamSlot) else StreamSlot(None)


async def released_at_end(frames: AsyncIterator[bytes], slot: StreamSlot) -> AsyncIterator[bytes]:
    """`frames`, releasing `slot` as soon as the stream ends or is closed."""
    try:
        async for frame in frames:
            yield frame
    finally:
        slot.release()
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            await aclose()


class ListenerApp:
    """hypercorn's app wrapper for one listener: each request gets a fresh
    `StreamSlot` on `streams` in its scope, released when its call ends."""

    def __init__(self, app: Callable[..., Any], streams: ListenerStreams) -> None:
        self.app = app
        self.streams = streams

    async def __call__(
        self, scope: Any, receive: Any, send: Any, sync_spawn: Any, call_soon: Any
    ) -> None:
        slot = StreamSlot(self.streams)
        scope[SCOPE_KEY] = slot
        try:
            await self.app(scope, receive, send, sync_spawn, call_soon)
        finally:
            slot.release()
