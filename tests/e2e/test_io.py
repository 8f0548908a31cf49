"""`GET /v1/sessions/{id}/io`: the WebSocket PTY channel end to end: seq
framing, stdin and resize through a real PTY, replay and gap from `lastSeq`,
no loss or duplication between replay and live, and every close code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionClosed

from tests.e2e.contract_client import (
    PtyTranscript,
    read_pty,
    resize_message,
    start_session,
    wait_terminal,
)
from tests.harness import open_ws, start_daemon
from tests.shared_daemon import OnBackend, shared_runnerd_on_each_backend

# Twenty lines, one per burst: the workload blocks on `read` after each, and
# `_run_paced` sends the next stdin line only once the burst has arrived, so
# each line reaches the PTY reader as its own chunk however loaded the machine.
PACED_LINES = 'stty -echo; i=0; while [ $i -lt 20 ]; do echo "line $i"; read go; i=$((i+1)); done'
PACED_COUNT = 20

# Every test taking `runnerd` runs on both backends (the kubernetes one on the
# test cluster, whose `sh` image runs these bundles as the local runtime does).
__all__ = ["shared_runnerd_on_each_backend"]


def _io(session_id: str, last_seq: int | None = None) -> str:
    query = "" if last_seq is None else f"?lastSeq={last_seq}"
    return f"/v1/sessions/{session_id}/io{query}"


async def _run_paced(socket_path: Path, client) -> str:
    """Start `PACED_LINES` and drive it to its end, one burst at a time."""
    session_id = await start_session(client, PACED_LINES)
    async with open_ws(socket_path, _io(session_id)) as ws:
        transcript = PtyTranscript()
        for i in range(PACED_COUNT):
            await read_pty(ws, transcript, until=f"line {i}\r\n".encode())
            await ws.send_message(b"\n")
    await wait_terminal(client, session_id)
    return session_id


async def _expect_close(ws, timeout_s: float = 10.0):
    with trio.fail_after(timeout_s), pytest.raises(ConnectionClosed) as closed:
        while True:
            await ws.get_message()
    return closed.value.reason


async def test_output_arrives_in_seq_frames_then_close_1000(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "echo ready; read line; echo bye; exit 0")
        async with open_ws(runnerd.socket_path, _io(session_id)) as ws:
            transcript = await read_pty(ws, until=b"ready")
            await ws.send_message(b"x\n")
            await read_pty(ws, transcript)
    assert transcript.controls[0] == {"type": "seq", "seq": 0}
    assert transcript.seqs == list(range(1, len(transcript.seqs) + 1))
    assert re.search(rb"ready\r\n.*bye\r\n", transcript.output, re.S)
    assert transcript.close is not None
    assert (transcript.close.code, transcript.close.reason) == (1000, "session terminal")


async def test_stdin_and_resize_reach_the_pty(runnerd) -> None:
    script = 'echo ready; read line; echo "got:$line"; stty size; exit 0'
    async with runnerd.client() as client:
        session_id = await start_session(client, script)
        async with open_ws(runnerd.socket_path, _io(session_id)) as ws:
            transcript = await read_pty(ws, until=b"ready")
            # Ignored: not JSON, not a resize, non-numbers, below 1.
            await ws.send_message("nonsense")
            await ws.send_message('{"type":"hello"}')
            await ws.send_message(resize_message("80", 24))
            await ws.send_message(resize_message(True, 24))
            await ws.send_message(resize_message(0.5, 24))
            # Floored and capped at 10000.
            await ws.send_message(resize_message(20000.7, 45.9))
            await ws.send_message(b"")  # an empty binary frame writes nothing
            await ws.send_message(b"hello\n")
            await read_pty(ws, transcript)
    assert b"got:hello" in transcript.output
    assert b"45 10000" in transcript.output
    assert transcript.close is not None and transcript.close.code == 1000


async def test_last_seq_resumes_exactly_after_the_given_chunk(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await _run_paced(runnerd.socket_path, client)
        async with open_ws(runnerd.socket_path, _io(session_id)) as ws:
            full = await read_pty(ws)
        assert len(full.chunks) >= PACED_COUNT, "each burst is at least one chunk"
        middle = full.seqs[len(full.seqs) // 2]
        async with open_ws(runnerd.socket_path, _io(session_id, middle)) as ws:
            resumed = await read_pty(ws)
    assert re.findall(rb"line (\d+)\r\n", full.output) == [str(i).encode() for i in range(20)]
    assert resumed.controls == [{"type": "seq", "seq": middle}]
    assert resumed.chunks == [c for c in full.chunks if c[0] > middle]
    assert resumed.close is not None and resumed.close.code == 1000


async def test_gap_message_when_bytes_after_last_seq_were_evicted(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    overrides = {"runner": {"replay_buffer_bytes": 60}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        session_id = await _run_paced(daemon.socket_path, client)
        async with open_ws(daemon.socket_path, _io(session_id)) as ws:
            transcript = await read_pty(ws)
    assert transcript.controls == [
        {"type": "seq", "seq": 0},
        {"type": "gap", "reason": "buffer_evicted"},
    ]
    first = transcript.seqs[0]
    assert first > 1
    assert transcript.seqs == list(range(first, first + len(transcript.seqs)))
    assert transcript.output.endswith(b"line 19\r\n")
    assert transcript.close is not None and transcript.close.code == 1000


async def test_no_loss_or_duplication_between_replay_and_live(runnerd) -> None:
    # 2000 lines, a pause for a second reader to join, then 18000 more lines
    # pouring out while that reader is still receiving its replay.
    script = (
        'i=0; while [ $i -lt 2000 ]; do echo "n $i"; i=$((i+1)); done; echo half; read go; '
        'while [ $i -lt 20000 ]; do echo "n $i"; i=$((i+1)); done; exit 0'
    )
    async with runnerd.client() as client:
        session_id = await start_session(client, script)
        async with open_ws(runnerd.socket_path, _io(session_id)) as first:
            first_transcript = await read_pty(first, until=b"half\r\n")
            async with open_ws(runnerd.socket_path, _io(session_id)) as second:
                second_transcript = PtyTranscript()
                await first.send_message(b"go\n")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_pty, first, first_transcript)
                    nursery.start_soon(read_pty, second, second_transcript)
    expected = [str(i).encode() for i in range(20000)]
    for transcript in (first_transcript, second_transcript):
        assert transcript.seqs == list(range(1, len(transcript.seqs) + 1))
        assert max(len(payload) for _, payload in transcript.chunks) <= 64 * 1024
        assert re.findall(rb"n (\d+)\r\n", transcript.output) == expected
        assert transcript.close is not None and transcript.close.code == 1000
    assert second_transcript.chunks == first_transcript.chunks


async def test_a_long_burst_arrives_whole_and_in_order_in_chunks_of_64_kib_at_most(
    runnerd,
) -> None:
    # ~2.7 MB written without a pause once the client is attached: the PTY
    # reader takes several full chunks per turn and the sender writes them
    # in one go, each still its own frame with its own seq.
    lines = 400_000
    async with runnerd.client() as client:
        script = f"stty -echo; echo ready; read go; seq 1 {lines}"
        session_id = await start_session(client, script)
        async with open_ws(runnerd.socket_path, _io(session_id)) as ws:
            # Stdin before the workload exists is ignored: wait for it.
            transcript = await read_pty(ws, until=b"ready\r\n")
            await ws.send_message(b"go\n")
            await read_pty(ws, transcript, timeout_s=60)
    assert transcript.seqs == list(range(1, len(transcript.seqs) + 1))
    assert max(len(payload) for _, payload in transcript.chunks) <= 64 * 1024
    numbers = re.findall(rb"(\d+)\r\n", transcript.output.partition(b"ready\r\n")[2])
    assert numbers == [str(i).encode() for i in range(1, lines + 1)]
    assert transcript.close is not None and transcript.close.code == 1000


async def test_unknown_session_closes_4404(runnerd) -> None:
    async with open_ws(runnerd.socket_path, _io("aaaaaaaaaaaa")) as ws:
        reason = await _expect_close(ws)
    assert reason.code == 4404


async def test_terminal_session_with_nothing_after_last_seq_closes_4410(runnerd) -> None:
    async with runnerd.client() as client:
        silent = await start_session(client, "exit 0")
        talker = await start_session(client, "echo something")
        await wait_terminal(client, silent)
        await wait_terminal(client, talker)
        async with open_ws(runnerd.socket_path, _io(silent)) as ws:
            silent_reason = await _expect_close(ws)
        async with open_ws(runnerd.socket_path, _io(talker)) as ws:
            everything = await read_pty(ws)
        async with open_ws(runnerd.socket_path, _io(talker, everything.seqs[-1])) as ws:
            caught_up_reason = await _expect_close(ws)
    assert silent_reason.code == 4410
    assert caught_up_reason.code == 4410
    assert b"something" in everything.output


async def test_origin_outside_allowlist_closes_4403(tmp_path: Path, on_backend: OnBackend) -> None:
    # A browser page always sends its Origin on a WebSocket handshake; a
    # client without one is no page (and could send any header anyway).
    editor = "https://editor.example.com"
    overrides = {"server": {"cors_origins": [editor]}}
    async with (
        start_daemon(tmp_path, on_backend.overrides(overrides)) as daemon,
        daemon.client() as client,
    ):
        session_id = await start_session(client, "echo hi")
        reasons = []
        for headers in ([(b"origin", b"https://evil.example")], [(b"origin", b"null")]):
            async with open_ws(daemon.socket_path, _io(session_id), extra_headers=headers) as ws:
                reasons.append(await _expect_close(ws))
        transcripts = []
        for allowed in ([(b"origin", editor.encode())], []):
            async with open_ws(daemon.socket_path, _io(session_id), extra_headers=allowed) as ws:
                transcripts.append(await read_pty(ws))
    assert [(r.code, r.reason) for r in reasons] == [(4403, "forbidden_origin")] * 2
    for transcript in transcripts:
        assert transcript.controls[0] == {"type": "seq", "seq": 0}
        assert b"hi" in transcript.output


async def test_streams_end_promptly_when_the_daemon_shuts_down(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    codes: list[int] = []

    async def stop() -> None:
        codes.append(await runnerd.stop())

    # Its own daemon: this test stops it.
    async with (
        start_daemon(tmp_path, on_backend.overrides()) as runnerd,
        runnerd.client() as client,
    ):
        session_id = await start_session(client, "echo ready; exec sleep 30")
        async with open_ws(runnerd.socket_path, _io(session_id)) as ws, trio.open_nursery() as n:
            transcript = await read_pty(ws, until=b"ready")
            with trio.fail_after(5):
                async with client.stream(
                    "GET", f"/v1/sessions/{session_id}/events", timeout=None
                ) as response:
                    n.start_soon(stop)
                    await response.aread()  # ends: the server closed the stream
                await read_pty(ws, transcript)
    assert transcript.close is not None
    assert codes == [0]


async def test_plain_get_without_upgrade_is_426_upgrade_required(runnerd) -> None:
    async with runnerd.client() as client:
        session_id = await start_session(client, "exec sleep 30")
        response = await client.get(_io(session_id))
        await client.delete(f"/v1/sessions/{session_id}")
    assert response.status_code == 426
    assert response.headers["upgrade"] == "websocket"
    body = response.json()
    assert body["error"] == "upgrade_required"
    assert "WebSocket" in body["message"] and "Upgrade: websocket" in body["message"]
