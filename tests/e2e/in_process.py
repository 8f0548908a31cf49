"""Serve the production app in-process, for tests that need what a daemon
subprocess does not expose.

`open_app` runs `create_app` under hypercorn on a UNIX socket in `tmp_path`
with a real `SessionManager`, and by default the real `LocalBackend` with an
`sh` runtime; a test may pass its own backend (e.g. one that emits thousands
of events) or a short SSE heartbeat. It yields the `AppState`, so a test can
set `closing` or reach the manager while sessions stay live.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from runnerd.backend import Backend
from runnerd.config import parse_config
from runnerd.http.app import create_app
from runnerd.http.events import DEFAULT_HEARTBEAT_S
from runnerd.http.state import AppState
from runnerd.local import LocalBackend, offered_images
from runnerd.session.manager import SessionManager


@contextlib.asynccontextmanager
async def open_app(
    tmp_path: Path,
    *,
    backend: Backend | None = None,
    sse_heartbeat_s: float = DEFAULT_HEARTBEAT_S,
) -> AsyncIterator[tuple[AppState, Path]]:
    """Yield `(state, socket_path)` while the app serves on `socket_path`."""
    socket_path = tmp_path / "s.sock"
    config = parse_config(
        {
            "server": {"listen": [f"unix:{socket_path}"]},
            "runner": {"default_image": "sh"},
            "local": {
                "workdir": str(tmp_path / "sessions"),
                "stop_grace_seconds": 1,
                "runtimes": {"sh": {"command": ["/bin/sh", "{entry}"]}},
            },
        },
        base_dir=tmp_path,
        read_text=Path.read_text,
    )
    backend = backend or LocalBackend(config.local, apps=lambda: config.apps)
    sessions = SessionManager(
        backend,
        max_sessions=config.runner.max_sessions,
        exit_ttl_s=config.runner.exit_ttl_s,
        replay_buffer_bytes=config.runner.replay_buffer_bytes,
    )
    state = AppState(
        config, backend, sessions, "test", trio.Event(), offered_images=offered_images
    )
    hypercorn = HypercornConfig()
    hypercorn.bind = [f"unix:{socket_path}"]
    hypercorn.accesslog = None
    hypercorn.graceful_timeout = 1.0
    stop = trio.Event()
    app = create_app(state, sse_heartbeat_s=sse_heartbeat_s)
    async with trio.open_nursery() as nursery:
        await nursery.start(sessions.run)
        await nursery.start(partial(serve, app, hypercorn, shutdown_trigger=stop.wait))
        try:
            yield state, socket_path
        finally:
            state.closing.set()
            stop.set()
            nursery.cancel_scope.cancel()
    socket_path.unlink(missing_ok=True)  # hypercorn leaves it behind


def open_client(socket_path: Path) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(socket_path)), base_url="http://runnerd"
    )
