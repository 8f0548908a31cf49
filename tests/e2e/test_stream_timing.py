"""Stream behaviour that depends on time or on shutdown: the SSE heartbeat
and `AppState.closing`.

These serve `create_app` in-process (hypercorn on a UNIX socket in
`tmp_path`, the real `LocalBackend` and `SessionManager`) because they need
what a daemon subprocess does not expose: a short heartbeat interval, and
setting `closing` while sessions stay live.
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

from runnerd.app import AppState, create_app
from runnerd.config import parse_config
from runnerd.local import LocalBackend
from runnerd.sessions import SessionManager
from tests.e2e.contract_client import SSE_TIMEOUT, read_pty, start_session
from tests.harness import iter_sse, open_ws

HEARTBEAT_S = 0.1


@contextlib.asynccontextmanager
async def open_app(tmp_path: Path) -> AsyncIterator[tuple[AppState, Path]]:
    config = parse_config(
        {
            "server": {"listen": [f"unix:{tmp_path}/s.sock"]},
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
    backend = LocalBackend(config.local, apps=lambda: config.apps)
    sessions = SessionManager(
        backend,
        max_sessions=config.runner.max_sessions,
        exit_ttl_s=config.runner.exit_ttl_s,
        replay_buffer_bytes=config.runner.replay_buffer_bytes,
    )
    state = AppState(config, backend, sessions, "test", trio.Event())
    socket_path = tmp_path / "s.sock"
    hypercorn = HypercornConfig()
    hypercorn.bind = [f"unix:{socket_path}"]
    hypercorn.accesslog = None
    hypercorn.graceful_timeout = 1.0
    stop = trio.Event()
    app = create_app(state, sse_heartbeat_s=HEARTBEAT_S)
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


def _client(socket_path: Path) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(socket_path)), base_url="http://runnerd"
    )


async def test_idle_sse_stream_sends_heartbeat_comments(tmp_path: Path) -> None:
    async with open_app(tmp_path) as (_, socket_path), _client(socket_path) as client:
        session_id = await start_session(client, "exec sleep 30")
        heartbeats = 0
        with trio.fail_after(5):
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as response:
                async with contextlib.aclosing(iter_sse(response)) as frames:
                    async for frame in frames:
                        if frame.comments:
                            assert frame.raw == [": heartbeat"]
                            assert frame.id is None and frame.event is None
                            heartbeats += 1
                            if heartbeats == 2:
                                break
    assert heartbeats == 2


async def test_closing_ends_sse_and_websocket_of_live_sessions(tmp_path: Path) -> None:
    async with open_app(tmp_path) as (state, socket_path), _client(socket_path) as client:
        session_id = await start_session(client, "echo ready; exec sleep 30")
        kinds: list[str] = []
        async with open_ws(socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"ready")
            with trio.fail_after(3):
                async with client.stream(
                    "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
                ) as response:
                    async for frame in iter_sse(response):
                        kinds.append(frame.data["status"]["kind"])
                        if kinds[-1] == "running":
                            state.closing.set()
                    # The loop ends when the server ends the stream.
                await read_pty(ws, transcript)
        live = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]["kind"]
    # The streams ended because of shutdown, not because the session did.
    assert live == "running"
    assert kinds == ["starting", "running"]
    assert transcript.close is not None and transcript.close.code == 1001

