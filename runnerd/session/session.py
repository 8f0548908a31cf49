"""One session as the rest of runnerd sees it.

Owns the per-session IO state around the pure `SessionRecord`: its phase
(`SessionPhase`: one lifecycle, moving only forward), the wake-up that stream
readers wait on, the live workload's handle (stdin, resizes with their 50 ms
coalescing), the stop scope a user stop cancels, and one backend stop at a
time. The `Sink` its backend reports to and the report the core's own
watchers of the workload write to are `runnerd.session.sink`'s. The
`SessionManager` (`runnerd.session.manager`) creates sessions and drives
their lifecycle through the methods under "the manager's side".

Reader contract (SSE, WebSocket): read `ring.since(cursor)`, send, then
`await session.wait_change()` with no checkpoint between the read and the
call. `wait_change` parks the caller before any other task can run, and
every append or status change wakes every parked reader, so nothing is lost
or delivered twice.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from runnerd.backend import EndIntent, RunSpec, Started, StopRefused, WorkloadHandle
from runnerd.contract import (
    RunStatus,
    running,
)
from runnerd.metrics import NULL_METRICS, Metrics
from runnerd.session.registry import ByteRing, EventRing, SessionRecord
from runnerd.session.resize import ResizeCoalescer
from runnerd.session.surface import WatchSurface

log = logging.getLogger("runnerd.sessions")


class SessionPhase(enum.Enum):
    """Where a session is in its one lifecycle. It only moves forward.

    STARTING: registered (`starting`); its backend is creating the workload,
    or about to (an adopted one: re-attaching). Stdin is dropped, the latest
    resize kept for the workload's start; a stop cancels the start.
    RUNNING: the backend reported `Started`: stdin and resizes reach the
    workload, and a user stop asks the backend's own stop first.
    ENDING: an end was asked, or the run is over: the workload is being (or
    has been) torn down; no second stop reaches the backend.
    ENDED: the ending is recorded (a terminal status, or detached) and
    `wait_terminal` has returned.
    """

    STARTING = 1
    RUNNING = 2
    ENDING = 3
    ENDED = 4


@dataclass
class _StopAttempt:
    """A backend stop in flight (`Session.stop_workload`) and, once `done`,
    how it went: `finished` (not given up at a deadline), `refused`."""

    done: trio.Event = field(default_factory=trio.Event)
    finished: bool = False
    refused: StopRefused | None = None


@dataclass
class _Workload:
    """The live workload while it is attached: where stdin and resizes go."""

    handle: WorkloadHandle
    resize: ResizeCoalescer  # its flushes run in the run's nursery
    stop: Callable[[], Awaitable[None]] | None  # `Started.stop`


class Session(WatchSurface):
    """One session as the HTTP side sees it: state, rings, stdin, resize, wake-ups.

    Stdin and resizes go to the live workload's handle; both are safe to call
    at any time (stdin is dropped before the workload exists and after it
    ends; the latest resize before it exists is applied when it does).
    """

    def __init__(
        self,
        record: SessionRecord,
        spec: RunSpec,
        wall_clock: Callable[[], float],
        metrics: Metrics = NULL_METRICS,
        backend_name: str = "",
    ):
        """`metrics` counts the start (POST → running) and PTY bytes, labelled
        with `backend_name`."""
        super().__init__()
        self.spec = spec
        # The image a client asked for, for listings (None: an app session,
        # or one adopted from a previous daemon, which stored no creation).
        self.image: str | None = (
            spec.creation.image.image if spec.creation is not None and spec.app is None else None
        )
        self.metrics = metrics
        self.backend_name = backend_name
        # When it first ran (wall clock; None: not yet, or never): a value,
        # not a flag, so the start latency and "ever started" are one fact.
        self.running_at: float | None = None
        # The end asked of it (None: none asked; a TTL or a cancelled manager
        # still ends it, as a stop). What its backend's teardown reads.
        self.end_requested: EndIntent | None = None
        self.phase = SessionPhase.STARTING
        # Debug frames a previous daemon relayed (its saved replay), in order:
        # a relay that starts over gets the kernel's replay of them first,
        # which must not reach the stream a second time.
        self.relayed_debug: deque[dict[str, Any]] = deque()
        self._record = record
        self._wall_clock = wall_clock
        self._changed = trio.Event()
        record.on_publish = self._notify
        self._done = trio.Event()
        # What a stop cancels: entered once, by the run (`stop_scope`).
        self._stop_scope = trio.CancelScope()
        self._workload: _Workload | None = None
        self._stop_attempt: _StopAttempt | None = None
        self._pending_size: tuple[int, int] | None = None
        # The latest size any client asked for, and when one first was: what
        # a workload that does not exist yet starts with (Sink.terminal_size).
        self._requested_size: tuple[int, int] | None = None
        self._size_requested = trio.Event()

    # -- state -------------------------------------------------------------

    @property
    def record(self) -> SessionRecord:
        """The pure state; this is what `SessionRegistry` keys and evicts by."""
        return self._record

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def created_at(self) -> str:
        """ISO-8601 UTC, e.g. `2026-11-29T16:00:00.123Z`."""
        return self._record.created_at_iso

    @property
    def exited_at(self) -> str | None:
        """ISO-8601 UTC of the terminal transition, None while live."""
        return self._record.exited_at_iso

    @property
    def status(self) -> RunStatus:
        return self._record.status

    @property
    def is_terminal(self) -> bool:
        return self._record.is_terminal

    @property
    def events(self) -> EventRing:
        return self._record.events

    @property
    def pty(self) -> ByteRing:
        return self._record.pty

    async def wait_change(self) -> None:
        """Return after the next event, PTY chunk or status change.

        Returns at once when the session is already terminal (nothing will
        change again: no entry is held back, `SessionRecord.holding`), so a
        reader must end its loop on a terminal status.
        The caller is parked before any other task runs, so a change made
        after the caller's last `since()` always wakes it.
        """
        if self._record.is_terminal and not self._record.holding:
            await trio.lowlevel.checkpoint()
            return
        await self._changed.wait()

    async def wait_terminal(self) -> None:
        """Return once the session's task has ended (status terminal, workload gone)."""
        await self._done.wait()

    def _notify(self) -> None:
        # Swap only when someone waits: a busy PTY would otherwise build one
        # Event per read for nobody.
        if self._changed.statistics().tasks_waiting:
            self._changed.set()
            self._changed = trio.Event()

    def _advance(self, phase: SessionPhase) -> None:
        if phase.value > self.phase.value:
            self.phase = phase

    def _set_status(self, status: RunStatus) -> bool:
        now = self._wall_clock()
        changed = self._record.set_status(status, now)
        if changed:
            if status["kind"] == "running" and self.running_at is None:
                self.running_at = now
                self.metrics.session_started(self.backend_name, "running")
                self.metrics.start_latency(self.backend_name, now - self._record.created_at)
            self._notify()
        return changed

    # -- terminal ----------------------------------------------------------

    def write_stdin(self, data: bytes) -> None:
        """Send bytes to the workload's stdin; dropped before it exists and after it ends.

        `running` is published only once the handle is attached (`attach`),
        so a client that has seen `running` never loses its stdin.
        """
        if not data or self.is_terminal:
            return
        self.metrics.pty_bytes("input", len(data))
        if self._workload is not None:
            self._workload.handle.write(data)

    def resize(self, cols: int, rows: int) -> None:
        """Resize the workload's terminal, coalesced: at most one resize per
        `RESIZE_INTERVAL_S` reaches it, and the latest size wins
        (`runnerd.session.resize`).

        The values are the caller's to validate (the WebSocket route clamps
        them per the contract in `runnerd.http.io.parse_resize`)."""
        if self.is_terminal:
            return
        self._requested_size = (cols, rows)
        self._size_requested.set()
        if self._workload is None:
            self._pending_size = (cols, rows)  # applied on attach
        else:
            self._workload.resize.request(cols, rows)

    # -- the manager's side ------------------------------------------------

    @property
    def stop_scope(self) -> trio.CancelScope:
        """What a stop cancels: the run enters it once (cancelled on entry
        when a stop came first)."""
        return self._stop_scope

    def attach(self, started: Started, nursery: trio.Nursery) -> None:
        """The workload exists (RUNNING): route stdin and resizes to its
        handle, run deferred resize flushes in `nursery` (the workload's, so
        none outlives it), then publish `running` (in that order:
        load-bearing, see `write_stdin`)."""
        coalescer = ResizeCoalescer(started.handle.resize, nursery, {"session_id": self.id})
        self._workload = _Workload(started.handle, coalescer, started.stop)
        self._advance(SessionPhase.RUNNING)
        if self._pending_size is not None:
            coalescer.request(*self._pending_size)
            self._pending_size = None
        self._set_status(running(list(started.endpoints), started.inspect_url))

    def drop_handle(self) -> None:
        """The run is over (ENDING): stdin and resizes are dropped from now on."""
        if self._workload is not None:
            self._workload.resize.close()
        self._workload = None
        self._advance(SessionPhase.ENDING)

    async def stop_workload(self) -> None:
        """The backend's own first step of a user stop (`Started.stop`), if
        it gave one and the session is RUNNING (no end asked yet, the
        workload still there); else nothing.

        Raises:
            StopRefused: the workload could not be stopped; it runs on.
        """
        # One backend stop at a time: a second DELETE while one is in flight
        # gets the first one's answer (a pod is deleted once), or tries
        # itself when the first gave up at its deadline.
        while (attempt := self._stop_attempt) is not None:
            await attempt.done.wait()
            if attempt.finished:
                if attempt.refused is not None:
                    raise StopRefused(str(attempt.refused)) from attempt.refused
                return
        workload = self._workload
        if self.phase is not SessionPhase.RUNNING or workload is None or not workload.stop:
            return
        attempt = self._stop_attempt = _StopAttempt()
        try:
            await workload.stop()
            attempt.finished = True
        except StopRefused as exc:
            attempt.refused, attempt.finished = exc, True
            raise
        finally:
            self._stop_attempt = None
            attempt.done.set()

    def release_creation(self) -> None:
        """Forget what creating the workload needed (its bundle, its env with
        catalog secrets): an ended session stays `exit_ttl_seconds` for
        replay, and must not pin a 16 MiB bundle or a secret that long."""
        self.spec = RunSpec(self.spec.identity, None)

    def request_stop(self, intent: EndIntent = EndIntent.STOP) -> None:
        """End on request (ENDING): record `intent` for the backend's
        teardown and the ending, and cancel the stop scope (if the run has
        not entered it yet, it is cancelled on entry)."""
        if self.is_terminal:
            return
        self.end_requested = intent
        self._advance(SessionPhase.ENDING)
        self._stop_scope.cancel()

    def close(self, status: RunStatus | None) -> None:
        """The session task has ended (ENDED): record `status` (terminal)
        unless one is already recorded, drop the workload, and release
        `wait_terminal`. None: it was detached (its workload runs on for a
        successor daemon, which reports how it ends), so no status is
        recorded here."""
        self.drop_handle()
        if status is not None:
            self._set_status(status)
        self._advance(SessionPhase.ENDED)
        self._done.set()
