"""A watch session's port set, published through its host: `Publisher`.

Owns what `running.endpoints` says while a watch session serves. The port
set is every app's ports in app order, each (protocol, port) once
(`port_set`); `WatchHost.publish` is told it once every app of a period
reported (before `running`) and again on every change while the session
serves (`PUT /apps`, a `Kernel.PortsResolved`: `request`). What the host
published is the status: `running` with `Published.endpoints` (and the
agent's endpoint); each port it rejected is an `endpoints` event with
`rejected`, for the app that declares the port, said once while the
rejection stands (a later publish that rejects it again says nothing new).

Publishes run one at a time, each with the set in effect when it begins,
so the status always ends at the latest set. A publish that raises a
`RunnerdError` (the backend could not reach what publishes) rejects every
port with its message; the session goes on.

Resource handling: `run` is a task of the driver's serving nursery;
`publish` is awaited by the driver (the first) and by `PUT /apps` on a
live host (so its 202 follows the new endpoints).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import trio

from runnerd.backend.watch import Published, WatchHost
from runnerd.contract import (
    PortMapping,
    PortRejection,
    RunEvent,
    RunnerEndpoint,
    RunStatus,
    endpoints_event,
    running,
)
from runnerd.errors import RunnerdError

if TYPE_CHECKING:
    from runnerd.session.apps import AppChannel

log = logging.getLogger("runnerd.sessions")


class _AgentPlan(Protocol):
    @property
    def endpoint(self) -> RunnerEndpoint: ...

    @property
    def conflict(self) -> str | None: ...


class PublishingSession(Protocol):
    """What a `Publisher` needs of `runnerd.session.watchsession.WatchSession`."""

    @property
    def id(self) -> str: ...

    @property
    def serving_period(self) -> bool: ...

    def app_channels(self) -> list[AppChannel]: ...

    def agent_plan(self) -> _AgentPlan | None: ...

    def set_status(self, status: RunStatus) -> None: ...

    def emit(self, event: RunEvent) -> None: ...


def port_set(channels: list[AppChannel]) -> tuple[PortMapping, ...]:
    """Every app's ports, in app order, each (protocol, port) once."""
    found: dict[tuple[str, int], PortMapping] = {}
    for channel in channels:
        for port in channel.ports:
            found.setdefault((port.protocol, port.port), port)
    return tuple(found.values())


def owner_of(channels: list[AppChannel], port: int) -> str | None:
    """The first app (in app order) that declares `port`."""
    return next((c.name for c in channels if any(p.port == port for p in c.ports)), None)


class Publisher:
    """One live host's publishing (see the module docstring)."""

    def __init__(self, session: PublishingSession, host: WatchHost) -> None:
        self._session = session
        self._host = host
        self._lock = trio.Lock()
        self._wanted = trio.Event()
        # The rejections the last publish reported, so each is said once.
        self._rejected: set[tuple[int, str]] = set()

    def request(self) -> None:
        """The port set changed: publish it again (soon, in `run`)."""
        self._wanted.set()

    async def run(self) -> None:
        """Publish each change asked for (coalesced), until cancelled."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            await self.publish()

    async def publish(self) -> None:
        """Publish the set in effect now and show what came of it."""
        async with self._lock:
            session = self._session
            ports = port_set(session.app_channels())
            try:
                published = await self._host.publish(ports)
            except RunnerdError as exc:
                log.warning("publish failed: %s", exc.message, extra={"session_id": session.id})
                why = f"the port could not be published: {exc.message}"
                published = Published((), tuple((p.port, why) for p in ports))
            self._show(published)

    def _show(self, published: Published) -> None:
        session = self._session
        if not session.serving_period:  # stopping meanwhile: no `running` now
            return
        plan = session.agent_plan()
        agent = plan.endpoint if plan is not None and plan.conflict is None else None
        session.set_status(running(list(published.endpoints), agent=agent))
        fresh = [r for r in published.rejected if r not in self._rejected]
        self._rejected = set(published.rejected)
        by_app: dict[str, list[PortRejection]] = {}
        channels = session.app_channels()
        for port, reason in fresh:
            app = owner_of(channels, port)
            if app is not None:
                by_app.setdefault(app, []).append(PortRejection(port=port, reason=reason))
        for app, rejected in by_app.items():
            session.emit(endpoints_event(app, rejected=rejected))
