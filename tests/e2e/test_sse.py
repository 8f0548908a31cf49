"""`GET /v1/sessions/{id}/events`: headers, exact framing, resume points,
gap frames, live delivery, and the end of the stream."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.e2e.contract_client import (
    SSE_TIMEOUT,
    read_events,
    read_pty,
    start_session,
    statuses,
    wait_terminal,
)
from tests.harness import iter_sse, open_ws, start_daemon
from tests.shared_daemon import OnBackend, shared_runnerd_on_each_backend

# Every test taking `runnerd` runs on both backends.
__all__ = ["shared_runnerd_on_each_backend"]


async def test_sse_headers_and_exact_frames(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exit 5")
        await wait_terminal(client, session_id)
        with trio.fail_after(10):
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as response:
                raw = await response.aread()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache, no-transform"
    assert response.headers["x-accel-buffering"] == "no"
    assert raw.startswith(
        b'id: 1\nevent: status\ndata: {"type":"status","status":{"kind":"starting"}}\n\n'
    )
    assert raw.endswith(
        b'event: status\ndata: {"type":"status","status":{"kind":"exited","code":5}}\n\n'
    )
    for block in raw.decode().split("\n\n")[:-1]:
        lines = block.split("\n")
        assert [line.split(": ", 1)[0] for line in lines] == ["id", "event", "data"]
        event = json.loads(lines[2].split(": ", 1)[1])
        assert lines[1] == f"event: {event['type']}"


async def test_sse_unknown_session_is_404_json(runnerd) -> None:
    async with runnerd.client() as client:
        response = await client.get("/v1/sessions/aaaaaaaaaaaa/events")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


async def test_sse_resumes_after_last_event_id_header_then_query(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exit 0")
        everything = await read_events(client, session_id)
        last = everything[-1].id
        by_header = await read_events(
            client, session_id, headers={"last-event-id": "1"}, params={"lastEventId": "2"}
        )
        by_query = await read_events(client, session_id, params={"lastEventId": "2"})
        caught_up = await read_events(client, session_id, headers={"last-event-id": str(last)})
    assert [f.id for f in everything] == list(range(1, last + 1))
    # The header wins over the query parameter.
    assert [f.id for f in by_header] == list(range(2, last + 1))
    assert [f.id for f in by_query] == list(range(3, last + 1))
    assert [f.data for f in by_query] == [f.data for f in everything[2:]]
    # Terminal and nothing after the resume point: the stream ends at once.
    assert caught_up == []


async def test_sse_an_empty_last_event_id_header_leaves_the_query_in_force(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exit 0")
        everything = await read_events(client, session_id)
        resumed = await read_events(
            client, session_id, headers={"last-event-id": ""}, params={"lastEventId": "2"}
        )
        alone = await read_events(client, session_id, headers={"last-event-id": ""})
    assert [f.id for f in resumed] == [f.id for f in everything[2:]]
    assert [f.id for f in alone] == [f.id for f in everything]


async def test_sse_gap_frame_when_resume_point_was_evicted(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    # Each status event is ~50 bytes of JSON: a 60-byte ring keeps only the newest.
    overrides = {"runner": {"replay_buffer_bytes": 60}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_session(client, "exit 2")
        await wait_terminal(client, session_id)
        from_start = await read_events(client, session_id)
        from_header = await read_events(client, session_id, headers={"last-event-id": "1"})
        from_query = await read_events(client, session_id, params={"lastEventId": "1"})
    for frames in (from_start, from_header, from_query):
        gap, *rest = frames
        assert gap.event == "gap" and gap.id is None
        assert gap.raw == ["event: gap", 'data: {"reason":"buffer_evicted"}']
        assert rest and rest[-1].data == {"type": "status", "status": {"kind": "exited", "code": 2}}
        assert rest[0].id is not None and rest[0].id > 2


async def test_sse_streams_live_events_and_ends_after_terminal_status(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "echo ready; read line; exit 4")
        frames = []
        with trio.fail_after(10):
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as response:
                async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
                    await read_pty(ws, until=b"ready")
                    async for frame in iter_sse(response):
                        frames.append(frame)
                        if frame.event == "status" and frame.data["status"]["kind"] == "running":
                            # The workload ends only after this input: the
                            # exit status below must arrive live.
                            await ws.send_message(b"go\n")
                # The loop ended because the server ended the stream.
    assert [s["kind"] for s in statuses(frames)] == ["starting", "running", "exited"]
    assert statuses(frames)[-1]["code"] == 4
