"""One stream reader: a ring from a cursor, then live, until the session ends.

Owns the loop both `/v1` streams run (`runnerd.http.events`, SSE over the
event ring; `runnerd.http.io`, the WebSocket PTY channel over the byte
ring): read the ring's `since(cursor)`, hand out what it holds, wait for
the session to change, read again. The streams only frame what it hands
out. A `StreamReader` yields `Part`s:

- `Items`: one read's entries (`(id, item)`, id order) up to the next gap;
- `Gap`: something is missing here: `EVICTED` (`buffer_evicted`: the ring
  dropped entries after the cursor; told once, the cursor then moves past
  them) or `LOST` (`output_lost`: a lost-output mark in its place, each
  told once);
- `HEARTBEAT`: nothing was handed out for `heartbeat_s` (SSE keep-alives).

It ends (`finished` True) once the session is terminal and the ring holds
nothing more for it, held back or not (so a terminal status event is
always delivered first), or at `stop()` (the daemon is shutting down; `finished` False).

The ring is anything with `since(after, after_mark)` (`Ring`): the event
ring, a byte ring, or another ring of the same session (one per app, say),
each read by its own reader against the same wake-up (`Changes`).

Waiting: after a read that found nothing, the reader parks on
`changes.wait_change()` under one `trio.move_on_at` (the heartbeat's
deadline), with no checkpoint between the read and the park: a change made
after the read always wakes it (the session wakes every parked reader on
each change), so nothing is lost or handed out twice. No task and no
nursery per wait; `open_reader` runs one task per stream, the shutdown
watch, in the caller's nursery.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

import trio

from runnerd.session.rings import Lost, Replay

X = TypeVar("X")


class Ring(Protocol[X]):
    """What a reader reads (`EventRing`, `ByteRing`): `since(after,
    after_mark)`, and `holding`, whether entries issued are held back from
    readers for now (their ids not yet reserved on disk)."""

    def since(self, after: int, after_mark: int = 0) -> Replay[X]: ...

    @property
    def holding(self) -> bool: ...


class Changes(Protocol):
    """The session's wake-up, as a reader waits on it (`Session`).

    `wait_change` returns after the next change (it may return early; the
    reader reads again), and parks its caller before any other task runs.
    """

    @property
    def is_terminal(self) -> bool: ...

    async def wait_change(self) -> None: ...


@dataclass(frozen=True)
class Items(Generic[X]):
    """Entries of one read, in id order, with no gap between them."""

    entries: list[tuple[int, X]]


@dataclass(frozen=True)
class Gap:
    """Something is missing at this point of the stream (the wire's words)."""

    reason: Literal["buffer_evicted", "output_lost"]


@dataclass(frozen=True)
class Heartbeat:
    """Nothing was handed out for the heartbeat interval."""


EVICTED = Gap("buffer_evicted")
LOST = Gap("output_lost")
HEARTBEAT = Heartbeat()

Part = Items[X] | Gap | Heartbeat


class StreamReader(Generic[X]):
    """A ring read from `cursor` (the last id the client has; 0: none) on.

    `async for part in reader` (or `await reader.next()`) hands out the
    stream's parts (module docstring); iteration ends when the stream
    does. `cursor` is the last id handed out (or skipped past by a gap).

    Cancellation: `next()` is cancellable; a cancelled call loses nothing
    (what a read found stays queued for the next call).
    """

    def __init__(
        self,
        ring: Ring[X],
        changes: Changes,
        cursor: int = 0,
        *,
        heartbeat_s: float = math.inf,
    ) -> None:
        self.cursor = cursor
        self.finished = False
        self._told = 0  # the newest lost-output mark handed out
        self._ring = ring
        self._changes = changes
        self._heartbeat_s = heartbeat_s
        self._parts: deque[Part[X]] = deque()
        self._stopped = False
        self._wait: trio.CancelScope | None = None
        self._quiet_since = trio.current_time()

    def stop(self) -> None:
        """End the stream: a parked `next()` returns None at once; what the
        last read found is still handed out first (as the loops this
        replaced finished the replay they were sending). Idempotent."""
        self._stopped = True
        if self._wait is not None:
            self._wait.cancel()

    def __aiter__(self) -> StreamReader[X]:
        return self

    async def __anext__(self) -> Part[X]:
        part = await self.next()
        if part is None:
            raise StopAsyncIteration
        return part

    async def next(self) -> Part[X] | None:
        """The next part, waiting for one; None once the stream is over."""
        while not self._parts:
            if self._stopped or self.finished:
                return None
            if self._read():
                break
            if self._changes.is_terminal and not self._ring.holding:
                self.finished = True
                return None
            if await self._wait_quietly():
                self._quiet_since = trio.current_time()
                return HEARTBEAT
        self._quiet_since = trio.current_time()
        return self._parts.popleft()

    def _read(self) -> bool:
        """Queue what the ring holds after the cursor; True if anything."""
        replay = self._ring.since(self.cursor, self._told)
        if replay.gap:
            self._parts.append(EVICTED)
            self.cursor = max(self.cursor, replay.evicted_to)  # told once, never again
        run: list[tuple[int, X]] = []
        for entry in replay.in_order():
            if isinstance(entry, Lost):
                if run:
                    self._parts.append(Items(run))
                    run = []
                self._parts.append(LOST)
                self._told = entry.mark
            else:
                run.append(entry)
                self.cursor = entry[0]
        if run:
            self._parts.append(Items(run))
        return bool(self._parts)

    async def _wait_quietly(self) -> bool:
        """Park until a change, `stop()`, or the heartbeat's deadline; True
        when the deadline passed (and no stop came)."""
        # No checkpoint since `_read`: load-bearing (module docstring).
        with trio.move_on_at(self._quiet_since + self._heartbeat_s) as scope:
            self._wait = scope
            try:
                await self._changes.wait_change()
            finally:
                self._wait = None
        return scope.cancelled_caught and not self._stopped


async def _stop_at(reader: StreamReader[X], closing: trio.Event) -> None:
    await closing.wait()
    reader.stop()


@asynccontextmanager
async def open_reader(
    ring: Ring[X],
    changes: Changes,
    cursor: int,
    closing: trio.Event,
    *,
    heartbeat_s: float = math.inf,
) -> AsyncIterator[StreamReader[X]]:
    """A `StreamReader` that `closing` stops (the daemon's shutdown).

    Resource handling: one task, the shutdown watch, runs while the block
    does; it is cancelled on exit.

    Error handling: what the block raises comes out as it was raised, never
    inside an ExceptionGroup.
    """
    reader = StreamReader(ring, changes, cursor, heartbeat_s=heartbeat_s)
    if closing.is_set():
        reader.stop()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_at, reader, closing)
            try:
                yield reader
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The watch never raises: this is the caller's block's one exception,
        # handed back as it was raised (no ExceptionGroup crosses this line).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise
