"""The session manager's watch side: starting, resuming and ending watch sessions.

Owns what `runnerd.session.manager.SessionManager` does for watch sessions
beside run sessions, kept here so the manager stays one screen of run
lifecycle: `WatchSide` builds a `WatchSession` (no state-file reservations:
a watch session's workspace never outlives its daemon), registers it past
the eviction rule (`add_evicting`: a full registry evicts the session that
stopped being live longest ago, and a suspended one so evicted is ended
with its checkpoint), runs it (`runnerd.session.watching.drive_watch`), and
answers `resume` and the watch cap (`live_count`: watch sessions
`starting` or `running`, check 9). `limits` is the `[watch]` table in
effect; `reconfigure` replaces it (each limit applies from its next use).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import trio

from runnerd.backend import Backend, Failed
from runnerd.config import WatchConfig
from runnerd.contract import suspended
from runnerd.metrics import Metrics
from runnerd.session.ending import Ending, Stopped, wire_status
from runnerd.session.registry import SessionRecord, SessionRegistry
from runnerd.session.session import Session
from runnerd.session.watchadopt import RecordKeeper, session_from
from runnerd.session.watchrecord import RecordWriter, WatchRecord
from runnerd.session.watchsession import WatchSession
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.errors import WatchError

if TYPE_CHECKING:
    from runnerd.session.watching import Beginning

log = logging.getLogger("runnerd.sessions")


def add_evicting(registry: SessionRegistry[Session], session: Session, now: float) -> list[str]:
    """`registry.add`, and end each suspended watch session it evicted
    (RegistryFull and ValueError as `add`, nothing changed)."""
    dormant = {
        s.id: s for s in registry if isinstance(s, WatchSession) and s.record.dormant_at is not None
    }
    evicted = registry.add(session, now)
    for session_id in evicted:
        log.info("evicted to make room", extra={"session_id": session_id})
        victim = dormant.get(session_id)
        if victim is not None:
            victim.evict()
    return evicted


class WatchSide:
    """The manager's watch sessions (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        registry: SessionRegistry[Session],
        wall_clock: Callable[[], float],
        limits: WatchConfig,
        on_end: Callable[[], None],
        records: RecordWriter | None = None,
    ) -> None:
        """`on_end`: called when a session has ended (its exit TTL runs from
        then). `records`: where each session's watch record is kept (None:
        none, the backend's places do not outlive the daemon)."""
        self._on_end = on_end
        self._records = records
        self._backend = backend
        self._registry = registry
        self._wall_clock = wall_clock
        self.limits = limits

    def reconfigure(self, limits: WatchConfig) -> None:
        self.limits = limits

    def live_count(self) -> int:
        """Watch sessions `starting` or `running` (suspended and terminal ones do not count)."""
        return sum(
            1
            for s in self._registry
            if isinstance(s, WatchSession) and s.status["kind"] in ("starting", "running")
        )

    def start(
        self,
        spec: WatchSessionSpec,
        nursery: trio.Nursery,
        replay_buffer_bytes: int,
        metrics: Metrics,
    ) -> WatchSession:
        """Register a watch session for `spec` and run it in `nursery`;
        return at once (`starting`, event 1).

        Raises:
            RegistryFull: every slot is held by a live session (nothing changed).
            ValueError: the id is already registered (nothing changed).
        """
        now = self._wall_clock()
        if spec.session_id in self._registry:
            raise ValueError(f"session {spec.session_id} is already registered")
        session = self.new_session(spec, now, replay_buffer_bytes, metrics)
        add_evicting(self._registry, session, now)
        log.info("starting watch session apps=%d", len(spec.apps), extra={"session_id": session.id})
        self._keep_record(session)
        nursery.start_soon(self._run, session, name=f"watch session {session.id}")
        return session

    def _keep_record(self, session: WatchSession) -> None:
        if self._records is not None:
            session.keeper = RecordKeeper(session, self._records)
            session.keeper.changed()  # written at creation

    async def adopt_all(
        self, nursery: trio.Nursery, replay_buffer_bytes: int, metrics: Metrics
    ) -> int:
        """`adopt` every record in the state dir (read off the event loop;
        one that cannot be is logged); how many were adopted."""
        if self._records is None:
            return 0
        found = await trio.to_thread.run_sync(self._records.records.load_all)
        # (Read leniently, as `watch_adopt`: a backend without it adopts.)
        if getattr(self._backend, "watch_reap", False):
            await self._discard_all(found)
            return 0
        adopted = 0
        for record in found:
            try:
                self.adopt(record, nursery, replay_buffer_bytes, metrics)
                adopted += 1
            except ValueError as exc:
                log.warning("not adopted: %s", exc, extra={"session_id": record.session_id})
        return adopted

    async def _discard_all(self, found: list[WatchRecord]) -> None:
        """The backend deletes the places a previous daemon left (Kubernetes
        `on_restart = "reap"`): their sessions are not adopted, their
        checkpoints are discarded and their records removed."""
        assert self._records is not None
        for record in found:
            saved = record.checkpoint
            checkpoint = None if saved is None else self._backend.load_checkpoint(saved)
            if checkpoint is not None:
                await checkpoint.discard()
            await trio.to_thread.run_sync(self._records.records.remove, record.session_id)
            extra = {"session_id": record.session_id}
            log.warning("not adopted: its place is reaped at start", extra=extra)

    def adopt(
        self, record: WatchRecord, nursery: trio.Nursery, replay_buffer_bytes: int, metrics: Metrics
    ) -> WatchSession:
        """Bring back a session a previous daemon left (its watch record):
        registered past the capacity check with its id and creation time; a
        running one re-enters its place (`adopt_watch`), a suspended one
        waits for `POST /resume` with its checkpoint (none left: it fails).

        Raises:
            ValueError: the id is already registered (nothing changed).
        """
        if record.session_id in self._registry:
            raise ValueError(f"session {record.session_id} is already registered")
        session = session_from(
            record,
            wall_clock=self._wall_clock,
            limits=lambda: self.limits,
            ring_bytes=replay_buffer_bytes,
            metrics=metrics,
            backend_name=self._backend.name,
            fixed_apps=self._backend.watch_fixed_apps,
        )
        saved = record.checkpoint
        session.checkpoint = None if saved is None else self._backend.load_checkpoint(saved)
        beginning: Beginning = "adopt"
        if record.status == "suspended":
            session.record.dormant_at = record.suspended_at
            session.record.resume_status(suspended())
            beginning = "suspended"
        self._registry.adopt(session)
        self._keep_record(session)
        extra = {"session_id": session.id}
        log.info("adopted watch session status=%s", record.status, extra=extra)
        nursery.start_soon(self._run, session, beginning, name=f"watch session {session.id}")
        return session

    def new_session(
        self, spec: WatchSessionSpec, now: float, replay_buffer_bytes: int, metrics: Metrics
    ) -> WatchSession:
        """The session for `spec`, created at `now` (not registered yet)."""
        identity = replace(spec.watch.identity, created_at=now)
        spec = replace(spec, watch=replace(spec.watch, identity=identity))
        record = SessionRecord(spec.session_id, now, replay_buffer_bytes)
        return WatchSession(
            record,
            spec,
            self._wall_clock,
            lambda: self.limits,
            ring_bytes=replay_buffer_bytes,
            metrics=metrics,
            backend_name=self._backend.name,
            fixed_apps=self._backend.watch_fixed_apps,
        )

    async def resume(self, session_id: str) -> None:
        """`POST /resume` (see `SessionManager.resume`)."""
        await trio.lowlevel.checkpoint()
        session = self._registry.get(session_id)
        if not isinstance(session, WatchSession) or session.status["kind"] != "suspended":
            raise WatchError(
                404, "not_suspended", f"session {session_id} is not a suspended watch session"
            )
        if self.live_count() >= self.limits.max_sessions:
            raise WatchError(
                409,
                "too_many_watch_sessions",
                f"{self.limits.max_sessions} watch sessions are starting or running "
                "(watch.max_sessions); stop or let one suspend first",
            )
        session.resume()

    async def _run(self, session: WatchSession, beginning: Beginning = "fresh") -> None:
        ending: Ending = Stopped()
        try:
            ending = await self._drive(session, beginning)
        finally:
            status = wire_status(ending)
            if session.keeper is not None:
                assert isinstance(session.keeper, RecordKeeper)
                session.keeper.finish(detached=status is None)
            session.release_creation()
            session.close(status)
            if session.evicted:
                self._registry.remove(session.id)
            self._on_end()
        log.info(
            "watch session ended %s%s",
            status["kind"] if status is not None else "detached",
            " (evicted)" if session.evicted else "",
            extra={"session_id": session.id},
        )

    async def _drive(self, session: WatchSession, beginning: Beginning) -> Ending:
        if beginning == "suspended" and session.checkpoint is None:
            await trio.lowlevel.checkpoint()  # nothing to resume it from
            return Failed("the session's checkpoint was gone after a restart")
        # Imported at the first watch session: the driver and its app,
        # generation and publishing modules are no part of a daemon's start.
        from runnerd.session.watching import drive_watch

        return await drive_watch(session, self._backend, self._wall_clock, beginning)
