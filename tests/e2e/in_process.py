"""Serve the production app in-process, for tests that need what a daemon
subprocess does not expose.

`open_app` runs `create_app` under hypercorn on a UNIX socket in `tmp_path`
with a real `SessionManager`, and by default the real `LocalBackend` with an
`sh` runtime (or, with `overrides`, the configured backend: the kubernetes
one on a test cluster); a test may pass its own backend (e.g. one that emits
thousands of events) or a short SSE heartbeat. It yields the daemon's runtime
object (`runnerd.daemon.runtime.Runtime`), so a test can set `closing` or
reach the manager while sessions stay live.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from runnerd.backend import Backend, BackendContext
from runnerd.backends import parse_config, provider_for
from runnerd.config import Config
from runnerd.daemon.runtime import Runtime
from runnerd.http.app import create_app
from runnerd.http.events import DEFAULT_HEARTBEAT_S
from runnerd.session.manager import SessionManager
from tests.harness import _merge


@contextlib.asynccontextmanager
async def open_app(
    tmp_path: Path,
    *,
    backend: Backend | None = None,
    sse_heartbeat_s: float = DEFAULT_HEARTBEAT_S,
    overrides: Mapping[str, Any] | None = None,
) -> AsyncIterator[tuple[Runtime, Path]]:
    """Yield `(state, socket_path)` while the app serves on `socket_path`.

    Without `backend`, the configured one (`overrides`, e.g.
    `tests.shared_daemon.OnBackend.overrides()`: the kubernetes backend on
    the module's test cluster), opened as the daemon opens it."""
    socket_path = tmp_path / "s.sock"
    raw = {
        "server": {"listen": [f"unix:{socket_path}"]},
        "runner": {"default_image": "sh"},
        "local": {
            "workdir": str(tmp_path / "sessions"),
            "stop_grace_seconds": 1,
            "runtimes": {"sh": {"command": ["/bin/sh", "{entry}"]}},
        },
    }
    config = parse_config(_merge(raw, overrides or {}), base_dir=tmp_path, read_text=Path.read_text)
    provider = provider_for(config)
    async with contextlib.AsyncExitStack() as stack:
        if backend is None:
            backend = await stack.enter_async_context(
                provider.open_backend(config, BackendContext())
            )
        async with _serve(
            config, backend, provider.offered_images, socket_path, sse_heartbeat_s
        ) as state:
            yield state, socket_path
    socket_path.unlink(missing_ok=True)  # hypercorn leaves it behind


@contextlib.asynccontextmanager
async def _serve(
    config: Config,
    backend: Backend,
    offered_images: Callable[[Config], tuple[str, ...] | None],
    socket_path: Path,
    sse_heartbeat_s: float,
) -> AsyncIterator[Runtime]:
    sessions = SessionManager(
        backend,
        max_sessions=config.runner.max_sessions,
        exit_ttl_s=config.runner.exit_ttl_s,
        replay_buffer_bytes=config.runner.replay_buffer_bytes,
        apps=config.apps,
    )
    state = Runtime(config, backend, sessions, "test", trio.Event(), offered_images=offered_images)
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
            yield state
        finally:
            state.closing.set()
            stop.set()
            nursery.cancel_scope.cancel()


def open_client(socket_path: Path) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(socket_path)), base_url="http://runnerd"
    )
