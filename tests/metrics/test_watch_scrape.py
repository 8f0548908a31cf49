"""The watch-session series of `GET /metrics`, scraped from a real daemon
(local backend) after a watch session was written to, reloaded, suspended
and resumed."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_watch_limits import wait_suspended
from tests.e2e.watch_client import route, start_watch, started, wait_frames, wait_running
from tests.harness import start_daemon

from .test_scrape import overrides, scrape, value


async def test_watch_sessions_generations_suspends_resumes_and_writes_are_counted(
    tmp_path: Path,
) -> None:
    config = overrides(tmp_path, watch={"enabled": True, "idle_seconds": 1})
    async with start_daemon(tmp_path, config) as daemon:
        async with daemon.client() as client:
            before = await scrape(daemon, tmp_path)
            assert value(before, "runnerd_watch_app_generations_total", trigger="watch") == 0
            assert value(before, "runnerd_watch_suspends_total") == 0
            session_id = await start_watch(client)
            await wait_running(client, session_id)
            write = {"write": [{"path": "a.txt", "content": "1"}], "delete": ["once.sh"]}
            assert (await route(client, "POST", session_id, "workspace", json=write)).is_success
            await wait_frames(client, session_id, lambda fs: started(fs, "app", 2) is not None)
            assert (await route(client, "POST", session_id, "reload")).status_code == 202
            await wait_frames(client, session_id, lambda fs: started(fs, "app", 3) is not None)
            await wait_suspended(client, session_id)  # plain GETs: no subscriber
            suspended = await scrape(daemon, tmp_path)
            assert value(suspended, "runnerd_watch_sessions", status="suspended") == 1
            assert value(suspended, "runnerd_watch_suspends_total") == 1
            assert (await route(client, "POST", session_id, "resume")).status_code == 202
            await wait_frames(client, session_id, lambda fs: started(fs, "app", 4) is not None)
            samples = await scrape(daemon, tmp_path)
    assert value(samples, "runnerd_watch_sessions", status="running") == 1
    assert value(samples, "runnerd_watch_sessions", status="suspended") == 0
    for trigger in ("initial", "watch", "manual", "resume"):
        assert value(samples, "runnerd_watch_app_generations_total", trigger=trigger) == 1
    assert value(samples, "runnerd_watch_resumes_total") == 1
    assert value(samples, "runnerd_watch_workspace_paths_total", change="written") == 1
    assert value(samples, "runnerd_watch_workspace_paths_total", change="deleted") == 1
    assert value(samples, "runnerd_sessions", status="running") == 1  # a watch session is a session
