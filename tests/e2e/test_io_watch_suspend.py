"""Streams and idle suspend through a real daemon (local backend, idle after
1 s): an open `/io` socket or SSE stream is a subscriber, so the session
stays up while one is open and suspends once the last one left; a
`suspended` status ends neither stream, both replay and stay open over it,
and the session's DELETE then ends both (`stopped`; close 1000)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import trio

from tests.e2e.io_client import TIMEOUT_S, Io, assert_sse_conforms, printed, start_watch
from tests.e2e.watch_client import kind_of, next_status, open_sse, until_kind
from tests.shared_daemon import SharedDaemon, shared_daemon

# Four ticks a second apart, on the terminal and into the workspace (read
# with plain requests, which are no subscribers): whoever waits for the
# fourth is open for 3 s at least, longer than the idle time (1 s) and the
# contract's 2 s to act on it.
TICKS = (
    'i=0; while [ $i -lt 4 ]; do i=$((i+1)); echo "tick $i"; echo "tick $i" >> ticks.txt; '
    "sleep 1; done; exec sleep 600"
)
APPS = [{"name": "ticker", "entryRelativePath": "tick.sh"}]
FILES = {"tick.sh": TICKS}


@pytest.fixture(scope="module", name="runnerd")
def idle_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    overrides = {"watch": {"enabled": True, "idle_seconds": 1}}
    with shared_daemon(tmp_path_factory.mktemp("runnerd"), overrides) as daemon:
        yield daemon


async def until_ticked(client: httpx.AsyncClient, session_id: str, tick: str) -> None:
    """Poll the workspace's `ticks.txt` (plain requests) until it holds `tick`."""
    url = f"/v1/sessions/{session_id}/workspace/file"
    with trio.fail_after(TIMEOUT_S):
        while True:
            answer = await client.get(url, params={"path": "ticks.txt"})
            if answer.status_code == 200 and tick in answer.json()["content"]:
                return
            assert answer.status_code in (200, 404, 409), answer.text
            await trio.sleep(0.05)


async def test_io_watch_an_open_socket_holds_off_idle_suspend(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        ticker = await io.connect(session_id, "?app=ticker&lastSeq=0")
        await ticker.until(printed(0, rb"tick 4"))  # 3 s and more, subscribed throughout
        assert await kind_of(client, session_id) == "running"
        await trio.to_thread.run_sync(ticker.ws.close)
        await until_kind(client, session_id, "suspended")
        await client.delete(f"/v1/sessions/{session_id}")


async def test_io_watch_an_open_sse_stream_holds_off_idle_suspend(runnerd: SharedDaemon) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        async with open_sse(client, session_id) as frames:
            await until_ticked(client, session_id, "tick 4")  # 3 s and more, subscribed throughout
            assert await kind_of(client, session_id) == "running"
            replayed = await next_status(frames, "running")
            assert "suspended" not in [
                f.data["status"]["kind"] for f in replayed if f.event == "status"
            ]
        await until_kind(client, session_id, "suspended")
        await client.delete(f"/v1/sessions/{session_id}")


async def test_io_watch_streams_stay_open_over_suspended_until_delete(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        await until_kind(client, session_id, "suspended")
        async with open_sse(client, session_id) as frames:
            replayed = await next_status(frames, "suspended")  # replayed; not the end
            await assert_sse_conforms(client, replayed)  # statuses (suspended too), progress, run
            assert [f.data["status"]["kind"] for f in replayed if f.event == "status"][-1] == (
                "suspended"
            )
            ticker = await io.connect(session_id, "?app=ticker&lastSeq=0")
            seen = await ticker.until(printed(0, rb"tick 1"))
            assert seen.controls[0] == {"type": "seq", "seq": 0, "app": "ticker", "io": "tty"}
            assert await kind_of(client, session_id) == "suspended"  # attaching resumes nothing
            assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
            await next_status(frames, "stopped")
            with trio.fail_after(TIMEOUT_S):
                assert [f async for f in frames] == []  # the stream ends at the terminal status
        assert await ticker.closed() == (1000, "session terminal")
