"""Behaviour that depends on time or on shutdown: the SSE heartbeat,
`AppState.closing`, and a start that lands while sessions are being stopped.

These serve `create_app` in-process (hypercorn on a UNIX socket in
`tmp_path`, a real backend and `SessionManager`) because they need
what a daemon subprocess does not expose: a short heartbeat interval,
setting `closing` while sessions stay live, and the window between the
manager refusing sessions and the server closing its listeners.

On each backend (`on_backend`: kubernetes on the module's test cluster).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import trio

from tests.e2e.contract_client import SSE_TIMEOUT, bundle_body, read_pty, start_session
from tests.e2e.in_process import open_app, open_client
from tests.harness import iter_sse, open_ws
from tests.shared_daemon import OnBackend

HEARTBEAT_S = 0.1


async def test_idle_sse_stream_sends_heartbeat_comments(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    app = open_app(tmp_path, sse_heartbeat_s=HEARTBEAT_S, overrides=on_backend.overrides())
    async with app as (_, socket_path), open_client(socket_path) as client:
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


async def test_closing_ends_sse_and_websocket_of_live_sessions(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    app = open_app(tmp_path, sse_heartbeat_s=HEARTBEAT_S, overrides=on_backend.overrides())
    async with app as (state, socket_path), open_client(socket_path) as client:
        session_id = await start_session(client, "echo ready; exec sleep 30")
        kinds: list[str] = []
        async with open_ws(socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"ready")
            # Generous: a hang is what it catches; the streams' end is proven by
            # the session still running after it.
            with trio.fail_after(30):
                async with client.stream(
                    "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
                ) as response:
                    async for frame in iter_sse(response):
                        if frame.event != "status":
                            continue  # the kubernetes backend's progress
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


async def test_start_during_shutdown_is_503_shutting_down_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, on_backend: OnBackend
) -> None:
    app = open_app(tmp_path, sse_heartbeat_s=HEARTBEAT_S, overrides=on_backend.overrides())
    async with app as (state, socket_path), open_client(socket_path) as client:
        live_id = await start_session(client, "exec sleep 30")
        # What the daemon does first on SIGTERM: refuse new sessions, stop live ones.
        assert await state.sessions.stop_all() == []
        with caplog.at_level(logging.WARNING):
            response = await client.post("/v1/sessions", json=bundle_body("exit 0"))
        listed = [s.id for s in state.sessions.sessions()]
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["error"] == "shutting_down"
    assert "shutting down" in body["message"]
    assert listed == [live_id]  # the refused start registered nothing
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
