"""The state files' one writer: every write and removal, off the event loop.

Owns the disk side of `runnerd.session.statefile` while the daemon runs: a
session's reservations (`FileReserver.claim` only asks), its saved replay on
a clean detach and its file's removal once it has ended for good. A
`Sink` call or `SessionManager.start()` never waits for a disk: they leave
a job here, and `run` does it in a worker thread (`trio.to_thread`), one at
a time, so no file ever has two writes in flight. Jobs are per session and
coalesce: the latest wins (a reservation asked for twice before it was
written is written once, with the newer floors; a removal or saved replay
replaces a reservation not yet written, and no reservation follows it).

Ordering: each session's jobs land in the order asked for; a file's last
job (the replay a successor reads, or its removal) is the last write to it.

Resource handling: `run` is a task of the session manager's nursery;
`flush` does what is left when that nursery has ended (the final replays of
a detach must be on disk before the daemon exits), shielded by its caller
and unbounded: a disk that hangs holds the exit up (never a request).

Error handling: never raises for the disk (`StateDir` logs what it cannot
write; a reservation that cannot be written leaves no file).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

import trio

from runnerd.session.registry import Resumed
from runnerd.session.statefile import FileReserver, Floors, StateDir

log = logging.getLogger("runnerd.sessions")


class _Last(enum.Enum):
    REMOVE = "remove"
    SAVE = "save"


@dataclass
class _Job:
    reserver: FileReserver
    last: _Last | None = None  # None: a reservation
    replay: Resumed | None = None


class StateWriter:
    """Writes `files`' state files for the session manager (module docstring)."""

    def __init__(self, files: StateDir) -> None:
        self._files = files
        self._jobs: dict[str, _Job] = {}
        self._wake = trio.Event()

    def reserver(self, session_id: str, on_disk: Floors | None) -> FileReserver:
        """A session's `Reserver`, whose writes are this writer's."""
        return FileReserver(session_id, self._ask_reservation, on_disk)

    def _ask_reservation(self, reserver: FileReserver) -> None:
        self._jobs.setdefault(reserver.session_id, _Job(reserver))
        self._wake.set()

    def finish(self, reserver: FileReserver, replay: Resumed | None) -> None:
        """The session's file's last job: `replay` (a detach's saved replay)
        or, None, its removal. No reservation is written after it."""
        reserver.closed = True
        last = _Last.REMOVE if replay is None else _Last.SAVE
        self._jobs[reserver.session_id] = _Job(reserver, last, replay)
        self._wake.set()

    def drop(self, reserver: FileReserver) -> None:
        """Forget the session's job not yet started; write nothing more for it."""
        reserver.closed = True
        job = self._jobs.get(reserver.session_id)
        if job is not None and job.reserver is reserver:
            del self._jobs[reserver.session_id]

    @property
    def pending(self) -> int:
        """Sessions with a job not yet started."""
        return len(self._jobs)

    async def run(self) -> None:
        """Do the jobs as they come, until cancelled (a write in flight
        then completes first: threads are not abandoned)."""
        while True:
            while not self._jobs:  # a wake-up may find it dropped (`drop`)
                self._wake = trio.Event()
                await self._wake.wait()
            await self._do_next()

    async def flush(self) -> None:
        """Do every job left, then return."""
        while self._jobs:
            await self._do_next()

    def flush_sync(self) -> None:
        """`flush` in the calling thread (tests; a caller with no event loop)."""
        while self._jobs:
            session_id = next(iter(self._jobs))
            job = self._jobs.pop(session_id)
            done = self._work(job)
            done(self._disk(job, done.floors))

    async def _do_next(self) -> None:
        session_id = next(iter(self._jobs))
        job = self._jobs.pop(session_id)
        done = self._work(job)
        try:
            # Once the thread runs it completes (not abandoned): only a
            # cancellation before it starts comes out of here, the job undone.
            ok = await trio.to_thread.run_sync(self._disk, job, done.floors)
        except BaseException:
            self._jobs.setdefault(session_id, job)  # still to do, for `flush`
            raise
        done(ok)

    def _work(self, job: _Job) -> _Landing:
        # The floors are read here, on the loop, when the write starts: the
        # latest asked for, and what `landed` is told was written.
        return _Landing(job, job.reserver.wanted())

    def _disk(self, job: _Job, floors: Floors) -> bool:
        """The job's IO (in a worker thread); True when its file is as asked.
        Never raises: a bug here must not take the manager's nursery down."""
        try:
            return self._do_disk(job, floors)
        except Exception:
            log.exception("state file job failed", extra={"session_id": job.reserver.session_id})
            return False

    def _do_disk(self, job: _Job, floors: Floors) -> bool:
        session_id = job.reserver.session_id
        if job.last is _Last.REMOVE:
            self._files.discard(session_id)
            return True
        if job.last is _Last.SAVE:
            assert job.replay is not None
            saved = self._files.write(session_id, job.replay)
            if saved:
                log.info("replay saved for a successor", extra={"session_id": session_id})
            return saved
        return self._files.write_reservation(session_id, Resumed(*floors))


@dataclass
class _Landing:
    job: _Job
    floors: Floors

    def __call__(self, ok: bool) -> None:
        """Back on the loop: tell the session's reserver what is on disk now.
        (A saved replay that could not be written leaves the reservation on
        disk, and what it covers, as they were.)"""
        if self.job.last is None:
            self.job.reserver.landed(self.floors, ok)
        elif ok:
            self.job.reserver.finished()
