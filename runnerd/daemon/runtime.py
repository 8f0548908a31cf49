"""`Runtime`: the daemon's runtime object, what lives while it serves.

Owns the one object the daemon's parts share once the backend is open: the
config in effect (the daemon swaps `config` on SIGHUP, `runnerd.daemon.reload`;
every route reads it per request), the backend, the session manager, the
metrics, the live stream subscribers and `closing` (set at shutdown: every
SSE stream and WebSocket ends at once, so the servers can stop promptly).
`build_runtime` builds it from the config. The HTTP edge sees it through
the narrow protocol it declares (`runnerd.http.state.AppState`), never
this class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from runnerd import __version__
from runnerd.backend import Backend
from runnerd.backends import Configured
from runnerd.config import Config
from runnerd.config.images import Offered
from runnerd.http.streams import SubscriberCounts
from runnerd.metrics import NULL_METRICS, Metrics
from runnerd.session.manager import SessionManager
from runnerd.session.statefile import StateDir


@dataclass
class Runtime:
    """See the module docstring. Satisfies `runnerd.http.state.AppState`."""

    config: Config
    backend: Backend
    sessions: SessionManager
    version: str
    closing: trio.Event
    metrics: Metrics = field(default=NULL_METRICS)
    # Live SSE + WebSocket subscribers per session (`runnerd.http.streams`).
    subscribers: SubscriberCounts = field(default_factory=SubscriberCounts)
    # The backend's images for the allowlist, from the current config
    # (`runnerd.backends.Provider.offered_images`); none by default.
    offered_images: Callable[[Config], Offered] = field(default=lambda config: None)

    def offered(self) -> Offered:
        """The images a bundle session may pick under the config in effect."""
        return self.offered_images(self.config)


def build_runtime(
    config: Config,
    backend: Backend,
    provider: Configured,
    metrics: Metrics = NULL_METRICS,
    files: StateDir | None = None,
    version: str = __version__,
) -> Runtime:
    """The runtime for an open `backend`: a session manager sized and
    cataloged by `config` (its `run()` is the caller's to start), counting
    in `metrics`, keeping replay marks in `files`."""
    sessions = SessionManager(
        backend,
        max_sessions=config.runner.max_sessions,
        exit_ttl_s=config.runner.exit_ttl_s,
        replay_buffer_bytes=config.runner.replay_buffer_bytes,
        stop_timeout_s=provider.stop_timeout_s(config),
        metrics=metrics,
        state=files,
        apps=config.apps,
        watch=config.watch,
    )
    metrics.watch_sessions(lambda: [s.status["kind"] for s in sessions.sessions()])
    metrics.watch_session_statuses(
        lambda: [s.status["kind"] for s in sessions.sessions() if s.mode == "watch"]
    )
    return Runtime(
        config=config,
        backend=backend,
        sessions=sessions,
        version=version,
        closing=trio.Event(),
        metrics=metrics,
        offered_images=provider.offered_images,
    )
