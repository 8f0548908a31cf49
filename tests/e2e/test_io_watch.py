"""`/io` of a watch session through a real daemon (local backend), read with
the python `websockets` client: one socket per app (`?app=`, 4404 for none
or a missing name), the seq frame naming the app and its io, frames of seq +
ONE stream byte + payload (0 tty; 1 stdout, 2 stderr), stdin and resize to
that app only (`resize_unsupported` on a `streams` app), an app's exit and
restart not closing the socket, and the session's DELETE closing it 1000; a
run session's socket unchanged; SSE and `/io` as idle-suspend subscribers,
and both staying open over `suspended`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.contract_client import wait_status
from tests.e2e.io_client import TIMEOUT_S, Io, printed, raw, start_watch
from tests.harness import session_body, start_daemon
from tests.shared_daemon import SharedDaemon, shared_daemon

WEB = 'echo "web up"; read line; echo "web got:$line"; stty size; read more; exec sleep 600'
WORKER = 'echo "worker out"; echo "worker err" >&2; exec cat'
ONCE = 'echo "once ran"; exit 3'
APPS = [
    {"name": "web", "entryRelativePath": "web.sh"},
    {"name": "worker", "entryRelativePath": "worker.sh", "io": "streams"},
    {"name": "once", "entryRelativePath": "once.sh", "io": "streams"},
]
FILES = {"web.sh": WEB, "worker.sh": WORKER, "once.sh": ONCE}


@pytest.fixture(scope="module", name="runnerd")
def watch_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    with shared_daemon(tmp_path_factory.mktemp("runnerd"), {"watch": {"enabled": True}}) as d:
        yield d


async def test_io_watch_app_query_rules_close_4404(runnerd: SharedDaemon, io: Io) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        for query, reason in (
            ("", "this watch session has 3 apps: name one with ?app="),
            ("?app=nope", "no app 'nope' in this session"),
            ("?app=", "no app '' in this session"),
        ):
            socket = await io.connect(session_id, query)
            assert await socket.closed() == (4404, reason)
        await client.delete(f"/v1/sessions/{session_id}")


async def test_io_watch_streams_app_splits_stdout_and_stderr_and_takes_stdin(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        worker = await io.connect(session_id, "?app=worker&lastSeq=0")
        seen = await worker.until(lambda s: b"worker out" in s.of(1) and b"worker err" in s.of(2))
        assert seen.controls[0] == {"type": "seq", "seq": 0, "app": "worker", "io": "streams"}
        assert [seq for seq, _, _ in seen.chunks] == list(range(1, len(seen.chunks) + 1))
        assert {stream for _, stream, _ in seen.chunks} == {1, 2}
        await worker.send(b"to the worker\n")
        await worker.until(printed(1, rb"to the worker\n"))
        await worker.send(json.dumps({"type": "resize", "cols": 100, "rows": 30}))
        seen = await worker.until(lambda s: len(s.controls) > 1)
        assert seen.controls[1] == {"type": "error", "error": "resize_unsupported", "io": "streams"}
        # The stdin went to the worker alone: the web app's terminal never saw it.
        web = await io.connect(session_id, "?app=web&lastSeq=0")
        seen = await web.until(printed(0, rb"web up"))
        assert seen.controls[0] == {"type": "seq", "seq": 0, "app": "web", "io": "tty"}
        assert b"to the worker" not in seen.of(0)
        assert {stream for _, stream, _ in seen.chunks} == {0}
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert await worker.closed() == (1000, "session terminal")
        assert await web.closed() == (1000, "session terminal")


async def test_io_watch_tty_app_takes_stdin_and_resizes_its_own_terminal(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        web = await io.connect(session_id, "?app=web")
        await web.until(printed(0, rb"web up"))
        await web.send(json.dumps({"type": "resize", "cols": 101, "rows": 31}))
        await web.send(b"hello\n")
        await web.until(printed(0, rb"web got:hello\r\n31 101\r\n"))
        await client.delete(f"/v1/sessions/{session_id}")


async def test_io_watch_an_exit_and_restart_keep_the_socket_and_its_seqs(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        once = await io.connect(session_id, "?app=once&lastSeq=0")
        await once.until(printed(1, rb"once ran\n"))
        # Generation 1 exits 3; the reload starts generation 2 on the same socket.
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        answer = await client.post(
            f"/v1/sessions/{session_id}/reload?app=once",
            headers={"content-type": "application/json"},  # the guard's rule for every POST
        )
        assert answer.status_code == 202, answer.text
        seen = await once.until(printed(1, rb"once ran\n(.|\n)*once ran\n"))
        assert [seq for seq, _, _ in seen.chunks] == list(range(1, len(seen.chunks) + 1))
        assert seen.controls == [{"type": "seq", "seq": 0, "app": "once", "io": "streams"}]
        await client.delete(f"/v1/sessions/{session_id}")
        assert await once.closed() == (1000, "session terminal")
        # A late reader of the ended session gets the replay, then 1000;
        # one that has it all is refused 4410.
        late = await io.connect(session_id, "?app=once&lastSeq=1")
        assert await late.closed() == (1000, "session terminal")
        assert late.seen.chunks[0][0] == 2
        last = seen.chunks[-1][0]
        done = await io.connect(session_id, f"?app=once&lastSeq={last}")
        expected = (4410, "session terminal and nothing buffered after lastSeq")
        assert await done.closed() == expected


async def test_io_watch_a_one_app_session_needs_no_app_and_run_sessions_are_unchanged(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS[1:2], FILES)
        only = await io.connect(session_id)
        seen = await only.until(printed(2, rb"worker err"))
        assert seen.controls[0]["app"] == "worker"
        await client.delete(f"/v1/sessions/{session_id}")
        answer = await client.post("/v1/sessions", json=session_body("echo plain; exec sleep 600"))
        run_id = answer.json()["sessionId"]
        for query in ("", "?app=app"):
            plain = await io.connect(run_id, query)
            seen = await plain.until(lambda s: b"plain\r\n" in raw(s))
            assert seen.controls[0] == {"type": "seq", "seq": 0}
            assert raw(seen).startswith(b"plain\r\n")  # no stream byte: the PTY's bytes
        refused = await io.connect(run_id, "?app=web")
        assert await refused.closed() == (4404, "no app 'web': a run session has one app, 'app'")
        await client.delete(f"/v1/sessions/{run_id}")


async def test_io_watch_an_app_dropped_by_put_apps_closes_its_socket_4404(
    runnerd: SharedDaemon, io: Io
) -> None:
    async with runnerd.client() as client:
        session_id = await start_watch(client, APPS, FILES)
        worker = await io.connect(session_id, "?app=worker&lastSeq=0")
        await worker.until(printed(1, rb"worker out"))
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        kept = [app for app in APPS if app["name"] != "worker"]
        answer = await client.put(f"/v1/sessions/{session_id}/apps", json={"apps": kept})
        assert answer.status_code == 202, answer.text
        assert await worker.closed() == (4404, "app 'worker' left the session")
        again = await io.connect(session_id, "?app=worker")
        assert await again.closed() == (4404, "no app 'worker' in this session")
        # Given again, it goes on where it was: a client resuming from the
        # last seq it saw gets the new process's output, never a seq reused.
        last = worker.seen.chunks[-1][0]
        answer = await client.put(f"/v1/sessions/{session_id}/apps", json={"apps": APPS})
        assert answer.status_code == 202, answer.text
        back = await io.connect(session_id, f"?app=worker&lastSeq={last}")
        seen = await back.until(printed(1, rb"worker out"))
        assert seen.chunks[0][0] == last + 1, seen.chunks
        got = (await client.get(f"/v1/sessions/{session_id}")).json()
        generation = next(a["generation"] for a in got["apps"] if a["name"] == "worker")
        assert generation == 2  # its first life was generation 1
        await client.delete(f"/v1/sessions/{session_id}")


async def test_io_watch_a_replay_past_the_app_s_ring_starts_with_a_gap(tmp_path: Path) -> None:
    # Five 3 KB blocks into a ring of 4 KB, each its own chunk (the app waits
    # for a line after each, sent once the block arrived): most are evicted.
    paced = (
        'i=0; while [ $i -lt 5 ]; do printf "%03000d\\n" $i; read go; i=$((i+1)); done; echo end'
    )
    overrides = {"watch": {"enabled": True}, "runner": {"replay_buffer_bytes": 4096}}
    apps = [{"name": "loud", "entryRelativePath": "loud.sh", "io": "streams"}]
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        session_id = await start_watch(client, apps, {"loud.sh": paced})
        sockets = Io(daemon.socket_path)
        try:
            live = await sockets.connect(session_id, "?app=loud")
            for block in range(5):
                await live.until(lambda seen, n=block + 1: seen.of(1).count(b"\n") >= n)
                await live.send(b"go\n")
            await live.until(printed(1, rb"end\n"))
            replay = await sockets.connect(session_id, "?app=loud&lastSeq=0")
            seen = await replay.until(printed(1, rb"end\n"))
        finally:
            await sockets.close_all()
        assert seen.controls[:2] == [
            {"type": "seq", "seq": 0, "app": "loud", "io": "streams"},
            {"type": "gap", "reason": "buffer_evicted"},
        ]
        assert seen.chunks[0][0] > 1 and len(seen.of(1)) < 3 * 3001
        await client.delete(f"/v1/sessions/{session_id}")
