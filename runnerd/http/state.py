"""`AppState`: what every route of the HTTP edge shares.

The daemon owns `AppState` and may swap `state.config` at any time (SIGHUP);
every route reads `state.config` per request. Setting `state.closing` ends
every SSE stream and WebSocket at once, so the server can stop promptly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from runnerd.backend import Backend
from runnerd.config import Config
from runnerd.config.images import Offered
from runnerd.http.streams import SubscriberCounts
from runnerd.metrics import NULL_METRICS, Metrics
from runnerd.session.manager import SessionManager


@dataclass
class AppState:
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
        return self.offered_images(self.config)
