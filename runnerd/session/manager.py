"""The session manager: every session as a task tree under one nursery.

Owns the IO side of sessions: the sessions nursery (started by the daemon),
one cancel scope and workload nursery per session, the terminal-status
decision, user stops and shutdown (asked and waited for by
`runnerd.session.stopping`) and exit-TTL expiry. The state itself (status,
rings, capacity) is the pure `runnerd.session.registry`; the workload is the
`Backend`'s.

How a session runs: `start()` registers it (`starting`, event 1) and starts
its task at once, so the 201 goes out before the backend does anything. The
task opens a cancel scope (a user stop cancels it), a TTL deadline
(`spec.limits.ttl_s`), and a workload nursery in which
`nursery.start(backend.run, spec, sink)` returns `Started`: the
`WorkloadHandle` for stdin and resizes, and the address the core's watchers
(reachability per declared tcp port, the debug relay) start on in the same
nursery. Whatever ends it is one `Ending` (`runnerd.session.ending`), and
that is exactly one terminal status (`ending.wire_status`):

    outcome Exited(code)         -> exited {code}
    outcome Failed(message)      -> failed message
    Stopped: user stop, any time -> stopped (never failed)
    TtlExpired: ttl_s elapsed    -> failed "ttl: session exceeded its time limit of N s"
    StartFailed(stage, message)  -> failed "<stage>: <message>"  (a StartError)
    Internal: anything else      -> failed "internal: ..." (traceback to the log only)
    Detached (SIGUSR2)           -> none: the workload runs on for a successor

A failing session never takes down the manager or another session: every
exception (ExceptionGroups too) is classified inside the session's own task.

Watch sessions (`start_watch`, `resume`) are `runnerd.session.watchmanage`'s;
they share the registry, the stops and the expiry.

The per-session object (`Session`, its `SessionPhase`, `SessionSink`) is
runnerd.session.session; one workload's run (stop scope, TTL, workload
nursery) is runnerd.session.running; state files and adoption after a restart are
runnerd.session.recovery.

PTY output decision: the backend's `output(bytes)` goes to the session's
`ByteRing` only (the WebSocket PTY channel); it is NOT also emitted as
`stdout` SSE events. The Telo runner does the same for its `tty` stream
(`stdout`/`stderr` events are for non-PTY streams, which no runnerd backend
has), doubling every byte into the event ring would halve the replay that
fits in `replay_buffer_bytes`, and the contract already drops debug log
frames because "the same bytes already arrive on the PTY channel".
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

import trio

from runnerd.backend import Backend, EndIntent, Recovered, RunSpec
from runnerd.config import WatchConfig
from runnerd.contract import is_terminal
from runnerd.errors import SessionNotFound
from runnerd.metrics import NULL_METRICS, Metrics
from runnerd.session.admission import Catalog
from runnerd.session.ending import Detached, Ending, Stopped, failed_stage, wire_status
from runnerd.session.errors import DetachUnsupported, ManagerClosed, StopFailed
from runnerd.session.recovery import Recovery, continue_adopted
from runnerd.session.registry import RegistryFull, Resumed, SessionRecord, SessionRegistry
from runnerd.session.running import drive
from runnerd.session.session import Session
from runnerd.session.statefile import StateDir
from runnerd.session.stopping import stop_every, stop_session
from runnerd.session.watchmanage import WatchSide, add_evicting
from runnerd.session.watchrecord import RecordWriter, WatchRecords
from runnerd.session.watchspec import WatchSessionSpec

__all__ = [
    "DetachUnsupported",
    "ManagerClosed",
    "RegistryFull",
    "Session",
    "SessionManager",
    "StopFailed",
]

log = logging.getLogger("runnerd.sessions")


class ManagerState(enum.Enum):
    """IDLE: `run()` is not running (no session can start). SERVING: sessions
    start and are adopted. CLOSING: `stop_all()` began; nothing new enters
    until `run()` ends (back to IDLE)."""

    IDLE = "idle"
    SERVING = "serving"
    CLOSING = "closing"


class SessionManager:
    """Starts, tracks, stops and expires sessions. See the module docstring.

    Resource handling: every session task runs in the nursery `run()` owns;
    cancelling `run()` cancels every session (each backend tears its
    workload down before the cancellation propagates). Call `stop_all()`
    first for an orderly shutdown that records `stopped` for each.

    Error handling: nothing a backend does escapes its session's task;
    `start()` raises only `RegistryFull`, `ManagerClosed` and (for a caller
    that reuses an id) `ValueError`; `stop()` only `StopFailed`.

    The registry holds the `Session` objects themselves: it is the one map of
    sessions, so eviction and expiry cannot leave a stale copy anywhere.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_sessions: int,
        exit_ttl_s: float,
        replay_buffer_bytes: int,
        stop_timeout_s: float = 10.0,
        wall_clock: Callable[[], float] = time.time,
        metrics: Metrics = NULL_METRICS,
        state: StateDir | None = None,
        apps: Iterable[str] = (),
        watch: WatchConfig | None = None,
    ) -> None:
        """`stop_timeout_s` bounds how long `stop()` waits for a session to end
        (the backend's own stop grace plus headroom). `wall_clock` gives epoch
        seconds for timestamps and exit-TTL expiry (injectable for tests).
        `metrics` counts starts, start failures and PTY bytes. `state`, for a
        backend whose workloads outlive the daemon: where each session's
        replay marks (and a detached one's replay) are kept for a successor
        (`runnerd.session.statefile`). `apps`: the catalog's app names; an
        app session whose app is not among them when its task runs fails
        to start (`runnerd.session.admission.Catalog.recheck`). `watch`: the
        `[watch]` limits (`runnerd.session.watchmanage`)."""
        self._backend = backend
        self._registry: SessionRegistry[Session] = SessionRegistry(max_sessions, exit_ttl_s)
        self._replay_buffer_bytes = replay_buffer_bytes
        self._stop_timeout_s = stop_timeout_s
        self._wall_clock = wall_clock
        self._metrics = metrics
        self._nursery: trio.Nursery | None = None
        self._state = ManagerState.IDLE
        self._expiry_wakeup = trio.Event()
        self._recovery = Recovery(state)
        self._catalog = Catalog(apps)
        # Watch records, where a watch session's place outlives the daemon
        # (`runnerd.session.watchrecord`): `<state_dir>/watch/`.
        self._records = None
        # (Read leniently: a backend made before the watch members has none.)
        if state is not None and getattr(backend, "watch_adopt", False):
            self._records = RecordWriter(WatchRecords(state.path / "watch"))
        self._watch = WatchSide(
            backend,
            self._registry,
            wall_clock,
            watch or WatchConfig(),
            self._wake_expiry,
            self._records,
        )

    def _wake_expiry(self) -> None:
        self._expiry_wakeup.set()

    @property
    def live_count(self) -> int:
        return self._registry.live_count

    def sessions(self) -> list[Session]:
        """Every registered session (live and retained), oldest first."""
        return list(self._registry)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the sessions nursery and the exit-TTL expiry loop until cancelled."""
        if self._state is not ManagerState.IDLE:
            raise RuntimeError("SessionManager.run is already running")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._state = ManagerState.SERVING
                nursery.start_soon(self._run_expiry)
                nursery.start_soon(self._recovery.run_writer)
                if self._records is not None:
                    nursery.start_soon(self._records.run)
                task_status.started()
        finally:
            self._nursery, self._state = None, ManagerState.IDLE
            # Every session has ended: its file's last write (a detach's
            # replay for the successor) must land before the daemon exits.
            with trio.CancelScope(shield=True):
                await self._recovery.flush()
                if self._records is not None:
                    await self._records.flush()

    def start(self, spec: RunSpec) -> Session:
        """Register a session for `spec` and start it; return at once.

        The session is `starting` (event 1) when this returns; everything
        after that arrives on its event stream.

        Raises:
            RegistryFull: every slot is held by a live session (nothing changed).
            ManagerClosed: `run()` is not running, or shutdown has begun.
            ValueError: `spec.session_id` is already registered (nothing
                changed; ids are the caller's to pick, see `get`).
        """
        nursery = self._open_nursery()
        now = self._wall_clock()
        spec = replace(spec, identity=replace(spec.identity, created_at=now))
        if spec.session_id in self._registry:
            # Before its record exists: a second record would reserve ids in
            # the live session's state file.
            raise ValueError(f"session {spec.session_id} is already registered")
        session = self._new_session(spec, now)
        try:
            add_evicting(self._registry, session, now)
        except RegistryFull:
            self._recovery.forget(session.id)  # refused: nothing of it reaches the disk
            raise
        log.info(
            "starting image=%s app=%s",
            spec.image.image,
            spec.app,
            extra={"session_id": session.id},
        )
        nursery.start_soon(self._run_session, session, name=f"session {session.id}")
        return session

    def start_watch(self, spec: WatchSessionSpec) -> Session:
        """`start` for a watch session (`runnerd.session.watchmanage`); the
        watch cap (check 9, `watch_live_count`) is the caller's, before it."""
        nursery = self._open_nursery()
        return self._watch.start(spec, nursery, self._replay_buffer_bytes, self._metrics)

    def watch_live_count(self) -> int:
        """Watch sessions `starting` or `running` (check 9's count)."""
        return self._watch.live_count()

    async def resume(self, session_id: str) -> None:
        """`POST /resume` (WatchError 404 not_suspended, 409 too_many_watch_sessions)."""
        await self._watch.resume(session_id)

    async def read_replays(self, session_ids: list[str]) -> dict[str, Resumed]:
        """The saved replays of sessions about to be adopted, read off the
        event loop (`Recovery.read_replays`); pass each to `adopt`."""
        return await self._recovery.read_replays(session_ids)

    def adopt(self, recovered: Recovered, resumed: Resumed | None = None) -> Session:
        """Take over a workload `Backend.recover()` found: register it with
        its original id, creation time and status, past the capacity check
        (it exists already; refusing it would orphan it). A live one runs
        (`run()` with no creation: the backend re-attaches), its TTL still a
        deadline from the original `created_at`; a terminal one (it ended
        while no daemon ran) is only kept for replay, `exit_ttl_s`. Its rings
        continue the previous daemon's (its state file: the saved replay, or
        ids above every one it may have issued).

        Raises:
            ManagerClosed: `run()` is not running, or shutdown has begun.
            ValueError: the id is already registered, or `created_at` is unset.
        """
        nursery = self._open_nursery()
        identity = recovered.identity
        session_id = identity.session_id
        if identity.created_at is None:
            raise ValueError(f"session {session_id}: adopted without created_at")
        if session_id in self._registry:
            raise ValueError(f"session {session_id} is already registered")
        resumed = self._recovery.resume(session_id, resumed)
        session = self._new_session(RunSpec(identity, None), identity.created_at, resumed)
        continue_adopted(session, recovered, resumed, self._wall_clock())
        self._registry.adopt(session)
        log.info("adopted status=%s", recovered.status["kind"], extra={"session_id": session_id})
        if is_terminal(recovered.status):
            session.close(recovered.status)
            self._recovery.session_ended(session, detached=False)
            self._expiry_wakeup.set()
        else:
            session.record.resume_status(recovered.status)
            nursery.start_soon(self._run_session, session, name=f"session {session_id}")
        return session

    async def adopt_watches(self) -> int:
        """Bring back every watch session a previous daemon left a record
        of (`runnerd.session.watchmanage.WatchSide.adopt`); how many.
        Records are read off the event loop.

        Raises:
            ManagerClosed: `run()` is not running, or shutdown has begun.
        """
        if self._records is None:
            return 0
        found = await trio.to_thread.run_sync(self._records.records.load_all)
        adopted = 0
        for record in found:
            nursery = self._open_nursery()
            try:
                self._watch.adopt(record, nursery, self._replay_buffer_bytes, self._metrics)
                adopted += 1
            except ValueError as exc:
                log.warning("not adopted: %s", exc, extra={"session_id": record.session_id})
        return adopted

    def _new_session(
        self, spec: RunSpec, created_at: float, resumed: Resumed | None = None
    ) -> Session:
        reserver = self._recovery.reserver(spec.session_id, resumed)
        record = SessionRecord(
            spec.session_id,
            created_at,
            self._replay_buffer_bytes,
            reserver=reserver,
            resumed=resumed,
        )
        return Session(record, spec, self._wall_clock, self._metrics, self._backend.name)

    # -- recovery ------------------------------------------------------------

    def begin_recovery(self) -> None:
        """Recovery has started: `find` waits for it on an unknown id."""
        self._recovery.begin()

    def end_recovery(self, *, prune: bool) -> None:
        """Recovery is over: release `find`; with `prune` (it succeeded),
        drop the state files of sessions not live here (no workload left)."""
        self._recovery.end({s.id for s in self._registry if not s.is_terminal}, prune=prune)

    async def find(self, session_id: str) -> Session | None:
        """`get`, except that while recovery runs an unknown id waits for it
        (at most `recovery.RECOVERY_WAIT_S`): it may be a session being adopted."""
        session = self._registry.get(session_id)
        if session is None and self._recovery.pending:
            await self._recovery.wait()
            session = self._registry.get(session_id)
        return session

    async def lookup(self, session_id: str) -> Session:
        """The session with this id, waiting for recovery as `find` does.

        Raises:
            SessionNotFound: no such session (never was, or evicted).
        """
        session = await self.find(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    def _open_nursery(self) -> trio.Nursery:
        if self._state is not ManagerState.SERVING or self._nursery is None:
            raise ManagerClosed()
        return self._nursery

    def get(self, session_id: str) -> Session | None:
        return self._registry.get(session_id)

    async def stop(self, session_id: str, intent: EndIntent = EndIntent.STOP) -> None:
        """User stop: record the end asked (`session.end_requested`), cancel
        the run, and return once it is terminal (`stopped`, or whatever it had
        already ended as).

        Idempotent; an unknown id is fine. A stop that lands while the workload
        is still being created cancels the creation, which stops it. A
        backend that gave a stop of its own (`Started.stop`) is asked first;
        if it refuses, nothing changes: the session is not marked stopped.

        Raises:
            StopFailed: the backend refused the stop (the session runs on), or
                the session was not terminal within `stop_timeout_s`.
        """
        session = await self.find(session_id)
        if session is not None:
            await stop_session(session, intent, self._stop_timeout_s)

    async def stop_all(self, intent: EndIntent = EndIntent.STOP) -> list[str]:
        """Shutdown: refuse new sessions and end every live one, concurrently,
        with `intent` (STOP: every workload gone; DETACH: left running for a
        successor daemon).

        Returns the ids that could not be ended in time (logged; their tasks
        are still running and end when `run()` is cancelled).

        Raises:
            DetachUnsupported: DETACH from a backend that cannot; nothing
                changed (the manager still accepts sessions).
        """
        if intent is EndIntent.DETACH and not self._backend.detach_supported:
            raise DetachUnsupported(self._backend.name)
        self._state = ManagerState.CLOSING
        live = [session for session in self._registry if not session.is_terminal]
        return await stop_every(live, intent, self._stop_timeout_s)

    def reconfigure(
        self,
        *,
        max_sessions: int | None = None,
        exit_ttl_s: float | None = None,
        replay_buffer_bytes: int | None = None,
        apps: Iterable[str] | None = None,
        watch: WatchConfig | None = None,
    ) -> None:
        """Change limits for what comes next; a smaller capacity never stops a
        live session, and `replay_buffer_bytes` applies to new sessions.
        `apps` replaces the catalog: an app session not yet run whose app
        left it fails to start; a running one runs on. `watch`: the
        `[watch]` limits, each applied from its next use."""
        self._registry.reconfigure(max_sessions=max_sessions, exit_ttl_s=exit_ttl_s)
        if replay_buffer_bytes is not None:
            self._replay_buffer_bytes = replay_buffer_bytes
        if apps is not None:
            self._catalog.offer(apps)
        if watch is not None:
            self._watch.reconfigure(watch)
        self._expiry_wakeup.set()

    # -- one session -------------------------------------------------------

    async def _run_session(self, session: Session) -> None:
        # Kept only if `run()` itself is cancelled (shutdown past its budget):
        # the workload is gone with the scope, so the session is stopped.
        ending: Ending = Stopped()
        try:
            ending = await drive(session, self._backend, self._wall_clock, self._catalog)
        finally:
            status = wire_status(ending)
            session.release_creation()
            self._recovery.session_ended(session, detached=status is None)
            session.close(status)
            self._expiry_wakeup.set()
            self._count_unstarted(session, ending)
        if status is None:
            log.info("detached", extra={"session_id": session.id})
            return
        log.info(
            "ended %s",
            status["kind"],
            extra={"session_id": session.id, "status": status},
        )

    def _count_unstarted(self, session: Session, ending: Ending) -> None:
        """A session that ended without ever running: its start's outcome,
        and for a failure its stage (`ending.failed_stage`)."""
        status = wire_status(ending)
        if session.running_at is not None or isinstance(ending, Detached) or status is None:
            return
        self._metrics.session_started(self._backend.name, status["kind"])
        stage = failed_stage(ending)
        if stage is not None:
            self._metrics.start_failed(stage)

    # -- expiry ------------------------------------------------------------

    async def _run_expiry(self) -> None:
        """Drop terminal sessions `exit_ttl_s` after their exit, to the second."""
        while True:
            now = self._wall_clock()
            for session_id in self._registry.expire(now):
                log.info("expired", extra={"session_id": session_id})
            due = self._registry.next_expiry()
            self._expiry_wakeup = trio.Event()
            with trio.move_on_after(math.inf if due is None else max(due - now, 0.0)):
                await self._expiry_wakeup.wait()
