"""A watch session's record while it runs, and the session it brings back.

Owns `RecordKeeper` (a `WatchSession.keeper`: asks the `RecordWriter` for
a write at each change the record holds: creation, each status change,
`PUT /apps`, a generation counter or an open generation changing, a new
checkpoint; and when the ids issued come within half a block of the
floors written; the writes coalesce, so output never costs one each; at
the end, the record's removal, or on a detach its last write), `record_of`
(a session as its record) and `session_from` (a record as a session to
adopt: its id, creation time, app set with slots and counters, agent, env
and token, event ids and `/io` seqs continuing above the floors).

What the manager then does with it (`runnerd.session.watchmanage`): a
`running` one is driven from `adopt_watch`, a `suspended` one waits for
`POST /resume` (`runnerd.session.watching`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from runnerd.config import WatchConfig
from runnerd.metrics import Metrics
from runnerd.session.registry import Resumed, SessionRecord
from runnerd.session.watchrecord import BLOCK, AppState, RecordWriter, WatchRecord, encode
from runnerd.session.watchsession import WatchSession
from runnerd.watch.runs import RunPhase


def record_of(session: WatchSession) -> WatchRecord:
    """The session as its record says it, floors a `BLOCK` ahead."""
    channels = session.app_channels()
    apps = tuple(
        AppState(
            c.spec,
            c.slot,
            c.runs.generation,
            c.runs.phase is RunPhase.OPEN,
            c.ring.last_id + BLOCK,
            c.kernel.consumed if c.kernel is not None else c.kernel_frames,
        )
        for c in channels
    )
    suspended = session.status["kind"] == "suspended"
    checkpoint = session.checkpoint.saved() if session.checkpoint is not None else None
    return WatchRecord(
        replace(session.watch_spec, apps=tuple(c.spec for c in channels)),
        apps,
        session.record.events.last_id + BLOCK,
        "suspended" if suspended else "running",
        session.live_since,
        session.record.dormant_at if suspended else None,
        checkpoint,
    )


class RecordKeeper:
    """One session's record, kept by `writer` (see the module docstring)."""

    def __init__(self, session: WatchSession, writer: RecordWriter) -> None:
        self._session = session
        self._writer = writer
        self._finished = False
        # The floors of the last record taken (-1: none yet).
        self._event_floor = -1
        self._seq_floors: dict[str, int] = {}

    def changed(self) -> None:
        if not self._finished:
            self._writer.ask(self._session.id, self._snapshot)

    def issued(self) -> None:
        """Half a block before a floor written is reached: a new record."""
        session, early = self._session, BLOCK // 2
        if self._finished or self._event_floor < 0:
            return
        crossed = session.record.events.last_id > self._event_floor - early or any(
            c.ring.last_id > self._seq_floors.get(c.name, 0) - early for c in session.app_channels()
        )
        if crossed:
            self._event_floor = -1  # asked: once, until that write is taken
            self.changed()

    def finish(self, *, detached: bool) -> None:
        """The session ended: remove its record; detached (its place left
        for a successor), write it a last time, now, while its env is
        still held."""
        if self._finished:
            return
        data = self._snapshot() if detached else None
        self._finished = True
        self._writer.ask(self._session.id, lambda: data)

    def _snapshot(self) -> bytes | None:
        if self._finished:
            return None  # ended meanwhile: its removal is asked already
        record = record_of(self._session)
        self._event_floor = record.event_floor
        self._seq_floors = {a.spec.name: a.seq_floor for a in record.apps}
        return encode(record)


def session_from(
    record: WatchRecord,
    *,
    wall_clock: Callable[[], float],
    limits: Callable[[], WatchConfig],
    ring_bytes: int,
    metrics: Metrics,
    backend_name: str,
    fixed_apps: bool,
) -> WatchSession:
    """The session `record` describes, its ids continuing above its floors
    (status `starting` with no event: the adopter's next status says it)."""
    created_at = record.spec.watch.identity.created_at
    assert created_at is not None  # `decode` requires it
    resumed = Resumed(record.event_floor, 0)
    session_record = SessionRecord(record.session_id, created_at, ring_bytes, resumed=resumed)
    session = WatchSession(
        session_record,
        record.spec,
        wall_clock,
        limits,
        ring_bytes=ring_bytes,
        metrics=metrics,
        backend_name=backend_name,
        fixed_apps=fixed_apps,
    )
    for app in record.apps:
        session.adopt_app(
            app.spec.name,
            slot=app.slot,
            generation=app.generation,
            open_=app.open,
            seq_floor=app.seq_floor,
            kernel_frames=app.kernel_frames,
        )
    session.live_since = record.live_since
    session.running_at = created_at  # it ran under the previous daemon
    return session
