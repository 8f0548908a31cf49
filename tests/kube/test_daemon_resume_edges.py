"""Resuming across a daemon restart at its edges: a real runnerd on the test
cluster, SIGKILLed or detached and started again on the same state_dir, read
by a client that resumes from what it saw (no duplicate id, one gap at most,
no new output skipped)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import trio

from tests.e2e.contract_client import PtyTranscript, wait_status
from tests.harness import Daemon, SseFrame, open_ws
from tests.kube.daemon import KERNEL, kube_daemon, resume_sse, start_telo
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
SSE_TIMEOUT = httpx.Timeout(10.0, read=None)
GAP = {"type": "gap", "reason": "buffer_evicted"}
# Gaps a reader may see before the test calls it a flood (one is right).
FLOOD = 20


async def sse_until(
    client: httpx.AsyncClient, session_id: str, last_event_id: int, event: str
) -> list[SseFrame]:
    """Resume the event stream from `last_event_id` until an `event` frame
    (or FLOOD gap frames: the stream repeats itself)."""
    return await resume_sse(
        client,
        session_id,
        last_event_id,
        lambda frames: frames[-1].event == event or sum(f.event == "gap" for f in frames) >= FLOOD,
    )


async def pty_until(daemon: Daemon, session_id: str, last_seq: int, text: bytes) -> PtyTranscript:
    """Resume the PTY channel from `last_seq` until `text` (or FLOOD gap messages)."""
    transcript = PtyTranscript()
    resource = f"/v1/sessions/{session_id}/io?lastSeq={last_seq}"
    async with open_ws(daemon.socket_path, resource) as ws:
        with trio.fail_after(TIMEOUT_S):
            while text not in transcript.output and transcript.controls.count(GAP) < FLOOD:
                transcript.record(await ws.get_message())
    return transcript


async def test_a_resume_before_the_adopted_session_says_anything_gets_one_gap(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # After a SIGKILL the adopted session's rings start empty above the old
    # process's marks, until its `running` (after its endpoints are
    # published, slowed here) and the restart line. A reader resuming in
    # that window is told of the gap once, then gets what comes.
    domain = {"routing_base_domain": "sessions.example.com", "routing": "ingress"}
    ports = [{"port": 8080, "protocol": "tcp"}]
    async with kube_daemon(kubesim, tmp_path, **domain) as first, first.client() as client:
        session_id = await start_telo(client, "print ready\nwait\n", ports=ports)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    kubesim.faults.slow_next(1, 3.0, verb="create")  # the Service's re-create
    async with kube_daemon(kubesim, tmp_path, **domain) as second, second.client() as client:
        assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 200
        # Listed as before the restart, its image included.
        (listed,) = (await client.get("/v1/sessions")).json()["sessions"]
        assert listed["image"] == KERNEL and listed["ports"] == ports, listed
        results: dict[str, object] = {}

        async def events() -> None:
            results["sse"] = await sse_until(client, session_id, 2, "status")

        async def pty() -> None:
            results["pty"] = await pty_until(second, session_id, 1, b"runnerd restarted")

        with trio.fail_after(TIMEOUT_S + 5):  # a wedged daemon never closes the WebSocket
            async with trio.open_nursery() as nursery:
                nursery.start_soon(events)
                nursery.start_soon(pty)
        with trio.fail_after(5):  # a reader repeating itself must not wedge the daemon
            assert (await client.get("/v1/health", timeout=4)).status_code == 200
        frames = results["sse"]
        assert isinstance(frames, list)
        # The republished route's `pending` may come before `running` (issue 21).
        kinds = [f.event for f in frames if f.event != "route"]
        assert kinds == ["gap", "status"] and frames[0].event == "gap", kinds
        assert frames[-1].data["status"]["kind"] == "running" and frames[-1].id > 2
        transcript = results["pty"]
        assert isinstance(transcript, PtyTranscript)
        assert transcript.controls == [{"type": "seq", "seq": 1}, GAP]
        assert all(seq > 1 for seq in transcript.seqs)
        await client.delete(f"/v1/sessions/{session_id}")


async def test_a_detach_restart_relays_no_debug_event_twice(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # The kernel's debug server sends each new connection every frame since
    # it started: the successor's relay gets its first three again first
    # (`kernel.started`, `one`, `two`).
    script = "event one\nevent two\nprint ready\necho\nevent three\nwait\n"
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        session_id = await start_telo(client, script, inspect=True)
        before = await sse_debug_frames(client, session_id, 0, 3)
        last_id = before[-1].id
        assert await first.stop(signal.SIGUSR2) == 75
    async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
        async with open_ws(second.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            await ws.send_message(b"quit\n")  # the kernel goes on to `event three`
        after = await sse_debug_frames(client, session_id, last_id or 0, 1)
        # The first debug event after the one last seen is the new one.
        assert [f.data["frame"]["event"] for f in after] == ["three"], [f.data for f in after]
        await client.delete(f"/v1/sessions/{session_id}")


async def sse_debug_frames(
    client: httpx.AsyncClient, session_id: str, last_event_id: int, count: int
) -> list[SseFrame]:
    """The first `count` debug frames after `last_event_id`."""
    frames = await resume_sse(
        client,
        session_id,
        last_event_id,
        lambda frames: sum(f.event == "debug" for f in frames) == count,
    )
    return [f for f in frames if f.event == "debug"]
