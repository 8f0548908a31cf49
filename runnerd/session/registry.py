"""The session registry and its replay buffers. Pure: no trio, no IO.

Owns the data the `/v1` streams replay from and the rules that keep it
bounded (contract.md, "Session registry semantics"):

- `EventRing`: a session's run events, each sized by its compact JSON length.
- `ByteRing`: a session's PTY bytes, in chunks of at most 64 KiB.
- `SessionRecord`: one session's status, timestamps and its two rings, with
  terminal stickiness enforced in one place.
- `SessionRegistry`: every known session, with capacity, eviction of the
  oldest-exited terminal session, and exit-TTL expiry.

Time is passed in as `now` (epoch seconds) so everything here is testable
without a clock. The IO side (tasks, wake-ups) is `runnerd.sessions`.

Ring invariants (both rings):
- Ids/seqs start at 1 and grow by one per entry; they are never reused, even
  after eviction. Retained ids are therefore contiguous: `first..last`.
- Eviction drops the oldest entries while the total size is over the cap, but
  always keeps the newest entry, even if it alone is over the cap (a client
  must always be able to see the latest event).
- `since(after)` answers everything with a larger id, and `gap=True` iff some
  entry with an id larger than `after` was already evicted.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Generic, Protocol, TypeVar

from runnerd.contract import RunEvent, RunStatus, is_terminal, starting, status_event
from runnerd.errors import RunnerdError

CHUNK_BYTES = 64 * 1024

X = TypeVar("X")


@dataclass(frozen=True)
class Replay(Generic[X]):
    """What a reader gets from `since(after)`: `(id, item)` pairs in id order.

    `gap` is True when entries after `after` were evicted before this read, so
    the reader must tell its client that something is missing (`event: gap`,
    `{"type":"gap"}`) before sending `items`.
    """

    gap: bool
    items: list[tuple[int, X]]


class _Ring(Generic[X]):
    """A byte-capped FIFO with contiguous ids. Subclasses say how big an item is."""

    def __init__(self, cap_bytes: int) -> None:
        if cap_bytes < 0:
            raise ValueError(f"cap_bytes must be >= 0, got {cap_bytes}")
        self._cap_bytes = cap_bytes
        self._items: deque[X] = deque()
        self._total_bytes = 0
        self._last = 0

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
        count = self._last - max(after, first - 1)
        if count <= 0:
            return Replay(gap, [])
        # Take from the right: a caught-up live reader asks for a short tail,
        # and that must not cost a walk over the whole buffer.
        tail = list(islice(reversed(self._items), count))
        tail.reverse()
        start = self._last - count + 1
        return Replay(gap, list(zip(range(start, self._last + 1), tail, strict=True)))


class EventRing(_Ring[RunEvent]):
    """Run events with SSE ids. Each event is sized by `json.dumps` (compact)."""

    def __init__(self, cap_bytes: int) -> None:
        super().__init__(cap_bytes)
        # Sizes kept alongside: re-serialising on eviction would double the cost.
        self._sizes: deque[int] = deque()

    @property
    def last_id(self) -> int:
        """The id of the newest event ever appended (0 when none)."""
        return self._last

    def append(self, event: RunEvent) -> int:
        """Append `event`; return its id."""
        size = len(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode())
        return self._push(event, size)

    def since(self, after: int) -> Replay[RunEvent]:
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
    """

    @property
    def last_seq(self) -> int:
        """The seq of the newest chunk ever appended (0 when none)."""
        return self._last

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

    def since(self, after_seq: int) -> Replay[bytes]:
        return self._since(after_seq)

    def _drop_oldest(self) -> int:
        return len(self._items.popleft())


def format_timestamp(epoch_s: float) -> str:
    """`2026-11-29T16:00:00.123Z`: ISO-8601 UTC with milliseconds, as the Telo runner."""
    moment = datetime.fromtimestamp(epoch_s, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class SessionRecord:
    """One session's state: status, timestamps, event and PTY rings.

    Starts `starting`, with that status already emitted as event 1. Terminal
    stickiness lives here: once the status is `exited`, `failed` or `stopped`,
    every later status, event and output is dropped.
    """

    def __init__(self, session_id: str, now: float, replay_buffer_bytes: int) -> None:
        self.id = session_id
        self.created_at = now
        self.created_at_iso = format_timestamp(now)
        self.exited_at: float | None = None
        self.events = EventRing(replay_buffer_bytes)
        self.pty = ByteRing(replay_buffer_bytes)
        self.status: RunStatus = starting()
        self.events.append(status_event(self.status))

    @property
    def record(self) -> SessionRecord:
        """A record is its own registry entry (see `RegistryEntry`)."""
        return self

    @property
    def is_terminal(self) -> bool:
        return is_terminal(self.status)

    @property
    def exited_at_iso(self) -> str | None:
        return None if self.exited_at is None else format_timestamp(self.exited_at)

    def set_status(self, status: RunStatus, now: float) -> bool:
        """Move to `status` and emit it as an event; False (and no change) if
        the session is already terminal. A terminal status records `exited_at`."""
        if self.is_terminal:
            return False
        self.status = status
        if is_terminal(status):
            self.exited_at = now
        self.events.append(status_event(status))
        return True

    def emit(self, event: RunEvent) -> int | None:
        """Append a non-status event; return its id, or None once terminal.

        Raises:
            ValueError: `event` is a status event (use `set_status`, which
                keeps the status and the stream in step).
        """
        if event["type"] == "status":
            raise ValueError("status events go through set_status")
        if self.is_terminal:
            return None
        return self.events.append(event)

    def output(self, data: bytes) -> int | None:
        """Append PTY bytes; return the last seq, or None once terminal or empty."""
        if self.is_terminal or not data:
            return None
        return self.pty.append(data)


class RegistryFull(RunnerdError):
    """Every slot is held by a live session; nothing was changed."""

    status_hint = 409
    code = "too_many_sessions"

    def __init__(self, max_sessions: int) -> None:
        super().__init__(
            f"all {max_sessions} session slots are held by live sessions; "
            "stop one or try again later"
        )
        self.max_sessions = max_sessions


class RegistryEntry(Protocol):
    """What the registry holds: anything that carries a `SessionRecord`.

    The session manager stores its `Session` objects here directly, so this
    registry is the one map of sessions and eviction or expiry cannot leave a
    second copy behind; a bare `SessionRecord` is an entry too.
    """

    @property
    def record(self) -> SessionRecord: ...


E = TypeVar("E", bound=RegistryEntry)


class SessionRegistry(Generic[E]):
    """Every known session by id: live ones, and terminal ones kept for replay.

    Entries are kept in registration order. Capacity counts both. Terminal
    sessions stay until `exit_ttl_s` after their exit (`expire`), or until a
    new session needs the slot (`add` evicts the oldest exit first). Only
    live sessions make `add` fail.
    """

    def __init__(self, max_sessions: int, exit_ttl_s: float) -> None:
        self._entries: dict[str, E] = {}
        self.max_sessions = max_sessions
        self.exit_ttl_s = exit_ttl_s
        self.reconfigure(max_sessions=max_sessions, exit_ttl_s=exit_ttl_s)

    def reconfigure(
        self, *, max_sessions: int | None = None, exit_ttl_s: float | None = None
    ) -> None:
        """Change the limits; existing sessions stay until the next add/expire."""
        if max_sessions is not None:
            if max_sessions < 1:
                raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
            self.max_sessions = max_sessions
        if exit_ttl_s is not None:
            if exit_ttl_s < 0:
                raise ValueError(f"exit_ttl_s must be >= 0, got {exit_ttl_s}")
            self.exit_ttl_s = exit_ttl_s

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[E]:
        return iter(list(self._entries.values()))

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._entries

    @property
    def live_count(self) -> int:
        return sum(1 for e in self._entries.values() if not e.record.is_terminal)

    def get(self, session_id: str) -> E | None:
        return self._entries.get(session_id)

    def add(self, entry: E, now: float) -> list[str]:
        """Register `entry`, evicting the oldest-exited terminal sessions if
        the registry is full; return the evicted ids (oldest exit first).

        Raises:
            RegistryFull: too many live sessions; nothing was evicted.
            ValueError: the id is already registered.
        """
        record = entry.record
        if record.id in self._entries:
            raise ValueError(f"session {record.id} is already registered")
        need = len(self._entries) + 1 - self.max_sessions
        evicted: list[str] = []
        if need > 0:
            terminal = sorted(
                (e.record for e in self._entries.values() if e.record.is_terminal),
                key=lambda r: (r.exited_at or 0.0),
            )
            if len(terminal) < need:
                raise RegistryFull(self.max_sessions)
            for victim in terminal[:need]:
                del self._entries[victim.id]
                evicted.append(victim.id)
        self._entries[record.id] = entry
        return evicted

    def adopt(self, entry: E) -> None:
        """Register a session that already exists elsewhere (a workload a
        previous daemon left), past the capacity check: it runs whether or
        not it fits, and only new sessions are refused until it ends.

        Raises:
            ValueError: the id is already registered.
        """
        record = entry.record
        if record.id in self._entries:
            raise ValueError(f"session {record.id} is already registered")
        self._entries[record.id] = entry

    def remove(self, session_id: str) -> E | None:
        return self._entries.pop(session_id, None)

    def expire(self, now: float) -> list[str]:
        """Drop terminal sessions that exited `exit_ttl_s` or more ago; return their ids."""
        expired = [
            r.id
            for r in (e.record for e in self._entries.values())
            # The same sum as `next_expiry`, so a timer set from it always finds work.
            if r.exited_at is not None and r.exited_at + self.exit_ttl_s <= now
        ]
        for session_id in expired:
            del self._entries[session_id]
        return expired

    def next_expiry(self) -> float | None:
        """When the next terminal session is due to expire (epoch s), or None."""
        exits = [at for e in self._entries.values() if (at := e.record.exited_at) is not None]
        return min(exits) + self.exit_ttl_s if exits else None
