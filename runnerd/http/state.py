"""`AppState`: what the routes of the HTTP edge need of the daemon, as protocols.

The daemon's runtime object (`runnerd.daemon.runtime.Runtime`) satisfies
`AppState`; the edge never imports it. The daemon may swap `config` at any
time (SIGHUP), so every route reads `state.config` per request. Setting
`closing` ends every SSE stream and WebSocket at once, so the server can
stop promptly. `Sessions` is the part of the session manager the routes
use: start (a watch session too), find, stop, list and resume; never adoption, shutdown or limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import trio

    from runnerd.backend import Backend, RunSpec
    from runnerd.config import Config
    from runnerd.config.images import Offered
    from runnerd.http.streams import SubscriberCounts
    from runnerd.metrics import Metrics
    from runnerd.session.session import Session
    from runnerd.session.watchspec import WatchSessionSpec


class Sessions(Protocol):
    """The routes' view of `runnerd.session.manager.SessionManager`."""

    def start(self, spec: RunSpec) -> Session:
        """Register `spec` and start it (RegistryFull, ManagerClosed)."""

    def start_watch(self, spec: WatchSessionSpec) -> Session:
        """Register a watch session and start it (RegistryFull, ManagerClosed)."""

    def watch_live_count(self) -> int:
        """Watch sessions `starting` or `running` (check 9)."""

    async def resume(self, session_id: str) -> None:
        """`POST /resume` (WatchError 404 not_suspended, 409 too_many_watch_sessions)."""

    def get(self, session_id: str) -> Session | None:
        """The registered session, or None."""

    async def lookup(self, session_id: str) -> Session:
        """The session, waiting for recovery (SessionNotFound)."""

    async def stop(self, session_id: str) -> None:
        """A user stop, returning once it is terminal (StopFailed)."""

    def sessions(self) -> list[Session]:
        """Every registered session, oldest first."""


class AppState(Protocol):
    """What every route shares, read-only to the edge."""

    @property
    def config(self) -> Config: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def sessions(self) -> Sessions: ...

    @property
    def version(self) -> str: ...

    @property
    def closing(self) -> trio.Event: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def subscribers(self) -> SubscriberCounts: ...

    def offered(self) -> Offered:
        """The images a bundle session may pick under the config in effect."""
