"""Per-session state files: what a successor daemon needs to continue replay.

Owns the files in `runner.state_dir` (one `<session-id>.json` per session
whose workload can outlive the daemon) and their one shape:

    {"format": 1, "session_id": ID,
     "event_floor": N, "events": [RunEvent, ...],
     "seq_floor": M, "chunks": ["<base64>", ...], "lost": [SEQ, ...]}

Ids up to a floor were (or may have been) issued and are not in the file;
the items that follow have ids `floor + 1, floor + 2, ...`. `lost` (absent
in older files) holds the places of the PTY ring's lost-output marks: seqs
from `seq_floor` (before the first chunk) to the last chunk's. Two writers:

- `FileReserver` (while a session runs): high-water *reservations*, no
  items. When the ids issued come within half a block of the reservation,
  it moves a block (`BLOCK`) ahead and the file is rewritten: one small
  write per 512-1024 events or PTY chunks, never one per chunk. The write
  happens off the event loop (`runnerd.session.statewriter`); until it has
  landed, readers are given no id above the reservation on disk
  (`FileReserver.covered`, the rings' `limit`). After a SIGKILL the
  successor starts its rings just above the reservation, so it never reuses
  an id the old daemon may have sent, and every resuming reader is told of
  the gap.
- `replay_of` (a clean detach): the exact floors and the rings' contents,
  so the successor replays everything with no gap.

Writes are atomic (a temporary file, fsync, rename), files 0600 in a 0700
directory. They never hold env (catalog secrets): only events and PTY bytes,
which every client of the session may read anyway.

Error handling: a file that cannot be written is logged at ERROR and the
session goes on. A reservation that could not be written is removed (the
older one would under-state the ids issued since, and a successor would
reuse them): without a file a successor skips far ahead (`UNKNOWN_FLOOR`).
One that cannot be read or parsed is logged and treated as missing.
`StateDir`'s methods never raise but `open`; `decode` raises ValueError for
what is not a state file.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runnerd.atomic_file import write_atomic
from runnerd.contract import RunEvent
from runnerd.session.registry import Resumed, SessionRecord

log = logging.getLogger("runnerd.sessions")

FORMAT = 1
# Ids reserved ahead of those issued: the file is rewritten once per block.
BLOCK = 1024
# Where a session with no readable state file continues: nothing says which
# ids the previous daemon issued, so skip far past any it plausibly did. A
# PTY seq is 4 bytes unsigned on the wire: half the space stays ahead.
UNKNOWN_FLOOR = 1 << 31
_SUFFIX = ".json"
# Session ids name the files: only what a session id can be, never a path.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


@dataclass(frozen=True)
class Saved:
    """One state file's contents."""

    session_id: str
    resumed: Resumed


def encode(session_id: str, resumed: Resumed) -> bytes:
    """The file's bytes (compact JSON)."""
    data = {
        "format": FORMAT,
        "session_id": session_id,
        "event_floor": resumed.event_floor,
        "events": list(resumed.events),
        "seq_floor": resumed.seq_floor,
        "chunks": [base64.b64encode(c).decode("ascii") for c in resumed.chunks],
        "lost": list(resumed.lost),
    }
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def decode(raw: bytes) -> Saved:
    """Read a file's bytes back.

    Raises:
        ValueError: not a state file of this format (what is wrong, in words).
    """
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a format {FORMAT} state file")
    session_id, events, chunks = data.get("session_id"), data.get("events"), data.get("chunks")
    floors = (data.get("event_floor"), data.get("seq_floor"))
    if not (isinstance(session_id, str) and isinstance(events, list) and isinstance(chunks, list)):
        raise ValueError("session_id, events or chunks missing")
    if not all(isinstance(f, int) and not isinstance(f, bool) and f >= 0 for f in floors):
        raise ValueError("event_floor and seq_floor must be integers >= 0")
    if not all(isinstance(e, dict) and isinstance(e.get("type"), str) for e in events):
        raise ValueError("an event is not an object with a type")
    try:
        decoded = tuple(base64.b64decode(c, validate=True) for c in chunks)
    except (TypeError, binascii.Error) as exc:
        raise ValueError(f"a chunk is not base64: {exc}") from None
    event_floor, seq_floor = floors
    assert isinstance(event_floor, int) and isinstance(seq_floor, int)
    lost = _lost_places(data.get("lost", []), seq_floor, len(decoded))
    typed: tuple[RunEvent, ...] = tuple(events)
    return Saved(session_id, Resumed(event_floor, seq_floor, typed, decoded, lost))


def _lost_places(places: Any, seq_floor: int, chunks: int) -> tuple[int, ...]:
    """The file's `lost`, checked: seqs within the saved chunks' span."""
    if not isinstance(places, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and seq_floor <= p <= seq_floor + chunks
        for p in places
    ):
        raise ValueError("lost must be a list of seqs from seq_floor to the last chunk's")
    return tuple(places)


class StateDir:
    """`runner.state_dir`: one state file per session. See the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def open(cls, path: Path) -> StateDir:
        """Create the directory (0700) if needed.

        Raises:
            OSError: it cannot be created or is not a directory.
        """
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):
            path.chmod(0o700)
        return cls(path)

    def _file(self, session_id: str) -> Path | None:
        if not _SESSION_ID.fullmatch(session_id):
            return None
        return self.path / f"{session_id}{_SUFFIX}"

    def write(self, session_id: str, resumed: Resumed) -> bool:
        """Replace the session's file; False (logged) when it could not be written."""
        path = self._file(session_id)
        if path is None:
            return False
        try:
            write_atomic(path, encode(session_id, resumed))
        except OSError as exc:
            log.error(
                "cannot write the session's state file %s: %s",
                path,
                exc,
                extra={"session_id": session_id},
            )
            return False
        return True

    def load(self, session_id: str) -> Resumed | None:
        """The session's saved state; None when it has no readable file (logged)."""
        path = self._file(session_id)
        if path is None:
            return None
        try:
            saved = decode(path.read_bytes())
        except FileNotFoundError:
            log.warning("no state file for an adopted session", extra={"session_id": session_id})
            return None
        except (OSError, ValueError) as exc:
            log.warning("unreadable state file %s: %s", path, exc, extra={"session_id": session_id})
            return None
        if saved.session_id != session_id:
            log.warning(
                "state file %s names session %s",
                path,
                saved.session_id,
                extra={"session_id": session_id},
            )
            return None
        return saved.resumed

    def resume(self, session_id: str) -> Resumed:
        """Where an adopted session's rings continue: its saved state, else
        `UNKNOWN_FLOOR` (nothing says which ids were issued)."""
        return self.load(session_id) or Resumed(UNKNOWN_FLOOR, UNKNOWN_FLOOR)

    def remove(self, session_id: str) -> None:
        path = self._file(session_id)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def discard(self, session_id: str) -> None:
        """Remove the session's file, logging (never raising) a failure."""
        try:
            self.remove(session_id)
        except OSError as exc:
            log.error(
                "cannot remove the stale state file of %s: %s; a successor may reuse"
                " event ids and PTY seqs",
                session_id,
                exc,
                extra={"session_id": session_id},
            )

    def session_ids(self) -> list[str]:
        """Every session with a file here."""
        try:
            names = [p.name for p in self.path.iterdir()]
        except OSError as exc:
            log.error("cannot list the state directory %s: %s", self.path, exc)
            return []
        return sorted(
            n.removesuffix(_SUFFIX) for n in names if n.endswith(_SUFFIX) and not n.startswith(".")
        )

    def prune(self, keep: set[str]) -> list[str]:
        """Remove every file whose session is not in `keep`; return their ids."""
        stale = [sid for sid in self.session_ids() if sid not in keep]
        for session_id in stale:
            self.remove(session_id)
        return stale

    def write_reservation(self, session_id: str, resumed: Resumed) -> bool:
        """A running session's reservation; False when it could not be
        written, and then no older one is left either (removed: it would
        under-state the ids issued since, and a successor would reuse them;
        without a file a successor skips far ahead)."""
        if self.write(session_id, resumed):
            return True
        self.discard(session_id)
        return False


# Floors as readers see them: None for an id kind means unbounded.
Floors = tuple[int, int]


def _lowest(a: Floors | None, b: Floors | None) -> Floors | None:
    if a is None or b is None:
        return a or b
    return (min(a[0], b[0]), min(a[1], b[1]))


class FileReserver:
    """A session's `Reserver`: keeps the state file's floors ahead of the ids
    issued (see the module docstring), written by a `StateWriter` off the
    event loop. Synchronous and never blocks: `claim` only asks for a write.

    `covered` is what readers may be given (ids at or below it): the lowest
    floors a successor could read from now until the next update, i.e. the
    file on disk (none: unbounded, a successor skips far ahead) or, lower,
    one asked for and not yet written (it may land any moment). `on_covered`
    is called when it moves up (a write landed).

    `on_disk`: the floors the session's file says when the reserver starts
    (an adopted session: where its rings continue; None: no file).
    """

    def __init__(
        self, session_id: str, ask: Callable[[FileReserver], None], on_disk: Floors | None
    ) -> None:
        self.session_id = session_id
        self._ask = ask
        self._on_disk = on_disk
        self._unwritten: Floors | None = None  # the lowest floors asked for, not yet landed
        # -1: nothing reserved yet, so the first claim reserves both kinds.
        self.event_floor = -1
        self.seq_floor = -1
        self.closed = False  # the session's file has its last write coming
        self.on_covered: Callable[[], None] = lambda: None

    @property
    def covered(self) -> Floors | None:
        return _lowest(self._on_disk, self._unwritten)

    def claim(self, last_event_id: int, last_seq: int) -> None:
        # Asked half a block early, so the write has usually landed before
        # the ids reach the floor on disk and no reader waits for it.
        early = BLOCK // 2
        if self.closed or (
            last_event_id <= self.event_floor - early and last_seq <= self.seq_floor - early
        ):
            return
        if last_event_id > self.event_floor - early:
            self.event_floor = last_event_id + BLOCK
        if last_seq > self.seq_floor - early:
            self.seq_floor = last_seq + BLOCK
        if self._unwritten is None:
            self._unwritten = (self.event_floor, self.seq_floor)
        self._ask(self)

    def wanted(self) -> Floors:
        """The floors to write now (the latest asked for)."""
        return (self.event_floor, self.seq_floor)

    def landed(self, floors: Floors, written: bool) -> None:
        """The write of `floors` ended: on disk, or (not `written`) no file
        is left (`StateDir.write_reservation`)."""
        self._on_disk = floors if written else None
        newer = self.wanted()
        self._unwritten = None if newer == floors or self.closed else newer
        self.on_covered()

    def finished(self) -> None:
        """The session's file was removed or holds its saved replay: every id
        issued is covered (nothing more is reserved)."""
        self.closed = True
        self._on_disk = self._unwritten = None
        self.on_covered()


def replay_of(record: SessionRecord) -> Resumed:
    """A clean detach's file: the exact floors and everything the rings
    retain (cheap: references to the retained items; encoding is the
    writer's)."""
    events, pty = record.events, record.pty
    return Resumed(
        events.first - 1,
        pty.first - 1,
        tuple(events.retained()),
        tuple(pty.retained()),
        tuple(pty.lost_places()),
    )


def describe(resumed: Resumed) -> dict[str, Any]:
    """Log fields for a resumed session."""
    return {
        "event_floor": resumed.event_floor,
        "seq_floor": resumed.seq_floor,
        "events": len(resumed.events),
        "chunks": len(resumed.chunks),
    }
