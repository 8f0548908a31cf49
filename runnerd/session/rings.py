"""A session's replay buffers: byte-capped rings with ids. Pure: no trio, no IO.

Owns `EventRing` (run events, each sized by its compact JSON length) and
`ByteRing` (PTY bytes, in chunks of at most 64 KiB), and `Replay`, what a
reader gets from them. Each ring is capped at `runner.replay_buffer_bytes`
(README.md, "Configuration").

Ring invariants (both rings):
- Ids/seqs start at 1 and grow by one per entry; they are never reused, even
  after eviction. Retained ids are therefore contiguous: `first..last`.
- Eviction drops the oldest entries while the total size is over the cap, but
  always keeps the newest entry, even if it alone is over the cap (a client
  must always be able to see the latest event).
- `since(after)` answers everything with a larger id, and `gap=True` iff some
  entry with an id larger than `after` was already evicted.
- A ring may start above a floor (a session a previous daemon ran): its ids
  then continue at `floor + 1`, and `1..floor` count as evicted, so a reader
  from anywhere below the floor is told of the gap and never gets an id twice.

Publication (both rings): entries above `limit` are held back from readers
(`since` answers as if they were not there yet, `holding` says so) until the
limit moves; ids are issued as always. The session's record sets it to the
ids a successor daemon could not reuse, i.e. those the state file on disk
reserves (`runnerd.session.statefile`): what no client has seen may be
reused, what one has seen never is.

Lost-output marks (`ByteRing` only): a backend that could not deliver some
of the workload's output marks the place (`mark_lost`): after the newest seq,
between it and the next. A mark takes no seq (seqs stay what clients resume
from) and no bytes of the cap; it has its own number, from 1, never reused,
so a reader that was told of it is not told again (`since(after, after_mark)`).
Marks at one place merge into one (the newest number). A reader from at or
before a mark's place gets it in order: after the chunk at its place, before
the next (`Replay.in_order`). A mark lives as long as its place is retained
or is the evicted frontier (`first - 1`); marks deeper in the evicted part
go with it (the reader is told of that eviction instead).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Generic, TypeVar

from runnerd.contract import RunEvent

CHUNK_BYTES = 64 * 1024

X = TypeVar("X")


@dataclass(frozen=True)
class Lost:
    """A lost-output mark: output after seq `after_seq` is missing; `mark` is
    its own number (from 1, never reused)."""

    after_seq: int
    mark: int


@dataclass(frozen=True)
class Replay(Generic[X]):
    """What a reader gets from `since(after)`: `(id, item)` pairs in id order.

    `gap` is True when entries after `after` were evicted before this read, so
    the reader must tell its client that something is missing (`event: gap`,
    `{"type":"gap"}`) before sending `items`. `evicted_to`: every id up to it
    is gone; a reader that told its client of the gap continues from there
    (with no items, e.g. a ring that starts above a floor and holds nothing
    yet, asking again from `after` would report the same gap forever).
    `lost`: the lost-output marks the reader was not told of yet, oldest
    first (`ByteRing` only); `in_order` puts them among the items.
    """

    gap: bool
    items: list[tuple[int, X]]
    evicted_to: int = 0
    lost: tuple[Lost, ...] = ()

    def in_order(self) -> list[tuple[int, X] | Lost]:
        """`items` and `lost` merged: each mark right after the item at its
        place (or before every item, when its place precedes them)."""
        if not self.lost:
            return list(self.items)
        merged: list[tuple[int, X] | Lost] = []
        marks = list(self.lost)
        for seq, item in self.items:
            while marks and marks[0].after_seq < seq:
                merged.append(marks.pop(0))
            merged.append((seq, item))
        merged.extend(marks)
        return merged


class _Ring(Generic[X]):
    """A byte-capped FIFO with contiguous ids. Subclasses say how big an item is.

    `floor`: the first id is `floor + 1`; ids up to the floor count as evicted.
    """

    def __init__(self, cap_bytes: int, floor: int = 0) -> None:
        if cap_bytes < 0:
            raise ValueError(f"cap_bytes must be >= 0, got {cap_bytes}")
        if floor < 0:
            raise ValueError(f"floor must be >= 0, got {floor}")
        self._cap_bytes = cap_bytes
        self._items: deque[X] = deque()
        self._total_bytes = 0
        self._last = floor
        # Readers get nothing above it (None: no bound); see "Publication".
        self.limit: int | None = None

    @property
    def last_id(self) -> int:
        """The id of the newest entry ever appended (the floor when none)."""
        return self._last

    @property
    def first(self) -> int:
        """The id of the oldest entry retained (`last + 1` when none is)."""
        return self._last - len(self._items) + 1

    def retained(self) -> list[X]:
        """Every retained item, oldest first (ids `first..last`)."""
        return list(self._items)

    @property
    def published(self) -> int:
        """The newest id a reader may be given: the newest, or `limit`."""
        return self._last if self.limit is None else min(self._last, self.limit)

    @property
    def holding(self) -> bool:
        """Entries are held back from readers (above `limit`)."""
        return self._last > self.published

    @property
    def total_bytes(self) -> int:
        """Bytes currently retained (by this ring's own measure)."""
        return self._total_bytes

    def __len__(self) -> int:
        return len(self._items)

    def _push(self, item: X, size: int) -> int:
        self._items.append(item)
        self._total_bytes += size
        self._last += 1
        self._record_size(size)
        # `len > 1`: the newest entry is never evicted, whatever its size.
        while self._total_bytes > self._cap_bytes and len(self._items) > 1:
            self._total_bytes -= self._drop_oldest()
        return self._last

    def _record_size(self, size: int) -> None:
        """Hook for rings that cannot recompute an item's size cheaply."""

    def _drop_oldest(self) -> int:
        """Remove the oldest item; return its size."""
        raise NotImplementedError

    def _since(self, after: int) -> Replay[X]:
        first = self._last - len(self._items) + 1
        after = max(after, 0)
        # Evicted ids are exactly 1..first-1; the reader lost some iff any of
        # them is > after.
        gap = after < first - 1
        shown = self.published
        count = shown - max(after, first - 1)
        if count <= 0:
            return Replay(gap, [], first - 1)
        # Take from the right: a caught-up live reader asks for a short tail,
        # and that must not cost a walk over the whole buffer.
        held = self._last - shown
        tail = list(islice(reversed(self._items), held, held + count))
        tail.reverse()
        start = shown - count + 1
        return Replay(gap, list(zip(range(start, shown + 1), tail, strict=True)), first - 1)


class EventRing(_Ring[RunEvent]):
    """Run events with SSE ids. Each event is sized by `json.dumps` (compact)."""

    def __init__(self, cap_bytes: int, floor: int = 0) -> None:
        super().__init__(cap_bytes, floor)
        # Sizes kept alongside: re-serialising on eviction would double the cost.
        self._sizes: deque[int] = deque()

    def append(self, event: RunEvent) -> int:
        """Append `event`; return its id."""
        size = len(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode())
        return self._push(event, size)

    def since(self, after: int, after_mark: int = 0) -> Replay[RunEvent]:
        """Events after `after` (`after_mark`: the `ByteRing` signature; an
        event ring has no lost-output marks)."""
        return self._since(after)

    def _record_size(self, size: int) -> None:
        self._sizes.append(size)

    def _drop_oldest(self) -> int:
        self._items.popleft()
        return self._sizes.popleft()


class ByteRing(_Ring[bytes]):
    """PTY output as chunks of at most `CHUNK_BYTES`, each with its own seq.

    Every `append` makes at least one chunk of its own (writes are never
    coalesced: a seq is what a client resumes from, so it must name bytes
    that were delivered together). Per-chunk overhead is one `bytes` object.
    Lost-output marks (module docstring) are kept beside the chunks, at
    most one per place, so there are never more of them than chunks + 1.
    """

    def __init__(self, cap_bytes: int, floor: int = 0) -> None:
        super().__init__(cap_bytes, floor)
        self._lost: deque[Lost] = deque()
        self._marks = 0

    @property
    def last_mark(self) -> int:
        """The number of the newest lost-output mark ever made (0 when none)."""
        return self._marks

    def lost_places(self) -> list[int]:
        """The places of the marks retained (seqs, oldest first)."""
        return [m.after_seq for m in self._lost]

    def mark_lost(self) -> int:
        """Mark output as lost after the newest seq; return the mark's number."""
        self._marks += 1
        if self._lost and self._lost[-1].after_seq == self._last:
            self._lost.pop()  # the same place: one mark, told again as the newest
        self._lost.append(Lost(self._last, self._marks))
        return self._marks

    @property
    def last_seq(self) -> int:
        """The seq of the newest chunk ever appended (0 when none)."""
        return self._last

    @staticmethod
    def chunks_for(size: int) -> int:
        """How many seqs `append` of `size` bytes takes."""
        return -(-size // CHUNK_BYTES)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append `data` (split into ≤64 KiB chunks); return the last seq.

        Empty data makes no chunk and returns the current `last_seq`.
        """
        if len(data) <= CHUNK_BYTES:
            if len(data) == 0:
                return self._last
            chunk = data if isinstance(data, bytes) else bytes(data)
            return self._push(chunk, len(chunk))
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_BYTES):
            piece = bytes(view[start : start + CHUNK_BYTES])
            self._push(piece, len(piece))
        return self._last

    def append_chunk(self, chunk: bytes) -> int:
        """Append `chunk` as ONE chunk, whatever its size (a watch app's
        stream byte + up to `CHUNK_BYTES` of payload); return its seq."""
        return self._push(chunk, len(chunk))

    def since(self, after_seq: int, after_mark: int = 0) -> Replay[bytes]:
        """Chunks after `after_seq`, and the lost-output marks at or after it
        numbered above `after_mark` (those the reader was not told of)."""
        replay = self._since(after_seq)
        after_seq = max(after_seq, 0)
        # From the right, as the chunks: a caught-up reader walks no old marks.
        newer: list[Lost] = []
        shown = self.published
        for m in reversed(self._lost):
            if m.after_seq > shown:
                continue  # held back with the chunks before it
            if m.after_seq < after_seq or m.mark <= after_mark:
                break
            newer.append(m)
        lost = tuple(reversed(newer))
        if not lost:
            return replay
        return Replay(replay.gap, replay.items, replay.evicted_to, lost)

    def _drop_oldest(self) -> int:
        evicted_to = self.first  # the frontier once this chunk is gone
        size = len(self._items.popleft())
        while self._lost and self._lost[0].after_seq < evicted_to:
            self._lost.popleft()  # inside the evicted part: its gap says it
        return size
