"""What a session's backend and the core's watchers report through.

`SessionSink` is the `runnerd.backend.Sink` a backend's `run()` is given;
`SessionReport` is where the core's watchers of `Started.address`
(`runnerd.workload.supervision`) report reachability and debug frames. Both
write into their `runnerd.session.session.Session` and wake its readers;
both are synchronous, never raise, and are no-ops once it is terminal, but
for the sink's two waits: the terminal's first size, and the drain (the rest
of an ended workload's output, within `DRAIN_TIMEOUT_S`: the budget is the
core's, one value for every backend and, in a watch session, every app).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from runnerd.backend import EndIntent
from runnerd.contract import (
    Reachability,
    RouteState,
    RunPhase,
    RunStatus,
    debug_event,
    is_event_frame,
    is_terminal,
    progress_event,
    reachability_event,
    route_event,
)
from runnerd.session.session import Session

log = logging.getLogger("runnerd.sessions")

# After its workload ends, how long a backend may wait for the rest of its
# output (`Sink.drain`). Every writer is dead by then, so this is only reached
# when something that escaped the stop still holds the terminal: it bounds how
# long after its workload's end a session is terminal, on every backend.
DRAIN_TIMEOUT_S = 2.0


class SessionSink:
    """The `Sink` a backend reports through: synchronous, never raises, and a
    no-op once the session is terminal (the record enforces that)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._record = session._record

    def status(self, status: RunStatus) -> None:
        if is_terminal(status):
            # Terminal statuses are the manager's to decide (from the outcome).
            log.warning(
                "backend reported terminal status %s; ignored",
                status["kind"],
                extra={"session_id": self._session.id},
            )
            return
        self._session._set_status(status)

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        if self._record.emit(progress_event(phase, message, done)) is not None:
            self._session._notify()

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        if self._record.emit(route_event(host, port, state, reason=reason)) is not None:
            self._session._notify()

    def output(self, data: bytes) -> None:
        if self._record.output(data) is not None:
            self._session.metrics.pty_bytes("output", len(data))
            self._session._notify()

    def output_lost(self) -> None:
        if self._record.output_lost() is not None:
            self._session._notify()

    def end_intent(self) -> EndIntent:
        return self._session.end_requested or EndIntent.STOP

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        with trio.move_on_after(DRAIN_TIMEOUT_S):
            for step in steps:
                await step()
            return True
        log.info(
            "output not through %g s after the end",
            DRAIN_TIMEOUT_S,
            extra={"session_id": self._session.id},
        )
        return False

    async def terminal_size(self, wait_s: float) -> tuple[int, int] | None:
        session = self._session
        created_at = session.spec.identity.created_at
        elapsed_s = 0.0 if created_at is None else max(0.0, session._wall_clock() - created_at)
        # From creation, as the TTL: the backend's own preparation counts.
        with trio.move_on_at(trio.current_time() + wait_s - elapsed_s):
            await session._size_requested.wait()
        return session._requested_size


class SessionReport:
    """Where the core's own watchers of the workload report
    (`runnerd.workload.supervision.Report`: its reachability probes and debug
    relay; not part of the seam). Synchronous, never raises, a no-op once
    the session is terminal. Debug frames other than events are dropped (the
    same bytes arrive on the PTY channel), and so is the kernel's replay of
    frames a previous daemon relayed (`Session.relayed_debug`)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._record = session._record

    def reachability(self, port: int, state: Reachability) -> None:
        if self._record.emit(reachability_event(port, state)) is not None:
            self._session._notify()

    def debug(self, frame: dict[str, Any]) -> None:
        if not is_event_frame(frame):
            return
        relayed = self._session.relayed_debug
        if relayed:  # the kernel's replay, in order, until the first new frame
            if frame == relayed[0]:
                relayed.popleft()
                return
            relayed.clear()
        if self._record.emit(debug_event(frame)) is not None:
            self._session._notify()
