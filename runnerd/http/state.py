"""`AppState`: what every route of the HTTP edge shares.

The daemon owns `AppState` and may swap `state.config` at any time (SIGHUP);
every route reads `state.config` per request. Setting `state.closing` ends
every SSE stream and WebSocket at once, so the server can stop promptly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from runnerd.backend import Backend
from runnerd.config import Config
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
