"""What a session leaves for a successor daemon, and taking it back.

Owns the manager's side of restarts: the state-file bookkeeping
(`runnerd.session.statefile`: a running session's reservations, a detached
one's saved replay, removal once a session has ended for good; all written
by one `runnerd.session.statewriter.StateWriter`, off the event loop),
reading the
saved replays of sessions about to be adopted, continuing an adopted
session's rings and debug relay, and the recovery gate: while the daemon
adopts what `Backend.recover()` found, a lookup of an unknown id waits for
it (bounded) instead of answering a spurious 404.

The `SessionManager` holds one `Recovery` and decides what to do with a
session; this module only keeps its files and the gate. With no state
directory (a backend whose workloads do not outlive the daemon) every
bookkeeping call is a no-op.
"""

from __future__ import annotations

import logging

import trio

from runnerd.backend import Recovered
from runnerd.session.registry import Resumed
from runnerd.session.session import Session
from runnerd.session.statefile import FileReserver, StateDir, describe, replay_of
from runnerd.session.statewriter import StateWriter

log = logging.getLogger("runnerd.sessions")

# A request for an unknown id made while recovery runs waits this long for it
# (an id a client knew from before a restart must not get a spurious 404).
RECOVERY_WAIT_S = 5.0


class Recovery:
    """The state files (`files`, None when nothing outlives the daemon) and
    the recovery gate, open until `begin()` and again after `end()`.

    Resource handling: `run_writer` runs in the session manager's nursery,
    `flush` after it (shielded): a detach's replays are on disk before exit.

    Error handling: never raises (`StateDir` logs what it cannot write)."""

    def __init__(self, files: StateDir | None) -> None:
        self._files = files
        self._writer = None if files is None else StateWriter(files)
        self._reservers: dict[str, FileReserver] = {}
        self._done = trio.Event()
        self._done.set()  # no recovery pending until `begin`

    def reserver(self, session_id: str, resumed: Resumed | None = None) -> FileReserver | None:
        """The session's id reservations in its state file, if any are kept.
        `resumed`: where an adopted session's rings continue (what its file
        says, or would: without one a successor continues at the same
        `UNKNOWN_FLOOR`)."""
        if self._writer is None:
            return None
        on_disk = None
        if resumed is not None:
            on_disk = (
                resumed.event_floor + len(resumed.events),
                resumed.seq_floor + len(resumed.chunks),
            )
        reserver = self._writer.reserver(session_id, on_disk)
        self._reservers[session_id] = reserver
        return reserver

    async def run_writer(self) -> None:
        """Write the state files (`StateWriter.run`) until cancelled."""
        if self._writer is not None:
            await self._writer.run()

    async def flush(self) -> None:
        """Write what is left (`StateWriter.flush`): before the daemon exits."""
        if self._writer is not None:
            await self._writer.flush()

    async def read_replays(self, session_ids: list[str]) -> dict[str, Resumed]:
        """The state files of sessions about to be adopted, read in a worker
        thread (saved rings can be megabytes each: decoding them on the event
        loop would hold up every client, health included)."""
        files = self._files
        if files is None or not session_ids:
            return {}
        return await trio.to_thread.run_sync(
            lambda: {session_id: files.resume(session_id) for session_id in session_ids}
        )

    def resume(self, session_id: str, resumed: Resumed | None) -> Resumed | None:
        """Where an adopted session's rings continue: `resumed` (read ahead
        by `read_replays`), else its state file read now."""
        if self._files is None:
            return resumed
        resumed = resumed or self._files.resume(session_id)
        log.info("replay resumed", extra={"session_id": session_id, **describe(resumed)})
        return resumed

    def forget(self, session_id: str) -> None:
        """A session refused before it ran: drop what it asked to be written
        (nothing has been: the writer runs only after `start()` returns)."""
        reserver = self._reservers.pop(session_id, None)
        if self._writer is not None and reserver is not None:
            self._writer.drop(reserver)

    def session_ended(self, session: Session, *, detached: bool) -> None:
        """Detached: its workload runs on for a successor, so leave it the
        exact replay. Otherwise it is over for good: remove its file. Either
        is the file's last write, done by the writer (`flush` before exit)."""
        reserver = self._reservers.pop(session.id, None)
        if self._writer is None or reserver is None:
            return
        self._writer.finish(reserver, replay_of(session.record) if detached else None)

    def begin(self) -> None:
        """Recovery has started: `wait` blocks until `end`."""
        self._done = trio.Event()

    def end(self, live: set[str], *, prune: bool) -> None:
        """Recovery is over: release `wait`; with `prune` (it succeeded), drop
        the state files of sessions not in `live` (no workload left)."""
        if prune and self._files is not None:
            for session_id in self._files.prune(live):
                log.info("removed a stale state file", extra={"session_id": session_id})
        self._done.set()

    @property
    def pending(self) -> bool:
        return not self._done.is_set()

    async def wait(self) -> None:
        """Until recovery is over, at most `RECOVERY_WAIT_S`."""
        with trio.move_on_after(RECOVERY_WAIT_S):
            await self._done.wait()


def continue_adopted(
    session: Session, recovered: Recovered, resumed: Resumed | None, now: float
) -> None:
    """What an adopted session carries over from the daemon that started it:
    it counts as running (that daemon counted its start), a bundle's image,
    and the debug frames already relayed (so none is sent twice)."""
    session.running_at = now
    session.image = recovered.image if recovered.identity.app is None else None
    if resumed is not None:
        session.relayed_debug.extend(e["frame"] for e in resumed.events if e["type"] == "debug")
