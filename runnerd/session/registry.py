"""The session registry and its replay buffers. Pure: no trio, no IO.

Owns the data the `/v1` streams replay from and the rules that keep it
bounded (`runner.max_sessions`, `exit_ttl_seconds`, `replay_buffer_bytes`;
README.md, "Configuration"):

- `EventRing` / `ByteRing` (`runnerd.session.rings`): a session's run events
  and PTY bytes.
- `SessionRecord`: one session's status, timestamps and its two rings, with
  terminal stickiness enforced in one place.
- `SessionRegistry`: every known session, with capacity, eviction of the
  session that stopped being live longest ago (terminal, or a suspended
  watch session), and exit-TTL expiry.

Time is passed in as `now` (epoch seconds) so everything here is testable
without a clock. The IO side (tasks, wake-ups) is `runnerd.session.manager`.

The rings themselves, with their invariants, are `runnerd.session.rings`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, Protocol, TypeVar

from runnerd.contract import RunEvent, RunStatus, is_terminal, starting, status_event
from runnerd.errors import RunnerdError
from runnerd.session.rings import CHUNK_BYTES, ByteRing, EventRing, Lost, Replay

__all__ = [
    "CHUNK_BYTES",
    "ByteRing",
    "EventRing",
    "Lost",
    "RegistryEntry",
    "RegistryFull",
    "Replay",
    "Reserver",
    "Resumed",
    "SessionRecord",
    "SessionRegistry",
    "format_timestamp",
]


def format_timestamp(epoch_s: float) -> str:
    """`2026-11-29T16:00:00.123Z`: ISO-8601 UTC with milliseconds, as the Telo runner."""
    moment = datetime.fromtimestamp(epoch_s, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class Reserver(Protocol):
    """Where a record claims its ids before readers get them (a state file
    the next daemon reads, so it never reuses one a client has seen).

    `claim` is called with the highest event id and PTY seq about to be
    issued, before they are; synchronous, it never blocks (a write it needs
    happens elsewhere, later). `covered`: the highest (event id, PTY seq) a
    reader may be given now (None: any); the record holds back the rest
    (the rings' `limit`). `on_covered`, set by the record, is called when
    `covered` moves.
    """

    on_covered: Callable[[], None]

    def claim(self, last_event_id: int, last_seq: int) -> None: ...

    @property
    def covered(self) -> tuple[int, int] | None: ...


@dataclass(frozen=True)
class Resumed:
    """What a record continues from when a previous daemon ran its session:
    ids continue above the floors (those up to them count as evicted), and
    the replay the previous daemon saved follows them (contiguous ids)."""

    event_floor: int
    seq_floor: int
    events: tuple[RunEvent, ...] = ()
    chunks: tuple[bytes, ...] = ()
    # Where output was lost (`ByteRing.mark_lost`): seqs from `seq_floor`
    # (before the first chunk) to the last chunk's.
    lost: tuple[int, ...] = ()


class SessionRecord:
    """One session's state: status, timestamps, event and PTY rings.

    Starts `starting`, with that status already emitted as event 1 (unless
    `resumed`: then its rings continue a previous daemon's, and the status,
    `starting` until set, has no event yet). Terminal stickiness lives here:
    once the status is `exited`, `failed` or `stopped`, every later status,
    event and output is dropped. `reserver`, when given, is told of every id
    before it is issued, and readers get only the ids it covers.
    """

    def __init__(
        self,
        session_id: str,
        now: float,
        replay_buffer_bytes: int,
        *,
        reserver: Reserver | None = None,
        resumed: Resumed | None = None,
    ) -> None:
        self.id = session_id
        self.created_at = now
        self.created_at_iso = format_timestamp(now)
        self.exited_at: float | None = None
        # When a watch session was suspended (None: it is not): a suspended
        # session may be evicted as a terminal one is, by this time.
        self.dormant_at: float | None = None
        self.status: RunStatus = starting()
        if resumed is None:
            self.events = EventRing(replay_buffer_bytes)
            self.pty = ByteRing(replay_buffer_bytes)
        else:
            self.events = EventRing(replay_buffer_bytes, resumed.event_floor)
            self.pty = ByteRing(replay_buffer_bytes, resumed.seq_floor)
            for event in resumed.events:
                self.events.append(event)
            self._restore_chunks(resumed)
        # Attached after the restore: those ids were the previous daemon's to claim.
        self._reserver = reserver
        # Called when held-back entries become readable (the session's wake-up).
        self.on_publish: Callable[[], None] = _nothing
        if reserver is not None:
            reserver.on_covered = self._publish
            self._limit()
        if resumed is None:
            self._claim(events=1)
            self.events.append(status_event(self.status))

    def _restore_chunks(self, resumed: Resumed) -> None:
        """The saved chunks, each lost-output mark back in its place."""
        places = set(resumed.lost)
        if self.pty.last_seq in places:
            self.pty.mark_lost()
        for chunk in resumed.chunks:
            self.pty.append(chunk)
            if self.pty.last_seq in places:
                self.pty.mark_lost()

    def _claim(self, events: int = 0, chunks: int = 0) -> None:
        if self._reserver is not None:
            self._reserver.claim(self.events.last_id + events, self.pty.last_seq + chunks)
            self._limit()

    def _limit(self) -> None:
        assert self._reserver is not None
        covered = self._reserver.covered
        self.events.limit = None if covered is None else covered[0]
        self.pty.limit = None if covered is None else covered[1]

    def _publish(self) -> None:
        self._limit()
        self.on_publish()

    @property
    def holding(self) -> bool:
        """Entries are held back from readers until their ids are reserved
        on disk (`Reserver.covered`)."""
        return self.events.holding or self.pty.holding

    def resume_status(self, status: RunStatus) -> None:
        """Set the status a resumed session has without an event: the next
        one (the adopter's `running`, with its endpoints) says it."""
        self.status = status

    @property
    def record(self) -> SessionRecord:
        """A record is its own registry entry (see `RegistryEntry`)."""
        return self

    @property
    def is_terminal(self) -> bool:
        return is_terminal(self.status)

    @property
    def evictable_since(self) -> float | None:
        """When it stopped being live (its exit, or its suspend); None while live."""
        return self.exited_at if self.exited_at is not None else self.dormant_at

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
        self._claim(events=1)
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
        self._claim(events=1)
        return self.events.append(event)

    def output(self, data: bytes) -> int | None:
        """Append PTY bytes; return the last seq, or None once terminal or empty."""
        if self.is_terminal or not data:
            return None
        self._claim(chunks=ByteRing.chunks_for(len(data)))
        return self.pty.append(data)

    def output_lost(self) -> int | None:
        """Mark PTY output as lost after the newest seq (`ByteRing.mark_lost`);
        return the mark's number, or None once terminal. Marks claim no ids;
        a clean detach saves their places with the replay (`Resumed.lost`),
        a SIGKILL loses them with it."""
        if self.is_terminal:
            return None
        return self.pty.mark_lost()


def _nothing() -> None:
    pass


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
        """Register `entry`, evicting the sessions that stopped being live
        longest ago (terminal or suspended alike: `evictable_since`) if the
        registry is full; return the evicted ids (oldest first).

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
                (e.record for e in self._entries.values() if e.record.evictable_since is not None),
                key=lambda r: r.evictable_since or 0.0,
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
