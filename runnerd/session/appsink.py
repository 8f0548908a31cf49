"""Where one app of a watch session reports: its output, its progress, its watchers.

`AppOutputSink` is the `runnerd.backend.watch.AppSink` a generation's
`run_app` is given (output into the app's own ring, tagged with its stream;
progress as a `progress` event carrying `app`); `AppReport` is where the
core's watchers of that generation's address report (`reachability` and
`debug` events carrying `app`; a self-watching app's frames also feed its
`KernelProjection`: its `run` events, and a `Kernel.PortsResolved` as its
new port set and an `endpoints` event). `AgentSink` is the agent's: it is not an
app, so its output goes nowhere a client reads (no `/io`), and its progress
is session-wide. All are synchronous, never raise, and are no-ops once the
session is terminal (the record enforces that for events).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from runnerd.backend.watch import OutputStream
from runnerd.contract import (
    PortMapping,
    Reachability,
    RouteState,
    RunPhase,
    debug_event,
    is_event_frame,
    progress_event,
    reachability_event,
    route_event,
)
from runnerd.session.sink import DRAIN_TIMEOUT_S
from runnerd.watch.kernel import AgentPort, diff_ports

if TYPE_CHECKING:
    from runnerd.session.apps import AppChannel
    from runnerd.session.watchsession import WatchSession

log = logging.getLogger("runnerd.sessions")


async def drain_within_budget(
    session_id: str, steps: tuple[Callable[[], Awaitable[object]], ...]
) -> bool:
    """`AppSink.drain`: the steps within the core's `DRAIN_TIMEOUT_S`."""
    with trio.move_on_after(DRAIN_TIMEOUT_S):
        for step in steps:
            await step()
        return True
    log.info(
        "app output not through %g s after the end",
        DRAIN_TIMEOUT_S,
        extra={"session_id": session_id},
    )
    return False


class AppOutputSink:
    """One generation's `AppSink` (see the module docstring)."""

    def __init__(self, session: WatchSession, channel: AppChannel) -> None:
        self._session = session
        self._channel = channel

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        if not self._session.is_terminal and not self._channel.gone:
            self._session.metrics.pty_bytes("output", len(data))
            self._channel.output(data, stream)

    def output_lost(self) -> None:
        if not self._session.is_terminal and not self._channel.gone:
            self._channel.output_lost()

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        self._session.emit(progress_event(phase, message, done, app=self._channel.name))

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        return await drain_within_budget(self._session.id, steps)

    def exited(self, code: int) -> None:
        self._channel.stopped_code = code  # the stopped generation's `completed` code


class AppReport:
    """The core's watchers of one generation (`runnerd.workload.supervision.Report`)."""

    def __init__(self, session: WatchSession, channel: AppChannel) -> None:
        self._session = session
        self._channel = channel

    def reachability(self, port: int, state: Reachability) -> None:
        self._session.emit(reachability_event(port, state, app=self._channel.name))

    def debug(self, frame: dict[str, Any]) -> None:
        if not is_event_frame(frame):
            return
        self._session.emit(debug_event(frame, app=self._channel.name))
        kernel = self._channel.kernel
        if kernel is not None:  # a self-watching app: its generations are the kernel's
            update = kernel.feed(frame, trio.current_time())
            self._session.emit_run(*update.runs)
            reported = self._channel.on_kernel_run
            if update.runs and reported is not None:
                self._channel.on_kernel_run = None
                reported()  # its first run: what the session's `running` waits for
            if update.declared is not None:
                self._ports_declared(update.declared)

    def _ports_declared(self, declared: tuple[PortMapping, ...]) -> None:
        """A `Kernel.PortsResolved`: the app's new port set and its `endpoints` event."""
        session, channel = self._session, self._channel
        apps = {c.name: c.ports for c in session.app_channels()}
        agent = session.watch_spec.agent
        owner = AgentPort(agent.name, agent.port) if agent and session.agent_name else None
        diff = diff_ports(channel.name, declared, apps, owner)
        if diff is not None:
            channel.spec = replace(channel.spec, ports=diff.ports)
            session.emit(diff.event())
            session.request_publish()  # `running.endpoints` follows the announced set


class AgentSink:
    """The co-resident agent's `AppSink`: output dropped, progress session-wide."""

    def __init__(self, session: WatchSession) -> None:
        self._session = session

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        pass  # not an app: no `/io`, no ring

    def output_lost(self) -> None:
        pass

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        self._session.emit(progress_event(phase, message, done))

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        return await drain_within_budget(self._session.id, steps)

    def exited(self, code: int) -> None:
        pass  # not an app: it has no generations


class SessionProgress:
    """`open_watch`'s `ProgressReport`: session-wide steps (no `app`)."""

    def __init__(self, session: WatchSession) -> None:
        self._session = session

    def progress(self, phase: RunPhase, message: str, done: bool | None = None) -> None:
        self._session.emit(progress_event(phase, message, done))

    def detaching(self) -> bool:
        """The daemon restarts and leaves the session's place to a successor."""
        return self._session.detaching

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        """With the app that declares `port` (none when no app does)."""
        app = next(
            (c.name for c in self._session.app_channels() if any(p.port == port for p in c.ports)),
            None,
        )
        self._session.emit(route_event(host, port, state, app=app, reason=reason))
